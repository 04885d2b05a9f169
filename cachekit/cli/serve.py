"""``cachekit serve``: the offline local backend, the providers' HTTP APIs on a local engine."""

from __future__ import annotations

import argparse
from contextlib import ExitStack, suppress
from typing import Any, TextIO

from cachekit.cli import _common
from cachekit.cli._common import port, say

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``serve`` to ``commands`` (the subparsers of ``cachekit``'s parser)."""
    _add_serve(commands)


def _serve(args: argparse.Namespace, out: TextIO) -> int:
    from cachekit.local import LocalBackend, LocalServer, make_engine

    with ExitStack() as stack:  # whatever stops it, what was started is closed: nothing keeps it alive
        options: dict[str, Any] = {}
        if args.script is not None:
            if args.engine != "scripted":
                raise _common.UsageError("--script needs the scripted engine (--engine scripted)")
            from cachekit.local import load_script

            # A malformed file is a ScriptError (a ValueError): one line naming the line or turn, exit 2.
            options["script"] = load_script(args.script)
        if args.engine == "transformers":  # seconds to load (minutes to convert, with its own bar)
            say("serve", f"loading the {args.model or 'smollm2'} model ...")
        try:
            engine = make_engine(args.engine, model=args.model, device=args.device, **options)
        except FileNotFoundError as exc:  # a --model that is neither a known name nor a model folder
            raise _common.UsageError(f"--model {args.model}: {exc}") from None
        stack.callback(engine.close)
        backend = LocalBackend(engine, rules=args.rules, accept_any_model=args.any_model)
        try:
            server = LocalServer(backend, host=args.host, port=args.port)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise _common.CommandFailed(
                f"cannot listen on {args.host}:{args.port}: {reason} (is a server there already? choose "
                "another --port or --host)"
            ) from None
        stack.callback(server.stop)
        out.write(
            f"cachekit serve: {engine.name} engine, {args.rules} cache rules, listening on {server.url}\n"
            f"  anthropic.Anthropic(base_url={server.url!r}, api_key='local')\n"
            f"  openai.OpenAI(base_url={(server.url + '/v1')!r}, api_key='local')\n"
        )
        out.flush()
        with suppress(KeyboardInterrupt):  # Ctrl-C is how it is stopped: no traceback, exit 0
            server.serve_forever()
    return 0


def _add_serve(commands: Any) -> None:
    serve = commands.add_parser(
        "serve",
        help="the offline local backend: Anthropic and OpenAI HTTP APIs on a local engine",
        description="Serves POST /v1/messages, /v1/chat/completions and /v1/responses until stopped.",
        epilog="""examples:
  cachekit serve                                     # scripted answers on 127.0.0.1:8765
  cachekit serve --engine transformers --device cpu  # SmolLM2 (the local extra)
  cachekit serve --rules anthropic --port 9000 --any-model""",
    )
    serve.add_argument(
        "--engine",
        choices=("scripted", "transformers"),
        default="scripted",
        help="scripted: instant canned answers; transformers: a real model (default: %(default)s)",
    )
    serve.add_argument(
        "--model",
        default=None,
        help="transformers engine: smollm2, tiny, or a local model directory (default: smollm2)",
    )
    serve.add_argument(
        "--device",
        default=None,
        help="transformers engine: cpu, cuda or cuda:N (default: cuda if there is a GPU, else cpu)",
    )
    serve.add_argument(
        "--rules",
        choices=("auto", "anthropic", "openai", "none"),
        default="auto",
        help="prompt-caching rules that bill each API (auto: each by its provider's; default: %(default)s)",
    )
    serve.add_argument(
        "--any-model",
        action="store_true",
        help="accept every model name (default: the models in cachekit's price and cache-rule tables)",
    )
    serve.add_argument(
        "--script",
        default=None,
        metavar="FILE",
        help=(
            "scripted engine: answer from this JSON file of turns (docs/local.md#script-files; default: "
            "none, the engine's canned answers)"
        ),
    )
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: %(default)s)")
    serve.add_argument(
        "--port",
        type=port,
        default=8765,
        help="the port to listen on, 0 for any free one (default: %(default)s)",
    )
    serve.set_defaults(run=_serve)

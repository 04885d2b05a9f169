"""``cachekit serve``: the offline local backend, the providers' HTTP APIs on a local engine."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``serve`` to ``commands`` (the subparsers of ``cachekit``'s parser)."""
    _add_serve(commands)


def _serve(args: argparse.Namespace, out: TextIO) -> int:
    from cachekit.errors import CachekitError
    from cachekit.local import LocalBackend, LocalServer, make_engine

    try:
        options: dict[str, Any] = {}
        if args.script is not None:
            if args.engine != "scripted":
                out.write("cachekit serve: --script needs the scripted engine (--engine scripted)\n")
                return 2
            from cachekit.local import load_script

            options["script"] = load_script(args.script)
        engine = make_engine(args.engine, model=args.model, device=args.device, **options)
        backend = LocalBackend(engine, rules=args.rules, accept_any_model=args.any_model)
        server = LocalServer(backend, host=args.host, port=args.port)
    except (CachekitError, OSError, ValueError) as exc:
        out.write(f"cachekit serve: {exc}\n")
        return 2
    out.write(
        f"cachekit serve: {engine.name} engine, {args.rules} cache rules, listening on {server.url}\n"
        f"  anthropic.Anthropic(base_url={server.url!r}, api_key='local')\n"
        f"  openai.OpenAI(base_url={(server.url + '/v1')!r}, api_key='local')\n"
    )
    out.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        backend.close()
    return 0


def _add_serve(commands: Any) -> None:
    serve = commands.add_parser(
        "serve",
        help="the offline local backend: Anthropic and OpenAI HTTP APIs on a local engine",
        description="Serves POST /v1/messages, /v1/chat/completions and /v1/responses until stopped.",
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
        "--device", default=None, help="transformers engine: cuda or cpu (default: cuda if any)"
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
        help="scripted engine: answer from this JSON file of turns (docs/local.md#script-files)",
    )
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: %(default)s)")
    serve.add_argument("--port", type=int, default=8765, help="the port to listen on (default: %(default)s)")
    serve.set_defaults(run=_serve)

"""The offline local backend: the providers' HTTP APIs on a local engine, with their caching rules.

Point the official SDKs at it, in process or over HTTP::

    import anthropic, httpx2
    from cachekit.local import LocalBackend, LocalServer, LocalTransport

    backend = LocalBackend()                               # the instant scripted engine
    client = anthropic.Anthropic(api_key="local", base_url="http://local",
                                 http_client=httpx2.Client(transport=LocalTransport(backend)))

    with LocalServer(backend) as server:                   # or `cachekit serve`
        client = anthropic.Anthropic(api_key="local", base_url=server.url)

Every response carries the usage fields the provider would write under its prompt-caching rules
(:mod:`cachekit.local.accounting`): place ``cache_control`` breakpoints and watch
``cache_creation_input_tokens`` and ``cache_read_input_tokens`` move exactly as they would upstream.
The ``transformers`` engine (the ``local`` extra) runs a real model with a persistent prefix KV cache.
"""

from __future__ import annotations

from typing import Any

from cachekit.errors import MissingExtraError
from cachekit.local.backend import BackendStats, LocalBackend, Rules
from cachekit.local.clock import ManualClock
from cachekit.local.engine import (
    Block,
    Citation,
    Document,
    Engine,
    Generation,
    Prompt,
    RedactedThinking,
    Refusal,
    Text,
    Thinking,
    Tokenizer,
    ToolCall,
    ToolChoice,
    ToolSpec,
    Turn,
    WebSearch,
)
from cachekit.local.script_file import ScriptFile, load_script
from cachekit.local.scripted import (
    REDACTED_THINKING_TRIGGER,
    REFUSAL_TRIGGER,
    ByteTokenizer,
    Script,
    ScriptedEngine,
)
from cachekit.local.server import LocalServer
from cachekit.local.transport import LocalTransport
from cachekit.local.wire import Billing, Reply

__all__ = [
    "REDACTED_THINKING_TRIGGER",
    "REFUSAL_TRIGGER",
    "BackendStats",
    "Billing",
    "Block",
    "ByteTokenizer",
    "Citation",
    "Document",
    "Engine",
    "Generation",
    "LocalBackend",
    "LocalServer",
    "LocalTransport",
    "ManualClock",
    "Prompt",
    "RedactedThinking",
    "Refusal",
    "Reply",
    "Rules",
    "Script",
    "ScriptFile",
    "ScriptedEngine",
    "Text",
    "Thinking",
    "Tokenizer",
    "ToolCall",
    "ToolChoice",
    "ToolSpec",
    "Turn",
    "WebSearch",
    "load_script",
    "make_engine",
]


def make_engine(
    kind: str = "scripted", *, model: str | None = None, device: str | None = None, **options: Any
) -> Engine:
    """An engine by name: ``"scripted"`` or ``"transformers"`` (``model``: ``smollm2``, ``tiny`` or a path).

    ``options`` go to the engine's constructor (e.g. ``block_size=``, ``kv_budget_bytes=``,
    ``spill_dir=`` for the transformers engine).
    """
    if kind == "scripted":
        if model is not None or device is not None:
            raise ValueError("the scripted engine has no model or device; use --engine transformers")
        return ScriptedEngine(**options)
    if kind == "transformers":
        try:
            from cachekit.local.transformers_engine import TransformersEngine
        except ImportError as exc:  # torch or transformers: the local extra
            raise MissingExtraError(exc.name or "torch", "local", "The transformers engine") from exc

        engine: Engine = TransformersEngine(model or "smollm2", device=device, **options)
        return engine
    raise ValueError(f"unknown engine {kind!r}: use 'scripted' or 'transformers'")

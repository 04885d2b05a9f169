"""Provider ``usage`` objects normalized into one :class:`UsageRecord`.

Every provider means something different by "input tokens":

===========================  ==========================================================================
dialect / provider           what the usage object says
===========================  ==========================================================================
Anthropic Messages           ``input_tokens`` EXCLUDES cache reads and writes; writes are
                             ``cache_creation_input_tokens`` (split by TTL in ``cache_creation``), reads
                             are ``cache_read_input_tokens``. Also DeepSeek's and Kimi's ``/anthropic``.
OpenAI Chat Completions      ``prompt_tokens`` INCLUDES cached tokens
                             (``prompt_tokens_details.cached_tokens``) and, on newer models, cache writes
                             (``prompt_tokens_details.cache_write_tokens``). xAI, Zhipu GLM and Gemini's
                             OpenAI endpoint use the same fields.
OpenAI Responses             ``input_tokens`` INCLUDES ``input_tokens_details.cached_tokens`` and
                             ``cache_write_tokens`` (split by retention in ``cache_write_tokens_details``).
Gemini (OpenAI endpoint)     as OpenAI, but thinking tokens are left out of ``completion_tokens`` and
                             counted in ``total_tokens``: output is ``total_tokens - prompt_tokens``.
xAI (chat)                   as Gemini (its reasoning tokens are also in ``completion_tokens_details``).
DeepSeek (chat)              ``prompt_cache_hit_tokens`` + ``prompt_cache_miss_tokens`` = ``prompt_tokens``.
Kimi / Moonshot (chat)       top-level ``cached_tokens`` (explicit context cache), or the OpenAI fields
                             (``cached_tokens``, ``cache_write_tokens`` in ``prompt_tokens_details``).
Bailian / DashScope (chat)   ``cached_tokens`` as OpenAI; explicit-cache writes in
                             ``cache_creation_input_tokens`` / ``cache_creation`` (in
                             ``prompt_tokens_details`` or at the top level).
===========================  ==========================================================================

The two cache-write fields are tiers, not exact durations: ``cache_write_5m`` holds writes at the
provider's standard write rate (Anthropic's 5-minute TTL, OpenAI's 30-minute retention, Bailian's
explicit cache) and ``cache_write_1h`` writes at the long-retention rate (Anthropic's 1-hour TTL,
OpenAI's 12-hour retention). The price table prices each tier per model.

A usage object that is missing, or whose shape is not recognised, gives ``known=False`` and ``None``
counts, never zeros. A token count that is negative, not an integer (floats, strings, booleans) or
inconsistent with the others is flagged in ``problems`` and not summed: the affected counts become
``None`` and the record is not ``known``. ``reasoning`` is informational (it is already part of
``output`` wherever a provider reports it), so a bad reasoning count is flagged but keeps the record
known.

Nothing here logs or keeps prompt text: only integer counts leave this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["TOKEN_FIELDS", "UsageRecord", "normalize", "price_context_of_body", "usage_of_body"]

#: The billable token counts of a :class:`UsageRecord`, in a fixed order (storage, reports).
TOKEN_FIELDS: tuple[str, ...] = ("uncached_input", "cache_write_5m", "cache_write_1h", "cache_read", "output")

_MISSING: Any = object()


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """One call's tokens, split the same way for every provider.

    ``uncached_input`` are input tokens billed at the plain input price, ``cache_write_5m`` /
    ``cache_write_1h`` input tokens written to the provider's prompt cache (standard / long retention
    tier), ``cache_read`` input tokens read from it, ``output`` generated tokens (reasoning included),
    ``reasoning`` the part of ``output`` spent on reasoning where reported. ``known`` is false when the
    counts could not be trusted; ``problems`` says why.
    """

    uncached_input: int | None
    cache_write_5m: int | None
    cache_write_1h: int | None
    cache_read: int | None
    output: int | None
    reasoning: int | None = None
    known: bool = True
    problems: tuple[str, ...] = ()

    @classmethod
    def unknown(cls, *problems: str) -> UsageRecord:
        """A record for a call whose usage could not be read: every count ``None``, ``known`` false."""
        return cls(None, None, None, None, None, None, False, tuple(problems))

    @property
    def input_total(self) -> int | None:
        """All input tokens (uncached + written + read), or ``None`` when any part is unknown."""
        parts = (self.uncached_input, self.cache_write_5m, self.cache_write_1h, self.cache_read)
        if any(p is None for p in parts):
            return None
        return sum(p for p in parts if p is not None)

    @property
    def cache_write(self) -> int | None:
        """Cache writes of both tiers together, or ``None`` when either is unknown."""
        if self.cache_write_5m is None or self.cache_write_1h is None:
            return None
        return self.cache_write_5m + self.cache_write_1h

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the inverse of :meth:`from_dict`)."""
        return {
            "uncached_input": self.uncached_input,
            "cache_write_5m": self.cache_write_5m,
            "cache_write_1h": self.cache_write_1h,
            "cache_read": self.cache_read,
            "output": self.output,
            "reasoning": self.reasoning,
            "known": self.known,
            "problems": list(self.problems),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> UsageRecord:
        """Rebuild a record written by :meth:`to_dict`."""
        return cls(
            uncached_input=data.get("uncached_input"),
            cache_write_5m=data.get("cache_write_5m"),
            cache_write_1h=data.get("cache_write_1h"),
            cache_read=data.get("cache_read"),
            output=data.get("output"),
            reasoning=data.get("reasoning"),
            known=bool(data.get("known", False)),
            problems=tuple(data.get("problems", ())),
        )


class _Reader:
    """Reads integer token counts out of one usage mapping, collecting problems instead of raising."""

    def __init__(self, usage: Mapping[str, Any]) -> None:
        self.usage = usage
        self.problems: list[str] = []
        self.bad = False

    def _get(self, path: tuple[str, ...]) -> Any:
        if len(path) == 1:
            return self.usage.get(path[0])
        value: Any = self.usage
        for key in path:
            # dict first: the isinstance check against the Mapping ABC is slow, and bodies are dicts.
            if type(value) is dict or isinstance(value, Mapping):
                value = value.get(key)
            else:
                return None
            if value is None:
                return None
        return value

    def count(self, *path: str, required: bool = False, default: int | None = 0) -> int | None:
        """The count at ``path``; ``default`` when absent or null (``None`` and a problem if required)."""
        value = self._get(path)
        if type(value) is int and value >= 0:  # the common case (bool is not exactly int)
            return value
        if value is None:
            if required:
                self._flag(f"missing {'.'.join(path)}")
                return None
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            self._flag(f"non-integer {'.'.join(path)}")
        elif value < 0:
            self._flag(f"negative {'.'.join(path)}")
        else:  # an int subclass: accept its value
            return int(value)
        return None

    def _flag(self, problem: str) -> None:
        self.problems.append(problem)
        self.bad = True

    def has(self, *path: str) -> bool:
        """Whether ``path`` is present with a non-null value."""
        return self._get(path) is not None

    def info(self, *path: str) -> int | None:
        """An informational count (reasoning): flagged when bad, but never makes the record unknown."""
        bad_before = self.bad
        value = self.count(*path, default=None)
        self.bad = bad_before
        return value

    def inconsistent(self, message: str) -> None:
        """Record counts that contradict each other."""
        self._flag(message)

    def record(self, *counts: int | None) -> UsageRecord:
        """The record for (uncached, write_5m, write_1h, read, output, reasoning)."""
        uncached, write_5m, write_1h, read, output, reasoning = counts
        return UsageRecord(
            uncached, write_5m, write_1h, read, output, reasoning, not self.bad, tuple(self.problems)
        )


def _minus(total: int | None, *parts: int | None) -> int | None:
    if total is None or any(p is None for p in parts):
        return None
    return total - sum(p for p in parts if p is not None)


def _anthropic(r: _Reader, provider: str) -> UsageRecord:
    # input_tokens excludes cache reads and writes; the TTL split may be absent (all writes are 5m then).
    uncached = r.count("input_tokens", required=True)
    output = r.count("output_tokens", required=True)
    writes = r.count("cache_creation_input_tokens")
    read = r.count("cache_read_input_tokens")
    if r.has("cache_creation"):
        w5 = r.count("cache_creation", "ephemeral_5m_input_tokens")
        w1 = r.count("cache_creation", "ephemeral_1h_input_tokens")
        if (
            w5 is not None
            and w1 is not None
            and writes is not None
            and r.has("cache_creation_input_tokens")
            and w5 + w1 != writes
        ):
            r.inconsistent("cache_creation split does not add up to cache_creation_input_tokens")
            w5 = w1 = None
    else:
        w5, w1 = writes, 0
    reasoning = r.info("output_tokens_details", "thinking_tokens")
    return r.record(uncached, w5, w1, read, output, reasoning)


def _writes(
    r: _Reader, total: int | None, split: tuple[str, ...], short: str, long: str
) -> tuple[int | None, int | None]:
    """Split ``total`` writes into the (standard, long) tiers using the ``split`` object when present."""
    if total is None:
        return None, None
    if not (r.has(*split, short) or r.has(*split, long)):
        # Absent, or a split by modality (text/image/audio tokens) rather than by retention: every
        # write is at the standard tier, and the modality split is no reason to distrust the total.
        return total, 0
    long_count = r.count(*split, long)
    short_count = r.count(*split, short)
    if long_count is None or short_count is None:
        return None, None
    if short_count + long_count != total:
        r.inconsistent(f"{'.'.join(split)} does not add up to the cache write count")
        return None, None
    return short_count, long_count


# Providers whose completion_tokens leave thinking out (total_tokens shows it); genai-prices' xAI
# extractor also adds completion_tokens_details.reasoning_tokens to xAI's output.
_THINKING_OUTSIDE = frozenset({"gemini", "xai"})


def _openai_chat(r: _Reader, provider: str) -> UsageRecord:
    output = r.count("completion_tokens", required=True)
    reasoning = r.info("completion_tokens_details", "reasoning_tokens")
    if (
        provider in _THINKING_OUTSIDE
        and output is not None
        and r.has("total_tokens")
        and r.has("prompt_tokens")
    ):
        # Gemini's OpenAI endpoint and xAI leave thinking tokens out of completion_tokens but count them
        # in total_tokens; they bill as output, so output = total - prompt and the difference is
        # reasoning (xAI also reports it as completion_tokens_details.reasoning_tokens).
        total, prompt_count = r.count("total_tokens"), r.count("prompt_tokens")
        if total is not None and prompt_count is not None and total > prompt_count + output:
            thinking = total - prompt_count - output
            output = output + thinking
            reasoning = (
                thinking if provider == "xai" and reasoning == thinking else (reasoning or 0) + thinking
            )
    if r.has("prompt_cache_hit_tokens") or r.has("prompt_cache_miss_tokens"):
        # DeepSeek: hit + miss = prompt_tokens.
        hit = r.count("prompt_cache_hit_tokens", required=True)
        miss = r.count("prompt_cache_miss_tokens", required=True)
        if r.has("prompt_tokens") and hit is not None and miss is not None:
            prompt = r.count("prompt_tokens")
            if prompt is not None and hit + miss != prompt:
                r.inconsistent("prompt_cache_hit_tokens + prompt_cache_miss_tokens != prompt_tokens")
                hit = miss = None
        return r.record(miss, 0, 0, hit, output, reasoning)

    prompt = r.count("prompt_tokens", required=True)
    if r.has("prompt_tokens_details", "cached_tokens"):
        read = r.count("prompt_tokens_details", "cached_tokens")
    else:
        read = r.count("cached_tokens")  # Kimi / Moonshot explicit context cache
    # Cache writes: OpenAI's cache_write_tokens, or Bailian's explicit-cache creation count.
    details = ("prompt_tokens_details",)
    w5: int | None
    w1: int | None
    if r.has(*details, "cache_write_tokens"):
        # OpenAI (GPT-5.6+) and Kimi report writes here; a details object may split them.
        w5, w1 = _writes(
            r,
            r.count(*details, "cache_write_tokens"),
            (*details, "cache_write_tokens_details"),
            "ttl_30m_tokens",
            "ttl_12h_tokens",
        )
    elif r.has(*details, "cache_creation_input_tokens") or r.has(*details, "cache_creation"):
        total = r.count(*details, "cache_creation_input_tokens", default=None)
        w5, w1 = _bailian_split(r, details, total)
    elif r.has("cache_creation_input_tokens") or r.has("cache_creation"):
        total = r.count("cache_creation_input_tokens", default=None)
        w5, w1 = _bailian_split(r, (), total)
    else:
        w5, w1 = 0, 0
    uncached = _minus(prompt, read, w5, w1)
    if uncached is not None and uncached < 0:
        r.inconsistent("cached and written tokens exceed prompt_tokens")
        uncached = None
    return r.record(uncached, w5, w1, read, output, reasoning)


def _bailian_split(r: _Reader, base: tuple[str, ...], total: int | None) -> tuple[int | None, int | None]:
    if r.has(*base, "cache_creation"):
        w5 = r.count(*base, "cache_creation", "ephemeral_5m_input_tokens")
        w1 = r.count(*base, "cache_creation", "ephemeral_1h_input_tokens")
        if w5 is not None and w1 is not None and total is not None and w5 + w1 != total:
            r.inconsistent("cache_creation split does not add up to cache_creation_input_tokens")
            return None, None
        return w5, w1
    return total, 0


def _openai_responses(r: _Reader, provider: str) -> UsageRecord:
    total_in = r.count("input_tokens", required=True)
    output = r.count("output_tokens", required=True)
    read = r.count("input_tokens_details", "cached_tokens")
    writes = r.count("input_tokens_details", "cache_write_tokens")
    w5, w1 = _writes(
        r, writes, ("input_tokens_details", "cache_write_tokens_details"), "ttl_30m_tokens", "ttl_12h_tokens"
    )
    reasoning = r.info("output_tokens_details", "reasoning_tokens")
    uncached = _minus(total_in, read, w5, w1)
    if uncached is not None and uncached < 0:
        r.inconsistent("cached and written tokens exceed input_tokens")
        uncached = None
    return r.record(uncached, w5, w1, read, output, reasoning)


# Which usage keys identify which shape (so an unrecognised object is reported as such, not as zeros).
_SHAPES = {
    "anthropic_messages": (_anthropic, ("input_tokens", "output_tokens")),
    "openai_chat": (_openai_chat, ("prompt_tokens", "completion_tokens", "prompt_cache_hit_tokens")),
    "openai_responses": (_openai_responses, ("input_tokens", "output_tokens")),
}


def normalize(provider: str, dialect: str, usage: Mapping[str, Any] | None) -> UsageRecord:
    """Normalize one provider ``usage`` object into a :class:`UsageRecord`.

    ``dialect`` picks the shape (``anthropic_messages``, ``openai_chat``, ``openai_responses``); the
    provider-specific fields of the OpenAI-compatible providers (DeepSeek hit/miss, Kimi's top-level
    ``cached_tokens``, Bailian's cache creation) are recognised by their names; ``provider`` matters
    only for Gemini's thinking tokens (see the module docstring) and in problem messages. Never raises on
    bad input: problems are reported in the record.
    """
    if usage is None:
        return UsageRecord.unknown(f"{provider}: no usage object")
    candidate: object = usage  # JSON can hold anything; check rather than trust the annotation
    if type(candidate) is not dict and not isinstance(candidate, Mapping):
        return UsageRecord.unknown(f"{provider}: usage is not an object")
    shape = _SHAPES.get(dialect)
    if shape is None:
        return UsageRecord.unknown(f"{provider}: no usage shape known for dialect {dialect!r}")
    parse, markers = shape
    for key in markers:
        if key in usage:
            return parse(_Reader(usage), provider)
    return UsageRecord.unknown(f"{provider}: unrecognised {dialect} usage shape")


def usage_of_body(provider: str, dialect: str, body: Mapping[str, Any]) -> UsageRecord:
    """Pick the usage object out of a (non-streaming or assembled) response body and normalize it.

    Accepts the plain bodies of the three dialects and, for the Responses API, the ``response.completed``
    event (``{"type": "response.completed", "response": {...}}``) as well.
    """
    candidate: object = body
    if type(candidate) is not dict and not isinstance(candidate, Mapping):
        return UsageRecord.unknown(f"{provider}: response body is not an object")
    usage = body.get("usage")
    if usage is None and isinstance(body.get("response"), Mapping):
        usage = body["response"].get("usage")
    if usage is None:
        return UsageRecord.unknown(f"{provider}: no usage object in the response body")
    return normalize(provider, dialect, usage)


# Values that mean "the standard price": not worth a price variant or a mention.
_STANDARD = frozenset({"default", "standard", "auto", "global", "not_available"})


def _option(value: Any) -> str | None:
    return value if isinstance(value, str) and value and value not in _STANDARD else None


def price_context_of_body(provider: str, dialect: str, body: Mapping[str, Any]) -> dict[str, str]:
    """The options a response reports that change its price, as ``{key: value}`` for the price data.

    OpenAI (both APIs) reports the ``service_tier`` that served the call (``flex``, ``priority``,
    ``fast``...); Anthropic reports ``usage.service_tier`` (``batch`` becomes ``processing: batch``,
    the batch price), ``usage.inference_geo`` (``us``) and ``usage.speed`` (``fast``). Standard
    values (``default``, ``standard``, ``global``) are left out. Reading the response, not the
    request, prices what actually ran (a request for a tier the project may not use falls back to
    standard).
    """
    candidate: object = body
    if type(candidate) is not dict and not isinstance(candidate, Mapping):
        return {}
    if isinstance(body.get("response"), Mapping):
        body = body["response"]  # a Responses API response.completed event
    context: dict[str, str] = {}
    if dialect.startswith("anthropic"):
        usage = body.get("usage")
        if isinstance(usage, Mapping):
            for key in ("service_tier", "inference_geo", "speed"):
                value = _option(usage.get(key))
                if value is not None:
                    context[key] = value
        if context.get("service_tier") == "batch":  # a Message Batches result: the batch price
            del context["service_tier"]
            context["processing"] = "batch"
        return context
    tier = _option(body.get("service_tier"))
    if tier is not None:
        context["service_tier"] = tier
    return context

"""The providers' prompt-caching rules as billing: which prompt tokens a request reads, writes or pays for.

The local backend bills prompts the way each provider does, so tests and trace replays can measure
cache placement offline. This is billing only; physical reuse (the KV cache) is separate. Two rule
sets, their numbers (minimums, breakpoint limits, lookback, lifetimes, context windows) read from
:mod:`cachekit.providers.cache_rules`:

* :class:`AnthropicCache`, explicit breakpoints (Anthropic, and Bailian's explicit cache which copies
  its marker rules). A prompt is a sequence of :class:`Segment` s in prefix order tools → system →
  messages; each segment's prefix hash chains over every segment before it. A ``cache_control``
  marker (a breakpoint) *writes* one entry, at its own position only; each breakpoint *reads* by
  walking back at most ``lookback_positions`` positions, itself counting as the first, and the
  longest hit found by any breakpoint is read. A breakpoint whose prefix is shorter than the model's
  minimum writes nothing (and is no error). Usage follows the docs' mixed-TTL formula: with ``A`` the
  tokens up to the highest hit, ``B`` up to the last 1-hour breakpoint after ``A`` (else ``A``) and
  ``C`` up to the last breakpoint, ``A`` is read, ``B - A`` written at 1 h, ``C - B`` at 5 min, and
  everything after ``C`` is plain input. A hit refreshes the entry's lifetime, measured from the
  start of the request (the clock's reading when :meth:`AnthropicCache.account` runs).
* :class:`OpenAICache`, automatic caching: prompts of at least 1,024 tokens are cached, hits come
  in 128-token steps (1,024 + 128k), so prefix hashes chain over a first 1,024-token chunk and then
  128-token chunks. ``prompt_cache_key`` joins the routing hash, so another key is another cache.
  In-memory retention is modelled as 5 minutes of inactivity (the docs: "typically" cleared within
  5 to 10 minutes of inactivity, always within an hour of last use); ``"24h"`` as 24 hours since
  last use.

Caches never cross partitions (the tenant) or models: both are hashed into the root of every chain.
Entries are evicted least-recently-used once their tokens exceed ``capacity_tokens``; an entry counts
the tokens it added beyond the prefix it extends. Requests the provider refuses raise
:class:`RequestRefusedError` (with the API's message where it is known) before any state changes.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from cachekit import _fork
from cachekit._types import Section, Ttl
from cachekit.errors import RequestRefusedError
from cachekit.local.clock import DEFAULT_CLOCK, Clock
from cachekit.providers.cache_rules import CacheRules, cache_rules, default_cache_rules
from cachekit.shape.blocks import lookback_positions

__all__ = [
    "AnthropicCache",
    "AnthropicUsage",
    "OpenAICache",
    "OpenAIUsage",
    "RequestRefusedError",
    "Retention",
    "Segment",
    "Ttl",
]

logger = logging.getLogger("cachekit.local.accounting")

Retention = Literal["in_memory", "24h"]

_SECTION_ORDER: dict[str, int] = {"tools": 0, "system": 1, "messages": 2}
# The API's own wording (quoted in github.com/cnighswonger/claude-code-cache-fix/issues/44).
_TTL_ORDER = (
    "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block. "
    "Note that blocks are processed in the following order: `tools`, `system`, `messages`."
)
_DEFAULT_CAPACITY = 50_000_000


@dataclass(frozen=True)
class Segment:
    """One cacheable position of an Anthropic-style prompt: a tool definition, a system block or a
    message content block, in prefix order tools -> system -> messages.

    ``block_type`` (``"text"``, ``"tool_use"``, ``"tool_result"``, ``"thinking"``, ...) is optional:
    consecutive ``tool_use`` or ``tool_result`` blocks count as one lookback position where the
    provider says so, and it names the block in the API's error messages.

    ``nested`` are the markers inside the block at any depth (a document's ``source.content``
    blocks, a search result in a tool result, ...) as (path, ttl) in prefix order, before the
    block's own marker: each counts against the limit and takes part in the 1h-before-5m order. A
    segment is the finest position billed here, so a nested marker writes and reads at its block's
    end, as one breakpoint with the block's own marker.
    """

    section: Section
    content: (
        bytes  # canonical bytes of the block WITHOUT its cache_control; the prefix hash chains over these
    )
    tokens: int  # its token count (the backend's tokenizer)
    marker: Ttl | None = None  # its cache_control ttl; None when unmarked
    eligible: bool = True  # False for blocks that cannot carry cache_control (e.g. thinking blocks)
    where: str = ""  # a JSON-path-like location for error messages, e.g. "messages.3.content.0"
    block_type: str = ""  # the content block's type, when the caller knows it
    nested: tuple[tuple[str, Ttl], ...] = ()  # markers inside the block: (path, ttl), prefix order
    role: str = ""  # the message's role (OpenAI takes breakpoints on some roles' blocks only)
    marker_field: str = "cache_control"  # the field the marker came in: or "prompt_cache_breakpoint"


@dataclass(frozen=True)
class AnthropicUsage:
    """The prompt side of an Anthropic ``usage`` object; the four counts add up to the prompt's tokens."""

    input_tokens: int  # tokens neither read from nor written to the cache
    cache_creation_input_tokens: int
    cache_read_input_tokens: int
    ephemeral_5m_input_tokens: int
    ephemeral_1h_input_tokens: int

    def __post_init__(self) -> None:
        counts = (
            self.input_tokens,
            self.cache_creation_input_tokens,
            self.cache_read_input_tokens,
            self.ephemeral_5m_input_tokens,
            self.ephemeral_1h_input_tokens,
        )
        if any(count < 0 for count in counts):
            raise ValueError(f"usage counts must be >= 0, got {self!r}")
        # "the current cache_creation_input_tokens field equals the sum of the values in the cache_creation
        # object" (prompt-caching docs, 1-hour cache duration)
        if (
            self.cache_creation_input_tokens
            != self.ephemeral_5m_input_tokens + self.ephemeral_1h_input_tokens
        ):
            raise ValueError(f"cache_creation_input_tokens must equal the 5m and 1h writes, got {self!r}")

    @property
    def total_input_tokens(self) -> int:
        """cache_read_input_tokens + cache_creation_input_tokens + input_tokens: the whole prompt."""
        return self.cache_read_input_tokens + self.cache_creation_input_tokens + self.input_tokens

    def fields(self) -> dict[str, Any]:
        """The usage JSON fields exactly as the Messages API writes them, including the nested
        ``"cache_creation": {"ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens"}``."""
        return {
            "input_tokens": self.input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cache_creation": {
                "ephemeral_5m_input_tokens": self.ephemeral_5m_input_tokens,
                "ephemeral_1h_input_tokens": self.ephemeral_1h_input_tokens,
            },
        }


@dataclass(frozen=True)
class OpenAIUsage:
    """The prompt side of an OpenAI ``usage`` object: all prompt tokens, and those read from the cache."""

    prompt_tokens: int
    cached_tokens: int

    def __post_init__(self) -> None:
        if not 0 <= self.cached_tokens <= self.prompt_tokens:
            raise ValueError(f"cached_tokens must be within 0..prompt_tokens, got {self!r}")


@dataclass(slots=True)
class _Entry:
    cost: int  # tokens this entry added beyond the prefix it extends (what capacity counts)
    ttl: float
    expires_at: float


class _EntryStore:
    """Live cache entries by prefix hash, least recently used first; expired entries are misses."""

    def __init__(self, capacity_tokens: int) -> None:
        if isinstance(capacity_tokens, bool) or not isinstance(capacity_tokens, int) or capacity_tokens < 0:
            raise ValueError(f"capacity_tokens must be an integer >= 0, got {capacity_tokens!r}")
        self._capacity = capacity_tokens
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()
        self._used = 0

    @property
    def used_tokens(self) -> int:
        return self._used

    def live(self, key: bytes, now: float) -> _Entry | None:
        entry = self._entries.get(key)
        if entry is not None and now >= entry.expires_at:
            self._remove(key)
            return None
        return entry

    def refresh(self, key: bytes, now: float, ttl: float) -> None:
        entry = self._entries.get(key)
        if entry is None:  # evicted earlier in the same request: nothing left to refresh
            return
        entry.ttl = ttl
        entry.expires_at = now + ttl
        self._entries.move_to_end(key)

    def put(self, key: bytes, cost: int, ttl: float, now: float) -> None:
        if key in self._entries:
            self._remove(key)
        self._entries[key] = _Entry(cost, ttl, now + ttl)
        self._used += cost
        while self._used > self._capacity and self._entries:
            _, evicted = self._entries.popitem(last=False)
            self._used -= evicted.cost

    def _remove(self, key: bytes) -> None:
        self._used -= self._entries.pop(key).cost


def _digest(*parts: bytes) -> bytes:
    """A 128-bit hash of length-prefixed parts (so no two part lists collide by concatenation)."""
    hasher = hashlib.blake2b(digest_size=16)
    for part in parts:
        hasher.update(len(part).to_bytes(8, "big"))
        hasher.update(part)
    return hasher.digest()


def _root(kind: bytes, provider: str, partition: bytes, model: str, *extra: bytes) -> bytes:
    # The tenant and the model start every chain: caches never cross organizations or models.
    if not isinstance(partition, bytes):
        raise TypeError(f"partition must be bytes, got {type(partition).__name__}")
    return _digest(kind, provider.encode(), partition, model.strip().lower().encode(), *extra)


def _path(where: str, leaf: str) -> str:
    return f"{where}.{leaf}" if where else leaf


class _BilledCache:
    """What both rule sets keep: a clock, the LRU entry store and the lock that guards it."""

    def __init__(self, clock: Clock | None, capacity_tokens: int) -> None:
        self._clock = clock if clock is not None else DEFAULT_CLOCK
        self._store = _EntryStore(capacity_tokens)
        self._lock = _fork.lock(self)

    @property
    def stored_tokens(self) -> int:
        """Tokens the live and not-yet-collected entries hold, as counted against ``capacity_tokens``."""
        with self._lock:
            return self._store.used_tokens


class AnthropicCache(_BilledCache):
    """Anthropic-style explicit prompt caching (breakpoints, lookback, TTLs) as billing, per partition.

    ``provider`` picks the rule rows (``"anthropic"``, or ``"bailian"`` for Model Studio's explicit
    cache); ``clock`` (default :func:`time.monotonic`) measures lifetimes. Thread-safe.
    """

    def __init__(
        self,
        *,
        provider: str = "anthropic",
        clock: Clock | None = None,
        capacity_tokens: int = _DEFAULT_CAPACITY,
    ) -> None:
        self._provider = provider.strip().lower()
        default_cache_rules().lookup(self._provider, "")  # UnknownProviderError for a provider without rules
        if all(row.mode != "explicit" for row in default_cache_rules() if row.provider == self._provider):
            raise ValueError(f"provider {provider!r} caches automatically; use OpenAICache")
        super().__init__(clock, capacity_tokens)

    def account(
        self,
        *,
        model: str,
        partition: bytes,
        segments: Sequence[Segment],
        automatic: Ttl | None = None,
        context: bytes = b"",
        implicit: Ttl | None = None,
        cache_key: str | None = None,
    ) -> AnthropicUsage:
        """Bill one request's prompt and update the cache: read the longest live prefix, write at breakpoints.

        ``partition`` is the tenant (caches never cross organizations); ``automatic`` is a top-level
        request ``cache_control`` (the marker goes on the last eligible block); ``context`` is the
        canonical bytes of settings that invalidate the messages cache but not tools or system
        (``tool_choice``, thinking, ...), chained in before the first messages segment. ``implicit``
        is the lifetime of the provider's own breakpoint where its rules place one
        (:attr:`CacheRules.implicit_breakpoint`; ``None`` when the request turned it off);
        ``cache_key`` is OpenAI's ``prompt_cache_key`` (another key is another cache). Raises
        :class:`RequestRefusedError` before changing any state when the provider would refuse the request.
        """
        rules = cache_rules(self._provider, model)
        if rules.mode != "explicit":
            raise ValueError(f"{self._provider} {model!r} caches automatically; use OpenAICache")
        segs = tuple(segments)
        _check_segments(segs)
        marks = _breakpoints(segs, automatic, rules, implicit if rules.implicit_breakpoint else None)
        total = sum(s.tokens for s in segs)
        if rules.context_window is not None and total > rules.context_window:
            raise RequestRefusedError(f"prompt is too long: {total} tokens > {rules.context_window} maximum")
        key = b"\x00" if cache_key is None else b"\x01" + cache_key.encode()
        hashes = _prefix_hashes(_root(b"explicit/v1", self._provider, partition, model, key), segs, context)
        prefix = list(itertools.accumulate(s.tokens for s in segs))  # tokens up to and including each
        positions = lookback_positions(
            (s.block_type for s in segs), tool_runs_one_position=rules.tool_runs_one_position
        )
        # "Shorter prompts cannot be cached, even if marked with cache_control ... and no error is returned."
        effective = [(i, ttl) for i, ttl in marks if prefix[i] >= rules.min_cacheable_tokens]
        # No lookback limit (OpenAI): a window as wide as the prompt.
        window = rules.lookback_positions or len(segs) + 1
        with self._lock:
            now = self._clock()
            hits = [
                hit
                for hit in (self._lookback(hashes, positions, i, window, now) for i, _ in effective)
                if hit is not None
            ]
            top = max(hits, default=-1)
            read = prefix[top] if top >= 0 else 0
            writers = [(i, ttl) for i, ttl in effective if i > top]
            long_end = read
            for i, ttl in writers:
                if ttl == "1h":  # 1h breakpoints precede 5m ones, so this ends the 1-hour stretch
                    long_end = prefix[i]
            end = prefix[writers[-1][0]] if writers else read
            # Hits are refreshed (own TTL) "for no additional cost each time the cached content is used".
            for hit in sorted(set(hits)):
                entry = self._store.live(hashes[hit], now)
                if entry is not None:
                    self._store.refresh(hashes[hit], now, entry.ttl)
            start = read
            for i, ttl in writers:
                self._store.put(hashes[i], prefix[i] - start, rules.lifetime(ttl), now)
                start = prefix[i]
        usage = AnthropicUsage(
            input_tokens=total - end,
            cache_creation_input_tokens=end - read,
            cache_read_input_tokens=read,
            ephemeral_5m_input_tokens=end - long_end,
            ephemeral_1h_input_tokens=long_end - read,
        )
        logger.debug(
            "%s %s: %d prompt tokens, %d read, %d written, %d breakpoints",
            self._provider,
            model,
            total,
            usage.cache_read_input_tokens,
            usage.cache_creation_input_tokens,
            len(effective),
        )
        return usage

    def _lookback(
        self, hashes: list[bytes], positions: list[int], breakpoint: int, window: int, now: float
    ) -> int | None:
        """The last segment at or before ``breakpoint``, within ``window`` positions, with a live entry."""
        floor = positions[breakpoint] - window + 1
        index = breakpoint
        while index >= 0 and positions[index] >= floor:
            if self._store.live(hashes[index], now) is not None:
                return index
            index -= 1
        return None


def _check_segments(segs: tuple[Segment, ...]) -> None:
    """Caller errors (not provider refusals): bad sections, order or token counts."""
    order = -1
    for s in segs:
        rank = _SECTION_ORDER.get(s.section)
        if rank is None:
            raise ValueError(
                f"segment {s.where or '?'}: section must be tools, system or messages, got {s.section!r}"
            )
        if rank < order:
            raise ValueError(f"segment {s.where or '?'}: {s.section} out of order (tools, system, messages)")
        order = rank
        if isinstance(s.tokens, bool) or not isinstance(s.tokens, int) or s.tokens < 0:
            raise ValueError(f"segment {s.where or '?'}: tokens must be an integer >= 0, got {s.tokens!r}")
        if not isinstance(s.content, bytes):
            raise TypeError(
                f"segment {s.where or '?'}: content must be bytes, got {type(s.content).__name__}"
            )


def _ineligible(s: Segment) -> RequestRefusedError:
    if s.block_type == "text":
        # The API's wording for an empty text block (github.com/anthropics/claude-code/issues/54013).
        return RequestRefusedError("cache_control cannot be set for empty text blocks")
    # The API rejects the field itself, e.g. "messages.13.content.0.thinking.cache_control: Extra inputs
    # are not permitted" (github.com/Wei-Shaw/sub2api/issues/225).
    block = _path(s.where, s.block_type) if s.block_type else s.where
    return RequestRefusedError(f"{_path(block, 'cache_control')}: Extra inputs are not permitted")


def _breakpoints(
    segs: tuple[Segment, ...], automatic: Ttl | None, rules: CacheRules, implicit: Ttl | None = None
) -> list[tuple[int, str]]:
    """The request's breakpoints (index, ttl) in prefix order, one per segment, after every check
    the API makes; markers nested in a segment count in the checks and bill at the segment."""
    every: list[tuple[int, str, str]] = []  # (segment, ttl, path) of every marker, in prefix order
    for index, s in enumerate(segs):
        every += [(index, _valid_ttl(ttl, where, rules), where) for where, ttl in s.nested]
        if s.marker is None:
            continue
        if s.marker_field not in rules.markers:
            # OpenAI's wording for a field it does not know.
            raise RequestRefusedError(f"Unknown parameter: '{_path(s.where, s.marker_field)}'.")
        if not _may_carry(s, rules):
            raise _ineligible(s)
        every.append((index, _valid_ttl(s.marker, s.where, rules), s.where))
    every = _within_budget(every, rules, implicit is not None)
    if implicit is not None:
        every = _with_implicit(every, segs, implicit)
    if automatic is not None:
        if not rules.automatic_caching:
            raise RequestRefusedError(
                f"cache_control: a top-level cache_control is not supported for {rules.provider}"
            )
        _valid_ttl(automatic, "", rules)
        # "If the last block is not eligible as an automatic cache breakpoint target, the system silently
        # walks backward to find the nearest eligible block. If none is found, caching is skipped."
        target = next((i for i in range(len(segs) - 1, -1, -1) if segs[i].eligible), None)
        if target is not None:
            existing = segs[target].marker
            if existing is None:
                # The last eligible block: still in prefix order.
                every.append((target, automatic, segs[target].where))
            elif existing != automatic:
                # The docs say only "the API returns a 400 error"; this wording is ours.
                raise RequestRefusedError(
                    f"{_path(segs[target].where, 'cache_control.ttl')}: the top-level cache_control "
                    f"(ttl={automatic!r}) conflicts with this block's cache_control (ttl={existing!r})"
                )
            # Same TTL already on the last block: "automatic caching is a no-op".
    limit = rules.max_breakpoints or 0
    if len(every) > limit and rules.over_limit == "error":
        # The automatic breakpoint "uses one of the 4 available breakpoint slots".
        raise RequestRefusedError(
            f"A maximum of {limit} blocks with cache_control may be provided. Found {len(every)}."
        )
    shortest = float("inf")
    for _, ttl, where in every if rules.ttl_order else ():
        seconds = rules.lifetime(ttl)
        if seconds > shortest:
            raise RequestRefusedError(f"{_path(where, 'cache_control.ttl')}: {_TTL_ORDER}")
        shortest = min(shortest, seconds)
    # One breakpoint per segment, with the lifetime of its first marker (the longest, in valid order).
    marks: dict[int, str] = {}
    for index, ttl, _ in every:
        marks.setdefault(index, ttl)
    return list(marks.items())


def _may_carry(s: Segment, rules: CacheRules) -> bool:
    """Whether the provider takes a breakpoint on this segment: its block type and role (OpenAI's
    lists, :attr:`CacheRules.marker_types` and :attr:`CacheRules.marker_roles`)."""
    if not s.eligible:
        return False
    if rules.marker_types is not None and s.block_type not in rules.marker_types:
        return False
    return rules.marker_roles is None or s.role in rules.marker_roles


def _within_budget(
    every: list[tuple[int, str, str]], rules: CacheRules, implicit: bool
) -> list[tuple[int, str, str]]:
    """Where the provider writes only the latest breakpoints ("writes up to the latest three explicit
    breakpoints" beside the implicit one, four without it), the earlier ones are dropped."""
    if rules.over_limit != "write_latest":
        return every
    room = max((rules.max_breakpoints or 0) - (1 if implicit else 0), 0)
    return every[len(every) - room :] if len(every) > room else every


def _implicit_target(segs: tuple[Segment, ...]) -> int | None:
    """The provider's own breakpoint: the last segment of the newest user or tool message (OpenAI
    "places a managed breakpoint near the latest user or tool message")."""
    for index in range(len(segs) - 1, -1, -1):
        s = segs[index]
        if s.section == "messages" and (
            s.role in ("user", "tool", "function") or s.block_type == "function_call_output"
        ):
            return index
    return None


def _with_implicit(
    every: list[tuple[int, str, str]], segs: tuple[Segment, ...], ttl: Ttl
) -> list[tuple[int, str, str]]:
    target = _implicit_target(segs)
    if target is None:
        return every
    return sorted([*every, (target, ttl, "(implicit)")], key=lambda item: item[0])


def _valid_ttl(ttl: str, where: str, rules: CacheRules) -> str:
    """``ttl`` when the provider offers that lifetime, else the API's error."""
    if "prompt_cache_breakpoint" in rules.markers and ttl in ("5m", "1h"):
        return ttl  # the short and long tiers of a prompt_cache_breakpoint (30m, 12h)
    if ttl not in rules.ttl_seconds:
        options = ", ".join(repr(name) for name in rules.ttl_seconds)
        raise RequestRefusedError(
            f"{_path(where, 'cache_control.ttl')}: must be one of {options}, got {ttl!r}"
        )
    return ttl


def _prefix_hashes(root: bytes, segs: tuple[Segment, ...], context: bytes) -> list[bytes]:
    """The cumulative hash after each segment; ``context`` enters just before the first messages segment."""
    hashes: list[bytes] = []
    current = root
    context_in = False
    for s in segs:
        if s.section == "messages" and not context_in:
            current = _digest(current, b"context", context)
            context_in = True
        current = _digest(current, s.section.encode(), s.content)
        hashes.append(current)
    return hashes


class OpenAICache(_BilledCache):
    """OpenAI-style automatic prompt caching (1,024-token minimum, 128-token steps) as billing.

    Thread-safe; ``clock`` (default :func:`time.monotonic`) measures retention.
    """

    def __init__(self, *, clock: Clock | None = None, capacity_tokens: int = _DEFAULT_CAPACITY) -> None:
        super().__init__(clock, capacity_tokens)

    def account(
        self,
        *,
        model: str,
        partition: bytes,
        tokens: Sequence[int],
        retention: Retention = "in_memory",
        cache_key: str | None = None,
    ) -> OpenAIUsage:
        """Bill one request's prompt (its token ids) and cache it: ``cached_tokens`` is the longest live
        prefix of 1,024 + 128k tokens. ``retention`` is ``prompt_cache_retention``; ``cache_key`` is
        ``prompt_cache_key`` (combined with the prefix hash, so another key is another cache)."""
        rules = cache_rules("openai", model)
        count = len(tokens)
        if rules.context_window is not None and count > rules.context_window:
            raise RequestRefusedError(
                f"This model's maximum context length is {rules.context_window} tokens. However, your "
                f"messages resulted in {count} tokens. Please reduce the length of the messages."
            )
        if retention not in rules.ttl_seconds:
            options = ", ".join(repr(name) for name in rules.ttl_seconds)
            raise RequestRefusedError(
                f"Invalid value for 'prompt_cache_retention': must be one of {options}."
            )
        ttl = rules.ttl(retention)
        minimum = rules.min_cacheable_tokens
        step = rules.increment_tokens or 1
        if count < minimum:  # "Caching is enabled automatically for prompts that are 1024 tokens or longer."
            return OpenAIUsage(prompt_tokens=count, cached_tokens=0)
        data = array("q", tokens).tobytes()
        width = array("q").itemsize
        key = b"\x00" if cache_key is None else b"\x01" + cache_key.encode()
        current = _root(b"automatic/v1", "openai", partition, model, key)
        chunks: list[tuple[int, bytes]] = []  # (prefix length, hash) at 1024, 1152, 1280, ...
        end = minimum
        start = 0
        while end <= count:
            current = _digest(current, data[start * width : end * width])
            chunks.append((end, current))
            start, end = end, end + step
        with self._lock:
            now = self._clock()
            # Look everything up before writing anything: a write may evict an entry not yet checked.
            found = [self._store.live(digest, now) for _, digest in chunks]
            cached = max(
                (length for (length, _), entry in zip(chunks, found, strict=True) if entry is not None),
                default=0,
            )
            previous = 0
            for (length, digest), entry in zip(chunks, found, strict=True):
                if entry is not None:
                    self._store.refresh(digest, now, max(entry.ttl, ttl))
                else:
                    self._store.put(digest, length - previous, ttl, now)
                previous = length
        logger.debug("openai %s: %d prompt tokens, %d cached", model, count, cached)
        return OpenAIUsage(prompt_tokens=count, cached_tokens=cached)

"""Automatic prompt-cache breakpoints: where ``cache_control`` markers go, and why.

Anthropic (and Bailian's explicit cache, which copies its rules) bills a prompt prefix read from the
cache at 0.1x and a prefix written to it at 1.25x (2x for a 1-hour entry), but only at the blocks
that carry a ``cache_control`` marker, at most 4 per request, only for prefixes of at least the
model's minimum length, and a marker only finds an earlier entry within 20 positions before it. The
planner places markers so that each request reads the longest earlier write and writes what the next
request will read:

1. **Census.** The caller's own markers, wherever they sit (on a block, or nested in one at any
   depth: a document's ``source.content`` blocks, a search result inside a tool result, ...), and a
   top-level automatic ``cache_control`` count against the limit and take part in the lifetime
   order; the caller's markers are never moved or removed. More than the limit, a marker on a block
   that cannot carry one, or a 1-hour marker after a 5-minute one is the caller's error:
   :class:`PlanError` names the blocks (the provider would refuse the request the same way).
2. **Candidates**, most valuable first while markers remain: the end of the conversation so far (the
   last block that may carry a marker: the next request extends this prompt and reads it whole); a
   **lookback bridge** when the conversation's previous write lies 20 positions or more before every
   later marker (a turn that added 30 tool results, say): a marker on the previous write's own block
   reads it (or the marker at the end of the system prompt or tools, when that lies within reach
   after the write: no marker more); then the end of the system prompt and the end of the tools
   (stable across conversations). A candidate whose prefix is shorter than the model's minimum gets
   no marker (it would write nothing); a block that cannot carry one (thinking, an empty or cited
   text block) is never marked; a string shorthand becomes one text block to carry its marker.
3. **Lifetimes**, chosen before the gap (:mod:`cachekit.shape.lifetimes`): 1 hour where the tenant's timing
   statistics for the model (or the caller's expected gap) make its expected saving beat a 5-minute
   write, else 5 minutes; a caller's fixed lifetime is used as given. A marker never gets a shorter
   lifetime than a marker after it (1h before 5m), nor a longer one than the caller's markers
   before it.

:func:`plan_breakpoints` is pure: the blocks, their token counts and what is remembered about
earlier requests (:class:`Recall`) go in, the planned body and the placements come out.
:class:`Planner` keeps that memory (:class:`PlanMemory`: which prefixes were written and when, by
prefix hash, per partition and model), counts tokens with a calibrated
:class:`~cachekit.shape.tokens.TokenEstimator` and, for OpenAI, sets ``prompt_cache_key`` from the hash
of the stable prefix when the caller set none (never for OpenAI-compatible third parties, which do
not take it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import logging
import operator
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from cachekit import _fork
from cachekit._types import Ttl
from cachekit.errors import PlanError
from cachekit.providers.cache_rules import MARKER_FIELDS, CacheRules, UnknownProviderError, cache_rules
from cachekit.providers.registry import ROUTING_HEADERS, RULES_AS
from cachekit.shape.blocks import (
    Block,
    ChainMemo,
    cache_context,
    chain_hashes,
    lookback_positions,
    prompt_blocks,
)
from cachekit.shape.lifetimes import Expect, GapMemory, WriteRates, choose_ttl, default_write_rates
from cachekit.shape.markers import (
    TailOdds,
    implicit_mode,
    implicit_target,
    marker_value,
    parse_marker,
    rebind,
)
from cachekit.shape.tokens import TokenEstimator

__all__ = [
    "Applied",
    "Placement",
    "Plan",
    "PlanError",
    "PlanMemory",
    "Planner",
    "Recall",
    "add_marker",
    "plan_breakpoints",
    "prompt_cache_key",
    "stable_first",
]

logger = logging.getLogger("cachekit.planner")

Reason = Literal["conversation", "lookback", "anchor", "system", "tools"]

_SHORT: Ttl = "5m"
_LONG: Ttl = "1h"
_FIVE_MINUTES = 300.0
_ONE_HOUR = 3600.0
_ANTHROPIC_DIALECTS = ("anthropic_messages", "anthropic_count_tokens")
_SECTION = operator.attrgetter("section")


@dataclass(frozen=True, slots=True)
class Placement:
    """One marker cachekit added: the block (its path and index), its lifetime, and why it is there."""

    where: str
    block: int
    ttl: Ttl
    reason: Reason
    prefix_tokens: int
    """Estimated tokens of the prefix up to and including the block (calibrated)."""


@dataclass(frozen=True, slots=True)
class Recall:
    """What is remembered about earlier requests, as facts about this request's blocks.

    ``last_write``: the latest block whose prefix an earlier request wrote and that is still live.
    ``long_gap``: blocks whose prefix came back after more than 5 minutes (they get 1-hour markers).
    ``conversation_long_gap``: the conversation's markers get 1-hour lifetimes.
    ``conversation_gap``: seconds since this conversation's previous request (``None``: a new one);
    ``stable_gap``: seconds since the stable prefix (system prompt, tools) was last used.
    ``anchor``: the latest block of the conversation whose prefix holds a live 1-hour entry.
    """

    last_write: int | None = None
    long_gap: frozenset[int] = frozenset()
    conversation_long_gap: bool = False
    conversation_gap: float | None = None
    stable_gap: float | None = None
    anchor: int | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    """A planned request: the body to send and the markers cachekit added to it."""

    body: dict[str, Any]
    placements: tuple[Placement, ...]
    caller_markers: int
    """The caller's own markers, plus one for a top-level automatic ``cache_control``."""
    notes: tuple[str, ...] = ()
    """Why candidates got no marker (below the minimum, no markers left), for the debug log."""
    writes: tuple[tuple[int, Ttl], ...] = ()
    """The markers of the planned body (the caller's and cachekit's) whose prefix reaches the model's
    minimum, as (block index, lifetime): the cache entries the request writes or refreshes."""
    tier_names: tuple[str, str] = ("5m", "1h")
    """The provider's names of the short and long lifetimes (OpenAI: 30m and 12h), for the header."""

    def header(self) -> str:
        """The ``x-cachekit-breakpoints`` header value: ``where=ttl/reason`` per added marker, or ``none``."""
        if not self.placements:
            return "none"
        names = dict(zip(("5m", "1h"), self.tier_names, strict=True))
        return ", ".join(f"{p.where}={names[p.ttl]}/{p.reason}" for p in self.placements)


def _ttl_of(control: Any, where: str, rules: CacheRules) -> Ttl:
    if rules.markers[0] != "cache_control":
        tier = parse_marker(control, rules)
        if tier is None:
            options = ", ".join(repr(name) for name in rules.ttl_seconds)
            raise PlanError(
                f"{where}.{rules.markers[0]}: must be {{'mode': 'explicit'}} with a ttl of {options}"
            )
        return tier
    if not isinstance(control, dict) or control.get("type") != "ephemeral":
        raise PlanError(f"{where}.cache_control: type must be 'ephemeral'")
    ttl = control.get("ttl", _SHORT)
    if ttl not in rules.ttl_seconds or ttl not in (_SHORT, _LONG):
        options = ", ".join(repr(name) for name in rules.ttl_seconds)
        raise PlanError(f"{where}.cache_control.ttl: must be one of {options}, got {ttl!r}")
    return _SHORT if ttl == _SHORT else _LONG


@dataclass(frozen=True, slots=True)
class _Census:
    """The caller's markers: on blocks (by index), nested inside blocks (at any depth, in prefix
    order, with their paths), and the automatic one."""

    marked: dict[int, Ttl]
    nested: tuple[tuple[int, str, Ttl], ...]
    target: int | None
    automatic: Ttl | None
    separate: bool = False
    """The automatic breakpoint is written apart from a caller's marker on its block (OpenAI's implicit
    one: "one implicit breakpoint and ... up to the latest three explicit breakpoints")."""

    def writes(self) -> int:
        """The breakpoints the request holds before any is added, each taking one of the limit."""
        extra = self.automatic is not None and (
            self.target is None or (self.separate and self.target in self.marked)
        )
        return len(self.fixed()) + (1 if extra else 0)

    def taken(self) -> dict[int, Ttl]:
        """Blocks that carry a marker: the caller's and the automatic one's target."""
        if self.automatic is not None and self.target is not None:
            return {**self.marked, self.target: self.automatic}
        return dict(self.marked)

    def fixed(self) -> list[tuple[tuple[int, int], Ttl, str]]:
        """Every marker in prefix order as (key, ttl, path): keyed (block, 0) when nested in the block
        (the path names it), (block, 1) on it (path ``""``): a block's own marker ends the block,
        after everything inside it."""
        keyed = [((index, 0), ttl, where) for index, where, ttl in self.nested]
        keyed += [((index, 1), ttl, "") for index, ttl in self.taken().items()]
        # By position only (a stable sort): markers nested in one block keep their own order, which
        # sorting by lifetime too would change (a later 1h would pass an earlier 5m).
        return sorted(keyed, key=lambda item: item[0])


def _census(
    body: dict[str, Any], blocks: Sequence[Block], rules: CacheRules, implicit: int | None = None
) -> _Census:
    """The caller's markers, checked as the API checks them: eligibility, lifetimes, the limit, order.

    A marker counts wherever it sits: on a block, or nested in one at any depth (a document's
    ``source.content`` blocks, a search result in a tool result, ...; :attr:`Block.nested`).
    """
    marked: dict[int, Ttl] = {}
    nested: list[tuple[int, str, Ttl]] = []
    named: list[str] = []  # every marker's path, in prefix order, for the messages below
    for index, block in enumerate(blocks):
        for path, control in block.nested:
            where = f"{block.where}.{path}"
            nested.append((index, where, _ttl_of(control, where, rules)))
            named.append(where)
        if block.marker is None:
            continue
        if not block.eligible:
            raise PlanError(f"{block.where}: a {block.kind or 'this'} block cannot carry cache_control")
        marked[index] = _ttl_of(block.marker, block.where, rules)
        named.append(block.where)
    automatic: Ttl | None = None
    target: int | None = None
    if implicit is not None:
        # The provider's own breakpoint (OpenAI's implicit mode) takes a write, like a top-level marker.
        automatic, target = _SHORT, implicit
        named.append("(implicit)")
    elif body.get("cache_control") is not None:
        if not rules.automatic_caching:
            raise PlanError(f"cache_control: a top-level cache_control is not supported by {rules.provider}")
        automatic = _ttl_of(body["cache_control"], "(top level)", rules)
        # The API's own walk back from the last block, which may stop at a cited block.
        target = next(
            (i for i in range(len(blocks) - 1, -1, -1) if blocks[i].eligible or blocks[i].cited), None
        )
        if target is not None and target in marked and marked[target] != automatic:
            raise PlanError(
                f"{blocks[target].where}: its cache_control conflicts with the top-level one "
                f"({marked[target]} vs {automatic})"
            )
        named.append("(top level)")
    census = _Census(marked, tuple(nested), target, automatic, separate=implicit is not None)
    count = census.writes()
    limit = rules.max_breakpoints or 0
    # Where the provider writes only the latest breakpoints (OpenAI), more is no error; none are added.
    if count > limit and rules.over_limit == "error":
        raise PlanError(f"{count} cache_control markers, at most {limit} allowed: {', '.join(named)}")
    _check_order(census, blocks, rules)
    return census


def _check_order(census: _Census, blocks: Sequence[Block], rules: CacheRules) -> None:
    """1-hour markers before 5-minute ones, in prefix order (the API refuses the request otherwise)."""
    shortest = float("inf")
    for (index, _), ttl, where in census.fixed() if rules.ttl_order else ():
        seconds = rules.lifetime(ttl)
        if seconds > shortest:
            name = where or blocks[index].where
            raise PlanError(f"{name}: a ttl='1h' marker must not come after a ttl='5m' one")
        shortest = min(shortest, seconds)


def _last_eligible(blocks: Sequence[Block], start: int, stop: int = -1) -> int | None:
    return next((i for i in range(start, stop, -1) if blocks[i].eligible), None)


def _conversation_end(body: dict[str, Any], blocks: Sequence[Block]) -> int | None:
    """The last block that may carry a marker, before an assistant prefill if the request ends with one:
    the next request replaces a prefill with the whole answer, so a marker on it would never be read."""
    end = len(blocks) - 1
    messages = body.get("messages")
    if (
        isinstance(messages, list)
        and len(messages) > 1
        and isinstance(messages[-1], dict)
        and messages[-1].get("role") == "assistant"
    ):
        last = len(messages) - 1
        while end >= 0 and blocks[end].message == last and blocks[end].section == "messages":
            end -= 1
    return _last_eligible(blocks, end)


def _section_end(blocks: Sequence[Block], section: str) -> int | None:
    """The last block of ``section`` that may carry a marker (searching back within the section).

    Sections come in prefix order (tools, system, messages), so the search stops at the first block
    of an earlier section.
    """
    # The sections are read in C and the last block of ``section`` found by ``list.index`` on the
    # reversed list: looking for the tools' end no longer walks every message block in Python (the
    # planner asks six times a request).
    sections = list(map(_SECTION, blocks))
    try:
        index = len(sections) - 1 - sections[::-1].index(section)
    except ValueError:
        return None
    while index >= 0 and sections[index] == section:
        if blocks[index].eligible:
            return index
        index -= 1
    return None


def _stable_system_end(blocks: Sequence[Block], volatile: frozenset[int]) -> int | None:
    """The system marker's block: the last eligible system block before the first volatile one."""
    end = _section_end(blocks, "system")
    if not volatile or end is None:
        return end
    first = min((i for i in volatile if blocks[i].section == "system"), default=end + 1)
    end = _last_eligible(blocks, min(end, first - 1))
    return end if end is not None and blocks[end].section == "system" else None


def _cache_control(ttl: Ttl, rules: CacheRules | None = None) -> tuple[str, dict[str, str]]:
    # The short lifetime is the default: written as callers write it, without a ttl field.
    if rules is None:
        return "cache_control", (
            {"type": "ephemeral"} if ttl == _SHORT else {"type": "ephemeral", "ttl": _LONG}
        )
    return rules.markers[0], marker_value(ttl, rules)


def _path(where: str) -> list[str | int]:
    return [int(part) if part.isdigit() else part for part in where.split(".")]


def add_marker(
    body: dict[str, Any], where: str, ttl: Ttl = "5m", rules: CacheRules | None = None
) -> dict[str, Any]:
    """``body`` with a ``cache_control`` marker on the block at ``where`` (a :attr:`Block.where` path);
    copies only the containers along the path, so ``body`` is unchanged. With ``rules``, the marker
    is written in that provider's field (OpenAI's ``prompt_cache_breakpoint``).

    A string (system or message content shorthand) becomes a list of one text block carrying it.
    """
    name, value = _cache_control(ttl, rules)

    def put(container: Any, path: list[str | int]) -> Any:
        key = path[0]
        copy: Any = dict(container) if isinstance(container, dict) else list(container)
        if len(path) == 1:
            target = container[key]
            if isinstance(target, str):
                copy[key] = [{"type": "text", "text": target, name: value}]
            else:
                copy[key] = {**target, name: value}
        else:
            copy[key] = put(container[key], path[1:])
        return copy

    result: dict[str, Any] = put(body, _path(where))
    return result


def _lifetimes(
    wanted: dict[int, Ttl], fixed: list[tuple[tuple[int, int], Ttl, str]], rules: CacheRules
) -> dict[int, Ttl]:
    """Lifetimes for the added markers (on blocks) that keep 1h before 5m around the caller's markers."""
    if len(rules.ttl_seconds) < 2:
        return dict.fromkeys(wanted, _SHORT)
    chosen = dict(wanted)
    for index in chosen:
        # Never longer than a caller's marker before it (one nested in this very block is before it).
        if any(ttl == _SHORT for at, ttl, _ in fixed if at < (index, 1)):
            chosen[index] = _SHORT
    # Never shorter than any marker after it.
    every = sorted(
        [*((at, ttl) for at, ttl, _ in fixed), *(((index, 1), ttl) for index, ttl in chosen.items())],
        key=lambda item: item[0],
        reverse=True,
    )
    longest_after = False
    for (index, order), ttl in every:
        planned = order == 1 and index in chosen
        if planned and longest_after:
            chosen[index] = _LONG
        longest_after = longest_after or (chosen[index] if planned else ttl) == _LONG
    return chosen


def _bridge(  # noqa: PLR0917 - the facts the decision reads, each named
    write: int | None,
    blocks: Sequence[Block],
    marked: Collection[int],
    stable: Sequence[tuple[int | None, Reason]],
    positions: Sequence[int],
    prefix: Sequence[int],
    window: int,
    rules: CacheRules,
) -> tuple[int, Reason] | None:
    """The lookback: a marker finds an earlier entry only within ``window`` positions before it. When
    every marker after the previous write (``marked``: the blocks marked so far) is out of its reach, a
    marker on the write's own block reads it, unless the end of the system prompt or the tools
    (``stable``), marked anyway, lies within reach after it: that marker reads the write as well, so
    it takes the bridge's place instead of a marker more. ``None``: no bridge is needed."""
    if write is None or write >= len(blocks) or not blocks[write].eligible:
        return None
    after = [i for i in marked if i >= write]
    if not after or any(positions[i] - positions[write] < window for i in after):
        return None
    for index, reason in stable:
        if (
            index is not None
            and index >= write
            and positions[index] - positions[write] < window
            and prefix[index] >= rules.min_cacheable_tokens
        ):
            return index, reason
    return write, "lookback"


def plan_breakpoints(
    body: dict[str, Any],
    blocks: Sequence[Block],
    tokens: Sequence[int],
    *,
    rules: CacheRules,
    recall: Recall = Recall(),
    volatile: frozenset[int] = frozenset(),
    implicit: int | None = None,
    conversation: bool = True,
) -> Plan:
    """Place ``cache_control`` markers on ``body`` (see the module docstring). Pure.

    ``blocks`` are ``body``'s blocks (:func:`cachekit.shape.blocks.prompt_blocks`), ``tokens`` their token
    counts as the provider would count them, ``rules`` the model's caching rules (explicit mode).
    ``volatile`` are system blocks known to change between calls: the system marker goes on the last
    eligible system block before the first of them. ``implicit`` is the block the provider's own
    breakpoint ends on (OpenAI's implicit mode): it takes a write and stands for the conversation
    marker. ``conversation=False`` leaves the conversation's end unmarked (its write would not pay).
    Raises :class:`PlanError` for markers the provider would refuse.
    """
    if len(tokens) != len(blocks):
        raise ValueError(f"{len(tokens)} token counts for {len(blocks)} blocks")
    census = _census(body, blocks, rules, implicit)
    taken = census.taken()
    budget = (rules.max_breakpoints or 0) - census.writes()
    prefix = list(itertools.accumulate(tokens))
    positions = lookback_positions(
        (b.kind for b in blocks), tool_runs_one_position=rules.tool_runs_one_position
    )
    window = rules.lookback_positions or len(blocks) + 1  # None: no lookback limit
    conversation_ttl = _LONG if recall.conversation_long_gap else _SHORT

    candidates: list[tuple[int | None, Reason, Ttl]] = []
    if census.automatic is None and blocks and conversation:
        candidates.append((_conversation_end(body, blocks), "conversation", conversation_ttl))
    system_end = _stable_system_end(blocks, volatile)
    tools_end = _section_end(blocks, "tools")

    wanted: dict[int, Ttl] = {}
    reasons: dict[int, Reason] = {}
    notes: list[str] = []

    def take(index: int | None, reason: Reason, ttl: Ttl) -> None:
        nonlocal budget
        if index is None or index in taken or index in wanted:
            return
        if prefix[index] < rules.min_cacheable_tokens:
            notes.append(
                f"{reason} at {blocks[index].where}: {prefix[index]} tokens "
                f"< {rules.min_cacheable_tokens} minimum"
            )
            return
        if budget <= 0:
            notes.append(f"{reason} at {blocks[index].where}: no markers left")
            return
        wanted[index] = ttl
        reasons[index] = reason
        budget -= 1

    stable: tuple[tuple[int | None, Reason], ...] = ((system_end, "system"), (tools_end, "tools"))

    def stable_ttl(index: int) -> Ttl:
        return _LONG if index in recall.long_gap else _SHORT

    for index, reason, ttl in candidates:
        take(index, reason, ttl)
    bridge = _bridge(recall.last_write, blocks, [*taken, *wanted], stable, positions, prefix, window, rules)
    if bridge is not None:
        index, reason = bridge
        take(index, reason, conversation_ttl if reason == "lookback" else stable_ttl(index))
    # The anchor: while the conversation's end is written for 5 minutes, a marker on its latest live
    # 1-hour entry refreshes that entry for free, so a longer pause loses only what came after it.
    if recall.anchor is not None and conversation_ttl == _SHORT and recall.anchor < len(blocks):
        take(recall.anchor, "anchor", _LONG)
    for index, reason in stable:
        if index is not None:
            take(index, reason, stable_ttl(index))

    chosen = _lifetimes(wanted, census.fixed(), rules)
    planned = body
    placements = []
    for index in sorted(chosen):
        planned = add_marker(planned, blocks[index].where, chosen[index], rules)
        placements.append(Placement(blocks[index].where, index, chosen[index], reasons[index], prefix[index]))
    writes = tuple(
        (index, ttl)
        for index, ttl in sorted({**taken, **chosen}.items())
        if prefix[index] >= rules.min_cacheable_tokens
    )
    names = (rules.tier_name(_SHORT), rules.tier_name(_LONG))
    return Plan(planned, tuple(placements), len(taken), tuple(notes), writes, names)


def _routed(provider: str, dialect: str, body: dict[str, Any], model: str) -> Applied | None:
    """xAI: its Chat Completions route a conversation to one cache server by the ``x-grok-conv-id``
    header, its Responses API by ``prompt_cache_key`` ("It functions identically to setting
    x-grok-conv-id"); set from the stable prefix's hash as for OpenAI, the caller's own kept."""
    header = ROUTING_HEADERS.get(provider)
    if header is None or not dialect.startswith("openai"):
        return None
    if dialect == "openai_chat":
        return Applied(body, model=model, headers=((header, prompt_cache_key(dialect, body)),), changed=True)
    if body.get("prompt_cache_key") is not None:
        return Applied(body, model=model)
    key = prompt_cache_key(dialect, body)
    return Applied({**body, "prompt_cache_key": key}, None, key, model=model, changed=True)


def _multipliers(provider: str, model: str) -> tuple[float, float]:
    """(write, read) multipliers of the input price from the price table, else the documented 1.25
    and 0.1 (OpenAI: "cache writes cost 1.25x the uncached input token rate")."""
    from cachekit.cost.prices import default_prices
    from cachekit.cost.usage import UsageRecord

    def cost(uncached: int = 0, write: int = 0, read: int = 0) -> float | None:
        usage = UsageRecord(
            uncached_input=uncached, cache_write_5m=write, cache_write_1h=0, cache_read=read, output=0
        )
        return default_prices().price(provider, model, usage).total_usd

    try:
        plain = cost(uncached=1_000_000)
        write = cost(write=1_000_000)
        read = cost(read=1_000_000)
    except Exception:  # a price table that cannot answer: the documented multipliers
        plain = write = read = None
    if not plain or write is None or read is None:
        return 1.25, 0.1
    return write / plain, read / plain


def stable_first(dialect: str, body: dict[str, Any], volatile: Collection[str]) -> dict[str, Any]:
    """``body`` with the system blocks at the ``volatile`` paths moved after the others, both groups
    in their own order, so the stable ones form a prefix that can be cached.

    Anthropic: blocks of a ``system`` list; Chat: the leading system/developer messages. Nothing moves
    while a system block carries the caller's ``cache_control`` or ``prompt_cache_breakpoint``
    (cachekit never moves a caller's marker), nor for a single block or the Responses API's one
    ``instructions`` string.
    """
    if dialect in _ANTHROPIC_DIALECTS:
        system = body.get("system")
        if not isinstance(system, list):
            return body
        moved = [f"system.{i}" in volatile for i in range(len(system))]
        items, key = system, "system"
    elif dialect == "openai_chat":
        messages = body.get("messages")
        if not isinstance(messages, list):
            return body
        lead = 0
        while (
            lead < len(messages)
            and isinstance(messages[lead], dict)
            and messages[lead].get("role")
            in (
                "system",
                "developer",
            )
        ):
            lead += 1
        moved = [
            any(
                where == f"messages.{m}.content" or where.startswith(f"messages.{m}.content.")
                for where in volatile
            )
            for m in range(lead)
        ]
        items, key = messages, "messages"
    else:
        return body
    rendered = orjson.dumps(items[: len(moved)]).decode()
    if not any(moved) or all(moved) or any(f'"{name}"' in rendered for name in MARKER_FIELDS):
        return body
    stable = [item for item, gone in zip(items, moved, strict=False) if not gone]
    changing = [item for item, gone in zip(items, moved, strict=False) if gone]
    return {**body, key: stable + changing + list(items[len(moved) :])}


def prompt_cache_key(dialect: str, body: dict[str, Any], blocks: Sequence[Block] | None = None) -> str:
    """A ``prompt_cache_key`` from the hash of the stable prefix: the model, tools and system section.

    Requests that share those share the key, so OpenAI routes them to the same cache machines.
    ``blocks`` are ``body``'s blocks when the caller has them already.
    """
    if blocks is None:
        blocks = prompt_blocks(dialect, body)
    stable = [b.content for b in blocks if b.section != "messages"]
    hasher = hashlib.blake2b(digest_size=16)
    hasher.update(str(body.get("model", "")).encode())
    for content in stable:
        hasher.update(len(content).to_bytes(8, "big"))
        hasher.update(content)
    return "ck-" + hasher.hexdigest()


@dataclass(slots=True)
class _Entry:
    last_used: float
    ttl: float


class PlanMemory:
    """Which prompt prefixes earlier requests wrote, and when they were last used, by prefix hash.

    Bounded (least recently used entries go first) and thread-safe. Only hashes and times are kept,
    never prompt text.
    """

    def __init__(self, capacity: int = 100_000) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity!r}")
        self._capacity = capacity
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()
        self._lock = _fork.lock(self)

    def __len__(self) -> int:
        return len(self._entries)

    def recall(
        self,
        hashes: Sequence[bytes],
        stable: Sequence[int],
        now: float,
        lifetimes: tuple[float, float] = (_FIVE_MINUTES, _ONE_HOUR),
    ) -> Recall:
        """What is known about a request whose prefix hashes are ``hashes``; ``stable`` are the blocks
        (tools end, system end) whose own recurrence decides their lifetime. ``lifetimes``: the
        provider's short and long lifetimes; a gap between them is a long one."""
        short, long = lifetimes
        last_write: int | None = None
        conversation_gap: float | None = None
        stable_gap: float | None = None
        anchor: int | None = None
        long_gap: set[int] = set()
        # Only a prefix longer than the stable one continues a conversation.
        floor = max(stable, default=-1)
        with self._lock:
            for index in range(len(hashes) - 1, -1, -1):
                entry = self._entries.get(hashes[index])
                if entry is None:
                    continue
                gap = now - entry.last_used
                # The whole prompt found again is a repeat (a retry, a rerun), not a continuation.
                if conversation_gap is None and floor < index < len(hashes) - 1:
                    conversation_gap = gap
                if gap < entry.ttl:
                    last_write = index
                    break
            anchor = self._anchor(hashes, range(last_write or -1, floor, -1), now)
            for index in stable:
                entry = self._entries.get(hashes[index])
                if entry is None:
                    continue
                stable_gap = now - entry.last_used
                if short < stable_gap <= long:
                    long_gap.add(index)
        long_conversation = conversation_gap is not None and short < conversation_gap <= long
        return Recall(
            last_write, frozenset(long_gap), long_conversation, conversation_gap, stable_gap, anchor
        )

    def _anchor(self, hashes: Sequence[bytes], indexes: range, now: float) -> int | None:
        """The first of ``indexes`` whose prefix holds a live 1-hour entry (the caller holds the lock).
        One loop without a call per block: it runs over most of a long conversation's blocks."""
        entries = self._entries
        for index in indexes:
            entry = entries.get(hashes[index])
            if entry is not None and entry.ttl >= _ONE_HOUR and now - entry.last_used < entry.ttl:
                return index
        return None

    def record(
        self, hashes: Sequence[bytes], markers: Sequence[tuple[int, float]], read: int | None, now: float
    ) -> None:
        """Remember a sent request: ``markers`` (block, lifetime in seconds) wrote or refreshed their
        prefixes; ``read`` (a block) was read, which refreshes its lifetime."""
        with self._lock:
            if read is not None:
                entry = self._entries.get(hashes[read])
                if entry is not None:
                    entry.last_used = now
                    self._entries.move_to_end(hashes[read])
            for index, ttl in markers:
                key = hashes[index]
                entry = self._entries.get(key)
                if entry is not None and now - entry.last_used < entry.ttl:
                    # A live entry under a marker is a hit: refreshed with its own lifetime, not rewritten.
                    entry.last_used = now
                    self._entries.move_to_end(key)
                else:
                    self._entries[key] = _Entry(now, ttl)
                    self._entries.move_to_end(key)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)


@dataclass(frozen=True, slots=True)
class _Pending:
    """What to remember once the request was answered: prefix hashes, the writes, the read, and the
    gaps it observed (for the tenant's timing statistics)."""

    hashes: tuple[bytes, ...]
    writes: tuple[tuple[int, float], ...]
    read: int | None
    now: float
    partition: bytes = b""
    model: str = ""
    gaps: tuple[float | None, float | None] = (None, None)


@dataclass(frozen=True, slots=True)
class Applied:
    """What the planner did to one request on its way upstream."""

    body: dict[str, Any]
    plan: Plan | None = None
    """The breakpoint plan (explicit-cache providers), or ``None``."""
    cache_key: str | None = None
    """The ``prompt_cache_key`` cachekit set (OpenAI), or ``None``."""
    estimate: int = 0
    """Raw estimated prompt tokens, for calibration against the usage the provider reports (0 when
    the prompt holds images or documents, whose estimates are too rough to learn from)."""
    model: str = ""
    changed: bool = False
    pending: _Pending | None = field(default=None, repr=False)
    headers: tuple[tuple[str, str], ...] = ()
    """Request headers cachekit adds upstream unless the caller set them (xAI's ``x-grok-conv-id``)."""

    def header(self) -> str:
        """The ``x-cachekit-breakpoints`` response header value."""
        if self.plan is not None:
            return self.plan.header()
        if self.headers:
            return ", ".join(f"{name}={value}" for name, value in self.headers)
        if self.cache_key is not None:
            return f"prompt_cache_key={self.cache_key}"
        return "none"


@dataclass
class Planner:
    """Breakpoints and cache keys for requests on their way upstream, with the memory they need.

    ``rules_for`` maps (provider, model) to caching rules (default: the bundled table); ``estimator``
    counts tokens (default: ``o200k_base``, calibrated per model). :meth:`apply` plans a request;
    :meth:`commit` remembers it once the provider accepted it. ``gaps`` holds each tenant's timing
    statistics per model, from which cache lifetimes are chosen before the gap
    (:mod:`cachekit.shape.lifetimes`).
    Thread-safe.

    Bailian's explicit cache replaces its implicit one for the request (they are mutually exclusive,
    and the implicit one has no write premium), so Bailian requests are planned only when the caller
    already uses explicit markers, except on Qwen4, whose explicit cache (automatic caching, 5m and
    1h lifetimes) is the one Model Studio recommends for deterministic hits.
    """

    estimator: TokenEstimator = field(default_factory=TokenEstimator)
    memory: PlanMemory = field(default_factory=PlanMemory)
    rules_for: Callable[[str, str], CacheRules] = cache_rules
    tails: TailOdds = field(default_factory=TailOdds)
    """How often requests read their conversation's earlier writes: whether writing the end pays."""
    multipliers: Callable[[str, str], tuple[float, float]] | None = None
    """(write, read) price multipliers of a provider's model (default: from the price table, else
    1.25 and 0.1, the write premium and read discount the providers document)."""
    #: Recent prefix-hash chains: a growing conversation hashes only its new blocks.
    chains: ChainMemo = field(default_factory=ChainMemo)
    gaps: GapMemory = field(default_factory=GapMemory)
    rates_for: Callable[[str, str], WriteRates | None] = default_write_rates

    def rules(self, provider: str, model: str) -> CacheRules | None:
        """The caching rules of ``provider``'s ``model`` (those of the provider it follows, for Azure
        OpenAI), or ``None`` when cachekit has none."""
        try:
            return self.rules_for(RULES_AS.get(provider, provider), model)
        except UnknownProviderError:
            return None

    def apply(
        self,
        provider: str,
        dialect: str,
        body: dict[str, Any],
        *,
        partition: bytes = b"",
        now: float,
        volatile: Collection[str] = (),
        blocks: Sequence[Block] | None = None,
        expect: Expect | None = None,
    ) -> Applied:
        """Plan ``body`` for ``provider`` (a provider name from the rules table); call :meth:`commit`
        with the result once the provider accepted the request.

        ``volatile`` are paths of system blocks known to change between calls (see :func:`stable_first`);
        ``blocks`` are ``body``'s blocks when the caller has them already; ``expect`` is what the caller
        knows about its traffic (a fixed lifetime or the expected gap; default: learned from the
        partition's traffic). The ``prompt_cache_key`` is only for ``provider="openai"``. Raises
        :class:`PlanError` for markers the provider would refuse.
        """
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return Applied(body)
        rules = self.rules(provider, model)
        routed = _routed(provider, dialect, body, model)
        if rules is None or routed is not None:
            return routed or Applied(body, model=model)
        if blocks is None:
            blocks = prompt_blocks(dialect, body)
        raw = self.estimator.counts([b.text for b in blocks])
        extra = [b.media_tokens for b in blocks]
        media = any(extra)
        if media:
            raw = [count + tokens for count, tokens in zip(raw, extra, strict=True)]
        estimate = 0 if media else sum(raw)
        if rules.mode == "automatic":
            # prompt_cache_key is a field of OpenAI's APIs: never put into a Messages body (a host that
            # bills the Messages API by OpenAI's rules, such as the local backend with rules="openai").
            openai_api = dialect.startswith("openai")
            if provider != "openai" or not openai_api or body.get("prompt_cache_key") is not None:
                return Applied(body, estimate=estimate, model=model)
            key = prompt_cache_key(dialect, body, blocks)
            return Applied({**body, "prompt_cache_key": key}, None, key, estimate, model, True)
        # Qwen4's explicit cache (automatic caching, 5m/1h) is planned like Anthropic's.
        caller_uses_it = any(b.marker is not None or b.nested for b in blocks)
        if rules.provider == "bailian" and not rules.automatic_caching and not caller_uses_it:
            return Applied(body, estimate=estimate, model=model)
        as_written = blocks  # prompt_cache_key hashes the sections as written, as for automatic caching
        blocks = rebind(dialect, body, blocks, rules)
        ratio = self.estimator.ratio(model)
        tokens = [round(count * ratio) for count in raw]
        context = cache_context(body)
        root = b"\x00".join(
            (b"cachekit-plan/v1", provider.encode(), model.strip().lower().encode(), partition)
        )
        hashes = chain_hashes(blocks, root, context, memo=self.chains)
        stable = [i for i in (_section_end(blocks, "tools"), _section_end(blocks, "system")) if i is not None]
        # A gap is long past the provider's short lifetime (5 minutes; OpenAI's 30 minutes).
        recall = self.memory.recall(hashes, stable, now, (rules.lifetime("5m"), rules.lifetime("1h")))
        changing = (
            frozenset(i for i, b in enumerate(blocks) if b.where in volatile) if volatile else frozenset()
        )
        # The timing statistics (and an expected gap) know 5-minute and 1-hour entries; other lifetimes
        # (OpenAI's 30m/12h) go by the gaps seen in this process, or the caller's fixed tier.
        fixed = expect is not None and expect.ttl is not None
        if fixed or (rules.lifetime("5m"), rules.lifetime("1h")) == (_FIVE_MINUTES, _ONE_HOUR):
            recall = self._lifetimes(
                provider,
                model,
                partition,
                body=body,
                blocks=blocks,
                tokens=tokens,
                recall=recall,
                volatile=changing,
                expect=expect,
            )
        plan = self._plan(dialect, body, blocks, tokens, rules, recall, changing, partition)
        # OpenAI's own, and Azure's for the GPT-5.6 family ("set the prompt_cache_key parameter").
        if (
            rules.provider == "openai"
            and dialect.startswith("openai")
            and body.get("prompt_cache_key") is None
        ):
            # Kept on GPT-5.6 and later: it still routes requests that share a prefix together.
            key = prompt_cache_key(dialect, body, as_written)
            plan = dataclasses.replace(plan, body={**plan.body, "prompt_cache_key": key})
        writes = tuple((index, rules.lifetime(ttl)) for index, ttl in plan.writes)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "breakpoints %s %s: %s (caller's: %d; %s)",
                provider,
                model,
                plan.header(),
                plan.caller_markers,
                "; ".join(plan.notes) or "nothing skipped",
            )
        observed = (recall.conversation_gap, recall.stable_gap)
        pending = _Pending(tuple(hashes), writes, recall.last_write, now, partition, model, observed)
        changed = plan.body is not body
        return Applied(plan.body, plan, plan.body.get("prompt_cache_key"), estimate, model, changed, pending)

    def _plan(  # noqa: PLR0917 - the planner's inputs, each named
        self,
        dialect: str,
        body: dict[str, Any],
        blocks: Sequence[Block],
        tokens: Sequence[int],
        rules: CacheRules,
        recall: Recall,
        volatile: frozenset[int],
        partition: bytes,
    ) -> Plan:
        """The breakpoint plan; where the provider places its own breakpoint (OpenAI's implicit mode),
        the cheaper of leaving it on and turning it off, by expected cost: the implicit breakpoint
        writes the conversation's end, which pays only when the next request reads it."""
        if not rules.implicit_breakpoint:
            return plan_breakpoints(body, blocks, tokens, rules=rules, recall=recall, volatile=volatile)
        model = str(body.get("model", ""))
        read = recall.last_write is not None and blocks[recall.last_write].section == "messages"
        self.tails.observe(partition, model, read=read)
        options = body.get("prompt_cache_options")
        if options is not None:  # the caller chose the mode: kept
            target = implicit_target(dialect, body, blocks) if implicit_mode(body) else None
            return plan_breakpoints(
                body, blocks, tokens, rules=rules, recall=recall, volatile=volatile, implicit=target
            )
        write, read_price = (self.multipliers or _multipliers)(rules.provider, model)
        if self.tails.worth_writing(partition, model, write, read_price):
            target = implicit_target(dialect, body, blocks)
            return plan_breakpoints(
                body, blocks, tokens, rules=rules, recall=recall, volatile=volatile, implicit=target
            )
        explicit = {**body, "prompt_cache_options": {"mode": "explicit"}}
        return plan_breakpoints(
            explicit, blocks, tokens, rules=rules, recall=recall, volatile=volatile, conversation=False
        )

    def commit(self, applied: Applied) -> None:
        """Remember a planned request the provider accepted: its writes, and the entry it read."""
        pending = applied.pending
        if pending is not None:
            self.memory.record(pending.hashes, pending.writes, pending.read, pending.now)
            self.gaps.observe(pending.partition, pending.model, *pending.gaps)

    def _lifetimes(
        self,
        provider: str,
        model: str,
        partition: bytes,
        *,
        body: dict[str, Any],
        blocks: Sequence[Block],
        tokens: Sequence[int],
        recall: Recall,
        volatile: frozenset[int],
        expect: Expect | None,
    ) -> Recall:
        """``recall`` with the lifetimes chosen before the gap
        (:func:`cachekit.shape.lifetimes.choose_ttl`): for the conversation's markers, and for the
        stable ones (system prompt end, tools end)."""
        stats = self.gaps.stats(partition, model)
        stats.observe(recall.conversation_gap, recall.stable_gap)  # this request's own gaps count too
        rates = self.rates_for(provider, model) if expect is None else None
        prefix = list(itertools.accumulate(tokens))
        read = prefix[recall.last_write] if recall.last_write is not None else 0
        end = _conversation_end(body, blocks)
        # A pause that loses the end's 5-minute entry still reads the anchor's 1-hour one.
        kept = prefix[recall.anchor] if recall.anchor is not None and recall.anchor != end else 0
        conversation = end is not None and (
            choose_ttl(
                stats,
                rates,
                written=prefix[end] - read,
                cached=prefix[end] - kept,
                stable=False,
                expect=expect,
            )
            == _LONG
        )
        long_gap = frozenset(
            index
            for index in (_stable_system_end(blocks, volatile), _section_end(blocks, "tools"))
            if index is not None
            and choose_ttl(
                stats, rates, written=prefix[index], cached=prefix[index], stable=True, expect=expect
            )
            == _LONG
        )
        return dataclasses.replace(recall, long_gap=long_gap, conversation_long_gap=conversation)

"""Breakpoint syntax per provider, read from the cache-rules data: which field carries a breakpoint,
which blocks may carry one, where a provider's own (implicit) breakpoint sits, and whether writing
the conversation's end pays.

The planner (:mod:`cachekit.shape.planner`) places breakpoints the same way for every explicit-caching
API; what differs between them is data (:class:`~cachekit.providers.cache_rules.CacheRules`):

* the field: Anthropic's (and Model Studio's) ``cache_control: {"type": "ephemeral", "ttl"?}``, or
  OpenAI's (GPT-5.6 and later) ``prompt_cache_breakpoint: {"mode": "explicit", "ttl"?}``, whose
  lifetimes 30m and 12h are the short and long tiers (:meth:`CacheRules.tier_name`);
* the blocks that take it (:attr:`CacheRules.marker_types`, :attr:`CacheRules.marker_roles`);
* the provider's implicit breakpoint (:attr:`CacheRules.implicit_breakpoint`): OpenAI places one at
  the end of the newest user or tool message unless ``prompt_cache_options.mode`` is ``explicit``,
  and it takes one of the four writes.

:class:`TailOdds` answers whether the conversation's end is worth writing: a write costs a premium
now and pays only if a later request reads it, which is what an agent's next turn does and a
one-shot classifier's next request never does. It counts, per partition and model, how often a
request read what an earlier one wrote in its messages.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from cachekit import _fork
from cachekit._types import Ttl
from cachekit.providers.cache_rules import CacheRules
from cachekit.shape.blocks import Block

__all__ = [
    "TailOdds",
    "implicit_mode",
    "implicit_target",
    "marker_value",
    "parse_marker",
    "rebind",
]

_TIERS: tuple[Ttl, Ttl] = ("5m", "1h")
_TOOL_OUTPUTS = ("function_call_output",)


def marker_value(tier: Ttl, rules: CacheRules) -> dict[str, str]:
    """The breakpoint object for lifetime ``tier`` in the provider's field (:func:`field_of`); the
    short tier is written without a ttl, as callers write it (it is the default)."""
    if rules.markers[0] == "prompt_cache_breakpoint":
        if tier == "5m":
            return {"mode": "explicit"}
        return {"mode": "explicit", "ttl": rules.tier_name(tier)}
    return {"type": "ephemeral"} if tier == "5m" else {"type": "ephemeral", "ttl": "1h"}


def parse_marker(value: Any, rules: CacheRules) -> Ttl | None:
    """The lifetime tier of a caller's breakpoint object in the provider's field, or ``None`` when the
    provider would refuse it (wrong shape, a lifetime it does not offer)."""
    if rules.markers[0] == "prompt_cache_breakpoint":
        if not isinstance(value, dict) or value.get("mode") != "explicit":
            return None
        name = value.get("ttl")
        if name is None:
            return "5m"  # inherits the request's ttl (30m by default)
        if name not in rules.ttl_seconds:
            return None
        return "5m" if rules.tier_of(name) == "5m" else "1h"
    if not isinstance(value, dict) or value.get("type") != "ephemeral":
        return None
    ttl = value.get("ttl", "5m")
    return ttl if ttl in _TIERS and ttl in rules.ttl_seconds else None


def _lookup(body: dict[str, Any], where: str) -> Any:
    node: Any = body
    for part in where.split("."):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return None
    return node


def _role(dialect: str, body: dict[str, Any], block: Block) -> str:
    items = body.get("input" if dialect == "openai_responses" else "messages")
    if block.message is None or not isinstance(items, list) or block.message >= len(items):
        return "system" if block.section == "system" else ""
    item = items[block.message]
    return str(item.get("role") or "") if isinstance(item, dict) else ""


def rebind(
    dialect: str, body: dict[str, Any], blocks: Sequence[Block], rules: CacheRules
) -> tuple[Block, ...]:
    """``blocks`` as the provider's rules see them: for a ``prompt_cache_breakpoint`` provider, each
    block's marker is read from that field and a block may carry one only when its type and role are
    among the provider's (:attr:`CacheRules.marker_types`, :attr:`CacheRules.marker_roles`). A Chat
    string content may (it becomes one text part); a Responses string may not. Other providers'
    blocks are returned as they are."""
    field = rules.markers[0]
    if field == "cache_control":
        return tuple(blocks)
    rebound = []
    leading = True
    for block in blocks:
        role = _role(dialect, body, block)
        # The Responses API's leading developer (or system) messages are its system prompt.
        leading = leading and (block.section != "messages" or role in ("system", "developer"))
        section = "system" if leading else block.section
        raw = _lookup(body, block.where)
        if isinstance(raw, dict):
            kind = raw.get("type")
            marker = raw.get(field)
        else:
            kind = "text" if block.shorthand and dialect == "openai_chat" else None
            marker = None
        eligible = (
            kind is not None
            and (rules.marker_types is None or kind in rules.marker_types)
            and (rules.marker_roles is None or role in rules.marker_roles)
            and bool(block.text)
        )
        rebound.append(
            dataclasses.replace(block, section=section, marker=marker, eligible=eligible, nested=())
        )
    return tuple(rebound)


def implicit_mode(body: dict[str, Any]) -> bool:
    """Whether the request leaves OpenAI's implicit breakpoint on (``prompt_cache_options.mode`` is
    ``implicit``, the default)."""
    options = body.get("prompt_cache_options")
    return not (isinstance(options, dict) and options.get("mode") == "explicit")


def implicit_target(dialect: str, body: dict[str, Any], blocks: Sequence[Block]) -> int | None:
    """The block the provider's implicit breakpoint ends on: the last block of the newest user or
    tool message (a Responses ``function_call_output`` is a tool message), as the local backend
    bills it."""
    for index in range(len(blocks) - 1, -1, -1):
        block = blocks[index]
        if block.section != "messages":
            continue
        if block.kind in _TOOL_OUTPUTS or _role(dialect, body, block) in ("user", "tool", "function"):
            return index
    return None


class TailOdds:
    """How often a request reads what an earlier one wrote in its messages, per partition and model:
    the odds that writing the conversation's end pays. Starts at even odds; bounded; thread-safe."""

    def __init__(self, capacity: int = 10_000) -> None:
        self._capacity = capacity
        self._counts: OrderedDict[tuple[bytes, str], list[int]] = OrderedDict()
        self._lock = _fork.lock(self)

    def observe(self, partition: bytes, model: str, *, read: bool) -> None:
        """Count one request of ``partition`` and ``model``, and whether it read an earlier write."""
        key = (partition, model)
        with self._lock:
            counts = self._counts.setdefault(key, [0, 0])
            counts[0] += 1
            counts[1] += int(read)
            self._counts.move_to_end(key)
            while len(self._counts) > self._capacity:
                self._counts.popitem(last=False)

    def probability(self, partition: bytes, model: str) -> float:
        """The chance that the next request reads this one's end (Laplace's rule: (reads+1)/(n+2))."""
        with self._lock:
            requests, reads = self._counts.get((partition, model), (0, 0))
        return (reads + 1) / (requests + 2)

    def worth_writing(self, partition: bytes, model: str, write: float, read: float) -> bool:
        """Whether writing the end is cheaper on average: a write costs ``write - 1`` input prices
        more, a later read saves ``1 - read`` (multipliers of the input price)."""
        return self.probability(partition, model) * (1 - read) > write - 1

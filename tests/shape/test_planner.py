"""Breakpoint planning: the rules (properties over generated conversations) and what it saves,
measured by the local backend's billing through the real SDKs.

The property tests call the pure planner on generated conversations whose blocks include every kind
and nesting the anthropic SDK's types allow (tests/sdk_shapes.py), with texts of every length (empty,
any script, thousands of tokens), with the caller's markers on blocks and nested at any depth;
independent checks are a marker count of the test's own and the local backend's parser and Anthropic
billing, which refuse what the API refuses (more than 4 markers, a marker on a thinking block, 1h
after 5m). What the planner must place is derived from the documented rules
(cachekit/providers/cache_rules.json: the model's minimum, 4 breakpoints, the 20-position lookback
with runs of tool blocks as one position), not from the planner's output: a planner that places
nothing fails them. The savings tests run the drop-in clients against the backend, which bills each
request by Anthropic's (or Bailian's) rules, and compare with markers placed by hand.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from typing import Any, cast

import httpx2
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cachekit
from cachekit._types import Ttl
from cachekit.cache import Cache
from cachekit.config import Breakpoints
from cachekit.local import LocalBackend, LocalTransport, ManualClock, ScriptedEngine
from cachekit.local.accounting import AnthropicCache
from cachekit.local.parse import RequestRefusedError, parse
from cachekit.local.scripted import ByteTokenizer
from cachekit.providers.cache_rules import cache_rules
from cachekit.shape.blocks import prompt_blocks
from cachekit.shape.planner import PlanError, Planner, Recall, add_marker, plan_breakpoints
from cachekit.shape.tokens import encoding
from cachekit.testing import FakeUpstream
from tests import sdk_shapes
from tests.conftest import sdk_client
from tests.fuzzing import fuzz

MODEL = "claude-sonnet-4-5"
RULES = cache_rules("anthropic", MODEL)
SECONDS = {"5m": 300, "1h": 3600}
POLICY = " ".join(
    f"Rule {i}: answer from the booking system only, never guess clause {i}." for i in range(150)
)
TOOLS = [
    {
        "name": f"tool_{i}",
        "description": f"Looks up record kind {i}.",
        "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
    }
    for i in range(4)
]


# -- generated conversations -------------------------------------------------------------------


def _text(draw: Any, empty: bool = False) -> str:
    return draw(sdk_shapes.texts(empty=empty))


# Blocks of every kind the anthropic SDK's types allow, at every nesting they allow (a document's
# content source, a search result in a tool result, a document in a web fetch result, ...), each
# dict that may carry a marker with an empty slot for one.
_SDK_CONTENT = sdk_shapes.blocks(sdk_shapes.content_types())
_SDK_SYSTEM = sdk_shapes.blocks(sdk_shapes.system_types())
_SDK_TOOLS = sdk_shapes.blocks(sdk_shapes.tool_types(named=True))
_O200K = encoding("o200k_base")


def _content(draw: Any, role: str, turn: int, *, rich: bool = True, empty: bool = False) -> Any:
    """A message's content: the string shorthand, blocks of the SDK's types (``rich``), or the blocks
    of an agent loop: thinking, text and tool calls, answered by tool results (text or blocks).
    ``empty``: its texts may be empty."""
    kind = draw(st.sampled_from(["string", "sdk", "handmade"] if rich else ["string", "handmade"]))
    if kind == "string":
        return _text(draw, empty)
    if kind == "sdk":
        return draw(st.lists(_SDK_CONTENT, min_size=1, max_size=3))
    content: list[dict[str, Any]] = []
    if role == "assistant":
        if draw(st.booleans()):
            content.append({"type": "thinking", "thinking": _text(draw, empty), "signature": "sig"})
        content.append({"type": "text", "text": _text(draw, empty)})
        for k in range(draw(st.integers(0, 3))):
            content.append({"type": "tool_use", "id": f"t{turn}_{k}", "name": "tool_0", "input": {"id": "7"}})
        return content
    for k in range(draw(st.integers(0, 3)) if turn else 0):  # a run of results: one lookback position
        result: Any = (
            _text(draw, empty) if draw(st.booleans()) else [{"type": "text", "text": _text(draw, empty)}]
        )
        content.append({"type": "tool_result", "tool_use_id": f"t{turn - 1}_{k}", "content": result})
    content.append({"type": "text", "text": _text(draw, empty)})
    if draw(st.booleans()):
        content.append({"type": "text", "text": "cited", "citations": [{"type": "char_location"}]})
    return content


def _slots(body: dict[str, Any]) -> list[str]:
    """Where a caller's marker may go, in prefix order: the blocks that may carry one, and the empty
    slots nested inside blocks (``nested:`` paths), each block's before the block itself."""
    found = []
    for block in prompt_blocks("anthropic_messages", body):
        value = functools.reduce(
            lambda node, key: node[int(key) if isinstance(node, list) else key],
            block.where.split("."),
            cast(Any, body),
        )
        found += [f"nested:{block.where}.{path}" for path in sdk_shapes.slots(value)]
        if block.eligible:
            found.append(block.where)
    return found


@st.composite
def _bodies(draw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": MODEL, "max_tokens": 8}
    if draw(st.booleans()):
        body["tools"] = TOOLS[: draw(st.integers(1, 4))] + draw(st.lists(_SDK_TOOLS, max_size=2))
    system = draw(st.sampled_from(["none", "string", "blocks", "sdk"]))
    if system == "string":
        body["system"] = _text(draw)
    elif system == "blocks":
        body["system"] = [{"type": "text", "text": _text(draw)} for _ in range(draw(st.integers(1, 3)))]
    elif system == "sdk":
        body["system"] = draw(st.lists(_SDK_SYSTEM, min_size=1, max_size=3))
    messages: list[dict[str, Any]] = []
    # Short conversations of every block kind; long agent loops, whose earlier writes fall out of the
    # 20-position lookback window (their blocks plainer, to keep each example cheap).
    long = draw(st.booleans())
    empty = draw(st.booleans())  # texts that may be empty: a body the API refuses, as the caller wrote it
    for turn in range(draw(st.integers(10, 24) if long else st.integers(1, 9))):
        role = "user" if turn % 2 == 0 else "assistant"
        messages.append({"role": role, "content": _content(draw, role, turn, rich=not long, empty=empty)})
    if messages[-1]["role"] == "assistant":
        messages.append({"role": "user", "content": "go on"})
    body["messages"] = messages
    # The caller's own markers, on blocks and nested at any depth: a valid set (at most 4 with the
    # automatic one, 1h before 5m in prefix order).
    slots = _slots(body)
    nested = [slot for slot in slots if slot.startswith("nested:")]
    pool = nested if nested and draw(st.booleans()) else slots  # blocks outnumber nested slots
    automatic = draw(st.booleans())
    # A body can have no slot at all (every block ineligible): then the caller placed nothing.
    limit = 3 if automatic else 4
    chosen = draw(st.lists(st.sampled_from(pool), max_size=limit, unique=True)) if pool else []
    chosen.sort(key=slots.index)  # prefix order
    long = draw(st.integers(0, len(chosen)))
    for k, where in enumerate(chosen):
        ttl: Ttl = "1h" if k < long else "5m"
        if where.startswith("nested:"):
            body = sdk_shapes.put(body, where.removeprefix("nested:"), {"type": "ephemeral", "ttl": ttl})
        else:
            body = add_marker(body, where, ttl)
    if automatic:
        last = prompt_blocks("anthropic_messages", body)
        target = next((b for b in reversed(last) if b.eligible), None)
        if target is not None:  # no eligible block: nothing for the automatic marker to land on
            ttl = target.marker.get("ttl", "5m") if target.marker else "5m"
            body["cache_control"] = {"type": "ephemeral", "ttl": ttl}
    return body


@st.composite
def _cases(draw: Any) -> tuple[dict[str, Any], list[int], Recall]:
    body = draw(_bodies())
    blocks = prompt_blocks("anthropic_messages", body)
    n = len(blocks)
    if draw(st.booleans()):  # any counts, so that every block boundary meets the minimum somewhere
        tokens = draw(st.lists(st.integers(0, 900), min_size=n, max_size=n))
    else:  # what the texts weigh
        tokens = [_O200K.count(b.text) + b.media_tokens for b in blocks]
    if n == 0:  # every text empty: nothing to mark, nothing remembered
        return body, tokens, Recall()
    # The previous write: none, anywhere, or a message block out of the conversation end's lookback
    # window (a long conversation: the planner must bridge to it).
    positions = _positions(blocks)
    window = RULES.lookback_positions
    assert window is not None
    far = [
        i
        for i, b in enumerate(blocks)
        if b.section == "messages" and b.eligible and positions[-1] - positions[i] >= window
    ]
    choices = [st.none(), st.integers(0, n - 1)] + ([st.sampled_from(far)] if far else [])
    write = draw(st.one_of(choices))
    if write in far and draw(st.booleans()):
        tokens[0] += RULES.min_cacheable_tokens  # a long first block: the write was worth making
    long_gap = frozenset(draw(st.lists(st.integers(0, n - 1), max_size=3)))
    return body, tokens, Recall(write, long_gap, draw(st.booleans()))


def _markers(body: dict[str, Any]) -> list[tuple[int, str]]:
    """(block index, ttl) of every marker, the automatic one at its target, in prefix order."""
    blocks = prompt_blocks("anthropic_messages", body)
    found = {i: b.marker.get("ttl", "5m") for i, b in enumerate(blocks) if b.marker is not None}
    if body.get("cache_control") is not None:
        target = max(i for i, b in enumerate(blocks) if b.eligible or b.cited)
        found.setdefault(target, body["cache_control"].get("ttl", "5m"))
    return sorted(found.items())


def _positions(blocks: Sequence[Any]) -> list[int]:
    """Each block's lookback position, by the documented rule: one per block, except that a run of
    consecutive tool_use blocks (or of tool_result blocks) is one position where the provider says so
    (``tool_runs_one_position`` in cache_rules.json: Anthropic)."""
    positions: list[int] = []
    previous = None
    for block in blocks:
        run = RULES.tool_runs_one_position and block.kind in ("tool_use", "tool_result")
        if not (run and block.kind == previous):
            positions.append(positions[-1] + 1 if positions else 0)
        else:
            positions.append(positions[-1])
        previous = block.kind
    return positions


def _ends(body: dict[str, Any], blocks: Sequence[Any]) -> dict[str, int]:
    """Where the next request's prefix can be read back, by section: the last block that may carry a
    marker in the tools and in the system prompt, and the end of the conversation so far (the last
    such block, before an assistant prefill, which the next request replaces)."""
    ends: dict[str, int] = {}
    for section in ("tools", "system"):
        found = [i for i, b in enumerate(blocks) if b.section == section and b.eligible]
        if found:
            ends[section] = found[-1]
    messages = body.get("messages", [])
    prefill = len(messages) > 1 and messages[-1].get("role") == "assistant"
    last = len(messages) - 1
    found = [i for i, b in enumerate(blocks) if b.eligible and not (prefill and b.message == last)]
    if found:
        ends["conversation"] = found[-1]
    return ends


def _check_what_is_placed(
    body: dict[str, Any], plan: Any, blocks: Sequence[Any], tokens: list[int], recall: Recall, count: int
) -> None:
    """What the documented rules require to be marked, from the rules and the blocks alone.

    While breakpoints are left (``count``, the planned body's markers at every depth, is below the
    limit), every place where a later request reads this prefix back and whose prefix reaches the
    model's minimum carries a marker: the end of the tools, of the system prompt, and (when the caller
    set no automatic marker, which does that job) of the conversation. The previous write, if
    cacheable, is within the lookback window of a marker at or after it. A lookback marker is only
    there when no other marker reaches the previous write.
    """
    minimum, window = RULES.min_cacheable_tokens, RULES.lookback_positions
    assert window is not None
    prefix = list(itertools.accumulate(tokens))
    positions = _positions(blocks)
    marked = {index for index, _ in _markers(plan.body)}
    write = recall.last_write
    for placement in plan.placements:
        if placement.reason == "lookback":
            assert write is not None
            assert write == placement.block
            others = marked - {placement.block}
            assert not any(i >= write and positions[i] - positions[write] < window for i in others)
    if count >= (RULES.max_breakpoints or 0):
        return  # no breakpoint left: which candidates got one is the planner's order of value
    ends = _ends(body, blocks)
    if body.get("cache_control") is not None:
        ends.pop("conversation", None)
    for reason, end in ends.items():
        if prefix[end] >= minimum:
            assert end in marked, (reason, blocks[end].where)
    reachable = write is not None and blocks[write].eligible and prefix[write] >= minimum
    if reachable and write is not None and any(i >= write for i in marked):
        assert any(i >= write and positions[i] - positions[write] < window for i in marked)


@fuzz(400)
@given(_cases())
def test_planning_keeps_every_rule(case: tuple[dict[str, Any], list[int], Recall]) -> None:
    body, tokens, recall = case
    before = orjson.dumps(body)
    blocks = prompt_blocks("anthropic_messages", body)
    plan = plan_breakpoints(body, blocks, tokens, rules=RULES, recall=recall)
    planned = plan.body
    after = prompt_blocks("anthropic_messages", planned)
    assert orjson.dumps(body) == before  # the caller's body is never mutated
    markers = _markers(planned)
    assert len(markers) <= 4
    assert all(after[i].eligible for i, _ in markers if after[i].marker is not None)
    # The caller's markers are untouched: same blocks, same values.
    for old, new in zip(blocks, after, strict=True):
        if old.marker is not None:
            assert new.marker == old.marker
    # 1h markers come before 5m ones.
    ttls = [SECONDS[ttl] for _, ttl in markers]
    assert ttls == sorted(ttls, reverse=True)
    # Nothing but cache_control changed: same blocks (identity excludes the marker), same other fields.
    assert [b.content for b in after] == [b.content for b in blocks]
    assert {k: v for k, v in planned.items() if k not in ("system", "messages", "tools")} == {
        k: v for k, v in body.items() if k not in ("system", "messages", "tools")
    }
    # Markers go only where the prefix reaches the model's minimum.
    prefix = list(itertools.accumulate(tokens))
    assert all(prefix[p.block] >= RULES.min_cacheable_tokens for p in plan.placements)
    # Idempotent: planning the planned request changes nothing.
    again = plan_breakpoints(planned, after, tokens, rules=RULES, recall=recall)
    assert again.body == planned
    assert again.placements == ()
    # Counted at every depth, independently: at most 4 markers, 1h before 5m, the caller's unchanged.
    every = [str(control.get("ttl", "5m")) for _, control in sdk_shapes.markers(planned)]
    if planned.get("cache_control") is not None and after[markers[-1][0]].marker is None:
        every.append(planned["cache_control"].get("ttl", "5m"))  # on the last block: last in order
    assert len(every) <= 4
    assert every == sorted(every, key=["1h", "5m"].index)
    planned_markers = sdk_shapes.markers(planned)
    assert all(marker in planned_markers for marker in sdk_shapes.markers(body))
    # What had to be placed was placed (a planner that places nothing fails here).
    _check_what_is_placed(body, plan, blocks, tokens, recall, len(every))
    # The backend, which refuses what the API refuses (it counts nested markers too), accepts it,
    # unless it refuses the caller's own body (an empty text block, say): planning never fixes that.
    try:
        parse("anthropic_messages", body, ByteTokenizer())
    except RequestRefusedError:
        with pytest.raises(RequestRefusedError):
            parse("anthropic_messages", planned, ByteTokenizer())
        return
    parsed = parse("anthropic_messages", planned, ByteTokenizer())
    AnthropicCache().account(
        model=MODEL,
        partition=b"t",
        segments=parsed.segments,
        automatic=parsed.automatic,
        context=parsed.context,
    )


def _long_conversation(turns: int, *, system: str = POLICY) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Please check booking 7 for me."}]
    for turn in range(turns):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": f"c{turn}", "name": "tool_0", "input": {"id": str(turn)}}
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"c{turn}",
                        "content": f"record {turn}: " + "x " * 60,
                    }
                ],
            }
        )
    return messages


def test_five_caller_markers_are_an_error_naming_the_blocks() -> None:
    body = {"model": MODEL, "max_tokens": 8, "system": POLICY, "messages": _long_conversation(3)}
    for where in (
        "messages.0.content",
        "messages.1.content.0",
        "messages.2.content.0",
        "messages.3.content.0",
    ):
        body = add_marker(body, where)
    body["cache_control"] = {"type": "ephemeral"}
    blocks = prompt_blocks("anthropic_messages", body)
    with pytest.raises(PlanError) as caught:
        plan_breakpoints(body, blocks, [100] * len(blocks), rules=RULES)
    message = str(caught.value)
    assert "5 cache_control markers, at most 4" in message
    assert "messages.1.content.0" in message
    assert "(top level)" in message


def test_a_marker_on_a_thinking_block_is_an_error_naming_it() -> None:
    body = {
        "model": MODEL,
        "max_tokens": 8,
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "thinking",
                        "thinking": "x",
                        "signature": "s",
                        "cache_control": {"type": "ephemeral"},
                    },
                    {"type": "text", "text": "yes"},
                ],
            },
            {"role": "user", "content": "and?"},
        ],
    }
    with pytest.raises(PlanError, match=r"messages\.1\.content\.0: a thinking block cannot carry"):
        plan_breakpoints(body, prompt_blocks("anthropic_messages", body), [10] * 4, rules=RULES)


def test_one_hour_after_five_minutes_is_an_error() -> None:
    body = {
        "model": MODEL,
        "max_tokens": 8,
        "system": POLICY,
        "messages": [{"role": "user", "content": "hi"}],
    }
    body = add_marker(add_marker(body, "system", "5m"), "messages.0.content", "1h")
    with pytest.raises(PlanError, match="1h"):
        plan_breakpoints(body, prompt_blocks("anthropic_messages", body), [2000, 5], rules=RULES)


# -- the pure planner, case by case --------------------------------------------------------------


def _plan(body: dict[str, Any], tokens: list[int] | None = None, rules: Any = RULES, **recall: Any) -> Any:
    blocks = prompt_blocks("anthropic_messages", body)
    counts = tokens if tokens is not None else [200] * len(blocks)
    return plan_breakpoints(body, blocks, counts, rules=rules, recall=Recall(**recall))


def test_stable_boundaries_and_the_conversation_end_are_marked() -> None:
    body = {
        "model": MODEL,
        "max_tokens": 8,
        "tools": TOOLS,
        "system": POLICY,
        "messages": _long_conversation(2),
    }
    plan = _plan(body, [300] * 4 + [2000] + [50] * 5)
    got = {(p.where, p.reason, p.ttl) for p in plan.placements}
    assert got == {
        ("tools.3", "tools", "5m"),
        ("system", "system", "5m"),
        ("messages.4.content.0", "conversation", "5m"),
    }
    # The system string became one text block to carry its marker, with the same text.
    assert plan.body["system"] == [{"type": "text", "text": POLICY, "cache_control": {"type": "ephemeral"}}]
    assert plan.header().startswith("tools.3=5m/tools")


def test_a_prefix_below_the_minimum_gets_no_marker() -> None:
    body = {
        "model": MODEL,
        "max_tokens": 8,
        "system": "Be terse.",
        "messages": [{"role": "user", "content": "Hi"}],
    }
    plan = _plan(body, [5, 2])
    assert plan.placements == ()
    assert plan.body == body
    assert plan.header() == "none"
    assert any("< 1024 minimum" in note for note in plan.notes)


def test_the_lookback_gets_a_bridge_when_the_last_write_is_out_of_reach() -> None:
    # 12 turns of one tool call each: tool_use and tool_result alternate, so each block is a position.
    body = {"model": MODEL, "max_tokens": 8, "system": POLICY, "messages": _long_conversation(12)}
    blocks = prompt_blocks("anthropic_messages", body)
    tokens = [2000] + [40] * (len(blocks) - 1)
    far = 2  # messages.1.content.0: 23 positions before the end
    plan = plan_breakpoints(body, blocks, tokens, rules=RULES, recall=Recall(last_write=far))
    bridge = [p for p in plan.placements if p.reason == "lookback"]
    assert [(p.where, p.block) for p in bridge] == [(blocks[far].where, far)]
    # Within reach (19 positions back), no bridge: the conversation-end marker reads it.
    near = len(blocks) - 20
    plan = plan_breakpoints(body, blocks, tokens, rules=RULES, recall=Recall(last_write=near))
    assert not [p for p in plan.placements if p.reason == "lookback"]


def test_a_stable_end_within_reach_reads_the_previous_write_instead_of_a_bridge() -> None:
    # The previous request wrote up to tools.1 (fewer tools then); the conversation's end is far
    # beyond the window, but the system prompt's end, marked anyway, is 3 positions after the write.
    body = {
        "model": MODEL,
        "max_tokens": 8,
        "tools": TOOLS,
        "system": POLICY,
        "messages": _long_conversation(12),
    }
    blocks = prompt_blocks("anthropic_messages", body)
    tokens = [600, 600, 0, 0, 2000] + [40] * (len(blocks) - 5)
    plan = plan_breakpoints(body, blocks, tokens, rules=RULES, recall=Recall(last_write=1))
    assert [(p.where, p.reason) for p in plan.placements] == [
        ("tools.3", "tools"),
        ("system", "system"),
        (blocks[-1].where, "conversation"),
    ]  # no marker on tools.1: the system's reads it


def test_a_run_of_tool_results_is_one_position_at_anthropic_but_not_at_bailian() -> None:
    calls = [
        {"type": "tool_use", "id": f"c{k}", "name": "tool_0", "input": {"id": str(k)}} for k in range(30)
    ]
    results = [{"type": "tool_result", "tool_use_id": f"c{k}", "content": "ok"} for k in range(30)]
    body = {
        "model": MODEL,
        "max_tokens": 8,
        "system": POLICY,
        "messages": [
            {"role": "user", "content": "Check all thirty."},
            {"role": "assistant", "content": calls},
            {"role": "user", "content": results},
        ],
    }
    tokens = [2000] + [10] * 61
    anthropic = _plan(body, tokens, last_write=1)
    assert not [p for p in anthropic.placements if p.reason == "lookback"]
    bailian = _plan(body, tokens, cache_rules("bailian", "qwen-plus"), last_write=1)
    assert [p.where for p in bailian.placements if p.reason == "lookback"] == ["messages.0.content"]


def test_lifetimes_follow_observed_gaps_and_keep_the_order() -> None:
    body = {
        "model": MODEL,
        "max_tokens": 8,
        "tools": TOOLS,
        "system": POLICY,
        "messages": _long_conversation(1),
    }
    tokens = [300] * 4 + [2000] + [50] * 3
    slow = _plan(body, tokens, conversation_long_gap=True)
    assert {p.ttl for p in slow.placements} == {"1h"}  # the conversation's 1h forces 1h before it
    system_only = _plan(body, tokens, long_gap=frozenset({4}))
    assert {(p.reason, p.ttl) for p in system_only.placements} == {
        ("tools", "1h"),  # before a 1h marker
        ("system", "1h"),
        ("conversation", "5m"),
    }
    # A caller's 5m marker on the system prompt caps what comes after it at 5m.
    capped = _plan(add_marker(body, "system", "5m"), tokens, conversation_long_gap=True)
    assert {p.reason: p.ttl for p in capped.placements} == {"tools": "5m", "conversation": "5m"}


def test_the_callers_markers_use_the_budget_first() -> None:
    body = {
        "model": MODEL,
        "max_tokens": 8,
        "tools": TOOLS,
        "system": POLICY,
        "messages": _long_conversation(3),
    }
    for where in ("tools.1", "system", "messages.2.content.0"):
        body = add_marker(body, where)
    plan = _plan(body, [300] * 4 + [2000] + [50] * 7)
    assert [p.reason for p in plan.placements] == ["conversation"]
    assert len(_markers(plan.body)) == 4


# -- against the local backend's billing, through the real SDKs ---------------------------------


def _anthropic(clock: ManualClock, *, breakpoints: Breakpoints = "auto") -> Any:
    """A drop-in client to a fresh local backend that bills by Anthropic's rules on ``clock``."""
    backend = LocalBackend(clock=clock)
    config = cachekit.CacheConfig(
        store="memory://",
        enabled=False,
        ledger=False,
        breakpoints=breakpoints,
        price_as="anthropic",
    )
    return sdk_client(
        "anthropic",
        transport=LocalTransport(backend),
        api_key="k",
        base_url="http://local.test",
        cache=Cache(config, clock=clock),
    )


def _send(client: Any, messages: list[dict[str, Any]], **extra: Any) -> tuple[Any, str]:
    raw = client.messages.with_raw_response.create(
        model=MODEL, max_tokens=8, system=POLICY, tools=TOOLS, messages=messages, **extra
    )
    return raw.parse().usage, raw.headers.get("x-cachekit-breakpoints", "")


def _total(usage: Any) -> int:
    return int(usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens)


def _last_marked(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The "last" policy: the caller marks the last block of the last message by hand."""
    last = len(messages) - 1
    blocks = [b for b in prompt_blocks("anthropic_messages", {"messages": messages}) if b.message == last]
    return add_marker({"messages": messages}, blocks[-1].where)["messages"]


def _thirty_results_turn(before: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One assistant turn of 30 parallel tool calls, answered by 30 results, each with a short note.

    Anthropic counts a run of consecutive tool_result blocks as one position, so the notes are what
    make this turn 60 positions long (as a screenshot after each result would)."""
    calls = [
        {"type": "tool_use", "id": f"p{k}", "name": "tool_0", "input": {"id": str(k)}} for k in range(30)
    ]
    results: list[dict[str, Any]] = []
    for k in range(30):
        results.append({"type": "tool_result", "tool_use_id": f"p{k}", "content": f"record {k}"})
        results.append({"type": "text", "text": f"note {k}"})
    return [*before, {"role": "assistant", "content": calls}, {"role": "user", "content": results}]


def test_a_turn_of_thirty_tool_results_still_reads_the_earlier_prefix() -> None:
    history = _long_conversation(3)
    grown = _thirty_results_turn(history)
    reads = {}
    for policy in ("cachekit", "last"):
        clock = ManualClock()
        client = _anthropic(clock, breakpoints="auto" if policy == "cachekit" else "off")
        shape = (lambda m: m) if policy == "cachekit" else _last_marked
        first, _ = _send(client, shape(history))
        clock.advance(5)
        second, header = _send(client, shape(grown))
        reads[policy] = (second.cache_read_input_tokens, _total(first), header)
    cachekit_read, earlier, header = reads["cachekit"]
    assert cachekit_read == earlier  # the whole earlier prompt, read through the bridge
    assert "/lookback" in header
    last_read, _, _ = reads["last"]
    assert last_read == 0  # the last-message marker cannot see 60 positions back


def test_thirty_tool_messages_at_bailian_still_read_the_earlier_prefix() -> None:
    # Bailian's explicit cache on the Chat API: every tool message is its own position.
    clock = ManualClock()
    backend = LocalBackend(accept_any_model=True, clock=clock, rules="anthropic")  # Bailian on Chat
    config = cachekit.CacheConfig(store="memory://", enabled=False, ledger=False, price_as="bailian")
    client = sdk_client(
        "openai",
        transport=LocalTransport(backend),
        api_key="k",
        base_url="http://local.test/v1",
        cache=Cache(config, clock=clock),
    )
    # Explicit markers turn Bailian's implicit cache off, so cachekit plans only for callers who
    # already use explicit caching: here, a marker of the caller's on the system prompt.
    system = {"type": "text", "text": POLICY, "cache_control": {"type": "ephemeral"}}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": [system]},
        {"role": "user", "content": "Check all."},
    ]
    plain = client.chat.completions.with_raw_response.create(
        model="qwen-plus", messages=[{"role": "system", "content": POLICY}, {"role": "user", "content": "Hi"}]
    )
    assert plain.headers["x-cachekit-breakpoints"] == "none"
    first = client.chat.completions.create(model="qwen-plus", messages=messages)
    calls = [
        {"id": f"p{k}", "type": "function", "function": {"name": "look", "arguments": "{}"}}
        for k in range(30)
    ]
    messages += [{"role": "assistant", "content": None, "tool_calls": calls}]
    messages += [{"role": "tool", "tool_call_id": f"p{k}", "content": f"record {k}"} for k in range(30)]
    clock.advance(5)
    raw = client.chat.completions.with_raw_response.create(model="qwen-plus", messages=messages)
    second = raw.parse()
    assert second.usage.prompt_tokens_details.cached_tokens == first.usage.prompt_tokens
    assert "/lookback" in raw.headers["x-cachekit-breakpoints"]


def test_a_prompt_below_the_model_minimum_is_sent_without_markers() -> None:
    client = _anthropic(ManualClock())
    raw = client.messages.with_raw_response.create(
        model=MODEL, max_tokens=8, system="Be terse.", messages=[{"role": "user", "content": "Hi"}]
    )
    assert raw.headers["x-cachekit-breakpoints"] == "none"
    assert raw.parse().usage.cache_creation_input_tokens == 0


def test_an_agent_loop_of_fifty_turns_reads_nine_tenths_from_cache() -> None:
    clock = ManualClock()
    client = _anthropic(clock)
    messages = _long_conversation(0)
    read = total = 0
    for turn in range(50):
        usage, _ = _send(client, messages)
        read += usage.cache_read_input_tokens
        total += _total(usage)
        messages = messages + _long_conversation(1)[1:]  # one more tool call and its result
        messages[-2]["content"][0]["id"] = messages[-1]["content"][0]["tool_use_id"] = f"turn{turn}"
        clock.advance(5)
    assert read / total >= 0.90


def test_a_prefix_that_comes_back_after_six_minutes_gets_a_one_hour_marker() -> None:
    clock = ManualClock()
    client = _anthropic(clock)
    messages = _long_conversation(1)
    _send(client, messages)
    clock.advance(360)  # the 5-minute entries expired
    usage, header = _send(client, messages + _long_conversation(2)[3:])
    assert usage.cache_read_input_tokens == 0
    assert "=1h/" in header
    clock.advance(360)  # ... but the 1-hour ones written now did not
    usage, _ = _send(client, messages + _long_conversation(3)[3:])
    assert usage.cache_read_input_tokens > 0
    assert usage.cache_creation.ephemeral_1h_input_tokens > 0


def test_breakpoints_can_be_turned_off_per_request_and_are_absent_on_hits() -> None:
    config = cachekit.CacheConfig(store="memory://", ledger=False, price_as="anthropic")
    client = sdk_client(
        "anthropic",
        transport=LocalTransport(LocalBackend()),
        api_key="k",
        base_url="http://local.test",
        cache=config,
    )
    messages = [{"role": "user", "content": "Which bookings are open?"}]
    usage, header = _send(client, messages)
    assert "/conversation" in header
    assert usage.cache_creation_input_tokens == _total(usage)
    hit = client.messages.with_raw_response.create(
        model=MODEL, max_tokens=8, system=POLICY, tools=TOOLS, messages=messages
    )
    assert hit.headers["x-cachekit-cache"] == "hit"
    assert "x-cachekit-breakpoints" not in hit.headers
    off = client.messages.with_raw_response.create(
        model=MODEL,
        max_tokens=8,
        system=POLICY,
        tools=TOOLS,
        messages=[{"role": "user", "content": "Another question?"}],
        extra_headers={"x-cachekit-breakpoints": "off"},
    )
    assert off.headers["x-cachekit-breakpoints"] == "off; x-cachekit-breakpoints: off"  # says why
    assert off.parse().usage.cache_creation_input_tokens == 0


@pytest.mark.parametrize("mode", ["cached", "bypass"])
def test_the_planner_remembers_writes_only_after_a_2xx(mode: str) -> None:
    """docs/breakpoints.md: "The planner remembers a request's writes only once the provider accepted
    it (a 2xx)": a refused request wrote nothing at the provider, so nothing may be read back."""
    import anthropic

    upstream = FakeUpstream()
    client = sdk_client(
        "anthropic",
        transport=upstream,
        api_key="k",
        cache=cachekit.CacheConfig(store="memory://", ledger=False),
    )
    memory = cachekit.cache_of(client).pipeline.planner.memory
    headers = {"x-cachekit": "bypass"} if mode == "bypass" else {}
    ask = functools.partial(
        client.messages.with_raw_response.create,
        model=MODEL,
        max_tokens=8,
        system=POLICY,
        messages=[{"role": "user", "content": "Which bookings are open?"}],
        extra_headers=headers,
    )
    for status in (500, 429, 400):
        upstream.fail_next(status)
        with pytest.raises(anthropic.APIStatusError) as refused:
            ask()
        assert "/conversation" in refused.value.response.headers["x-cachekit-breakpoints"]  # planned
        assert len(memory) == 0
    assert "/conversation" in ask().headers["x-cachekit-breakpoints"]
    assert len(memory) > 0
    client.close()


class _ThreeByteTokenizer:
    """One token per 3 bytes of UTF-8: a provider that counts about a third more tokens than o200k."""

    def encode(self, text: str) -> list[int]:
        data = text.encode()
        return [int.from_bytes(data[i : i + 3], "little") for i in range(0, len(data), 3)]

    def decode(self, tokens: list[int]) -> str:
        return b"".join(token.to_bytes(3, "little") for token in tokens).decode(errors="ignore")


def test_token_estimates_calibrate_to_what_the_provider_reports() -> None:
    # The backend counts 3-byte tokens; cachekit estimates with o200k. After one call the planner's
    # ratio is the backend's count over the o200k count of the same texts, computed here directly.
    backend = LocalBackend(ScriptedEngine(_ThreeByteTokenizer()))
    config = cachekit.CacheConfig(store="memory://", enabled=False, ledger=False, price_as="anthropic")
    cache = Cache(config)
    client = sdk_client(
        "anthropic", transport=LocalTransport(backend), api_key="k", base_url="http://local.test", cache=cache
    )
    messages = [{"role": "user", "content": "How many seats are left on flight 7?"}]
    usage, _ = _send(client, messages)
    o200k = encoding("o200k_base")
    texts = [orjson.dumps(tool, option=orjson.OPT_SORT_KEYS).decode() for tool in TOOLS]
    estimate = sum(o200k.count(text) for text in [*texts, POLICY, messages[0]["content"]])
    ratio = cache.pipeline.planner.estimator.ratio(MODEL)
    assert ratio == pytest.approx(_total(usage) / estimate)
    assert 1.2 < ratio < 2  # o200k averages about 4 bytes a token in English prose
    assert cache.pipeline.planner.estimator.ratio("claude-opus-4-8") == 1.0  # kept per model


def _recording_openai(base_url: str, seen: list[dict[str, Any]], **config: Any) -> Any:
    """A cachekit OpenAI client on the local backend that keeps every body that reached the backend."""
    backend = LocalTransport(LocalBackend(accept_any_model=True))

    class Recording(httpx2.BaseTransport):
        def handle_request(self, request: httpx2.Request) -> httpx2.Response:
            seen.append(orjson.loads(request.read()))
            return backend.handle_request(request)

    return sdk_client(
        "openai",
        transport=Recording(),
        api_key="k",
        base_url=base_url,
        cache=cachekit.CacheConfig(store="memory://", enabled=False, ledger=False, **config),
    )


def test_openai_gets_a_prompt_cache_key_and_third_parties_do_not() -> None:
    seen: list[dict[str, Any]] = []

    def client(base_url: str) -> Any:
        return _recording_openai(base_url, seen)

    system = {"role": "system", "content": POLICY}
    for question in ("One?", "Two?"):
        client("https://api.openai.com/v1").chat.completions.create(
            model="gpt-4.1-mini", messages=[system, {"role": "user", "content": question}]
        )
    client("https://api.openai.com/v1").chat.completions.create(
        model="gpt-4.1-mini",
        messages=[system, {"role": "user", "content": "Three?"}],
        prompt_cache_key="mine",
    )
    client("https://api.deepseek.com/v1").chat.completions.create(
        model="deepseek-chat", messages=[system, {"role": "user", "content": "Four?"}]
    )
    keys = [body.get("prompt_cache_key") for body in seen]
    assert keys[0] is not None
    assert keys[0].startswith("ck-")
    assert keys[1] == keys[0]  # same stable prefix, same key
    assert keys[2] == "mine"  # the caller's own key is kept
    assert keys[3] is None  # never sent to an OpenAI-compatible third party


def test_stable_first_moves_a_volatile_system_block_after_the_stable_ones() -> None:
    def system(now: str) -> list[dict[str, Any]]:
        return [{"type": "text", "text": f"Current time: {now}."}, {"type": "text", "text": POLICY}]

    reads = {}
    for option in (False, True):
        clock = ManualClock()
        config = cachekit.CacheConfig(
            store="memory://", enabled=False, ledger=False, price_as="anthropic", stable_first=option
        )
        client = sdk_client(
            "anthropic",
            transport=LocalTransport(LocalBackend(clock=clock)),
            api_key="k",
            base_url="http://local.test",
            cache=Cache(config, clock=clock),
        )
        for now in ("2026-12-03 10:00:00", "2026-12-03 10:00:05"):
            usage = client.messages.create(
                model=MODEL, max_tokens=8, system=system(now), messages=[{"role": "user", "content": "Hi"}]
            ).usage
            clock.advance(5)
        reads[option] = usage.cache_read_input_tokens
    assert reads[False] == 0  # the timestamp comes first: nothing after it can be reused
    assert reads[True] == encoding("o200k_base").count(POLICY)  # the policy moved first and was read


def test_stable_first_leaves_marked_or_unmovable_systems_alone() -> None:
    from cachekit.shape.planner import stable_first

    marked = {
        "system": [
            {"type": "text", "text": "t", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "p"},
        ]
    }
    assert stable_first("anthropic_messages", marked, {"system.0"}) is marked
    chat = {
        "messages": [
            {"role": "system", "content": "Now: 10:00"},
            {"role": "developer", "content": "Policy"},
            {"role": "user", "content": "Hi"},
        ]
    }
    moved = stable_first("openai_chat", chat, {"messages.0.content"})
    assert [m["content"] for m in moved["messages"]] == ["Policy", "Now: 10:00", "Hi"]
    assert stable_first("openai_responses", {"instructions": "x"}, {"instructions"}) == {"instructions": "x"}


@pytest.mark.anyio
async def test_async_clients_plan_the_same_way() -> None:
    clock = ManualClock()
    backend = LocalBackend(clock=clock)
    config = cachekit.CacheConfig(store="memory://", enabled=False, ledger=False, price_as="anthropic")
    client = sdk_client(
        "anthropic",
        "async",
        transport=LocalTransport(backend),
        api_key="k",
        base_url="http://local.test",
        cache=Cache(config, clock=clock),
    )
    messages = _long_conversation(2)
    first = await client.messages.with_raw_response.create(
        model=MODEL, max_tokens=8, system=POLICY, tools=TOOLS, messages=messages
    )
    clock.advance(5)
    second = await client.messages.create(
        model=MODEL, max_tokens=8, system=POLICY, tools=TOOLS, messages=messages + _long_conversation(3)[5:]
    )
    assert "/conversation" in first.headers["x-cachekit-breakpoints"]
    assert second.usage.cache_read_input_tokens == _total((await first.parse()).usage)


def test_images_neither_slow_the_estimate_nor_skew_the_calibration() -> None:
    image = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo" * 200_000}  # 2.2 MB
    body = {
        "model": MODEL,
        "max_tokens": 8,
        "system": POLICY,
        "messages": [
            {"role": "user", "content": [{"type": "image", "source": image}, {"type": "text", "text": "?"}]}
        ],
    }
    blocks = prompt_blocks("anthropic_messages", body)
    assert [b.media_tokens for b in blocks] == [0, 1600, 0]
    assert "iVBOR" not in blocks[1].text  # the base64 data is never tokenized
    planner = Planner()
    applied = planner.apply("anthropic", "anthropic_messages", body, now=0.0)
    assert applied.estimate == 0  # nothing to calibrate from
    assert applied.plan is not None
    assert [p.where for p in applied.plan.placements] == ["system", "messages.0.content.1"]


def test_calibration_averages_its_first_reports_and_clamps_odd_ones() -> None:
    from cachekit.shape.tokens import TokenEstimator

    estimator = TokenEstimator(counter=encoding("o200k_base"))
    estimator.observe("m", 1000, 50_000)  # an odd report (an image counted as text): clamped to 2.5
    assert estimator.ratio("m") == 2.5
    estimator.observe("m", 1000, 1000)
    assert estimator.ratio("m") == pytest.approx((2.5 + 1.0) / 2)
    estimator.observe("m", 10, 1000)  # too small a prompt to learn from
    assert estimator.samples("m") == 2
    assert estimator.ratio("other") == 1.0


def test_a_deferred_tool_never_carries_a_marker() -> None:
    tools = [*TOOLS, {**TOOLS[0], "name": "rarely_used", "defer_loading": True}]
    body = {
        "model": MODEL,
        "max_tokens": 8,
        "tools": tools,
        "system": POLICY,
        "messages": _long_conversation(1),
    }
    plan = _plan(body, [300] * 5 + [2000] + [50] * 3)
    assert ("tools.3", "tools") in {(p.where, p.reason) for p in plan.placements}
    assert "tools.4" not in {p.where for p in plan.placements}


def test_markers_nested_in_tool_results_count_against_the_limit() -> None:
    nested = [{"type": "text", "text": f"row {k}", "cache_control": {"type": "ephemeral"}} for k in range(2)]
    messages = _long_conversation(1)
    messages[2]["content"][0]["content"] = nested
    body = {"model": MODEL, "max_tokens": 8, "tools": TOOLS, "system": POLICY, "messages": messages}
    plan = _plan(body, [300] * 4 + [2000] + [50] * 3)
    assert len(plan.placements) == 2  # 4 minus the caller's 2
    body = add_marker(add_marker(body, "system"), "messages.1.content.0")
    with pytest.raises(PlanError, match="5 cache_control markers"):
        _plan(add_marker(body, "tools.3"), [300] * 4 + [2000] + [50] * 3)


def test_a_document_with_citations_enabled_can_carry_a_marker() -> None:
    document = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": POLICY},
        "citations": {"enabled": True},
    }
    cited = {"type": "text", "text": "As clause 3 says.", "citations": [{"type": "char_location"}]}
    body = {
        "model": MODEL,
        "max_tokens": 8,
        "messages": [
            {"role": "user", "content": [document, {"type": "text", "text": "Summarize."}]},
            {"role": "assistant", "content": [cited]},
            {"role": "user", "content": [document]},
        ],
    }
    blocks = prompt_blocks("anthropic_messages", body)
    assert [b.eligible for b in blocks] == [True, True, False, True]
    plan = _plan(add_marker(body, "messages.0.content.0"), [2000, 5, 10, 2000])
    assert [p.where for p in plan.placements] == ["messages.2.content.0"]


def test_an_assistant_prefill_is_not_where_the_conversation_marker_goes() -> None:
    messages = [*_long_conversation(1), {"role": "assistant", "content": "{"}]
    body = {"model": MODEL, "max_tokens": 8, "system": POLICY, "messages": messages}
    plan = _plan(body, [2000, 50, 50, 50, 1])
    assert {p.reason: p.where for p in plan.placements}["conversation"] == "messages.2.content.0"


def test_the_lookback_window_is_exactly_twenty_positions() -> None:
    body = {"model": MODEL, "max_tokens": 8, "system": POLICY, "messages": _long_conversation(12)}
    blocks = prompt_blocks("anthropic_messages", body)
    tokens = [2000] + [40] * (len(blocks) - 1)
    end = len(blocks) - 1
    for distance, bridged in ((19, False), (20, True)):
        plan = plan_breakpoints(body, blocks, tokens, rules=RULES, recall=Recall(last_write=end - distance))
        assert any(p.reason == "lookback" for p in plan.placements) is bridged


def test_lint_raise_answers_with_a_400_the_sdk_does_not_retry() -> None:
    import anthropic

    seen: list[Any] = []
    config = cachekit.CacheConfig(
        store="memory://", ledger=False, price_as="anthropic", lint="raise", on_lint=seen.append
    )
    backend = LocalBackend()
    client = sdk_client(
        "anthropic",
        transport=LocalTransport(backend),
        api_key="k",
        base_url="http://local.test",
        cache=config,
    )
    with pytest.raises(anthropic.BadRequestError, match="timestamp at system"):
        client.messages.create(
            model=MODEL,
            max_tokens=8,
            system="Now: 2026-12-03 10:00:00 UTC. " + POLICY,
            messages=[{"role": "user", "content": "Hi"}],
        )
    assert [f.code for f in seen] == ["timestamp"]  # one call: no retries
    assert backend.stats.requests == 0  # nothing was sent


def test_a_request_the_api_would_refuse_is_sent_as_written() -> None:
    marked = [{"type": "text", "text": f"part {k}", "cache_control": {"type": "ephemeral"}} for k in range(5)]
    client = _anthropic(ManualClock())
    import anthropic

    with pytest.raises(anthropic.BadRequestError, match="A maximum of 4 blocks with cache_control"):
        client.messages.create(
            model=MODEL, max_tokens=8, system=POLICY, messages=[{"role": "user", "content": marked}]
        )


def test_price_as_openai_never_sends_a_prompt_cache_key_to_another_host() -> None:
    seen: list[dict[str, Any]] = []
    client = _recording_openai("http://my-vllm.internal/v1", seen, price_as="openai")
    client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": POLICY}])
    assert "prompt_cache_key" not in seen[0]

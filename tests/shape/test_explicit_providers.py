"""Explicit prompt-cache breakpoints on OpenAI GPT-5.6 and later: the local backend bills them as the
provider documents (each test quotes the text and its URL), and cachekit's planner places them the
same way it places Anthropic's, from the rules data, with bodies the API accepts.

The SDK docstrings quoted as "API reference" are the openai package's (3.60.0) types, generated from
OpenAI's API reference: https://developers.openai.com/api/reference (prompt_cache_options).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cachekit.cost.prices import PriceTable
from cachekit.local import LocalBackend, LocalTransport, ManualClock, ScriptedEngine
from cachekit.providers.cache_rules import cache_rules
from cachekit.replay import read_traces, replay
from cachekit.shape.blocks import prompt_blocks
from cachekit.shape.markers import rebind
from cachekit.shape.planner import Planner
from cachekit.shape.tokens import encoding
from tests import sdk_shapes
from tests.conftest import sdk_client
from tests.fuzzing import fuzz

GUIDE = "https://developers.openai.com/api/docs/guides/prompt-caching"
REFERENCE = "https://developers.openai.com/api/reference"
MODEL = "gpt-5.6-sol"
STABLE = "You are the support agent of a travel company. Follow the refund policy closely. " * 100
BREAKPOINT = {"mode": "explicit"}
TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces-sample.jsonl"  # see fixtures/README.md


class Client:
    """The real openai SDK, sync or async, on one local backend with a manual clock."""

    def __init__(self, mode: str) -> None:
        self.clock = ManualClock()
        self.backend = LocalBackend(ScriptedEngine(encoding("o200k_base")), clock=self.clock)
        transport = LocalTransport(self.backend)
        self.loop = asyncio.new_event_loop() if mode == "async" else None
        self.sdk = sdk_client(
            "openai",
            mode,
            transport=transport,
            plain=True,
            api_key="sk-test",
            base_url="http://local.invalid/v1",
        )

    def chat(self, **kwargs: Any) -> Any:
        return self._run(self.sdk.chat.completions.create(model=MODEL, **kwargs))

    def responses(self, **kwargs: Any) -> Any:
        return self._run(self.sdk.responses.create(model=MODEL, **kwargs))

    def _run(self, result: Any) -> Any:
        return result if self.loop is None else self.loop.run_until_complete(result)

    def close(self) -> None:
        self._run(self.sdk.close())
        if self.loop is not None:
            self.loop.close()


@pytest.fixture(params=["sync", "async"])
def client(request: pytest.FixtureRequest) -> Iterator[Client]:
    c = Client(request.param)
    yield c
    c.close()


def _system(marked: bool = True) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "text", "text": STABLE}
    if marked:
        part["prompt_cache_breakpoint"] = BREAKPOINT
    return {"role": "system", "content": [part]}


def _details(response: Any) -> tuple[int, int, int]:
    """(prompt tokens, cached_tokens, cache_write_tokens) of a Chat Completions answer."""
    usage = response.usage
    details = usage.prompt_tokens_details
    return usage.prompt_tokens, details.cached_tokens, details.cache_write_tokens


# -- billing (the local backend) -----------------------------------------------------------------


def test_writes_are_reported_in_cache_write_tokens_and_reads_in_cached_tokens(client: Client) -> None:
    # GUIDE: "For GPT-5.6 models and later model families, cache writes cost 1.25x the uncached input
    # token rate ... OpenAI reports writes in cache_write_tokens and reads in cached_tokens".
    messages = [_system(), {"role": "user", "content": "Where is my refund?"}]
    total, read, written = _details(client.chat(messages=messages, prompt_cache_options={"mode": "explicit"}))
    assert read == 0
    assert 1000 < written < total
    client.clock.advance(60)
    again = [_system(), {"role": "user", "content": "And my booking?"}]
    total2, read2, written2 = _details(client.chat(messages=again, prompt_cache_options={"mode": "explicit"}))
    assert (read2, written2) == (written, 0)
    assert total2 > read2


def test_the_first_request_writes_its_breakpoint_prefix(client: Client) -> None:
    # GUIDE: "OpenAI reports writes in cache_write_tokens"; API reference (prompt_cache_breakpoint):
    # "Marks the exact end of a reusable prompt prefix ... the boundary is not rounded to a token block".
    messages = [_system(), {"role": "user", "content": "Hi"}]
    total, read, written = _details(client.chat(messages=messages, prompt_cache_options={"mode": "explicit"}))
    plain = [{"role": "system", "content": STABLE}]
    system_tokens = _details(client.chat(messages=plain, prompt_cache_options={"mode": "explicit"}))[0]
    assert read == 0
    assert written == system_tokens  # exactly the prefix up to the marked block, not a 128-token step
    assert total > written


def test_explicit_mode_without_breakpoints_caches_nothing(client: Client) -> None:
    # API reference (prompt_cache_options.mode): "With explicit, OpenAI does not create an implicit
    # breakpoint and writes up to the latest four explicit breakpoints. If there are no explicit
    # breakpoints, the request does not use prompt caching."
    messages = [_system(marked=False), {"role": "user", "content": "Hi"}]
    for _ in range(2):
        _, read, written = _details(client.chat(messages=messages, prompt_cache_options={"mode": "explicit"}))
        assert (read, written) == (0, 0)
        client.clock.advance(10)


def test_implicit_mode_writes_at_the_newest_user_message(client: Client) -> None:
    # API reference: "By default, OpenAI automatically chooses one implicit cache breakpoint"; OpenAI's
    # GPT-5.6 upgrade guide (quoted in https://github.com/openai/codex/issues/35300): implicit caching
    # "places a managed breakpoint near the latest user or tool message and no longer relies on 128-token
    # rounding. A prompt with a large stable prefix followed by a changing suffix can therefore lose
    # cache hits even when the stable prefix itself has not changed."
    first = [_system(marked=False), {"role": "user", "content": "Hi"}]
    total, read, written = _details(client.chat(messages=first))
    assert (read, written) == (0, total)  # the whole prompt, up to the user message
    client.clock.advance(10)
    changed = [_system(marked=False), {"role": "user", "content": "Something else entirely"}]
    total2, read2, written2 = _details(client.chat(messages=changed))
    assert read2 == 0  # the stable prefix alone is no hit
    assert written2 == total2
    client.clock.advance(10)
    extended = [*first, {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "More"}]
    _, read3, _ = _details(client.chat(messages=extended))
    assert read3 == total  # the next turn reads the earlier implicit write


def test_implicit_mode_writes_only_the_latest_three_explicit_breakpoints(client: Client) -> None:
    # API reference: "With implicit, OpenAI creates one implicit breakpoint and writes up to the latest
    # three explicit breakpoints in the request."
    parts = [
        {"type": "text", "text": f"Section {i}. " + STABLE, "prompt_cache_breakpoint": BREAKPOINT}
        for i in range(5)
    ]
    messages = [{"role": "system", "content": parts}, {"role": "user", "content": "Hi"}]
    client.chat(messages=messages)
    client.clock.advance(10)
    # Only the first (dropped) breakpoint's prefix again: nothing was written there.
    first_only = [{"role": "system", "content": parts[:1]}, {"role": "user", "content": "Other"}]
    _, read, _ = _details(client.chat(messages=first_only, prompt_cache_options={"mode": "explicit"}))
    assert read == 0
    client.clock.advance(10)
    # The third breakpoint was among the latest three: its prefix is read.
    three = [{"role": "system", "content": parts[:3]}, {"role": "user", "content": "Other"}]
    _, read3, _ = _details(client.chat(messages=three, prompt_cache_options={"mode": "explicit"}))
    assert read3 > 0


def test_a_read_has_no_content_block_lookback_limit(client: Client) -> None:
    # API reference: "For cache matching, OpenAI considers up to the latest 80 breakpoints in the
    # conversation, without a content-block lookback limit." (Anthropic: 20 blocks.)
    messages: list[dict[str, Any]] = [_system(), {"role": "user", "content": "Run the checks"}]
    client.chat(messages=messages, prompt_cache_options={"mode": "explicit"})
    client.clock.advance(10)
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "check", "arguments": "{}"}}
        for i in range(30)
    ]
    longer = [
        *messages,
        {"role": "assistant", "content": None, "tool_calls": calls},
        *({"role": "tool", "tool_call_id": f"c{i}", "content": f"result {i}"} for i in range(30)),
        {
            "role": "user",
            "content": [{"type": "text", "text": "Summarize", "prompt_cache_breakpoint": BREAKPOINT}],
        },
    ]
    _, read, _ = _details(client.chat(messages=longer, prompt_cache_options={"mode": "explicit"}))
    assert read >= 1000  # 60+ blocks after the system breakpoint, still found


def test_responses_report_writes_by_lifetime(client: Client) -> None:
    # API reference (Responses prompt_cache_options.ttl): "Supported values are 30m (the default) and 12h";
    # ResponseUsage.input_tokens_details.cache_write_tokens_details: ttl_30m_tokens, ttl_12h_tokens.
    item = {
        "role": "developer",
        "content": [
            {
                "type": "input_text",
                "text": STABLE,
                "prompt_cache_breakpoint": {"mode": "explicit", "ttl": "12h"},
            }
        ],
    }
    response = client.responses(
        input=[item, {"role": "user", "content": "Hi"}], prompt_cache_options={"mode": "explicit"}
    )
    details = response.usage.input_tokens_details
    assert details.cache_write_tokens > 1000
    assert details.cache_write_tokens_details.ttl_12h_tokens == details.cache_write_tokens
    assert details.cache_write_tokens_details.ttl_30m_tokens == 0


def test_a_12h_entry_outlives_30_minutes_and_a_30m_one_does_not(client: Client) -> None:
    # API reference (prompt_cache_breakpoint.ttl): "The minimum lifetime of this cache breakpoint";
    # '30m' | '12h'.
    def ask(ttl: str, question: str) -> int:
        part = {
            "type": "input_text",
            "text": f"[{ttl}] " + STABLE,
            "prompt_cache_breakpoint": {"mode": "explicit", "ttl": ttl},
        }
        item = {"role": "developer", "content": [part]}
        response = client.responses(
            input=[item, {"role": "user", "content": question}], prompt_cache_options={"mode": "explicit"}
        )
        return int(response.usage.input_tokens_details.cached_tokens)

    ask("30m", "a")
    ask("12h", "a")
    client.clock.advance(45 * 60)
    assert ask("30m", "b") == 0
    assert ask("12h", "b") > 1000


def test_chat_refuses_a_12h_request_ttl(client: Client) -> None:
    # API reference (Chat prompt_cache_options.ttl): "Defaults to 30m, which is currently the only
    # supported value."
    with pytest.raises(openai.BadRequestError):
        client.chat(messages=[_system()], prompt_cache_options={"mode": "explicit", "ttl": "12h"})


def test_cache_control_is_not_a_gpt_5_6_field(client: Client) -> None:
    # GPT-5.6 takes prompt_cache_breakpoint (GUIDE, "explicit cache breakpoints"); cache_control is the
    # Messages API's field.
    part = {"type": "text", "text": STABLE, "cache_control": {"type": "ephemeral"}}
    with pytest.raises(openai.BadRequestError, match="cache_control"):
        client.chat(messages=[{"role": "system", "content": [part]}])


def test_assistant_output_cannot_carry_a_breakpoint(client: Client) -> None:
    # The openai SDK's content parts that take prompt_cache_breakpoint are the input ones (Chat text,
    # image_url, input_audio, file; Responses input_text, input_image, input_file); assistant output is
    # not among them.
    messages = [
        _system(marked=False),
        {"role": "user", "content": "Hi"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Hello", "prompt_cache_breakpoint": BREAKPOINT}],
        },
        {"role": "user", "content": "More"},
    ]
    with pytest.raises(openai.BadRequestError):
        client.chat(messages=messages)


# -- planning -----------------------------------------------------------------------------------


def _planner() -> Planner:
    return Planner(multipliers=lambda provider, model: (1.25, 0.1))


def _markers(body: dict[str, Any], dialect: str) -> dict[str, Any]:
    rules = cache_rules("openai", MODEL)
    blocks = rebind(dialect, body, prompt_blocks(dialect, body), rules)
    return {b.where: b.marker for b in blocks if b.marker is not None}


def test_the_planner_marks_the_system_end_keeps_implicit_mode_and_the_cache_key() -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "system", "content": STABLE}, {"role": "user", "content": "Hi"}],
    }
    applied = _planner().apply("openai", "openai_chat", body, now=0.0)
    planned = applied.body
    assert _markers(planned, "openai_chat") == {"messages.0.content.0": {"mode": "explicit"}}
    assert (
        "prompt_cache_options" not in planned
    )  # implicit mode: OpenAI's own breakpoint ends the conversation
    assert planned["prompt_cache_key"].startswith("ck-")
    assert "cache_control" not in orjson.dumps(planned).decode()


def test_one_shot_traffic_turns_the_implicit_breakpoint_off() -> None:
    # The implicit breakpoint writes each new question at 1.25x, and no later request reads it.
    planner = _planner()
    bodies = [
        {
            "model": MODEL,
            "messages": [{"role": "system", "content": STABLE}, {"role": "user", "content": f"Q{i}"}],
        }
        for i in range(6)
    ]
    modes = []
    for i, body in enumerate(bodies):
        applied = planner.apply("openai", "openai_chat", body, now=float(i))
        planner.commit(applied)
        modes.append(applied.body.get("prompt_cache_options", {}).get("mode", "implicit"))
    assert modes[0] == "implicit"
    assert modes[-1] == "explicit"


def test_a_callers_mode_and_markers_are_kept() -> None:
    parts = [
        {"type": "text", "text": f"P{i} " + STABLE, "prompt_cache_breakpoint": BREAKPOINT} for i in range(5)
    ]
    body = {
        "model": MODEL,
        "messages": [{"role": "system", "content": parts}, {"role": "user", "content": "Hi"}],
        "prompt_cache_options": {"mode": "explicit"},
    }
    applied = _planner().apply("openai", "openai_chat", body, now=0.0)
    assert (
        applied.body["messages"] == body["messages"]
    )  # over the limit already: nothing added, nothing moved
    assert applied.body["prompt_cache_options"] == {"mode": "explicit"}


def test_an_implicit_breakpoint_on_a_callers_marked_block_still_takes_a_write() -> None:
    # API reference: "With implicit, OpenAI creates one implicit breakpoint and writes up to the latest
    # three explicit breakpoints in the request." The implicit one ends on the newest user message,
    # which carries the caller's third marker: there is no room for a fourth explicit one (found by
    # test_planned_chat_bodies_are_accepted; the planner counted the two as one write).
    def turns(marked: int) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = [{"role": "system", "content": [{"type": "text", "text": STABLE}]}]
        for i in range(3):
            part: dict[str, Any] = {"type": "text", "text": f"Question {i}? " + STABLE}
            if i >= 3 - marked:
                part["prompt_cache_breakpoint"] = BREAKPOINT
            messages += [{"role": "user", "content": [part]}, {"role": "assistant", "content": "Noted."}]
        return messages[:-1]

    for marked, system_marked in ((3, False), (2, True)):
        body = {"model": MODEL, "messages": turns(marked)}
        planned = _planner().apply("openai", "openai_chat", body, now=0.0).body
        assert "prompt_cache_options" not in planned  # implicit mode
        assert ("messages.0.content.0" in _markers(planned, "openai_chat")) is system_marked


# The property: for every new dialect, the planned body is one the API accepts.

# Texts of every length (tests/sdk_shapes.py: short ones in any script, thousands of tokens), and the
# stable prompt, which clearly exceeds the minimum.
_TEXT = st.one_of(sdk_shapes.texts(), st.just(STABLE))
_O200K = encoding("o200k_base")


@st.composite
def _chat_body(draw: st.DrawFn) -> dict[str, Any]:
    def part(role: str) -> dict[str, Any]:
        item: dict[str, Any] = {"type": "text", "text": draw(_TEXT)}
        if role != "assistant" and draw(st.integers(0, 4)) == 0:
            item["prompt_cache_breakpoint"] = draw(
                st.sampled_from([BREAKPOINT, {"mode": "explicit", "ttl": "12h"}])
            )
        return item

    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append({"role": draw(st.sampled_from(["system", "developer"])), "content": [part("system")]})
    for turn in range(draw(st.integers(1, 6))):
        role = "user" if turn % 2 == 0 else "assistant"
        if draw(st.booleans()):
            messages.append({"role": role, "content": draw(_TEXT)})
        else:
            messages.append({"role": role, "content": [part(role) for _ in range(draw(st.integers(1, 3)))]})
    if messages[-1]["role"] == "assistant":
        messages.append({"role": "user", "content": "Next"})
    body: dict[str, Any] = {"model": MODEL, "messages": messages}
    if draw(st.booleans()):
        body["prompt_cache_options"] = {"mode": draw(st.sampled_from(["implicit", "explicit"]))}
    return body


@st.composite
def _responses_body(draw: st.DrawFn) -> dict[str, Any]:
    chat = draw(_chat_body())
    items: list[dict[str, Any]] = []
    for message in chat["messages"]:
        role = message["role"]
        content = message["content"]
        kind = "output_text" if role == "assistant" else "input_text"
        if isinstance(content, str):
            parts: Any = (
                content if role != "assistant" else [{"type": kind, "text": content, "annotations": []}]
            )
        else:
            parts = [{**p, "type": kind} for p in content]
            if role == "assistant":
                parts = [{**p, "annotations": []} for p in parts]
        items.append({"type": "message", "role": role, "content": parts})
        if role == "assistant" and draw(st.booleans()):
            items.append({"type": "function_call", "call_id": "c1", "name": "look", "arguments": "{}"})
            items.append({"type": "function_call_output", "call_id": "c1", "output": draw(_TEXT)})
    body = {"model": MODEL, "input": items}
    if "prompt_cache_options" in chat:
        body["prompt_cache_options"] = chat["prompt_cache_options"]
    return body


_PATHS = {"openai_chat": "/v1/chat/completions", "openai_responses": "/v1/responses"}


def _check_accepted(dialect: str, body: dict[str, Any]) -> None:
    backend = LocalBackend(ScriptedEngine(encoding("o200k_base")), clock=ManualClock())
    planner = _planner()
    applied = planner.apply("openai", dialect, body, now=0.0)
    planned = applied.body
    reply = backend.handle(
        "POST", _PATHS[dialect], {"content-type": "application/json"}, orjson.dumps(planned)
    )
    assert reply.status == 200, reply.content
    before, after = _markers(body, dialect), _markers(planned, dialect)
    assert {where: after.get(where) for where in before} == before  # the caller's are never moved
    implicit = planned.get("prompt_cache_options", {}).get("mode", "implicit") == "implicit"
    added = set(after) - set(before)
    assert len(before) + len(added) <= 4 - implicit or not added  # never pushed over the write limit
    _check_what_is_placed(dialect, body, planned, implicit)


def _check_what_is_placed(
    dialect: str, body: dict[str, Any], planned: dict[str, Any], implicit: bool
) -> None:
    """What the documented rules require, from the rules data and the blocks alone (a planner that
    places nothing fails here). Prefixes are counted with o200k, the planner's own estimate only
    approximately, so only prefixes clearly above (1.5x) or below (half) the minimum are judged.

    While writes are left, the end of the system prompt (stable across conversations) carries a
    breakpoint, and so does the conversation's end when the caller chose explicit mode (no implicit
    breakpoint writes it); no breakpoint is added where the prefix is clearly below the minimum (it
    would write nothing)."""
    rules = cache_rules("openai", MODEL)
    blocks = rebind(dialect, body, prompt_blocks(dialect, body), rules)
    marked = {
        i for i, b in enumerate(rebind(dialect, planned, prompt_blocks(dialect, planned), rules)) if b.marker
    }
    caller = {i for i, b in enumerate(blocks) if b.marker}
    prefix = list(itertools.accumulate(_O200K.count(b.text) for b in blocks))
    minimum = rules.min_cacheable_tokens
    assert all(prefix[i] > minimum / 2 for i in marked - caller)
    if len(marked) + implicit >= (rules.max_breakpoints or 0):
        return
    ends = {}
    system = [i for i, b in enumerate(blocks) if b.section == "system" and b.eligible]
    if system:
        ends["system"] = system[-1]
    if body.get("prompt_cache_options", {}).get("mode") == "explicit":
        last = max((b.message for b in blocks if b.message is not None), default=None)
        prefill = blocks and blocks[-1].section == "messages" and _role(body, dialect, last) == "assistant"
        conversation = [i for i, b in enumerate(blocks) if b.eligible and not (prefill and b.message == last)]
        if conversation:
            ends["conversation"] = conversation[-1]
    for reason, end in ends.items():
        if prefix[end] >= 1.5 * minimum:
            assert end in marked, (reason, blocks[end].where)


def _role(body: dict[str, Any], dialect: str, message: int | None) -> str | None:
    items = body["messages" if dialect == "openai_chat" else "input"]
    return None if message is None else items[message].get("role")


@fuzz(60)
@given(_chat_body())
def test_planned_chat_bodies_are_accepted(body: dict[str, Any]) -> None:
    _check_accepted("openai_chat", body)


@fuzz(60)
@given(_responses_body())
def test_planned_responses_bodies_are_accepted(body: dict[str, Any]) -> None:
    _check_accepted("openai_responses", body)


# -- replay -------------------------------------------------------------------------------------

_PRICES = [
    {
        "provider": "openai",
        "model": MODEL,
        "input": 5.0,
        "cache_write_5m": 6.25,
        "cache_write_1h": 6.25,
        "cache_read": 0.5,
        "output": 30.0,
        "source": GUIDE,
        "checked": "2026-12-03",
        "note": "test row: writes at 1.25x, reads at 0.1x",
    }
]


@pytest.mark.parametrize("layout", ["chat", "responses"])
@pytest.mark.parametrize("gap", [5.0, 360.0])
def test_replay_cachekit_beats_every_openai_policy(layout: str, gap: float) -> None:
    conversations = [c for c in read_traces(TRACES) if not isinstance(c, Exception)]
    results = replay(
        conversations,
        provider="openai",
        model=MODEL,
        prices=PriceTable.load(overrides=_PRICES),
        layout=layout,  # type: ignore[arg-type]
        gap_seconds=gap,
    )
    by_policy = {r.policy: r for r in results}
    assert list(by_policy) == ["none", "implicit", "last", "cachekit"]
    assert all(list(r.to_json()) == list(results[0].to_json()) and len(r.to_json()) == 10 for r in results)
    assert all(not r.errors for r in results)
    best = by_policy["cachekit"].savings_efficiency
    assert best is not None
    assert best >= 0.95
    for name in ("none", "implicit", "last"):
        other = by_policy[name].savings_efficiency
        assert other is not None
        assert best > other


_QWEN4_PRICES = [
    {
        "provider": "bailian",
        "model": "qwen4-plus",
        "input": 1.0,
        "cache_write_5m": 1.25,
        "cache_write_1h": 2.0,
        "cache_read": 0.1,
        "output": 4.0,
        "source": "https://www.alibabacloud.com/help/en/model-studio/context-cache",
        "checked": "2026-12-03",
        "note": "test row: explicit-cache writes 125%, hits 10% of the input price",
    }
]


@pytest.mark.parametrize("gap", [5.0, 360.0])
def test_replay_through_model_studio_qwen4(gap: float) -> None:
    # https://www.alibabacloud.com/help/en/model-studio/explicit-cache-qwen4 (Last Updated: Nov 16, 2026):
    # "Explicit cache uses cache breakpoints to specify the content prefix to reuse, and hits are
    # deterministic"; the Context cache page: creation "125% of the standard input token price", hits 10%.
    conversations = [c for c in read_traces(TRACES) if not isinstance(c, Exception)]
    results = replay(
        conversations,
        provider="bailian",
        model="qwen4-plus",
        prices=PriceTable.load(overrides=_QWEN4_PRICES),
        gap_seconds=gap,
    )
    by_policy = {r.policy: r for r in results}
    assert list(by_policy) == ["none", "last", "cachekit"]
    assert all(len(r.to_json()) == 10 for r in results)
    assert all(not r.errors for r in results)
    best = by_policy["cachekit"].savings_efficiency
    assert best is not None
    if gap < 300:  # past 5 minutes, the lifetime is chosen by observed gaps (issue 19's TTL work)
        assert best >= 0.95
    for name in ("none", "last"):
        other = by_policy[name].savings_efficiency
        assert other is not None
        assert best > other


def test_qwen4_is_planned_without_the_callers_markers() -> None:
    # Qwen4's explicit cache is deterministic ("as long as the prefix is identical and within the validity
    # period, subsequent requests read the cache"), so cachekit places its markers there; on older Qwen
    # models the explicit cache would replace the implicit one the caller chose.
    body = {
        "model": "qwen4-plus",
        "messages": [{"role": "system", "content": STABLE}, {"role": "user", "content": "Hi"}],
    }
    planned = _planner().apply("bailian", "openai_chat", body, now=0.0).body
    assert planned["messages"][0]["content"] == [
        {"type": "text", "text": STABLE, "cache_control": {"type": "ephemeral"}}
    ]
    older = {**body, "model": "qwen3-max"}
    assert _planner().apply("bailian", "openai_chat", older, now=0.0).body == older


# -- xAI: conversation routing -------------------------------------------------------------------


def test_xai_chat_gets_x_grok_conv_id_and_responses_a_prompt_cache_key(harness: Any) -> None:
    # https://docs.x.ai/developers/advanced-api-usage/prompt-caching/maximizing-cache-hits: "The
    # x-grok-conv-id HTTP header routes requests with the same conversation ID to the same server"
    # (Chat Completions); "For the Responses API, use the prompt_cache_key field ... It functions
    # identically to setting x-grok-conv-id".
    sdk = harness.sdk("openai").with_options(base_url="https://api.x.ai/v1")
    messages = [{"role": "system", "content": STABLE}, {"role": "user", "content": "Hi"}]
    raw = sdk.call("chat.completions.with_raw_response.create", model="grok-4.7", messages=messages)
    sdk.call(
        "chat.completions.create",
        model="grok-4.7",
        messages=[*messages[:1], {"role": "user", "content": "Other"}],
    )
    sdk.call(
        "chat.completions.create",
        model="grok-4.7",
        messages=messages,
        extra_headers={"x-grok-conv-id": "mine"},
        temperature=0.5,
    )
    sdk.call("responses.create", model="grok-4.7", input="Hi", instructions=STABLE)
    first, second, own, responses = harness.upstream.requests
    assert first.headers["x-grok-conv-id"].startswith("ck-")
    assert raw.headers["x-cachekit-breakpoints"] == f"x-grok-conv-id={first.headers['x-grok-conv-id']}"
    assert (
        second.headers["x-grok-conv-id"] == first.headers["x-grok-conv-id"]
    )  # one stable prefix, one server
    assert own.headers["x-grok-conv-id"] == "mine"  # the caller's own is kept
    assert "prompt_cache_key" not in orjson.loads(first.body)
    assert orjson.loads(responses.body)["prompt_cache_key"].startswith("ck-")
    assert "x-grok-conv-id" not in responses.headers


# -- the Anthropic-compatible endpoints, and the rules data ------------------------------------


@pytest.mark.parametrize(
    ("host", "path", "provider"),
    [
        # Z.ai: "https://api.z.ai/api/anthropic" as ANTHROPIC_BASE_URL (its Claude Code guide); Model
        # Studio: ".../apps/anthropic" ("agents and coding tools connect to Model Studio using the
        # Anthropic protocol", https://www.alibabacloud.com/help/ja/model-studio/explicit-cache-guide).
        ("api.z.ai", "/api/anthropic/v1/messages", "glm"),
        ("dashscope-intl.aliyuncs.com", "/apps/anthropic/v1/messages", "bailian"),
    ],
)
def test_anthropic_compatible_endpoints_are_their_providers(host: str, path: str, provider: str) -> None:
    from cachekit.providers.registry import route_request

    route = route_request("POST", "https", host, None, path)
    assert route is not None
    assert (route.provider, route.dialect) == (provider, "anthropic_messages")
    assert "anthropic-version" in route.key_headers  # the Anthropic SDK's headers that change the answer


def test_fable_5_and_mythos_5_take_a_million_tokens() -> None:
    # https://platform.claude.com/docs/en/models/fable-5/overview: "Context window: 1M tokens"; "Claude
    # Mythos 5 ... shares Claude Fable 5's specifications and pricing".
    for model in ("claude-fable-5", "claude-mythos-5", "claude-fable-5-20260609"):
        rules = cache_rules("anthropic", model)
        assert rules.context_window == 1_000_000
        assert rules.context_window_source == "https://platform.claude.com/docs/en/models/fable-5/overview"


def test_a_callers_breakpoint_on_a_system_message_is_never_moved() -> None:
    from cachekit.shape.planner import stable_first

    messages = [
        {"role": "system", "content": "Today is 2026-12-03 10:04"},
        {
            "role": "system",
            "content": [{"type": "text", "text": STABLE, "prompt_cache_breakpoint": BREAKPOINT}],
        },
        {"role": "user", "content": "Hi"},
    ]
    body = {"model": MODEL, "messages": messages}
    assert stable_first("openai_chat", body, {"messages.0.content"}) is body
    unmarked = {"model": MODEL, "messages": [messages[0], _system(marked=False), messages[2]]}
    assert stable_first("openai_chat", unmarked, {"messages.0.content"})["messages"][0] == _system(
        marked=False
    )


@pytest.mark.parametrize(("gap", "long"), [(360.0, False), (2400.0, True)])
def test_a_gap_is_long_only_past_the_30_minute_lifetime(gap: float, long: bool) -> None:
    # API reference: prompt_cache_options.ttl "Defaults to 30m"; a breakpoint's ttl '30m' | '12h'. A
    # 6-minute gap is inside the 30-minute lifetime, so a 12h write would buy nothing.
    planner = _planner()
    body = {
        "model": MODEL,
        "messages": [{"role": "system", "content": STABLE}, {"role": "user", "content": "Hi"}],
    }
    planner.commit(planner.apply("openai", "openai_chat", body, now=0.0))
    later = {**body, "messages": [body["messages"][0], {"role": "user", "content": "Later"}]}
    planned = planner.apply("openai", "openai_chat", later, now=gap).body
    marker = planned["messages"][0]["content"][0]["prompt_cache_breakpoint"]
    assert marker == ({"mode": "explicit", "ttl": "12h"} if long else {"mode": "explicit"})


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_cachekit_plans_gpt_5_6_requests_on_their_way_to_the_api(mode: str) -> None:
    # End to end: the cachekit drop-in client (real openai SDK) to the local backend billing GPT-5.6's
    # rules. The second conversation reads the first one's system prefix: only an explicit breakpoint
    # there makes that possible ("exact match at a breakpoint"; the implicit one ends each conversation).
    from cachekit.cache import Cache
    from cachekit.config import CacheConfig

    clock = ManualClock()
    backend = LocalBackend(ScriptedEngine(encoding("o200k_base")), clock=clock)
    config = CacheConfig(store="memory://", enabled=False, ledger=False, lint="off", breakpoints="auto")
    loop = asyncio.new_event_loop() if mode == "async" else None
    sdk = sdk_client(
        "openai", mode, transport=LocalTransport(backend), api_key="sk-test", cache=Cache(config, clock=clock)
    )

    def ask(question: str) -> Any:
        call = sdk.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=[{"role": "system", "content": STABLE}, {"role": "user", "content": question}],
        )
        return call if loop is None else loop.run_until_complete(call)

    try:
        first = ask("Where is my refund?")
        clock.advance(30)
        second = ask("Can I change my seat?")
    finally:
        if loop is None:
            sdk.close()
        else:
            loop.run_until_complete(sdk.close())
            loop.close()
    assert first.headers["x-cachekit-breakpoints"] == "messages.0.content=30m/system"  # OpenAI's name
    details = second.parse().usage.prompt_tokens_details
    assert details.cached_tokens > 1000  # the system prefix, written by the first request's breakpoint


def test_azure_openai_gets_the_gpt_5_6_breakpoints_and_cache_key(harness: Any) -> None:
    # https://learn.microsoft.com/en-ca/Azure/foundry/openai/how-to/prompt-caching: "On GPT-5.6 models
    # and later model families, cache writes can incur charges"; "On GPT-5.6 models and later model
    # families, set the prompt_cache_key parameter"; the Foundry SDK's PromptCacheBreakpointConfig:
    # "Marks the exact end of a reusable prompt prefix" (mode "explicit", ttl "30m" | "12h").
    from cachekit.providers.registry import route_request

    route = route_request("POST", "https", "contoso.openai.azure.com", None, "/openai/v1/chat/completions")
    assert route is not None
    assert route.provider == "azure"
    sdk = harness.sdk("openai").with_options(base_url="https://contoso.openai.azure.com/openai/v1")
    messages = [{"role": "system", "content": STABLE}, {"role": "user", "content": "Hi"}]
    sdk.call("chat.completions.create", model=MODEL, messages=messages)
    sent = orjson.loads(harness.upstream.requests[-1].body)
    assert sent["messages"][0]["content"][0]["prompt_cache_breakpoint"] == BREAKPOINT
    assert sent["prompt_cache_key"].startswith("ck-")
    assert "cache_control" not in orjson.dumps(sent).decode()


@pytest.mark.parametrize("field", ["prompt_cache_breakpoint", "cache_control"])
def test_qwen4_takes_either_breakpoint_field(field: str) -> None:
    # https://help.aliyun.com/zh/model-studio/explicit-cache-qwen4: add prompt_cache_breakpoint
    # {"mode": "explicit"} on the content block to cache; "the existing cache_control content block
    # markers remain compatible, used the same way as prompt_cache_breakpoint"; "the cache prefix is at
    # least 1,024 tokens".
    backend = LocalBackend(ScriptedEngine(encoding("o200k_base")), rules="anthropic", clock=ManualClock())
    sdk = sdk_client(
        "openai",
        transport=LocalTransport(backend),
        plain=True,
        api_key="sk-test",
        base_url="http://local.invalid/v1",
    )
    marker = BREAKPOINT if field == "prompt_cache_breakpoint" else {"type": "ephemeral"}
    system = {"role": "system", "content": [{"type": "text", "text": STABLE, field: marker}]}
    try:
        first = sdk.chat.completions.create(
            model="qwen4-plus", messages=[system, {"role": "user", "content": "a"}]
        )
        second = sdk.chat.completions.create(
            model="qwen4-plus", messages=[system, {"role": "user", "content": "b"}]
        )
    finally:
        sdk.close()
    written = first.model_dump()["usage"]["prompt_tokens_details"]["cache_creation_input_tokens"]
    assert written > 1000
    assert second.usage.prompt_tokens_details.cached_tokens == written

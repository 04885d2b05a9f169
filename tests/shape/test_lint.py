"""Prefix lint: volatile content in tools and system, and what changes between calls of a conversation."""

from __future__ import annotations

import copy
import json
import logging
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cachekit.errors import CachekitError, ConfigError
from cachekit.shape.lint import Finding, PrefixLinter, PrefixLintError, lint_request

TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces-sample.jsonl"  # see fixtures/README.md
# A SWE-agent trajectory with 21 assistant turns and a system prompt without volatile content.
STABLE_TRACE = "swe-agent:trajectories/demonstrations/ctf/web/i_got_id_demo.traj"

TOOLS = [
    {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
    {
        "name": "get_time",
        "description": "Local time in a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
    {
        "name": "search",
        "description": "Search the web.",
        "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
    },
]


def _trace(conversation_id: str | None = None, line: int = 0) -> dict[str, Any]:
    lines = TRACES.read_text(encoding="utf-8").splitlines()
    if conversation_id is None:
        return dict(json.loads(lines[line]))
    for text in lines:
        trace = json.loads(text)
        if trace["id"] == conversation_id:
            return dict(trace)
    raise AssertionError(f"{conversation_id} is not in {TRACES}")


def _requests(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """Request k of a trace: system, tools and the messages before assistant turn k."""
    return [
        {
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "system": trace["system"],
            "tools": trace["tools"],
            "messages": trace["messages"][:k],
        }
        for k, message in enumerate(trace["messages"])
        if message["role"] == "assistant"
    ]


def _body(system: Any = "You are a helpful assistant.", **extra: Any) -> dict[str, Any]:
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 100,
        "tools": copy.deepcopy(TOOLS),
        "system": system,
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
    }
    body.update(extra)
    return body


def _grow(body: dict[str, Any], turn: int) -> dict[str, Any]:
    grown = copy.deepcopy(body)
    grown["messages"] += [
        {"role": "assistant", "content": f"answer {turn}"},
        {"role": "user", "content": f"question {turn}"},
    ]
    return grown


def _codes(findings: list[Finding]) -> list[str]:
    return [finding.code for finding in findings]


# --- static findings ----------------------------------------------------------------------------------


def test_a_timestamp_in_a_real_system_prompt_is_found_with_its_block_and_offset() -> None:
    trace = _trace(line=0)
    system = trace["system"]
    assert "The current time is 2024-05-15 15:00:00 EST." in system
    findings = lint_request("anthropic_messages", _requests(trace)[0])
    assert _codes(findings) == ["timestamp"]
    (finding,) = findings
    assert finding.where == "system"
    assert finding.block == len(trace["tools"])  # tools come first in prefix order
    assert finding.offset == system.index("2024-05-15 15:00:00")
    assert finding.offset is not None
    assert finding.match == "2024-05-15 15:00:00 EST"
    assert system[finding.offset : finding.offset + len(finding.match)] == finding.match
    assert "system prompt" in finding.fix


def test_a_timestamp_in_a_system_block_list_names_that_block() -> None:
    stamp = "Tue, 03 Dec 2026 10:00:00 +0000"
    second = f"Context generated on {stamp}. Be brief."
    system = [{"type": "text", "text": "You are terse."}, {"type": "text", "text": second}]
    (finding,) = lint_request("anthropic_messages", _body(system))
    assert (finding.code, finding.where, finding.block) == ("timestamp", "system.1", len(TOOLS) + 1)
    assert finding.offset == second.index(stamp)
    assert finding.match == stamp


@pytest.mark.parametrize(
    ("value", "code"),
    [
        ("2024-05-15 15:00:00", "timestamp"),
        ("2024-05-15T15:00:00Z", "timestamp"),
        ("2024-05-15T15:00:00.123+02:00", "timestamp"),
        ("Tue, 03 Dec 2026 10:00:00 GMT", "timestamp"),
        ("December 3, 2026 at 10:00 AM", "timestamp"),
        ("1733220000", "timestamp"),
        ("1733220000123", "timestamp"),
        ("10:32:15 UTC", "timestamp"),
        ("2026-12-03", "date"),
        ("12/03/2026", "date"),
        ("December 3, 2026", "date"),
        ("3 Dec 2026", "date"),
        ("Tuesday, December 3rd, 2026", "date"),
        ("123e4567-e89b-12d3-a456-426614174000", "uuid"),
        ("req_011CSHoEeqs5C35K2UUqR7Fy", "request_id"),
        ("msg_01XFDUDYJgAACzvnptvVoYEL", "request_id"),
        ("chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT", "request_id"),
        ("resp_67ccd2bed1ec8190b14f964abc054267", "request_id"),
        ("d41d8cd98f00b204e9800998ecf8427e", "hex_digest"),
        ("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "hex_digest"),
        ("/tmp/tmpa8x2k_q1/notes.txt", "temp_path"),
        ("/var/folders/xy/abc123/T/run", "temp_path"),
        ("C:\\Users\\bob\\AppData\\Local\\Temp\\x1.txt", "temp_path"),
    ],
)
def test_each_kind_of_volatile_value_is_found_once_with_its_offset(value: str, code: str) -> None:
    system = f"You are a support agent. Context: {value}. Answer briefly."
    findings = lint_request("anthropic_messages", _body(system))
    assert [(f.code, f.match) for f in findings] == [(code, value)]
    assert findings[0].offset == system.index(value)


def test_a_request_id_label_reports_the_value() -> None:
    system = "Request ID: a1b2c3d4e5 (for support)."
    (finding,) = lint_request("anthropic_messages", _body(system))
    assert (finding.code, finding.match, finding.offset) == ("request_id", "a1b2c3d4e5", system.index("a1b2"))


@pytest.mark.parametrize(
    "text",
    [
        "Use version 1.2.3 of the API, python 3.12.1, node v20.11.0.",
        "Founded in 2024; revenue grew in 2023 and 1999.",
        "The brand colour is #ff0000 and the accent #00ff7f.",
        "Fixed in commit 1a2b3c4 (see 9f8e7d6c5b4a).",
        "You are gpt-4o-2024-08-06 or claude-3-5-sonnet-20241022.",
        "Dates use the format YYYY-MM-DD, such as '2024-05-01'; e.g. 123e4567-e89b-12d3-a456-426614174000.",
        "Office hours are 9:00-17:00; a timeout of 00:05:00 applies.",
        "Values fit in 2147483647 and 1500000000 bytes; pi is 3.14159265.",
        "The session id: none. Call the search tool first.",
        "Write scratch files under /tmp when needed.",
        "deadbeefdeadbeefdeadbeefdeadbeefdeadbeef and 12345678901234567890123456789012345",
        "Released in May 2026.",
    ],
)
def test_no_false_positives_on_stable_content(text: str) -> None:
    assert lint_request("anthropic_messages", _body(text)) == []


def test_a_date_in_a_tool_definition_is_located_in_its_canonical_json() -> None:
    tools = copy.deepcopy(TOOLS)
    tools[1]["description"] = "Local time in a city.\nData as of 2026-12-03."
    (finding,) = lint_request("anthropic_messages", _body(tools=tools))
    assert (finding.code, finding.where, finding.block, finding.match) == ("date", "tools.1", 1, "2026-12-03")
    # The tool's text is its canonical JSON: sorted keys, no blanks.
    canonical = json.dumps(tools[1], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert finding.offset == canonical.index("2026-12-03")


def test_a_windows_temp_path_in_a_tool_definition_is_found_despite_json_escapes() -> None:
    tools = copy.deepcopy(TOOLS)
    tools[0]["description"] = "Writes to C:\\Users\\ann\\AppData\\Local\\Temp\\w1.json first."
    (finding,) = lint_request("anthropic_messages", _body(tools=tools))
    assert (finding.code, finding.where) == ("temp_path", "tools.0")
    assert finding.match == "C:\\\\Users\\\\ann\\\\AppData\\\\Local\\\\Temp\\\\w1.json"  # as in the JSON text


def test_messages_are_not_scanned() -> None:
    body = _body()
    body["messages"] = [
        {"role": "user", "content": "It is 2024-05-15 15:00:00 and my id is req_011CSHoEeqs5C35K"}
    ]
    assert lint_request("anthropic_messages", body) == []


def test_openai_chat_system_messages_and_responses_instructions_are_the_system_section() -> None:
    chat = {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": "Trace 123e4567-e89b-12d3-a456-426614174000."},
            {"role": "user", "content": "Also 123e4567-e89b-12d3-a456-426614174999."},
        ],
    }
    assert [(f.code, f.where, f.block) for f in lint_request("openai_chat", chat)] == [
        ("uuid", "messages.1.content", 1)
    ]
    responses = {"model": "gpt-4o", "instructions": "Today is 2026-12-03.", "input": "2026-12-04?"}
    assert [(f.code, f.where) for f in lint_request("openai_responses", responses)] == [
        ("date", "instructions")
    ]


def test_custom_patterns_are_reported_as_custom_and_not_twice() -> None:
    system = "Tenant ACME-4471 on build 123e4567-e89b-12d3-a456-426614174000."
    findings = lint_request(
        "anthropic_messages", _body(system), patterns=[r"ACME-\d+", re.compile(r"build [0-9a-f-]+")]
    )
    assert [(f.code, f.match) for f in findings] == [
        ("custom", "ACME-4471"),
        ("uuid", "123e4567-e89b-12d3-a456-426614174000"),
    ]
    assert findings[0].offset == system.index("ACME")


def test_a_bad_custom_pattern_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not a valid regular expression"):
        lint_request("anthropic_messages", _body(), patterns=["(unclosed"])


# --- across calls -------------------------------------------------------------------------------------


def test_a_reordered_tool_list_is_reported_with_the_first_moved_tool() -> None:
    linter = PrefixLinter()
    first = _body()
    assert linter.check("anthropic_messages", first) == []
    second = _grow(first, 1)
    second["tools"] = [TOOLS[0], TOOLS[2], TOOLS[1]]
    findings = linter.check("anthropic_messages", second)
    assert [(f.code, f.where, f.block, f.match) for f in findings] == [
        ("tools_reordered", "tools.1", 1, "search")
    ]
    assert "order" in findings[0].fix


def test_an_added_or_edited_tool_is_tools_changed() -> None:
    linter = PrefixLinter()
    first = _body()
    linter.check("anthropic_messages", first)
    added = _grow(first, 1)
    added["tools"].insert(1, {"name": "book", "description": "Book.", "input_schema": {"type": "object"}})
    assert [(f.code, f.where, f.match) for f in linter.check("anthropic_messages", added)] == [
        ("tools_changed", "tools.1", "book")
    ]
    edited = _grow(added, 2)
    edited["tools"][3]["description"] = "Search the web, fast."
    assert [(f.code, f.where, f.match) for f in linter.check("anthropic_messages", edited)] == [
        ("tools_changed", "tools.3", "search")
    ]


def test_a_changed_tool_choice_is_reported() -> None:
    linter = PrefixLinter()
    first = _body(tool_choice={"type": "auto"})
    linter.check("anthropic_messages", first)
    second = _grow(first, 1)
    second["tool_choice"] = {"type": "tool", "name": "get_weather"}
    findings = linter.check("anthropic_messages", second)
    assert [(f.code, f.where, f.block, f.offset) for f in findings] == [
        ("tool_choice_changed", "tool_choice", None, None)
    ]


@pytest.mark.parametrize(
    ("dialect", "before", "after", "code", "where"),
    [
        (
            "anthropic_messages",
            {},
            {"thinking": {"type": "enabled", "budget_tokens": 2048}},
            "thinking_changed",
            "thinking",
        ),
        (
            "anthropic_messages",
            {"output_config": {"effort": "high"}},
            {"output_config": {"effort": "low"}},
            "effort_changed",
            "output_config.effort",
        ),
        (
            "openai_chat",
            {"reasoning_effort": "low"},
            {"reasoning_effort": "high"},
            "effort_changed",
            "reasoning_effort",
        ),
        (
            "openai_responses",
            {"reasoning": {"effort": "low"}},
            {"reasoning": {"effort": "medium"}},
            "effort_changed",
            "reasoning.effort",
        ),
        ("openai_chat", {"model": "gpt-4o"}, {"model": "gpt-4o-mini"}, "model_changed", "model"),
    ],
)
def test_changed_settings_are_reported(
    dialect: str, before: dict[str, Any], after: dict[str, Any], code: str, where: str
) -> None:
    if dialect == "openai_responses":
        body: dict[str, Any] = {"model": "gpt-4o", "input": [{"role": "user", "content": "hi"}]}
    else:
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    linter = PrefixLinter()
    assert linter.check(dialect, {**body, **before}) == []
    assert [(f.code, f.where) for f in linter.check(dialect, {**body, **after})] == [(code, where)]


def test_a_changed_system_block_is_located_by_block() -> None:
    # The system prompt is part of a derived conversation identity; a named conversation shows it.
    linter = PrefixLinter()
    first = _body([{"type": "text", "text": "Rules."}, {"type": "text", "text": "User tier: gold."}])
    linter.check("anthropic_messages", first, conversation="c1")
    second = _grow(first, 1)
    second["system"][1]["text"] = "User tier: silver."
    assert PrefixLinter().check("anthropic_messages", second) == []
    findings = linter.check("anthropic_messages", second, conversation="c1")
    assert [(f.code, f.where, f.block, f.offset) for f in findings] == [
        ("system_changed", "system.1", len(TOOLS) + 1, None)
    ]


def test_two_personas_opening_with_the_same_message_are_two_conversations() -> None:
    linter = PrefixLinter(raise_on=True)
    hello = [{"role": "user", "content": "Hi"}]
    linter.check(
        "anthropic_messages", {"model": "claude-sonnet-4-5", "system": "You are Ada.", "messages": hello}
    )
    body = {"model": "claude-sonnet-4-5", "system": "You are Bob.", "messages": hello}
    assert linter.check("anthropic_messages", body) == []


def test_an_assistant_prefill_is_not_a_rewritten_history() -> None:
    linter = PrefixLinter(raise_on=True)
    question = {"role": "user", "content": "List three primes as JSON."}
    prefill = {"role": "assistant", "content": "["}
    answer = {"role": "assistant", "content": "[2, 3, 5]"}
    body = {"model": "claude-sonnet-4-5", "system": "Be terse.", "messages": [question, prefill]}
    linter.check("anthropic_messages", body)
    grown = {**body, "messages": [question, answer, {"role": "user", "content": "And three more?"}]}
    assert linter.check("anthropic_messages", grown) == []


def test_an_edited_earlier_message_is_messages_changed_and_a_retry_is_not() -> None:
    linter = PrefixLinter()
    first = _grow(_grow(_body(), 1), 2)
    linter.check("anthropic_messages", first)
    retry = copy.deepcopy(first)
    retry["messages"] = retry["messages"][:3]  # re-sent from an earlier turn: nothing new in the prefix
    assert linter.check("anthropic_messages", retry) == []
    edited = _grow(retry, 3)
    edited["messages"][1]["content"] = "a different answer 1"
    findings = linter.check("anthropic_messages", edited)
    assert [(f.code, f.where, f.block) for f in findings] == [
        ("messages_changed", "messages.1.content", len(TOOLS) + 2)
    ]


def test_a_stable_real_conversation_of_20_growing_calls_gives_no_findings() -> None:
    trace = _trace(STABLE_TRACE)
    requests = _requests(trace)
    assert len(requests) >= 20
    assert lint_request("anthropic_messages", requests[0]) == []  # nothing volatile in its system prompt
    seen: list[Finding] = []
    linter = PrefixLinter(on_finding=seen.append)
    for request in requests[:20]:
        assert linter.check("anthropic_messages", request) == []
    assert seen == []


def test_a_real_conversation_with_a_fixed_timestamp_has_only_the_static_finding() -> None:
    linter = PrefixLinter()
    for request in _requests(_trace(line=0))[:20]:
        assert _codes(linter.check("anthropic_messages", request)) == ["timestamp"]


def test_interleaved_conversations_are_kept_apart() -> None:
    linter = PrefixLinter()
    a = _body()
    b = _body()
    b["messages"][0]["content"] = "Another conversation entirely."
    b["tools"] = list(reversed(b["tools"]))  # its own (stable) order
    for turn in range(5):
        assert linter.check("anthropic_messages", a) == []
        assert linter.check("anthropic_messages", b) == []
        a, b = _grow(a, turn), _grow(b, turn)


def test_partitions_are_separate_conversations() -> None:
    linter = PrefixLinter()
    body = _body()
    linter.check("anthropic_messages", body, partition=b"tenant-a")
    other = _grow(body, 1)
    other["tool_choice"] = {"type": "any"}
    assert linter.check("anthropic_messages", other, partition=b"tenant-b") == []
    assert _codes(linter.check("anthropic_messages", other, partition=b"tenant-a")) == ["tool_choice_changed"]


def test_memory_is_bounded_to_capacity_conversations() -> None:
    def conversation(n: int) -> dict[str, Any]:
        body = _body()
        body["messages"][0]["content"] = f"conversation {n}"
        return body

    changed = _grow(conversation(0), 1)
    changed["tool_choice"] = {"type": "any"}
    for capacity, expected in ((2, []), (3, ["tool_choice_changed"])):
        linter = PrefixLinter(capacity=capacity)
        for n in range(3):
            linter.check("anthropic_messages", conversation(n))
        assert _codes(linter.check("anthropic_messages", changed)) == expected


# --- reporting ----------------------------------------------------------------------------------------


def test_the_callback_gets_every_finding_every_time() -> None:
    seen: list[Finding] = []
    linter = PrefixLinter(on_finding=seen.append)
    body = _body("Generated 2026-12-03T10:00:00Z.")
    first = linter.check("anthropic_messages", body)
    second = linter.check("anthropic_messages", _grow(body, 1))
    assert seen == first + second
    assert _codes(seen) == ["timestamp", "timestamp"]
    assert seen[0].match == "2026-12-03T10:00:00Z"


def test_raise_on_raises_with_codes_and_places_and_the_refused_call_is_not_remembered() -> None:
    linter = PrefixLinter(raise_on=True)
    first = _body()
    assert linter.check("anthropic_messages", first) == []
    reordered = _grow(first, 1)
    reordered["tools"] = list(reversed(reordered["tools"]))
    with pytest.raises(PrefixLintError) as caught:
        linter.check("anthropic_messages", reordered)
    assert isinstance(caught.value, CachekitError)
    assert _codes(list(caught.value.findings)) == ["tools_reordered"]
    assert "tools_reordered at tools.0 (block 0)" in str(caught.value)
    # The refused call was never sent: the fixed one is compared with the first call.
    assert linter.check("anthropic_messages", _grow(first, 1)) == []


def test_the_error_message_has_no_prompt_text() -> None:
    secret = "req_SECRET0123456789"
    linter = PrefixLinter(raise_on=True)
    with pytest.raises(PrefixLintError) as caught:
        linter.check("anthropic_messages", _body(f"Trace {secret}."))
    assert secret not in str(caught.value)
    assert "request_id at system (block 3, char 6)" in str(caught.value)


def test_logging_is_once_per_place_and_never_contains_the_matched_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    secrets = ["2026-12-03T10:00:00Z", "123e4567-e89b-12d3-a456-426614174000", "ACME-4471"]
    system = f"Now {secrets[0]}, run {secrets[1]}, tenant {secrets[2]}."
    linter = PrefixLinter(patterns=[r"ACME-\d+"])
    body = _body(system)
    with caplog.at_level(logging.WARNING, logger="cachekit.lint"):
        for turn in range(3):
            findings = linter.check("anthropic_messages", body)
            assert _codes(findings) == ["timestamp", "uuid", "custom"]
            body = _grow(body, turn)
    records = [r for r in caplog.records if r.name == "cachekit.lint"]
    assert len(records) == 3  # once per (conversation, code, place), not once per call
    assert all(r.levelno == logging.WARNING for r in records)
    logged = "\n".join(r.getMessage() for r in records)
    assert "timestamp at system (block 3, char 4)" in logged
    for secret in secrets:
        assert secret not in logged
        assert secret not in caplog.text
        assert all(secret not in repr(finding) for finding in findings)


def test_concurrent_checks_of_stable_conversations_give_no_findings() -> None:
    linter = PrefixLinter(capacity=64)
    errors: list[BaseException] = []
    found: list[Finding] = []

    def run(n: int) -> None:
        try:
            body = _body()
            body["messages"][0]["content"] = f"thread {n}"
            for turn in range(30):
                found.extend(linter.check("anthropic_messages", body))
                body = _grow(body, turn)
        except BaseException as error:  # surfaced by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert found == []


# --- robustness ---------------------------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
_part = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["text", "image", "tool_use", "tool_result", "thinking", "input_text"])
        | _json,
        "text": st.text(max_size=60) | _json,
        "content": _json,
        "cache_control": _json,
        "name": _json,
        "function": _json,
        "role": st.sampled_from(["user", "assistant", "system", "developer", "tool"]) | _json,
        "tool_calls": _json,
    },
)
_body_strategy = st.fixed_dictionaries(
    {},
    optional={
        "model": _json,
        "system": st.text(max_size=80) | st.lists(_part | _json, max_size=3) | _json,
        "instructions": st.text(max_size=80) | _json,
        "tools": st.lists(_part | _json, max_size=3) | _json,
        "messages": st.lists(_part | _json, max_size=4) | _json,
        "input": st.text(max_size=40) | st.lists(_part | _json, max_size=4) | _json,
        "tool_choice": _json,
        "thinking": _json,
        "reasoning": _json,
        "output_config": _json,
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=_body_strategy, dialect=st.sampled_from(["anthropic_messages", "openai_chat", "openai_responses"])
)
def test_lint_never_raises_on_arbitrary_json_bodies(body: dict[str, Any], dialect: str) -> None:
    findings = lint_request(dialect, body)
    assert all(isinstance(finding, Finding) for finding in findings)
    linter = PrefixLinter()
    linter.check(dialect, body)
    linter.check(dialect, body)


_FRAGMENTS = [
    "2024-05-15",
    "15:00:00",
    " ",
    "\n",
    '"',
    "T",
    "Z",
    " EST",
    "Dec",
    "December",
    "3",
    "03",
    ",",
    " at ",
    "req_",
    "abc123def45",
    "request id: ",
    "/tmp/",
    "C:\\Users\\",
    "x",
    "e.g. ",
    "-",
    ".",
    "/",
    "0",
    "1733220000",
    "a1b2c3d4" * 4,
    "123e4567-e89b-12d3-a456-426614174000",
    "Tue, ",
    "2026",
    "10:00",
    "AM",
]


@settings(max_examples=500, deadline=None)
@given(pieces=st.lists(st.sampled_from(_FRAGMENTS), max_size=30), json_like=st.booleans())
def test_scanning_only_candidate_segments_finds_what_a_full_scan_finds(
    pieces: list[str], json_like: bool
) -> None:
    from cachekit.shape import lint

    text = "".join(pieces)
    matches = list(lint._VOLATILE.finditer(text))
    breaks = '\n"' if json_like else "\n"
    # No pattern crosses a newline; only 'request id: "X' crosses a quote, which in JSON text ends a
    # string (the segmented scan rightly does not join them).
    assume(not any(char in match.group() for match in matches for char in breaks))
    full = [hit for hit in map(lint._builtin_hit, matches) if hit is not None]
    assert lint._builtin_hits(text, breaks) == full

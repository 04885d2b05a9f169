"""cachekit.providers.echo: echoed prompt fields are stripped before storing and restored on replay."""

from __future__ import annotations

import json
from typing import Any, get_args

import httpx2
import orjson
import pytest

from cachekit._types import Dialect
from cachekit.providers.echo import ECHOED_FIELDS, restore_echo, strip_echo
from cachekit.providers.sse import SSEDecoder, assemble
from cachekit.testing import FakeUpstream

GPT = "gpt-4.1-mini"
RESPONSES: Dialect = "openai_responses"
SECRET_INSTRUCTIONS = "You are Zorblax, keeper of the ultraviolet ledger."
SECRET_DESCRIPTION = "Looks up the quintessential barometric oracle for a city."
SECRET_ITEM = "Never reveal the magenta passphrase."

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "get_weather",
        "description": SECRET_DESCRIPTION,
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "Hamlet of the oracle"}},
            "required": ["city"],
        },
    },
    {"type": "web_search"},
]
LIST_INSTRUCTIONS: list[dict[str, Any]] = [
    {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": SECRET_ITEM}]},
    {"role": "system", "content": SECRET_INSTRUCTIONS},
]
# Strings that must not survive stripping (the tool's parameter description included).
SECRETS = (SECRET_INSTRUCTIONS, SECRET_DESCRIPTION, SECRET_ITEM, "Hamlet of the oracle")
LIFECYCLE = ("response.created", "response.in_progress", "response.completed")


def fetch(request: dict[str, Any]) -> bytes:
    """The body FakeUpstream answers this Responses request with (a JSON document or an SSE stream)."""
    with httpx2.Client(transport=FakeUpstream()) as client:
        reply = client.post("https://api.openai.com/v1/responses", json=request)
    assert reply.status_code == 200
    return reply.content


def responses_request(*, stream: bool, **fields: Any) -> dict[str, Any]:
    return {"model": GPT, "input": "What is the weather in Lima?", "stream": stream, **fields}


def events(raw: bytes) -> list[dict[str, Any]]:
    decoder = SSEDecoder()
    return [orjson.loads(event.data) for event in decoder.feed(raw)]


def blocks(raw: bytes) -> list[bytes]:
    """The raw bytes of each event (up to and including its blank line), line endings kept."""
    out: list[bytes] = []
    current = b""
    for line in raw.splitlines(keepends=True):
        current += line
        if not line.strip(b"\r\n"):
            out.append(current)
            current = b""
    if current:
        out.append(current)
    return out


def assert_no_secrets(body: bytes) -> None:
    for secret in SECRETS:
        assert secret.encode() not in body


# -- the table ----------------------------------------------------------------------------------


def test_echoed_fields_cover_every_dialect() -> None:
    assert set(ECHOED_FIELDS) == set(get_args(Dialect))
    assert ECHOED_FIELDS["openai_responses"] == ("instructions", "tools", "prompt")
    assert all(not ECHOED_FIELDS[d] for d in ECHOED_FIELDS if d != "openai_responses")


# -- round trips against FakeUpstream -----------------------------------------------------------


@pytest.mark.parametrize("instructions", [SECRET_INSTRUCTIONS, LIST_INSTRUCTIONS], ids=["str", "list"])
def test_json_round_trip_is_byte_exact(instructions: Any) -> None:
    request = responses_request(stream=False, instructions=instructions, tools=TOOLS)
    body = fetch(request)
    assert SECRET_DESCRIPTION.encode() in body  # the provider does echo the prompt

    stripped = strip_echo(RESPONSES, "json", body)

    assert_no_secrets(stripped)
    document = orjson.loads(stripped)
    assert document["instructions"] is None
    assert document["tools"] is None
    assert list(document) == list(orjson.loads(body))  # keys stay in place
    assert restore_echo(RESPONSES, "json", stripped, request) == body


@pytest.mark.parametrize("instructions", [SECRET_INSTRUCTIONS, LIST_INSTRUCTIONS], ids=["str", "list"])
def test_sse_round_trip_is_byte_exact(instructions: Any) -> None:
    request = responses_request(stream=True, instructions=instructions, tools=TOOLS)
    raw = fetch(request)
    assert SECRET_INSTRUCTIONS.encode() in raw

    stripped = strip_echo(RESPONSES, "sse", raw)

    assert_no_secrets(stripped)
    parsed = events(stripped)
    carrying = [event for event in parsed if "response" in event]
    final = parsed[-1]["type"]
    assert [event["type"] for event in carrying] == ["response.created", "response.in_progress", final]
    for event in carrying:
        assert event["response"]["instructions"] is None
        assert event["response"]["tools"] is None
    assert restore_echo(RESPONSES, "sse", stripped, request) == raw


def test_stripped_stream_still_assembles_and_restored_matches_the_original() -> None:
    request = responses_request(stream=True, instructions=SECRET_INSTRUCTIONS, tools=TOOLS)
    raw = fetch(request)
    stripped = strip_echo(RESPONSES, "sse", raw)

    assembled = assemble(RESPONSES, stripped)

    assert assembled["instructions"] is None
    assert assembled["output"] == assemble(RESPONSES, raw)["output"]
    restored = restore_echo(RESPONSES, "sse", stripped, request)
    assert assemble(RESPONSES, restored) == assemble(RESPONSES, raw)


def test_no_tools_keeps_the_empty_list_and_restores_instructions() -> None:
    request = responses_request(stream=True, instructions=SECRET_INSTRUCTIONS)
    raw = fetch(request)

    stripped = strip_echo(RESPONSES, "sse", raw)

    assert_no_secrets(stripped)
    for event in events(stripped):
        if "response" in event:
            assert event["response"]["tools"] == []
            assert event["response"]["instructions"] is None
    assert restore_echo(RESPONSES, "sse", stripped, request) == raw


@pytest.mark.parametrize("form", ["json", "sse"])
def test_nothing_echoed_leaves_the_body_itself(form: Any) -> None:
    request = responses_request(stream=form == "sse")
    body = fetch(request)

    assert strip_echo(RESPONSES, form, body) is body
    assert restore_echo(RESPONSES, form, body, request) is body


@pytest.mark.parametrize("form", ["json", "sse"])
def test_strip_and_restore_are_idempotent(form: Any) -> None:
    request = responses_request(stream=form == "sse", instructions=SECRET_INSTRUCTIONS, tools=TOOLS)
    body = fetch(request)
    stripped = strip_echo(RESPONSES, form, body)

    assert stripped != body
    assert strip_echo(RESPONSES, form, stripped) is stripped
    # A body stored before stripping was switched on keeps its own values.
    assert restore_echo(RESPONSES, form, body, request) is body


def test_restore_without_the_fields_in_the_request_uses_the_provider_defaults() -> None:
    body = orjson.dumps({"id": "resp_1", "object": "response", "instructions": None, "tools": None})

    restored = orjson.loads(restore_echo(RESPONSES, "json", body, {"model": GPT, "input": "Hi"}))

    assert restored["instructions"] is None
    assert restored["tools"] == []


def test_function_tools_are_restored_in_the_echoed_shape() -> None:
    body = orjson.dumps({"object": "response", "instructions": None, "tools": None})
    request = {
        "tools": [
            {"name": "f", "type": "function", "parameters": {"type": "object"}, "defer_loading": True},
            {"type": "function", "name": "g", "description": "d", "parameters": {}, "strict": False},
            {"type": "web_search", "search_context_size": "low"},
        ]
    }

    tools = orjson.loads(restore_echo(RESPONSES, "json", body, request))["tools"]

    assert tools[0] == {
        "type": "function",
        "name": "f",
        "description": None,
        "parameters": {"type": "object"},
        "strict": True,
        "defer_loading": True,
    }
    assert list(tools[0]) == ["type", "name", "description", "parameters", "strict", "defer_loading"]
    assert tools[1]["strict"] is False
    assert tools[2] == {"type": "web_search", "search_context_size": "low"}


# -- SSE framing --------------------------------------------------------------------------------


def test_crlf_comments_and_ids_are_kept() -> None:
    request = responses_request(stream=True, instructions=SECRET_INSTRUCTIONS, tools=TOOLS)
    lf = fetch(request)
    # CRLF everywhere (JSON data has no raw newlines), a keep-alive comment and an id line per event.
    raw = lf.replace(b"\n\n", b"\nid: 7\n: keep-alive\n\n").replace(b"\n", b"\r\n")

    stripped = strip_echo(RESPONSES, "sse", raw)

    assert_no_secrets(stripped)
    assert stripped.count(b"\n") == stripped.count(b"\r\n") == raw.count(b"\r\n")
    assert stripped.count(b"id: 7\r\n: keep-alive\r\n\r\n") == raw.count(b"id: 7\r\n: keep-alive\r\n\r\n")
    assert restore_echo(RESPONSES, "sse", stripped, request) == raw


def test_only_lifecycle_events_change() -> None:
    request = responses_request(stream=True, instructions=SECRET_INSTRUCTIONS, tools=TOOLS)
    raw = fetch(request)
    error = b'event: error\ndata: {"type":"error","code":"x","message":"\\"response\\"","param":null}\n\n'
    raw += error

    before, after = blocks(raw), blocks(strip_echo(RESPONSES, "sse", raw))

    assert len(before) == len(after)
    changed = [old.split(b"\n", 1)[0] for old, new in zip(before, after, strict=True) if old != new]
    assert changed == [b"event: " + kind.encode() for kind in LIFECYCLE]
    assert after[-1] == error


def test_lifecycle_event_without_event_line_and_queued_failed_types() -> None:
    response = {"id": "r", "instructions": SECRET_INSTRUCTIONS, "tools": TOOLS}
    raw = b"".join(
        b"data: " + orjson.dumps({"type": kind, "response": response}) + b"\n\n"
        for kind in ("response.queued", "response.failed")
    )
    request = {"instructions": SECRET_INSTRUCTIONS, "tools": TOOLS}

    stripped = strip_echo(RESPONSES, "sse", raw)

    assert_no_secrets(stripped)
    assert [event["response"]["tools"] for event in events(stripped)] == [None, None]
    restored = restore_echo(RESPONSES, "sse", stripped, request)
    assert [event["response"]["instructions"] for event in events(restored)] == [SECRET_INSTRUCTIONS] * 2


def test_unterminated_last_event_is_stripped_too() -> None:
    data = orjson.dumps({"type": "response.completed", "response": {"instructions": SECRET_INSTRUCTIONS}})
    raw = b"event: response.completed\ndata: " + data  # no final newline

    stripped = strip_echo(RESPONSES, "sse", raw)

    assert_no_secrets(stripped)
    assert stripped == raw.replace(orjson.dumps(SECRET_INSTRUCTIONS), b"null")


def test_multiline_data_and_no_space_prefix_compare_equal_after_parsing() -> None:
    payload = {"type": "response.created", "response": {"id": "r", "instructions": SECRET_INSTRUCTIONS}}
    pretty = json.dumps(payload, indent=1).encode()
    multiline = b"event: response.created\r\n" + b"".join(
        b"data:" + line + b"\r\n" for line in pretty.split(b"\n")
    )
    raw = b": hello\r\n\r\n" + multiline + b"\r\n"
    request = {"instructions": SECRET_INSTRUCTIONS}

    stripped = strip_echo(RESPONSES, "sse", raw)

    assert_no_secrets(stripped)
    assert stripped.startswith(b": hello\r\n\r\nevent: response.created\r\ndata:{")
    assert stripped.count(b"data:") == 1  # the multi-line value is written back as one line
    restored = restore_echo(RESPONSES, "sse", stripped, request)
    assert restored != raw
    assert events(restored) == events(raw)


def test_byte_order_mark_before_the_first_data_line() -> None:
    data = orjson.dumps({"type": "response.created", "response": {"instructions": SECRET_INSTRUCTIONS}})
    raw = b"\xef\xbb\xbfdata: " + data + b"\n\n"

    stripped = strip_echo(RESPONSES, "sse", raw)

    assert stripped == raw.replace(orjson.dumps(SECRET_INSTRUCTIONS), b"null")
    assert restore_echo(RESPONSES, "sse", stripped, {"instructions": SECRET_INSTRUCTIONS}) == raw


def test_json_with_other_spacing_compares_equal_after_parsing() -> None:
    document = {"id": "resp_1", "instructions": SECRET_INSTRUCTIONS, "tools": [], "note": "caf\u00e9"}
    body = json.dumps(document, indent=2).encode()  # spaces and \\u escapes: not orjson's bytes

    stripped = strip_echo(RESPONSES, "json", body)

    assert_no_secrets(stripped)
    restored = restore_echo(RESPONSES, "json", stripped, {"instructions": SECRET_INSTRUCTIONS})
    assert restored != body
    assert orjson.loads(restored) == document


# -- unexpected input and other dialects --------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"\xff\xfe\x00garbage",
        b"[1, 2, 3]",
        b'"instructions"',
        b'{"error": {"message": "bad", "type": "invalid_request_error"}}',
        b'{"instructions": ' + b"{" * 3,
    ],
)
@pytest.mark.parametrize("form", ["json", "sse"])
def test_garbage_is_returned_unchanged(body: bytes, form: Any) -> None:
    request = {"instructions": SECRET_INSTRUCTIONS, "tools": TOOLS}
    assert strip_echo(RESPONSES, form, body) is body
    assert restore_echo(RESPONSES, form, body, request) is body


@pytest.mark.parametrize(
    "raw",
    [
        b"data: {not json\n\n",
        b'data: {"type":"response.created","response":"not an object"}\n\n',
        b'data: {"type":"message_start","response":{"instructions":"x"}}\n\n',
        b'event: response.created\ndata: ["response", "instructions"]\n\n',
        b"data: [DONE]\n\n",
    ],
)
def test_sse_events_of_other_shapes_are_untouched(raw: bytes) -> None:
    assert strip_echo(RESPONSES, "sse", raw) is raw
    assert restore_echo(RESPONSES, "sse", raw, {"instructions": "y", "tools": []}) is raw


@pytest.mark.parametrize("dialect", ["anthropic_messages", "anthropic_count_tokens", "openai_chat"])
@pytest.mark.parametrize("form", ["json", "sse"])
def test_other_dialects_are_unchanged(dialect: Dialect, form: Any) -> None:
    response = {"instructions": SECRET_INSTRUCTIONS, "tools": TOOLS}
    body = (
        orjson.dumps(response)
        if form == "json"
        else b"event: response.created\ndata: "
        + orjson.dumps({"type": "response.created", "response": response})
        + b"\n\n"
    )
    stripped = strip_echo(dialect, form, body)
    assert stripped is body
    nulled = body.replace(orjson.dumps(SECRET_INSTRUCTIONS), b"null")
    assert restore_echo(dialect, form, nulled, response) is nulled


def test_prompt_template_variables_are_stripped_and_restored() -> None:
    """The Responses API echoes ``prompt`` (a stored template's id, version and the caller's variables)."""
    request = {
        "model": "gpt-4.1-mini",
        "input": "hi",
        "prompt": {"id": "pmpt_1", "variables": {"ssn": "123-45-6789"}},
    }
    document = orjson.dumps({"id": "resp_1", "object": "response", "prompt": request["prompt"], "output": []})
    stripped = strip_echo("openai_responses", "json", document)
    assert b"123-45-6789" not in stripped
    assert orjson.loads(restore_echo("openai_responses", "json", stripped, request)) == orjson.loads(document)

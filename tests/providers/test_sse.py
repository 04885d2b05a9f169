"""cachekit.providers.sse: the SSE decoder, the stream recorder, assemble / synthesize / restream.

Fixtures in tests/fixtures/sse/ are real provider event sequences (each names its source); the SDK
checks feed them, and what cachekit synthesizes, to the official SDKs' stream helpers.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cachekit._types import Dialect
from cachekit.providers import sse
from cachekit.testing import FakeUpstream
from tests.conftest import sdk_client
from tests.local.test_answer_shapes import CASES as SHAPE_CASES
from tests.local.test_answer_shapes import cite_the_web
from tests.local.test_answer_shapes import request as shape_request
from tests.sdk_events import read_typed

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sse"
FIXTURE_NAMES = sorted(path.stem for path in FIXTURES.glob("*.sse"))
DIALECTS: dict[str, Dialect] = {
    "anthropic": "anthropic_messages",
    "chat": "openai_chat",
    "responses": "openai_responses",
}


def dialect_of(name: str) -> Dialect:
    return DIALECTS[name.split("_", 1)[0]]


def fixture(name: str) -> bytes:
    return (FIXTURES / f"{name}.sse").read_bytes()


def split_fixture(raw: bytes) -> tuple[bytes, list[bytes]]:
    """(the leading comment lines, each event block with its blank line). Fixtures use LF line ends."""
    lines = raw.split(b"\n")
    head_lines = [line for line in lines if line.startswith(b":")]
    head = b"".join(line + b"\n" for line in head_lines)
    body = raw[len(head) :]
    blocks = [block + b"\n\n" for block in body.split(b"\n\n") if block]
    assert head + b"".join(blocks) == raw
    return head, blocks


def record(dialect: Dialect, raw: bytes, size: int | None = None) -> bytes | None:
    recorder = sse.StreamRecorder(dialect)
    step = size or len(raw) or 1
    for start in range(0, len(raw), step):
        recorder.feed(raw[start : start + step])
    return recorder.complete()


def decode(chunks: list[bytes]) -> list[sse.SSEEvent]:
    decoder = sse.SSEDecoder()
    events: list[sse.SSEEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    events.extend(decoder.flush())
    return events


def test_fixtures_present() -> None:
    for name in (
        "anthropic_text",
        "anthropic_tool_use",
        "anthropic_thinking",
        "chat_text",
        "chat_tool_calls",
        "chat_usage",
        "responses_text",
        "responses_function_call",
    ):
        raw = fixture(name)
        assert raw.startswith(b": source: https://"), name
        assert b"(checked 2026-12-02)" in raw.split(b"\n", 1)[0], name


# ---------------------------------------------------------------------------------------------
# SSEDecoder


# Characters that are line breaks for str.splitlines but must not be for SSE, multi-byte UTF-8,
# a colon and leading spaces (only one space after "data:" is stripped).
_TEXT = st.text(
    alphabet=st.sampled_from([*'ab :{}"\\', "é", "€", "𝄞", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\t"]),
    max_size=12,
)
_EOL = st.sampled_from([b"\n", b"\r", b"\r\n"])


@st.composite
def streams(draw: st.DrawFn) -> tuple[bytes, list[sse.SSEEvent]]:
    """An SSE byte stream with mixed line ends and comments, and the events it must produce."""
    out = bytearray()
    expected: list[sse.SSEEvent] = []
    for _ in range(draw(st.integers(0, 5))):
        if draw(st.booleans()):
            out += b":" + draw(_TEXT).encode() + draw(_EOL)
        name = draw(st.one_of(st.none(), st.text(alphabet="abc._", min_size=1, max_size=8)))
        if name is not None:
            out += b"event: " + name.encode() + draw(_EOL)
        lines = draw(st.lists(_TEXT, min_size=1, max_size=3))
        values = []
        for line in lines:
            space = draw(st.sampled_from(["", " "]))
            out += b"data:" + space.encode() + line.encode() + draw(_EOL)
            # one space after the colon is dropped, whether we wrote it or the line starts with it
            values.append(line if space or not line.startswith(" ") else line[1:])
            if draw(st.booleans()):
                out += b": keep-alive" + draw(_EOL)
        eol = draw(_EOL)
        # after a CR line end, a lone LF would merge with it into one CRLF: not a blank line
        out += b"\r\n" if out.endswith(b"\r") and eol == b"\n" else eol
        expected.append(sse.SSEEvent(name, "\n".join(values)))
    return bytes(out), expected


def chunked(raw: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({cut % (len(raw) + 1) for cut in cuts})
    pieces, start = [], 0
    for point in [*points, len(raw)]:
        pieces.append(raw[start:point])
        start = point
    return pieces


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.lists(st.integers(min_value=0), max_size=12))
def test_decoder_any_chunking(stream: tuple[bytes, list[sse.SSEEvent]], cuts: list[int]) -> None:
    raw, expected = stream
    assert decode([raw]) == expected
    assert decode(chunked(raw, cuts)) == expected


def test_decoder_every_split_inside_crlf_and_utf8() -> None:
    raw = "event: é\r\ndata: 𝄞€\r\ndata:  two\r\r\n: c\r\ndata: x\r\n\r\n".encode()
    expected = [sse.SSEEvent("é", "𝄞€\n two"), sse.SSEEvent(None, "x")]
    assert decode([raw]) == expected
    assert decode([raw[i : i + 1] for i in range(len(raw))]) == expected
    for i in range(len(raw) + 1):
        for j in range(i, len(raw) + 1):
            assert decode([raw[:i], raw[i:j], raw[j:]]) == expected, (i, j)


def test_decoder_cr_then_lf_in_the_next_chunk_is_one_line_end() -> None:
    decoder = sse.SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\n") == []  # the LF of the CRLF, not a blank line
    assert decoder.feed(b"\r\n") == [sse.SSEEvent(None, "a")]


def test_decoder_ignores_comments() -> None:
    raw = b": hello\n:\n: another\n\ndata: x\n: inside\n\n: tail\n\n"
    assert decode([raw]) == [sse.SSEEvent(None, "x")]
    assert decode([b": only comments\n\n: more\n\n"]) == []


def test_decoder_does_not_dispatch_an_unterminated_event() -> None:
    decoder = sse.SSEDecoder()
    assert decoder.feed(b"data: one\n\ndata: two\n") == [sse.SSEEvent(None, "one")]
    assert decoder.flush() == []
    assert decode([b"event: x\ndata: y"]) == []


def test_decoder_field_rules() -> None:
    # a blank line with no data dispatches nothing and forgets the event name
    assert decode([b"event: lost\n\ndata: a\n\n"]) == [sse.SSEEvent(None, "a")]
    # "data" without a colon is an empty data line; unknown fields, id and retry are ignored
    assert decode([b"data\nid: 7\nretry: 10\nfoo: bar\n\n"]) == [sse.SSEEvent(None, "")]
    assert decode([b"data:a\ndata: b\ndata:  c\n\n"]) == [sse.SSEEvent(None, "a\nb\n c")]
    # a byte-order mark is dropped only at the very start of the stream
    assert decode([b"\xef\xbb", b"\xbfdata: x\n\n"]) == [sse.SSEEvent(None, "x")]


# ---------------------------------------------------------------------------------------------
# StreamRecorder


@pytest.mark.parametrize("name", FIXTURE_NAMES)
@pytest.mark.parametrize("size", [None, 1, 7, 64])
def test_recorder_keeps_complete_fixtures_byte_for_byte(name: str, size: int | None) -> None:
    raw = fixture(name)
    assert record(dialect_of(name), raw, size) == raw


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_recorder_rejects_every_cut(name: str) -> None:
    raw = fixture(name)
    head, blocks = split_fixture(raw)
    dialect = dialect_of(name)
    for k in range(len(blocks)):
        cut = head + b"".join(blocks[:k])
        assert record(dialect, cut) is None, k
        # cut inside the next event, too
        assert record(dialect, cut + blocks[k][: len(blocks[k]) // 2]) is None, k


def test_recorder_rejects_every_byte_prefix() -> None:
    raw = fixture("anthropic_text")
    complete = [n for n in range(len(raw) + 1) if record("anthropic_messages", raw[:n]) is not None]
    # message_stop is dispatched only by the final blank line, so no shorter prefix is complete
    assert complete == [len(raw)]


_ERRORS = {
    "anthropic_messages": b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", '
    b'"message": "Overloaded"}}\n\n',
    "openai_chat": b'data: {"error": {"message": "The server had an error", "type": "server_error", '
    b'"param": null, "code": null}}\n\n',
    "openai_responses": b'event: error\ndata: {"type": "error", "code": "server_error", "message": "x", '
    b'"param": null, "sequence_number": 3}\n\n',
}


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_recorder_rejects_an_error_event(name: str) -> None:
    dialect = dialect_of(name)
    head, blocks = split_fixture(fixture(name))
    # an error in the middle of an otherwise complete stream
    middle = head + b"".join(blocks[:2]) + _ERRORS[dialect] + b"".join(blocks[2:])
    assert record(dialect, middle) is None
    # an error instead of the end
    assert record(dialect, head + b"".join(blocks[:-1]) + _ERRORS[dialect]) is None


def test_recorder_rejects_a_chat_error_chunk_that_looks_like_a_chunk() -> None:
    # Some compatible gateways send the error inside an otherwise ordinary chunk.
    head, blocks = split_fixture(fixture("chat_text"))
    error = (
        b'data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1,"model":"m","choices":[],'
    )
    error += b'"error":{"message":"upstream failed","code":502}}\n\n'
    assert record("openai_chat", head + blocks[0] + error + b"".join(blocks[1:])) is None


def test_recorder_rejects_a_responses_stream_that_went_incomplete_first() -> None:
    head, blocks = split_fixture(fixture("responses_text"))
    incomplete = b'event: response.incomplete\ndata: {"type":"response.incomplete","response":{"id":'
    incomplete += b'"resp_67ccfcdd16748190a91872c75d38539e09e4d4aac714747c","status":"incomplete"}}\n\n'
    assert record("openai_responses", head + b"".join(blocks[:-1]) + incomplete + blocks[-1]) is None


@pytest.mark.parametrize("kind", ["response.failed", "response.incomplete"])
def test_recorder_rejects_responses_that_did_not_complete(kind: str) -> None:
    head, blocks = split_fixture(fixture("responses_text"))
    final = orjson.loads(blocks[-1].split(b"data: ", 1)[1])
    final["type"] = kind
    final["response"]["status"] = kind.split(".")[1]
    ending = f"event: {kind}\ndata: ".encode() + orjson.dumps(final) + b"\n\n"
    assert record("openai_responses", head + b"".join(blocks[:-1]) + ending) is None


@pytest.mark.parametrize("name", FIXTURE_NAMES)
@pytest.mark.parametrize(
    "junk",
    [
        b"data: {}\n\n",
        b'event: ping\ndata: {"type": "ping"}\n\n',
        b"data: [DONE]\n\n",
        b"data: x",
        b"id: 1\n\n",
    ],
)
def test_recorder_rejects_junk_after_the_terminator(name: str, junk: bytes) -> None:
    raw = fixture(name)
    assert record(dialect_of(name), raw + junk) is None


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_recorder_accepts_blank_lines_and_comments_after_the_terminator(name: str) -> None:
    raw = fixture(name) + b"\n\n: bye\r\n\r\n:"
    assert record(dialect_of(name), raw) == raw


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_recorder_rejects_malformed_json(name: str) -> None:
    head, blocks = split_fixture(fixture(name))
    for k, block in enumerate(blocks):
        if b"[DONE]" in block:
            continue
        broken = block.replace(b"}\n\n", b"\n\n", 1)  # drop the closing brace of the data
        assert broken != block
        assert record(dialect_of(name), head + b"".join([*blocks[:k], broken, *blocks[k + 1 :]])) is None, k


def test_recorder_feed_does_not_parse_and_max_bytes_bounds_memory() -> None:
    recorder = sse.StreamRecorder("openai_chat")
    recorder.feed(b"\xff\xfe not even text")
    assert recorder.complete() is None
    raw = fixture("chat_text")
    small = sse.StreamRecorder("openai_chat", max_bytes=len(raw) - 1)
    small.feed(raw)
    assert small.complete() is None
    exact = sse.StreamRecorder("openai_chat", max_bytes=len(raw))
    exact.feed(raw)
    assert exact.complete() == raw


def fake_stream(dialect: Dialect, *, tool: bool = False, break_after: int | None = None) -> bytes:
    """A streamed answer of FakeUpstream, read through a real httpx2 client."""
    upstream = FakeUpstream()
    if break_after is not None:
        upstream.break_next_stream(after=break_after, how="error")
    url, body = _FAKE_REQUESTS[dialect](tool)
    with (
        httpx2.Client(transport=upstream) as client,
        client.stream("POST", url, json={**body, "stream": True}) as response,
    ):
        return b"".join(response.iter_raw())


def fake_body(dialect: Dialect, *, tool: bool = False) -> dict[str, Any]:
    """A non-streaming answer of FakeUpstream."""
    url, body = _FAKE_REQUESTS[dialect](tool)
    with httpx2.Client(transport=FakeUpstream()) as client:
        result: dict[str, Any] = client.post(url, json=body).json()
    return result


# keys the dialects' events use, so wrong shapes land where the code looks
_SHAPE_KEYS = [
    "type", "index", "delta", "content_block", "message", "content", "usage", "text", "partial_json",
    "choices", "tool_calls", "function", "arguments", "response", "output", "output_index", "item", "id",
]  # fmt: skip


_WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def _anthropic_request(tool: bool) -> tuple[str, dict[str, Any]]:
    body: dict[str, Any] = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": "What's the weather in Paris?" if tool else "Hello"}],
    }
    if tool:
        body["tools"] = [{"name": "get_weather", "input_schema": _WEATHER_SCHEMA}]
    return "https://api.anthropic.com/v1/messages", body


def _chat_request(tool: bool) -> tuple[str, dict[str, Any]]:
    body: dict[str, Any] = {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "What's the weather in Paris?" if tool else "Hello"}],
    }
    if tool:
        body["tools"] = [
            {"type": "function", "function": {"name": "get_weather", "parameters": _WEATHER_SCHEMA}}
        ]
    return "https://api.openai.com/v1/chat/completions", body


def _responses_request(tool: bool) -> tuple[str, dict[str, Any]]:
    body: dict[str, Any] = {"model": "gpt-4o", "input": "What's the weather in Paris?" if tool else "Hello"}
    if tool:
        body["tools"] = [{"type": "function", "name": "get_weather", "parameters": _WEATHER_SCHEMA}]
    return "https://api.openai.com/v1/responses", body


_FAKE_REQUESTS = {
    "anthropic_messages": _anthropic_request,
    "openai_chat": _chat_request,
    "openai_responses": _responses_request,
}


@pytest.mark.parametrize("dialect", list(_FAKE_REQUESTS))
@pytest.mark.parametrize("tool", [False, True])
def test_recorder_on_fake_upstream_streams(dialect: Dialect, tool: bool) -> None:
    raw = fake_stream(dialect, tool=tool)
    assert record(dialect, raw, 5) == raw
    for after in range(4):
        assert record(dialect, fake_stream(dialect, tool=tool, break_after=after)) is None


# ---------------------------------------------------------------------------------------------
# assemble


def test_assemble_anthropic_fixtures() -> None:
    text = sse.assemble("anthropic_messages", fixture("anthropic_text"))
    assert text["id"] == "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY"
    assert text["content"] == [{"type": "text", "text": "Hello!"}]
    assert (text["stop_reason"], text["stop_sequence"]) == ("end_turn", None)
    assert text["usage"] == {"input_tokens": 25, "output_tokens": 15}  # message_delta's count wins

    tool = sse.assemble("anthropic_messages", fixture("anthropic_tool_use"))
    assert tool["content"] == [
        {"type": "text", "text": "Okay, let's check the weather for San Francisco, CA:"},
        {
            "type": "tool_use",
            "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
            "name": "get_weather",
            "input": {"location": "San Francisco, CA", "unit": "fahrenheit"},
        },
    ]
    assert tool["stop_reason"] == "tool_use"
    assert tool["usage"] == {"input_tokens": 472, "output_tokens": 89}

    thinking = sse.assemble("anthropic_messages", fixture("anthropic_thinking"))
    block = thinking["content"][0]
    assert block["type"] == "thinking"
    assert block["thinking"].startswith("Let me solve this step by step:\n\n1. First break down 27 * 453\n2.")
    assert block["thinking"].endswith("6. 10,800 + 1,350 + 81 = 12,231")
    assert block["signature"] == "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds..."
    assert thinking["content"][1] == {"type": "text", "text": "27 * 453 = 12,231"}


def test_assemble_anthropic_merges_usage_and_empty_tool_input() -> None:
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"message": {"id": "m", "type": "message", "role": "assistant", "content": [],
                                       "model": "x", "stop_reason": None, "stop_sequence": None,
                                       "container": {"id": "container_1", "expires_at": "2026-01-01"},
                                       "usage": {"input_tokens": 5, "cache_read_input_tokens": 7,
                                                 "output_tokens": 1}}}),
        ("content_block_start", {"index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "n",
                                                                "input": {}}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "input_json_delta", "partial_json": ""}}),
        ("content_block_stop", {"index": 0}),
        ("message_delta", {"delta": {"stop_reason": "tool_use", "stop_sequence": None, "container": None},
                           "usage": {"input_tokens": 6, "cache_read_input_tokens": None,
                                     "output_tokens": 9}}),
        ("message_stop", {}),
    ]  # fmt: skip
    raw = b"".join(
        f"event: {name}\ndata: ".encode() + orjson.dumps({"type": name, **data}) + b"\n\n"
        for name, data in events
    )
    message = sse.assemble("anthropic_messages", raw)
    assert message["content"][0]["input"] == {}
    assert message["usage"] == {"input_tokens": 6, "cache_read_input_tokens": 7, "output_tokens": 9}
    assert message["stop_reason"] == "tool_use"
    assert message["container"] == {"id": "container_1", "expires_at": "2026-01-01"}  # null does not erase it


def test_assemble_anthropic_rejects_an_unknown_delta() -> None:
    # Content we cannot put together must not be stored: a replay would silently lose it.
    raw = fixture("anthropic_text").replace(
        b'"type": "text_delta", "text": "!"', b'"type": "future_delta", "x": "!"'
    )
    with pytest.raises(sse.StreamError, match="future_delta"):
        sse.assemble("anthropic_messages", raw)
    assert record("anthropic_messages", raw) is None


def test_assemble_chat_fixtures() -> None:
    text = sse.assemble("openai_chat", fixture("chat_text"))
    assert text == {
        "id": "chatcmpl-123",
        "object": "chat.completion",
        "created": 1694268190,
        "model": "gpt-4o-mini",
        "system_fingerprint": "fp_44709d6fcb",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello"},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
    }
    usage = sse.assemble("openai_chat", fixture("chat_usage"))
    assert usage["usage"]["total_tokens"] == 107
    assert (usage["usage"]["prompt_tokens"], usage["usage"]["completion_tokens"]) == (96, 11)
    assert usage["choices"][0]["message"]["content"] == (
        "Pack a light umbrella: showers are likely on Thursday."
    )
    assert usage["choices"][0]["message"]["refusal"] is None

    calls = sse.assemble("openai_chat", fixture("chat_tool_calls"))
    message = calls["choices"][0]["message"]
    assert message["content"] is None
    assert message["tool_calls"] == [
        {
            "id": "call_Wx3pQ9dKfa1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 3}'},
        },
        {
            "id": "call_Tz8mR2vLcb7",
            "type": "function",
            "function": {"name": "get_time", "arguments": '{"timezone": "Europe/Paris"}'},
        },
    ]
    assert calls["choices"][0]["finish_reason"] == "tool_calls"


def test_assemble_chat_null_repeats_and_interleaved_choices() -> None:
    # The function-calling guide's deltas repeat absent fields as null (id, name, type).
    head = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    deltas = [
        (0, {"role": "assistant", "content": None}),
        (1, {"role": "assistant", "content": ""}),
        (0, {"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                             "function": {"name": "get_weather", "arguments": ""}}]}),
        (1, {"role": "assistant", "content": "Hi"}),  # some providers resend the role on every chunk
        (0, {"tool_calls": [{"index": 0, "id": None, "type": None,
                             "function": {"name": None, "arguments": '{"location":'}}]}),
        (0, {"tool_calls": [{"index": 0, "id": None, "type": None,
                             "function": {"name": None, "arguments": '"Paris"}'}}]}),
        # and some resend the whole call head: the same id, type and name must not be doubled
        (0, {"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                             "function": {"name": "get_weather", "arguments": ""}}]}),
    ]  # fmt: skip
    chunks = [
        {**head, "choices": [{"index": i, "delta": d, "logprobs": None, "finish_reason": None}]}
        for i, d in deltas
    ]
    chunks.append({**head, "choices": [{"index": 1, "delta": {}, "logprobs": None, "finish_reason": "stop"}]})
    chunks.append(
        {**head, "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "tool_calls"}]}
    )
    raw = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    body = sse.assemble("openai_chat", raw)
    first, second = body["choices"]
    assert first["message"]["tool_calls"] == [
        {
            "id": "call_a",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"location":"Paris"}'},
        }
    ]
    assert (first["finish_reason"], second["finish_reason"]) == ("tool_calls", "stop")
    assert second["message"] == {"role": "assistant", "content": "Hi"}


def test_assemble_responses_fixtures() -> None:
    text = sse.assemble("openai_responses", fixture("responses_text"))
    assert text["id"] == "resp_67ccfcdd16748190a91872c75d38539e09e4d4aac714747c"
    assert text["status"] == "completed"
    assert text["output"][0]["content"][0]["text"].startswith("In a shimmering forest")
    call = sse.assemble("openai_responses", fixture("responses_function_call"))
    assert call["output"] == [
        {
            "type": "function_call",
            "id": "fc_1234xyz",
            "call_id": "call_1234xyz",
            "name": "get_weather",
            "arguments": '{"location":"Paris, France"}',
        }
    ]


def test_assemble_responses_recovers_a_null_output() -> None:
    head, blocks = split_fixture(fixture("responses_function_call"))
    final = orjson.loads(blocks[-1].split(b"data: ", 1)[1])
    expected = copy.deepcopy(final["response"])
    final["response"]["output"] = None
    raw = head + b"".join(blocks[:-1]) + b"event: response.completed\ndata: " + orjson.dumps(final) + b"\n\n"
    assert sse.assemble("openai_responses", raw) == expected


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(_SHAPE_KEYS), inner, max_size=4)
    ),
    max_leaves=8,
)


def _replace_somewhere(data: st.DataObject, value: Any) -> Any:
    """``value`` with one nested field or item (or the whole of it) replaced by arbitrary JSON."""
    if isinstance(value, dict) and value and data.draw(st.integers(0, 3)):
        key = data.draw(st.sampled_from(sorted(value)))
        return {**value, key: _replace_somewhere(data, value[key])}
    if isinstance(value, list) and value and data.draw(st.integers(0, 3)):
        i = data.draw(st.integers(0, len(value) - 1))
        return [*value[:i], _replace_somewhere(data, value[i]), *value[i + 1 :]]
    return data.draw(_JSON)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(FIXTURE_NAMES), st.data())
def test_assemble_of_wrong_shapes_raises_only_stream_error(name: str, data: st.DataObject) -> None:
    """Well-formed JSON of the wrong shape anywhere in an event: a StreamError (a miss), never a crash."""
    head, blocks = split_fixture(fixture(name))
    k = data.draw(st.integers(0, len(blocks) - 1))
    event = decode([blocks[k]])[0]
    original = orjson.loads(event.data) if event.data != "[DONE]" else {}
    name_line = f"event: {event.event}\n".encode() if event.event else b""
    blocks[k] = name_line + b"data: " + orjson.dumps(_replace_somewhere(data, original)) + b"\n\n"
    raw = head + b"".join(blocks)
    with contextlib.suppress(sse.StreamError):
        sse.assemble(dialect_of(name), raw)
    record(dialect_of(name), raw)  # and the recorder never raises


@pytest.mark.parametrize("dialect", list(_FAKE_REQUESTS))
def test_assemble_raises_stream_error(dialect: Dialect) -> None:
    with pytest.raises(sse.StreamError):
        sse.assemble(dialect, b"")
    with pytest.raises(sse.StreamError):
        sse.assemble(dialect, fake_stream(dialect, break_after=2))
    with pytest.raises(sse.StreamError):
        sse.assemble("anthropic_count_tokens", fixture("anthropic_text"))


# ---------------------------------------------------------------------------------------------
# synthesize: round trips and shape


def with_parallel_calls(dialect: Dialect, body: dict[str, Any]) -> dict[str, Any]:
    """A FakeUpstream tool answer with a second, parallel call (FakeUpstream only ever makes one)."""
    body = copy.deepcopy(body)
    if dialect == "anthropic_messages":
        second = {
            **body["content"][0],
            "id": "toolu_01SecondCall",
            "input": {"city": "Rome", "days": [1, 2.5]},
        }
        body["content"] = [{"type": "text", "text": "Checking both."}, body["content"][0], second]
    elif dialect == "openai_chat":
        calls = body["choices"][0]["message"]["tool_calls"]
        arguments = '{"city": "Rome \\u00e9"}'  # JSON escapes survive: arguments are opaque text
        calls.append(
            {
                "id": "call_second",
                "type": "function",
                "function": {"name": "get_weather", "arguments": arguments},
            }
        )
    else:
        first = body["output"][0]
        body["output"].append(
            {**first, "id": "fc_second", "call_id": "call_second", "arguments": '{"city":"Rome"}'}
        )
    return body


def with_thinking(dialect: Dialect, body: dict[str, Any]) -> dict[str, Any]:
    """A FakeUpstream text answer with reasoning in front, as each dialect carries it."""
    body = copy.deepcopy(body)
    if dialect == "anthropic_messages":
        body["content"][:0] = [
            {"type": "thinking", "thinking": "Step 1. " * 100, "signature": "EqQBCgIYAhIM1gbc"},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
        ]
    elif dialect == "openai_chat":
        body["choices"][0]["message"]["reasoning_content"] = "Let me think. " * 60  # DeepSeek's field
    else:
        reasoning = {
            "id": "rs_1",
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "**Thinking** about it."}],
            "encrypted_content": None,
        }
        body["output"].insert(0, reasoning)
    return body


def sample_bodies(dialect: Dialect) -> dict[str, dict[str, Any]]:
    text = fake_body(dialect)
    tool = fake_body(dialect, tool=True)
    return {
        "text": text,
        "long_text": _longer(dialect, text),
        "tool": tool,
        "parallel_tools": with_parallel_calls(dialect, tool),
        "thinking": with_thinking(dialect, text),
        **shaped_bodies(dialect),
    }


def shaped_bodies(dialect: Dialect) -> dict[str, dict[str, Any]]:
    """The scripted engine's answers in every shape of today's APIs (text and parallel tool calls,
    thinking, redacted thinking, citations, refusals: ``tests/local/test_answer_shapes.py``), as
    bodies."""
    upstream = FakeUpstream(script=cite_the_web)
    url = _FAKE_REQUESTS[dialect](False)[0]
    bodies = {}
    with httpx2.Client(transport=upstream) as client:
        for case, shape in SHAPE_CASES:
            if case == dialect:
                bodies[f"shape:{shape}"] = client.post(
                    url, json=shape_request(dialect, shape, "Paris")
                ).json()
    return bodies


# Samples with fields of OpenAI-compatible providers that the openai SDK does not type.
_FOREIGN_FIELDS = {("openai_chat", "thinking")}  # DeepSeek's reasoning_content


def _longer(dialect: Dialect, body: dict[str, Any]) -> dict[str, Any]:
    body = copy.deepcopy(body)
    long = 'Ünïcödé 𝄞 text with "quotes" and\nnewlines\r\n and more. ' * 40
    if dialect == "anthropic_messages":
        body["content"][0]["text"] = long
    elif dialect == "openai_chat":
        body["choices"][0]["message"]["content"] = long
    else:
        body["output"][0]["content"][0]["text"] = long
    return body


@pytest.mark.parametrize("dialect", list(_FAKE_REQUESTS))
def test_round_trip_fake_upstream_bodies(dialect: Dialect) -> None:
    for label, body in sample_bodies(dialect).items():
        streamed = sse.synthesize(dialect, body, include_usage=True)
        assert sse.assemble(dialect, streamed) == body, label
        assert sse.assemble(dialect, sse.synthesize(dialect, orjson.dumps(body), include_usage=True)) == body
        assert record(dialect, streamed, 3) == streamed, label  # what we synthesize is storable


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_round_trip_fixtures(name: str) -> None:
    dialect = dialect_of(name)
    body = sse.assemble(dialect, fixture(name))
    assert sse.assemble(dialect, sse.synthesize(dialect, body, include_usage=True)) == body


def test_round_trip_chat_without_usage_drops_only_usage() -> None:
    body = fake_body("openai_chat")
    assert "usage" in body
    expected = {key: value for key, value in body.items() if key != "usage"}
    assert sse.assemble("openai_chat", sse.synthesize("openai_chat", body)) == expected


def events_of(raw: bytes) -> list[tuple[str | None, Any]]:
    return [
        (event.event, event.data if event.data == "[DONE]" else orjson.loads(event.data))
        for event in decode([raw])
    ]


def test_synthesize_anthropic_shape() -> None:
    body = with_parallel_calls("anthropic_messages", fake_body("anthropic_messages", tool=True))
    body = {**body, "content": [*with_thinking("anthropic_messages", body)["content"][:1], *body["content"]]}
    events = events_of(sse.synthesize("anthropic_messages", body))
    assert all(name == data["type"] for name, data in events)
    names = [name for name, _ in events]
    assert names[0] == "message_start"
    assert names[-2:] == ["message_delta", "message_stop"]
    start = events[0][1]["message"]
    assert start["content"] == []
    assert (start["stop_reason"], start["stop_sequence"]) == (None, None)
    assert start["usage"] == {**body["usage"], "output_tokens": 1}
    starts = [data["content_block"] for name, data in events if name == "content_block_start"]
    assert starts[0] == {"type": "thinking", "thinking": "", "signature": ""}
    assert starts[1] == {"type": "text", "text": ""}
    assert starts[2] == {**body["content"][2], "input": {}}
    thinking_deltas = [data["delta"]["type"] for name, data in events if name == "content_block_delta"][:3]
    assert thinking_deltas[-1] == "signature_delta"
    json_deltas = [
        data["delta"]["partial_json"]
        for name, data in events
        if name == "content_block_delta"
        and data["index"] == 3
        and data["delta"]["type"] == "input_json_delta"
    ]
    assert orjson.loads("".join(json_deltas)) == body["content"][3]["input"]
    assert names.count("content_block_start") == names.count("content_block_stop") == 4
    delta = events[-2][1]
    assert delta["delta"]["stop_reason"] == "tool_use"
    assert delta["usage"]["output_tokens"] == body["usage"]["output_tokens"]


def test_synthesize_chat_shape() -> None:
    body = with_parallel_calls("openai_chat", fake_body("openai_chat", tool=True))
    events = events_of(sse.synthesize("openai_chat", body, include_usage=True))
    assert events[-1] == (None, "[DONE]")
    chunks = [data for _, data in events[:-1]]
    for chunk in chunks:
        assert chunk["object"] == "chat.completion.chunk"
        assert (chunk["id"], chunk["created"], chunk["model"]) == (body["id"], body["created"], body["model"])
        assert chunk["system_fingerprint"] == body["system_fingerprint"]
        assert "usage" in chunk
    assert [chunk["usage"] for chunk in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == body["usage"]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    openings = [
        call
        for chunk in chunks[:-1]
        for call in chunk["choices"][0]["delta"].get("tool_calls") or []
        if "id" in call
    ]
    assert [(call["index"], call["type"], call["function"]["arguments"]) for call in openings] == [
        (0, "function", ""),
        (1, "function", ""),
    ]
    without = events_of(sse.synthesize("openai_chat", body))
    assert all("usage" not in data for _, data in without[:-1])
    assert all(data["choices"] for _, data in without[:-1])


def test_synthesize_responses_shape() -> None:
    body = with_thinking("openai_responses", fake_body("openai_responses"))
    body["output"].append(
        with_parallel_calls("openai_responses", fake_body("openai_responses", tool=True))["output"][1]
    )
    events = events_of(sse.synthesize("openai_responses", body))
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    assert all(name == data["type"] for name, data in events)
    names = [name for name, _ in events]
    assert names[:2] == ["response.created", "response.in_progress"]
    assert names[-1] == "response.completed"
    assert events[-1][1]["response"] == body
    created = events[0][1]["response"]
    assert (created["status"], created["output"], created["usage"]) == ("in_progress", [], None)
    assert names.count("response.output_item.added") == names.count("response.output_item.done") == 3
    for kind in (
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.reasoning_summary_text.delta",
    ):
        assert kind in names, kind


def test_synthesize_anthropic_reports_late_usage_in_message_delta() -> None:
    # How much of the answer was thinking is known at its end: message_delta says it, as the API does,
    # and message_start does not claim it before the answer exists.
    body = shaped_bodies("anthropic_messages")["shape:thinking"]
    assert body["usage"]["output_tokens_details"]["thinking_tokens"] > 0
    events = events_of(sse.synthesize("anthropic_messages", body))
    assert "output_tokens_details" not in events[0][1]["message"]["usage"]
    assert events[-2][1]["usage"]["output_tokens_details"] == body["usage"]["output_tokens_details"]
    assert sse.assemble("anthropic_messages", sse.synthesize("anthropic_messages", body)) == body


def test_synthesize_responses_web_search_goes_through_its_stages() -> None:
    url, _ = _responses_request(False)
    request = {"model": "gpt-4o", "input": "News?", "tools": [{"type": "web_search"}]}
    with httpx2.Client(transport=FakeUpstream()) as client:
        body = client.post(url, json=request).json()
    assert body["output"][0]["type"] == "web_search_call"
    raw = sse.synthesize("openai_responses", body)
    names = [name for name, _ in events_of(raw)]
    at = names.index("response.output_item.added")
    assert names[at : at + 5] == [
        "response.output_item.added",
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
        "response.web_search_call.completed",
        "response.output_item.done",
    ]
    read_typed("openai_responses", raw)
    assert sse.assemble("openai_responses", raw) == body


def test_synthesize_responses_that_did_not_complete_ends_like_the_api() -> None:
    body = {
        **fake_body("openai_responses"),
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
    }
    raw = sse.synthesize("openai_responses", body)
    assert events_of(raw)[-1][0] == "response.incomplete"
    with pytest.raises(sse.StreamError):
        sse.assemble("openai_responses", raw)


def test_synthesize_rejects_what_is_not_a_response() -> None:
    with pytest.raises(sse.StreamError):
        sse.synthesize("anthropic_messages", b"[1, 2]")
    with pytest.raises(sse.StreamError):
        sse.synthesize("openai_chat", {"error": {"message": "x"}})
    with pytest.raises(sse.StreamError):
        sse.synthesize("openai_responses", {"status": "queued", "output": []})
    with pytest.raises(sse.StreamError):
        sse.synthesize("anthropic_messages", {"content": ["not a block"]})
    with pytest.raises(sse.StreamError):
        sse.synthesize("openai_chat", {"choices": [{"message": "text"}]})
    big = {"type": "tool_use", "id": "t", "name": "n", "input": {"n": 2**70}}
    with pytest.raises(sse.StreamError):  # orjson cannot write integers beyond 64 bits
        sse.synthesize("anthropic_messages", {"content": [big]})


# ---------------------------------------------------------------------------------------------
# The official SDKs: a stream and its assembled body give the same final message


MESSAGES: Any = [{"role": "user", "content": "Hi"}]


def served(provider: str, content: bytes, content_type: str) -> Any:
    """The plain SDK of ``provider`` (strict validation on), whose next call gets ``content``."""
    upstream = FakeUpstream()
    upstream.respond_next(200, content, content_type)
    return sdk_client(provider, transport=upstream, plain=True, api_key="k", _strict_response_validation=True)


def anthropic_final(raw: bytes) -> Any:
    with (
        served("anthropic", raw, "text/event-stream") as client,
        client.messages.stream(model="claude-sonnet-4-5", max_tokens=64, messages=MESSAGES) as stream,
    ):
        return stream.get_final_message()


def anthropic_plain(body: dict[str, Any]) -> Any:
    with served("anthropic", orjson.dumps(body), "application/json") as client:
        return client.messages.create(model="claude-sonnet-4-5", max_tokens=64, messages=MESSAGES)


def chat_final(raw: bytes) -> Any:
    with (
        served("openai", raw, "text/event-stream") as client,
        client.chat.completions.stream(model="gpt-4o", messages=MESSAGES) as stream,
    ):
        return stream.get_final_completion()


def chat_plain(body: dict[str, Any]) -> Any:
    with served("openai", orjson.dumps(body), "application/json") as client:
        return client.chat.completions.create(model="gpt-4o", messages=MESSAGES)


def responses_final(raw: bytes) -> Any:
    with (
        served("openai", raw, "text/event-stream") as client,
        client.responses.stream(model="gpt-4o", input="Hi") as stream,
    ):
        return stream.get_final_response()


def responses_plain(body: dict[str, Any]) -> Any:
    with served("openai", orjson.dumps(body), "application/json") as client:
        # parse(), like stream(), returns ParsedResponse items (with their "parsed" fields)
        return client.responses.parse(model="gpt-4o", input="Hi")


def anthropic_facts(message: Any) -> dict[str, Any]:
    blocks: list[tuple[Any, ...]] = []
    for block in message.content:
        if block.type == "text":
            blocks.append(("text", block.text))
        elif block.type == "tool_use":
            blocks.append(("tool_use", block.id, block.name, block.input))
        elif block.type == "thinking":
            blocks.append(("thinking", block.thinking, block.signature))
        else:
            blocks.append((block.type, block.model_dump()))
    return {
        "id": message.id,
        "model": message.model,
        "stop": (message.stop_reason, message.stop_sequence),
        "usage": message.usage.model_dump(),
        "blocks": blocks,
    }


def chat_facts(completion: Any) -> dict[str, Any]:
    return {
        "id": completion.id,
        "model": completion.model,
        "usage": completion.usage.model_dump() if completion.usage else None,
        "choices": [
            (
                choice.index,
                choice.finish_reason,
                choice.message.content,
                choice.message.refusal,
                [(c.id, c.function.name, c.function.arguments) for c in choice.message.tool_calls or []],
                [a.model_dump() for a in choice.message.annotations or []],
            )
            for choice in completion.choices
        ],
    }


def responses_facts(response: Any) -> dict[str, Any]:
    return {
        "id": response.id,
        "status": response.status,
        "usage": response.usage.model_dump() if response.usage else None,
        "text": response.output_text,
        "output": [item.model_dump(exclude={"parsed_arguments"}) for item in response.output],
    }


SDK = {
    "anthropic_messages": (anthropic_final, anthropic_plain, anthropic_facts),
    "openai_chat": (chat_final, chat_plain, chat_facts),
    "openai_responses": (responses_final, responses_plain, responses_facts),
}


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_sdk_stream_of_fixture_equals_sdk_parse_of_assembled_body(name: str) -> None:
    dialect = dialect_of(name)
    final, plain, facts = SDK[dialect]
    raw = fixture(name)
    streamed = facts(final(raw))
    parsed = facts(plain(sse.assemble(dialect, raw)))
    assert streamed == parsed
    assert streamed["id"]  # the comparison is about something


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixtures_are_typed_by_the_sdks(name: str) -> None:
    # Every event validates against the SDK's own event types, and nothing is left untyped.
    read = read_typed(dialect_of(name), fixture(name))
    assert read.events
    assert read.final.id


@pytest.mark.parametrize("dialect", list(_FAKE_REQUESTS))
def test_sdk_stream_of_synthesized_equals_sdk_parse_of_body(dialect: Dialect) -> None:
    final, plain, facts = SDK[dialect]
    for label, body in sample_bodies(dialect).items():
        raw = sse.synthesize(dialect, body, include_usage=True)
        if (dialect, label) not in _FOREIGN_FIELDS:
            read_typed(dialect, raw)  # what cachekit synthesizes is what the SDKs type
        streamed = final(raw)
        parsed = plain(body)
        assert facts(streamed) == facts(parsed), label
        if dialect == "anthropic_messages":
            # the whole message, not only the facts we chose
            assert streamed.model_dump() == parsed.model_dump(), label


def test_sdk_fixture_facts_are_the_documented_ones() -> None:
    tool = anthropic_facts(anthropic_final(fixture("anthropic_tool_use")))
    assert tool["blocks"][1] == (
        "tool_use",
        "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
        "get_weather",
        {"location": "San Francisco, CA", "unit": "fahrenheit"},
    )
    assert tool["stop"] == ("tool_use", None)
    calls = chat_facts(chat_final(fixture("chat_tool_calls")))
    assert [call[1] for call in calls["choices"][0][4]] == ["get_weather", "get_time"]
    assert calls["usage"]["total_tokens"] == 225


# ---------------------------------------------------------------------------------------------
# restream


@pytest.mark.parametrize("name", [n for n in FIXTURE_NAMES if not n.startswith("chat_")])
@pytest.mark.parametrize("include_usage", [False, True])
def test_restream_replays_other_dialects_unchanged(name: str, include_usage: bool) -> None:
    raw = fixture(name)
    assert sse.restream(dialect_of(name), raw, include_usage=include_usage) is raw


def test_restream_chat_keeps_a_usage_stream_for_include_usage() -> None:
    raw = fixture("chat_usage")
    assert sse.restream("openai_chat", raw, include_usage=True) is raw


@pytest.mark.parametrize("name", ["chat_usage", "chat_tool_calls"])
def test_restream_chat_drops_the_usage_chunk_without_include_usage(name: str) -> None:
    """Without include_usage the API sends neither the usage-only chunk nor ``"usage": null`` on the
    other chunks; every other byte of the stored stream is replayed as stored (comments included)."""
    raw = fixture(name)
    replay = sse.restream("openai_chat", raw, include_usage=False)
    head, blocks = split_fixture(raw)
    assert b'"usage":null' in raw  # the stream was recorded with include_usage
    expected = head + b"".join(
        block.replace(b',"usage":null', b"") for block in blocks if b'"choices":[],"usage"' not in block
    )
    assert replay == expected
    kept = decode([replay])
    assert len(kept) == len(decode([raw])) - 1
    assert kept[-1].data == "[DONE]"
    assert record("openai_chat", replay) == replay
    message = {k: v for k, v in sse.assemble("openai_chat", raw).items() if k != "usage"}
    assert sse.assemble("openai_chat", replay) == message
    assert chat_final(replay).usage is None


def test_restream_chat_without_usage_stays_unchanged_without_include_usage() -> None:
    raw = fixture("chat_text")
    assert sse.restream("openai_chat", raw, include_usage=False) is raw


def test_restream_chat_adds_usage_fields_for_include_usage() -> None:
    raw = fixture("chat_text")
    replay = sse.restream("openai_chat", raw, include_usage=True)
    assert replay == sse.synthesize("openai_chat", sse.assemble("openai_chat", raw), include_usage=True)
    chunks = [orjson.loads(e.data) for e in decode([replay]) if e.data != "[DONE]"]
    assert chunks
    assert all(chunk["usage"] is None for chunk in chunks)  # the usage itself was never recorded
    assert sse.assemble("openai_chat", replay) == sse.assemble("openai_chat", raw)
    assert record("openai_chat", replay) == replay


# ---------------------------------------------------------------------------------------------
# UsageStripper: a Chat stream asked for usage, as the caller that did not ask gets it


def strip(chunks: list[bytes]) -> bytes:
    stripper = sse.UsageStripper()
    return b"".join(stripper.feed(chunk) for chunk in chunks) + stripper.flush()


def without_usage(raw: bytes) -> bytes:
    """The expected bytes, written independently: LF-framed events, one data line each."""
    head, blocks = split_fixture(raw)
    kept = [block for block in blocks if b'"choices":[],"usage"' not in block]
    return head + b"".join(block.replace(b',"usage":null', b"") for block in kept)


@settings(max_examples=60, deadline=None, database=None, derandomize=True)
@given(
    cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=12),
    style=st.sampled_from(["\n", "\r\n", "\r"]),
)
def test_usage_stripper_gives_the_same_bytes_however_the_stream_is_cut(cuts: list[int], style: str) -> None:
    """Chunk boundaries fall anywhere (inside a line, between CR and LF): the output is the same, and
    keeps the stream's own line ends."""
    raw = fixture("chat_usage").replace(b"\n", style.encode())
    expected = without_usage(fixture("chat_usage")).replace(b"\n", style.encode())
    points = sorted({min(cut, len(raw)) for cut in cuts} | {0, len(raw)})
    assert strip([raw[a:b] for a, b in itertools.pairwise(points)]) == expected


def test_usage_stripper_gives_the_same_bytes_cut_anywhere_in_a_crlf_stream() -> None:
    """Every single cut, including each one between a CR and its LF (a CR ends no line until the
    next byte shows it is not a CRLF: a usage chunk ended early would leave its blank line behind)."""
    raw = fixture("chat_usage").replace(b"\n", b"\r\n")
    expected = without_usage(fixture("chat_usage")).replace(b"\n", b"\r\n")
    for cut in range(len(raw) + 1):
        assert strip([raw[:cut], raw[cut:]]) == expected, cut


def test_usage_stripper_hands_each_event_over_as_soon_as_it_ends() -> None:
    """No buffering beyond the event being read: feeding an event returns it at once."""
    _, blocks = split_fixture(fixture("chat_usage"))
    stripper = sse.UsageStripper()
    first = stripper.feed(blocks[0][:-1])  # the event's blank line has not arrived yet
    assert first == b""
    assert stripper.feed(b"\n") == blocks[0].replace(b',"usage":null', b"")
    assert stripper.feed(b": keep-alive\n") == b": keep-alive\n"  # a comment passes at once
    usage_chunk = next(block for block in blocks if b'"choices":[],"usage"' in block)
    assert stripper.feed(usage_chunk) == b""
    assert stripper.feed(b"data: [DONE]\n\n") == b"data: [DONE]\n\n"
    assert stripper.flush() == b""


def test_usage_stripper_cuts_the_member_in_any_spacing_and_keeps_everything_else() -> None:
    spaced = b'data: {"id": "c", "choices": [{"index": 0, "delta": {"content": "x"}}], "usage": null}\n\n'
    assert strip([spaced]) == b'data: {"id": "c", "choices": [{"index": 0, "delta": {"content": "x"}}]}\n\n'
    first = b'data:{"usage":null, "id":"c","choices":[]}\r\n\r\n'  # no space after the colon, usage first
    assert strip([first]) == b'data:{"id":"c","choices":[]}\r\n\r\n'
    # A nested "usage": null is not the chunk's: the member is written again without the top-level one.
    nested = b'data: {"choices":[{"index":0,"delta":{"usage":null}}],"usage":null}\n\n'
    out = strip([nested])
    assert orjson.loads(out[len(b"data: ") : -2]) == {"choices": [{"index": 0, "delta": {"usage": None}}]}
    # Several data lines, an event name and an id line: the data is written back in place.
    multi = b'event: chunk\ndata: {"choices":[],\ndata: "usage":null}\nid: 7\n\n'
    assert strip([multi]) == b'event: chunk\ndata: {"choices":[]}\nid: 7\n\n'


def test_usage_stripper_leaves_what_is_not_the_asked_usage() -> None:
    """A chunk whose usage rides with its choices (a provider that always sends it), a chunk that
    never mentions usage, data that is not JSON, and a stream cut mid-event all pass as they came."""
    inline = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"total_tokens":3}}'
    inline += b"\n\n"
    plain = b'data: {"choices":[{"index":0,"delta":{"content":"usage"}}]}\n\n'
    junk = b'data: {"usage": nul\n\n'
    cut = b'data: {"choices":[],"usage":{"total_tokens":3}}\n'  # no blank line: never ended
    for raw in (inline, plain, junk, cut, b"", b": only a comment\n"):
        assert strip([raw]) == raw


def test_a_stream_recorder_keeps_the_message_it_assembled() -> None:
    recorder = sse.StreamRecorder("openai_chat")
    raw = fixture("chat_usage")
    recorder.feed(raw)
    before = recorder.message
    assert before is None
    assert recorder.complete() == raw
    assert recorder.message == sse.assemble("openai_chat", raw)
    cut = sse.StreamRecorder("openai_chat")
    cut.feed(raw[:100])
    assert cut.complete() is None
    assert cut.message is None

"""FakeUpstream speaks each provider's API well enough for the real SDKs, in strict validation mode."""

from __future__ import annotations

import threading
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import orjson
import pydantic
import pytest
from anthropic.types import MessageParam, ToolParam
from openai.types.responses import FunctionToolParam

from cachekit.testing import FakeUpstream, RecordedRequest
from tests.conftest import sdk_client
from tests.sdk_events import first_text

ANTHROPIC_URL = "https://api.anthropic.com"
OPENAI_URL = "https://api.openai.com/v1"
MODEL = "claude-sonnet-4-5"
GPT = "gpt-4.1-mini"

WEATHER: dict[str, object] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city"],
}
TIME: dict[str, object] = {
    "type": "object",
    "properties": {"timezone": {"type": "string"}},
    "required": ["timezone"],
}
WEATHER_INPUT = {"city": "example city"}  # the required properties: optional ones are left out

ANTHROPIC_TOOLS: list[ToolParam] = [
    {"name": "get_weather", "description": "Weather forecast.", "input_schema": WEATHER},
    {"name": "get_time", "description": "Local time.", "input_schema": TIME},
]
CHAT_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": TIME}},
]
RESPONSES_TOOLS: list[FunctionToolParam] = [
    {"type": "function", "name": "get_weather", "parameters": WEATHER, "strict": False},
    {"type": "function", "name": "get_time", "parameters": TIME, "strict": False},
]


def for_httpx(upstream: FakeUpstream) -> Any:
    """``upstream`` for a plain ``httpx`` client: typed as an ``httpx2`` transport, it serves httpx by
    duck typing (the same two methods)."""
    return upstream


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def upstream() -> FakeUpstream:
    return FakeUpstream()


def claude(upstream: FakeUpstream, **kwargs: Any) -> anthropic.Anthropic:
    return _plain("anthropic", "sync", upstream, ANTHROPIC_URL, **kwargs)


def async_claude(upstream: FakeUpstream, **kwargs: Any) -> anthropic.AsyncAnthropic:
    return _plain("anthropic", "async", upstream, ANTHROPIC_URL, **kwargs)


def gpt(upstream: FakeUpstream, base_url: str = OPENAI_URL, **kwargs: Any) -> openai.OpenAI:
    return _plain("openai", "sync", upstream, base_url, **kwargs)


def async_gpt(upstream: FakeUpstream, **kwargs: Any) -> openai.AsyncOpenAI:
    return _plain("openai", "async", upstream, OPENAI_URL, **kwargs)


def _plain(provider: str, mode: str, upstream: FakeUpstream, base_url: str, **kwargs: Any) -> Any:
    """The SDK's own client (no cachekit) over ``upstream``, validating every response strictly."""
    return sdk_client(
        provider,
        mode,
        transport=upstream,
        plain=True,
        api_key="test",
        base_url=base_url,
        _strict_response_validation=True,
        **kwargs,
    )


def ask(text: str, **kwargs: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 256, "messages": [{"role": "user", "content": text}], **kwargs}


def chat(text: str, **kwargs: Any) -> dict[str, Any]:
    return {"model": GPT, "messages": [{"role": "user", "content": text}], **kwargs}


# -- Anthropic Messages -------------------------------------------------------------------------


def test_anthropic_text_answer_parses_and_is_deterministic(upstream: FakeUpstream) -> None:
    with claude(upstream) as client:
        first = client.messages.with_raw_response.create(**ask("Hello there"))
        second = client.messages.with_raw_response.create(**ask("Hello there"))
        other = client.messages.create(**ask("Something else"))
    one, two = first.parse(), second.parse()
    assert one.type == "message"
    assert one.role == "assistant"
    assert one.model == MODEL
    assert one.stop_reason == "end_turn"
    assert one.stop_sequence is None
    assert one.content[0].type == "text"
    assert "Hello there" in one.content[0].text
    assert one.content == two.content  # same request, same answer
    assert other.content != one.content  # different request, different answer
    assert one.id.startswith("msg_")
    assert one.id != two.id
    assert first.headers["request-id"].startswith("req_")
    assert first.headers["request-id"] != second.headers["request-id"]
    assert first.headers["content-type"] == "application/json"
    usage = one.usage
    assert usage.input_tokens > 0
    assert usage.output_tokens > 0
    assert usage.cache_creation_input_tokens == 0
    assert usage.cache_read_input_tokens == 0
    assert usage.cache_creation is not None
    assert usage.cache_creation.ephemeral_5m_input_tokens == 0
    assert usage.service_tier == "standard"
    assert upstream.calls == 3


def test_anthropic_tool_use(upstream: FakeUpstream) -> None:
    with claude(upstream) as client:
        message = client.messages.create(**ask("What's the weather in Paris?", tools=ANTHROPIC_TOOLS))
        forced = client.messages.create(
            **ask("Hi", tools=ANTHROPIC_TOOLS, tool_choice={"type": "tool", "name": "get_time"})
        )
        declined = client.messages.create(
            **ask("Weather?", tools=ANTHROPIC_TOOLS, tool_choice={"type": "none"})
        )
    assert message.stop_reason == "tool_use"
    [block] = message.content
    assert block.type == "tool_use"
    assert block.id.startswith("toolu_")
    assert (block.name, block.input) == ("get_weather", WEATHER_INPUT)
    assert forced.content[0].type == "tool_use"
    assert (forced.content[0].name, forced.content[0].input) == ("get_time", {"timezone": "example timezone"})
    assert declined.stop_reason == "end_turn"


def test_anthropic_tool_result_turn_gets_text(upstream: FakeUpstream) -> None:
    messages: list[MessageParam] = [
        {"role": "user", "content": "What's the weather in Paris?"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"}]},
    ]
    with claude(upstream) as client:
        message = client.messages.create(model=MODEL, max_tokens=64, tools=ANTHROPIC_TOOLS, messages=messages)
    assert message.stop_reason == "end_turn"  # an agent loop ends


def test_anthropic_stream_matches_non_stream(upstream: FakeUpstream) -> None:
    with claude(upstream) as client:
        plain = client.messages.create(**ask("Tell me a story"))
        with client.messages.stream(**ask("Tell me a story")) as stream:
            pieces = list(stream.text_stream)
            final = stream.get_final_message()
    assert len(pieces) > 1
    assert "".join(pieces) == first_text(plain) == first_text(final)
    assert final.stop_reason == "end_turn"
    assert final.usage.input_tokens == plain.usage.input_tokens
    assert final.usage.output_tokens == plain.usage.output_tokens
    body = upstream.requests[-1].json()
    assert body["stream"] is True


def test_anthropic_stream_tool_use(upstream: FakeUpstream) -> None:
    with (
        claude(upstream) as client,
        client.messages.stream(**ask("weather in Oslo?", tools=ANTHROPIC_TOOLS)) as stream,
    ):
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    assert final.content[0].type == "tool_use"
    assert final.content[0].input == WEATHER_INPUT


def test_anthropic_raw_sse_events(upstream: FakeUpstream) -> None:
    with httpx.Client(transport=for_httpx(upstream)) as client:
        response = client.post(
            f"{ANTHROPIC_URL}/v1/messages",
            json=ask("Hi", stream=True),
            headers={"anthropic-version": "2023-06-01"},
        )
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [block.split("\n")[0] for block in response.text.strip().split("\n\n")]
    assert events[0] == "event: message_start"
    assert events[1] == "event: content_block_start"
    assert events[-3:] == ["event: content_block_stop", "event: message_delta", "event: message_stop"]
    assert "event: content_block_delta" in events


def test_anthropic_count_tokens_matches_usage(upstream: FakeUpstream) -> None:
    with claude(upstream) as client:
        count = client.messages.count_tokens(
            model=MODEL, messages=[{"role": "user", "content": "Hello there"}]
        )
        message = client.messages.create(**ask("Hello there"))
    assert count.input_tokens == message.usage.input_tokens


def test_anthropic_max_tokens_truncates(upstream: FakeUpstream) -> None:
    with claude(upstream) as client:
        message = client.messages.create(**{**ask("A long question about many things"), "max_tokens": 2})
    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == 2
    assert len(message.content[0].text.split()) == 2


@pytest.mark.anyio
async def test_anthropic_async(upstream: FakeUpstream) -> None:
    async with async_claude(upstream) as client:
        message = await client.messages.create(**ask("Hello there"))
        tool = await client.messages.create(**ask("weather please", tools=ANTHROPIC_TOOLS))
        async with client.messages.stream(**ask("Hello there")) as stream:
            pieces = [text async for text in stream.text_stream]
            final = await stream.get_final_message()
    assert final.content[0].type == "text"
    assert message.content[0].type == "text"
    assert "".join(pieces) == final.content[0].text == message.content[0].text
    assert tool.content[0].type == "tool_use"
    assert upstream.calls == 3


# -- OpenAI Chat Completions --------------------------------------------------------------------


def test_chat_text_answer(upstream: FakeUpstream) -> None:
    with gpt(upstream) as client:
        raw = client.chat.completions.with_raw_response.create(**chat("Hello"))
        again = client.chat.completions.create(**chat("Hello"))
    completion = raw.parse()
    assert raw.headers["x-request-id"].startswith("req_")
    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    assert completion.id != again.id
    [choice] = completion.choices
    assert choice.finish_reason == "stop"
    assert choice.message.role == "assistant"
    assert choice.message.content == again.choices[0].message.content
    usage = completion.usage
    assert usage is not None
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == 0
    assert usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == 0


def test_chat_tool_calls(upstream: FakeUpstream) -> None:
    with gpt(upstream) as client:
        completion = client.chat.completions.create(**chat("What's the weather?", tools=CHAT_TOOLS))
        forced = client.chat.completions.create(
            **chat("Hi", tools=CHAT_TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}})
        )
        required = client.chat.completions.create(**chat("Hi", tools=CHAT_TOOLS, tool_choice="required"))
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [call] = choice.message.tool_calls or []
    assert call.type == "function"
    assert call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert orjson.loads(call.function.arguments) == WEATHER_INPUT
    forced_call = (forced.choices[0].message.tool_calls or [])[0]
    assert forced_call.type == "function"
    assert forced_call.function.name == "get_time"
    required_call = (required.choices[0].message.tool_calls or [])[0]
    assert required_call.type == "function"
    assert required_call.function.name == "get_weather"


def test_chat_stream_with_usage(upstream: FakeUpstream) -> None:
    with gpt(upstream) as client:
        plain = client.chat.completions.create(**chat("Hello"))
        chunks = list(
            client.chat.completions.create(
                **chat("Hello"), stream=True, stream_options={"include_usage": True}
            )
        )
    assert all(chunk.object == "chat.completion.chunk" for chunk in chunks)
    assert len({chunk.id for chunk in chunks}) == 1
    *content_chunks, usage_chunk = chunks
    assert usage_chunk.choices == []
    assert usage_chunk.usage == plain.usage
    assert all(chunk.usage is None for chunk in content_chunks)
    assert content_chunks[0].choices[0].delta.role == "assistant"
    assert content_chunks[-1].choices[0].finish_reason == "stop"
    text = "".join(chunk.choices[0].delta.content or "" for chunk in content_chunks)
    assert text == plain.choices[0].message.content


def test_chat_stream_without_usage_has_no_usage_chunk(upstream: FakeUpstream) -> None:
    with gpt(upstream) as client:
        chunks = list(client.chat.completions.create(**chat("Hello"), stream=True))
    assert all(chunk.choices for chunk in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_chat_stream_helper_tool_calls(upstream: FakeUpstream) -> None:
    with (
        gpt(upstream) as client,
        client.chat.completions.stream(**chat("weather in Rome", tools=CHAT_TOOLS)) as stream,
    ):
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls or []
    assert call.function.name == "get_weather"
    assert orjson.loads(call.function.arguments) == WEATHER_INPUT


def test_chat_structured_output(upstream: FakeUpstream) -> None:
    class Place(pydantic.BaseModel):
        city: str

    class Forecast(pydantic.BaseModel):
        place: Place
        days: int
        rain: bool

    with gpt(upstream) as client:
        completion = client.chat.completions.parse(**chat("Forecast please"), response_format=Forecast)
    assert completion.choices[0].message.parsed == Forecast(
        place=Place(city="example city"), days=1, rain=True
    )


def test_chat_length_finish(upstream: FakeUpstream) -> None:
    with gpt(upstream) as client:
        completion = client.chat.completions.create(**chat("A long question"), max_completion_tokens=3)
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 3


def test_chat_compatible_base_url(upstream: FakeUpstream) -> None:
    with gpt(upstream, base_url="https://api.deepseek.com") as client:
        completion = client.chat.completions.create(**chat("Hello", model="deepseek-chat"))
    assert upstream.requests[-1].url == "https://api.deepseek.com/chat/completions"
    assert completion.model == "deepseek-chat"
    assert completion.usage is not None
    extra = completion.usage.model_extra or {}
    assert extra["prompt_cache_hit_tokens"] == 0
    assert extra["prompt_cache_miss_tokens"] == completion.usage.prompt_tokens


@pytest.mark.anyio
async def test_chat_async(upstream: FakeUpstream) -> None:
    async with async_gpt(upstream) as client:
        completion = await client.chat.completions.create(**chat("Hello"))
        stream = await client.chat.completions.create(
            **chat("Hello"), stream=True, stream_options={"include_usage": True}
        )
        chunks = [chunk async for chunk in stream]
        async with client.chat.completions.stream(**chat("weather?", tools=CHAT_TOOLS)) as helper:
            final = await helper.get_final_completion()
    assert chunks[-1].usage == completion.usage
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == completion.choices[0].message.content
    assert final.choices[0].finish_reason == "tool_calls"


# -- OpenAI Responses ---------------------------------------------------------------------------


def test_responses_text_answer(upstream: FakeUpstream) -> None:
    with gpt(upstream) as client:
        response = client.responses.create(model=GPT, input="Hello", instructions="Be brief.")
        again = client.responses.create(model=GPT, input="Hello", instructions="Be brief.")
    assert response.object == "response"
    assert response.status == "completed"
    assert response.id.startswith("resp_")
    assert response.id != again.id
    assert "Hello" in response.output_text
    assert response.output_text == again.output_text
    assert response.instructions == "Be brief."
    usage = response.usage
    assert usage is not None
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.input_tokens_details.cached_tokens == 0
    assert usage.output_tokens_details.reasoning_tokens == 0


def test_responses_function_call(upstream: FakeUpstream) -> None:
    with gpt(upstream) as client:
        response = client.responses.create(model=GPT, input="weather in Lima?", tools=RESPONSES_TOOLS)
        forced = client.responses.create(
            model=GPT, input="Hi", tools=RESPONSES_TOOLS, tool_choice={"type": "function", "name": "get_time"}
        )
        after = client.responses.create(
            model=GPT,
            tools=RESPONSES_TOOLS,
            input=[
                {"role": "user", "content": "weather in Lima?"},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "Sunny"},
            ],
        )
    [item] = response.output
    assert item.type == "function_call"
    assert item.name == "get_weather"
    assert item.call_id.startswith("call_")
    assert orjson.loads(item.arguments) == WEATHER_INPUT
    assert forced.output[0].type == "function_call"
    assert forced.output[0].name == "get_time"
    assert after.output[0].type == "message"
    assert [tool.type for tool in response.tools] == ["function", "function"]


def test_responses_stream_events(upstream: FakeUpstream) -> None:
    with gpt(upstream) as client:
        plain = client.responses.create(model=GPT, input="Hello")
        events = list(client.responses.create(model=GPT, input="Hello", stream=True))
    kinds = [event.type for event in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
    assert "".join(deltas) == plain.output_text
    completed = events[-1]
    assert completed.type == "response.completed"
    assert completed.response.output_text == plain.output_text
    assert completed.response.usage == plain.usage


def test_responses_stream_helper(upstream: FakeUpstream) -> None:
    with gpt(upstream) as client:
        with client.responses.stream(model=GPT, input="Hello") as stream:
            text = stream.get_final_response().output_text
        with client.responses.stream(model=GPT, input="weather?", tools=RESPONSES_TOOLS) as stream:
            call = stream.get_final_response().output[0]
    assert text.startswith("Fake reply")
    assert call.type == "function_call"
    assert orjson.loads(call.arguments) == WEATHER_INPUT


def test_responses_incomplete(upstream: FakeUpstream) -> None:
    question = "A long question about many things " * 4
    with gpt(upstream) as client:
        response = client.responses.create(model=GPT, input=question, max_output_tokens=16)
        events = list(client.responses.create(model=GPT, input=question, max_output_tokens=16, stream=True))
        with pytest.raises(openai.BadRequestError) as too_small:
            client.responses.create(model=GPT, input=question, max_output_tokens=2)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage is not None
    assert response.usage.output_tokens == 16
    assert events[-1].type == "response.incomplete"
    assert too_small.value.code == "integer_below_min_value"  # the Responses API's minimum is 16


@pytest.mark.anyio
async def test_responses_async(upstream: FakeUpstream) -> None:
    async with async_gpt(upstream) as client:
        response = await client.responses.create(model=GPT, input="Hello")
        stream = await client.responses.create(model=GPT, input="Hello", stream=True)
        kinds = [event.type async for event in stream]
        async with client.responses.stream(model=GPT, input="weather?", tools=RESPONSES_TOOLS) as helper:
            final = await helper.get_final_response()
    assert response.output_text
    assert kinds[0] == "response.created"
    assert kinds[-1] == "response.completed"
    assert final.output[0].type == "function_call"


# -- Errors and scripting -----------------------------------------------------------------------


def test_anthropic_typed_errors(upstream: FakeUpstream) -> None:
    upstream.fail_next(429)
    upstream.fail_next(529, message="Busy right now")
    with claude(upstream) as client:
        with pytest.raises(anthropic.RateLimitError) as rate_limited:
            client.messages.create(**ask("Hi"))
        with pytest.raises(anthropic.OverloadedError) as overloaded:
            client.messages.create(**ask("Hi"))
        ok = client.messages.create(**ask("Hi"))
    error = rate_limited.value
    assert error.status_code == 429
    assert error.type == "rate_limit_error"
    assert error.api_message is not None
    assert "rate limit" in error.api_message
    assert error.request_id is not None
    assert error.request_id.startswith("req_")
    assert isinstance(error.body, dict)
    assert error.body["request_id"] == error.request_id
    assert error.body["type"] == "error"
    assert overloaded.value.api_message == "Busy right now"
    assert overloaded.value.type == "overloaded_error"
    assert ok.content[0].type == "text"
    assert upstream.calls == 3


def test_openai_typed_errors(upstream: FakeUpstream) -> None:
    upstream.fail_next(400, message="messages: bad role")
    upstream.fail_next(404)
    upstream.fail_next(500)
    with gpt(upstream) as client:
        with pytest.raises(openai.BadRequestError) as bad:
            client.chat.completions.create(**chat("Hi"))
        with pytest.raises(openai.NotFoundError) as missing:
            client.chat.completions.create(**chat("Hi", model="gpt-nope"))
        with pytest.raises(openai.InternalServerError):
            client.responses.create(model=GPT, input="Hi")
    assert "messages: bad role" in bad.value.message
    assert bad.value.type == "invalid_request_error"
    assert bad.value.request_id is not None
    assert bad.value.request_id.startswith("req_")
    assert missing.value.code == "model_not_found"
    assert "gpt-nope" in missing.value.message


def test_fail_next_times_then_retry_succeeds(upstream: FakeUpstream) -> None:
    upstream.fail_next(529, times=2, headers={"retry-after-ms": "1"})
    with claude(upstream, max_retries=2) as client:
        message = client.messages.create(**ask("Hi"))
    assert message.content[0].type == "text"
    assert upstream.calls == 3


def test_fail_next_custom_body(upstream: FakeUpstream) -> None:
    upstream.fail_next(418, body=b"teapot", headers={"Content-Type": "text/plain"})
    with httpx.Client(transport=for_httpx(upstream)) as client:
        response = client.post(f"{OPENAI_URL}/chat/completions", json=chat("Hi"))
    assert (response.status_code, response.content) == (418, b"teapot")
    assert response.headers["content-type"] == "text/plain"


def test_respond_next_arbitrary_body(upstream: FakeUpstream) -> None:
    upstream.respond_next(200, b"<html>gateway</html>", "text/html")
    with httpx2.Client(transport=upstream) as client:
        odd = client.post(f"{ANTHROPIC_URL}/v1/messages", json=ask("Hi"))
        normal = client.post(f"{ANTHROPIC_URL}/v1/messages", json=ask("Hi"))
    assert (odd.status_code, odd.headers["content-type"], odd.content) == (
        200,
        "text/html",
        b"<html>gateway</html>",
    )
    assert normal.json()["type"] == "message"


def test_respond_next_non_json_fails_strict_sdk(upstream: FakeUpstream) -> None:
    upstream.respond_next(200, b"not json", "text/plain")
    with claude(upstream) as client, pytest.raises(anthropic.APIResponseValidationError):
        client.messages.create(**ask("Hi"))


def test_unknown_paths_are_404_in_dialect(upstream: FakeUpstream) -> None:
    with httpx.Client(transport=for_httpx(upstream)) as client:
        claude_404 = client.get(f"{ANTHROPIC_URL}/v1/models", headers={"anthropic-version": "2023-06-01"})
        openai_404 = client.post(f"{OPENAI_URL}/embeddings", json={"model": "x", "input": "y"})
        wrong_method = client.get(f"{OPENAI_URL}/chat/completions")
    assert claude_404.status_code == 404
    assert claude_404.json()["error"]["type"] == "not_found_error"
    assert claude_404.json()["request_id"] == claude_404.headers["request-id"]
    assert openai_404.status_code == 404
    assert openai_404.json()["error"]["message"] == "Invalid URL (POST /v1/embeddings)"
    assert wrong_method.status_code == 404
    assert upstream.calls == 3


def test_invalid_bodies_are_400(upstream: FakeUpstream) -> None:
    with httpx.Client(transport=for_httpx(upstream)) as client:
        broken = client.post(f"{ANTHROPIC_URL}/v1/messages", content=b"{nope")
        missing = client.post(f"{OPENAI_URL}/chat/completions", json={"model": GPT})
    assert broken.status_code == 400
    assert broken.json()["error"]["type"] == "invalid_request_error"
    assert missing.status_code == 400
    assert missing.json()["error"]["message"] == "Missing required parameter: 'messages'."
    assert missing.json()["error"]["param"] == "messages"


def test_fail_next_rejects_zero_times(upstream: FakeUpstream) -> None:
    with pytest.raises(ValueError, match="times"):
        upstream.fail_next(500, times=0)


# -- Broken streams -----------------------------------------------------------------------------


def test_break_next_stream_error_event(upstream: FakeUpstream) -> None:
    upstream.break_next_stream(after=2)
    upstream.break_next_stream(after=2)
    with claude(upstream) as client:
        plain = client.messages.create(**ask("Hi"))  # not a stream: does not consume the break
        with (
            pytest.raises(anthropic.APIStatusError, match="overloaded_error"),
            client.messages.stream(**ask("Hi")) as stream,
        ):
            stream.get_final_message()
    with gpt(upstream) as client, pytest.raises(openai.APIError, match="server had an error"):
        list(client.chat.completions.create(**chat("Hi"), stream=True))
    upstream.break_next_stream(after=4)
    with gpt(upstream) as client:
        kinds = [event.type for event in client.responses.create(model=GPT, input="Hi", stream=True)]
    assert kinds[-1] == "error"
    assert "response.completed" not in kinds
    assert len(kinds) == 5
    assert plain.content[0].type == "text"


def test_anthropic_structured_output(upstream: FakeUpstream) -> None:
    schema: dict[str, object] = {
        "type": "object",
        "properties": {"answer": {"type": "string"}, "score": {"type": "number"}},
    }
    with claude(upstream) as client:
        message = client.messages.create(
            **ask("Rate this"), output_config={"format": {"type": "json_schema", "schema": schema}}
        )
    assert message.content[0].type == "text"
    assert orjson.loads(message.content[0].text) == {"answer": "example answer", "score": 1.0}


def test_break_next_stream_disconnect(upstream: FakeUpstream) -> None:
    upstream.break_next_stream(after=3, how="disconnect")
    with gpt(upstream) as client:
        stream = client.responses.create(model=GPT, input="Hi", stream=True)
        seen: list[str] = []
        with pytest.raises(openai.APIConnectionError) as dropped:
            seen.extend(event.type for event in stream)
    assert isinstance(dropped.value.__cause__, httpx2.RemoteProtocolError)
    assert seen == ["response.created", "response.in_progress", "response.output_item.added"]


@pytest.mark.anyio
async def test_break_next_stream_disconnect_async(upstream: FakeUpstream) -> None:
    upstream.break_next_stream(after=1, how="disconnect")
    async with (
        httpx.AsyncClient(transport=for_httpx(upstream)) as client,
        client.stream("POST", f"{OPENAI_URL}/chat/completions", json=chat("Hi", stream=True)) as response,
    ):
        with pytest.raises(httpx.RemoteProtocolError):
            await response.aread()


# -- Transport behaviour ------------------------------------------------------------------------


def test_raw_httpx_client_gets_httpx_responses(upstream: FakeUpstream) -> None:
    with httpx.Client(transport=for_httpx(upstream)) as client:
        response = client.post(f"{OPENAI_URL}/chat/completions", json=chat("Hello"))
    assert type(response) is httpx.Response
    assert response.json()["choices"][0]["message"]["content"].startswith("Fake reply")
    assert response.headers["x-request-id"].startswith("req_")


@pytest.mark.anyio
async def test_raw_async_httpx_client(upstream: FakeUpstream) -> None:
    async with httpx.AsyncClient(transport=for_httpx(upstream)) as client:
        response = await client.post(f"{ANTHROPIC_URL}/v1/messages", json=ask("Hello"))
    assert type(response) is httpx.Response
    assert response.json()["type"] == "message"


def test_stream_arrives_one_event_per_chunk(upstream: FakeUpstream) -> None:
    with (
        httpx2.Client(transport=upstream) as client,
        client.stream(
            "POST", f"{OPENAI_URL}/chat/completions", json=chat("Hello there", stream=True)
        ) as response,
    ):
        chunks = list(response.iter_raw())
    assert response.headers["content-type"].startswith("text/event-stream")
    assert len(chunks) > 3
    assert all(chunk.startswith(b"data: ") and chunk.endswith(b"\n\n") for chunk in chunks)
    assert chunks[-1] == b"data: [DONE]\n\n"


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """What the upstream waited for, in order with what the test logs itself: its ``time.sleep`` and
    ``anyio.sleep`` record the seconds asked for instead of waiting."""
    log: list[object] = []

    async def asleep(seconds: float) -> None:
        log.append(seconds)

    monkeypatch.setattr("cachekit.testing.time.sleep", log.append)
    monkeypatch.setattr("cachekit.testing.anyio.sleep", asleep)
    return log


@pytest.mark.anyio
async def test_async_stream_arrives_incrementally(waits: list[object]) -> None:
    upstream = FakeUpstream(chunk_delay=0.01)
    async with (
        httpx2.AsyncClient(transport=upstream) as client,
        client.stream(
            "POST", f"{ANTHROPIC_URL}/v1/messages", json=ask("Hello there", stream=True)
        ) as response,
    ):
        async for chunk in response.aiter_raw():
            assert chunk.startswith(b"event: ")
            waits.append("chunk")
    assert waits.count("chunk") > 3
    assert waits == [0.01, "chunk"] * waits.count("chunk")  # a wait before each chunk, as it is read


def test_requests_are_recorded_and_reset(upstream: FakeUpstream) -> None:
    with claude(upstream) as client:
        client.messages.create(**ask("Hello"), extra_headers={"X-Custom": "yes"})
    [recorded] = upstream.requests
    assert isinstance(recorded, RecordedRequest)
    assert recorded.method == "POST"
    assert recorded.url == f"{ANTHROPIC_URL}/v1/messages"
    assert recorded.path == "/v1/messages"
    assert recorded.headers["x-custom"] == "yes"
    assert recorded.headers["authorization"] == "Bearer test"  # anthropic 2.x sends a bearer token
    assert recorded.json()["messages"] == [{"role": "user", "content": "Hello"}]
    upstream.fail_next(500)
    upstream.break_next_stream()
    upstream.reset()
    assert upstream.calls == 0
    assert upstream.requests == []
    with claude(upstream) as client:
        assert client.messages.create(**ask("Hello")).content[0].type == "text"  # queue was dropped


def test_latency_sync(waits: list[object]) -> None:
    upstream = FakeUpstream(latency=0.05)
    with httpx2.Client(transport=upstream) as client:
        assert client.post(f"{ANTHROPIC_URL}/v1/messages", json=ask("Hi")).status_code == 200
    assert waits == [0.05]


@pytest.mark.anyio
async def test_latency_async(waits: list[object]) -> None:
    upstream = FakeUpstream(latency=0.05)
    async with httpx2.AsyncClient(transport=upstream) as client:
        response = await client.post(f"{OPENAI_URL}/responses", json={"model": GPT, "input": "Hi"})
    assert response.status_code == 200
    assert waits == [0.05]


def test_counters_are_thread_safe(upstream: FakeUpstream) -> None:
    def worker() -> None:
        with httpx2.Client(transport=upstream) as client:
            for _ in range(25):
                assert client.post(f"{OPENAI_URL}/chat/completions", json=chat("Hi")).status_code == 200

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert upstream.calls == 200
    assert len(upstream.requests) == 200


def test_shared_upstream_survives_client_close(upstream: FakeUpstream) -> None:
    with claude(upstream) as first:
        first.messages.create(**ask("Hi"))
    with claude(upstream) as second:
        second.messages.create(**ask("Hi"))
    with upstream:
        pass
    assert upstream.calls == 2

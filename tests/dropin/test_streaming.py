"""Streams through the cache: record, replay, cross-serve, never store a broken stream. (Concurrent
identical streams, single-flight: tests/pipeline/test_single_flight.py.)

All through the real SDKs (sync and async via the ``harness`` fixture) over the in-process upstream.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest

import cachekit
from cachekit.providers import sse
from cachekit.stores import MemoryStore
from cachekit.testing import FakeUpstream
from tests.conftest import SDK, Harness
from tests.requests import anthropic_messages, openai_chat, openai_responses

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sse"


def _drain(sdk: SDK, stream: Any) -> list[Any]:
    if sdk.is_async:

        async def collect() -> list[Any]:
            return [event async for event in stream]

        return sdk.run(collect())
    return list(stream)


# -- one request in each dialect, answered by the SDK's own stream accumulators ------------------


# kind -> (the SDK's create method, how to open its stream helper, the helper's final-result getter)
STREAM_HELPERS: dict[str, tuple[str, Any, str]] = {
    "anthropic": ("messages.create", lambda c, body: c.messages.stream(**body), "get_final_message"),
    "chat": (
        "chat.completions.create",
        lambda c, body: c.chat.completions.stream(**body, stream_options={"include_usage": True}),
        "get_final_completion",
    ),
    "responses": ("responses.create", lambda c, body: c.responses.stream(**body), "get_final_response"),
}


def final(kind: str, sdk: SDK, body: dict[str, Any], stream: bool) -> Any:
    """The SDK's final result for ``body``: from ``create`` or from its stream helper, read to the end."""
    create, open_stream, getter = STREAM_HELPERS[kind]
    if not stream:
        return sdk.call(create, **body)
    manager = open_stream(sdk.client, body)
    if sdk.is_async:

        async def run() -> Any:
            async with manager as s:
                async for _ in s:
                    pass
                return await getattr(s, getter)()

        return sdk.run(run())
    with manager as s:
        for _ in s:
            pass
        return getattr(s, getter)()


def anthropic_final(sdk: SDK, body: dict[str, Any], stream: bool) -> Any:
    return final("anthropic", sdk, body, stream)


def chat_final(sdk: SDK, body: dict[str, Any], stream: bool) -> Any:
    return final("chat", sdk, body, stream)


def responses_final(sdk: SDK, body: dict[str, Any], stream: bool) -> Any:
    return final("responses", sdk, body, stream)


def _comparable(provider: str, result: Any) -> dict[str, Any]:
    """The fields a replay must reproduce, as plain data."""
    data = result.model_dump(exclude_none=True)
    if provider == "chat":
        # The parsed-completion helper adds `parsed` fields to the non-streamed form too; compare the
        # wire fields: ids, choices (text, tool calls, finish reasons) and usage.
        data = {k: data.get(k) for k in ("id", "model", "created", "usage")} | {
            "choices": [
                {
                    "finish_reason": c.get("finish_reason"),
                    "content": c["message"].get("content"),
                    "tool_calls": [
                        (t["id"], t["function"]["name"], orjson.loads(t["function"]["arguments"]))
                        for t in c["message"].get("tool_calls") or []
                    ],
                }
                for c in data["choices"]
            ]
        }
    if provider == "responses":
        data = {k: data.get(k) for k in ("id", "model", "status", "usage", "output")}
    return data


FINALS = {
    "anthropic": ("anthropic", anthropic_messages, anthropic_final),
    "chat": ("openai", openai_chat, chat_final),
    "responses": ("openai", openai_responses, responses_final),
}


def _tool_request(kind: str) -> dict[str, Any]:
    body = FINALS[kind][1]()
    last = body["messages" if kind != "responses" else "input"]
    last.append({"role": "user", "content": "And the weather in Rome?"})
    return body


@pytest.mark.parametrize("kind", list(FINALS))
@pytest.mark.parametrize("variant", ["text", "tool_use"])
@pytest.mark.parametrize(("first", "second"), [(True, True), (True, False), (False, True)])
def test_stream_and_document_forms_share_one_entry(
    harness: Harness, kind: str, variant: str, first: bool, second: bool
) -> None:
    provider, make, final = FINALS[kind]
    body = make() if variant == "text" else _tool_request(kind)
    if kind == "chat":
        body.pop("stream_options", None)
    sdk = harness.sdk(provider)
    original = final(sdk, body, first)
    replayed = final(sdk, body, second)
    assert harness.upstream.calls == 1, "the second form was not served from the cache"
    assert _comparable(kind, replayed) == _comparable(kind, original)
    if variant == "tool_use" and kind == "anthropic":
        assert original.stop_reason == "tool_use"


# chat_text is a Chat stream without usage: it serves only streams that did not ask for usage
# (tests/pipeline/test_stream_usage.py), never the document form or the stream helper's
# include_usage.
@pytest.mark.parametrize(
    "fixture", sorted(p for p in FIXTURES.glob("*.sse") if p.stem != "chat_text"), ids=lambda p: p.stem
)
def test_recorded_streams_cross_serve(harness: Harness, fixture: Path) -> None:
    """Real provider event sequences (text, parallel tool calls, thinking) recorded, then replayed in
    both forms; the SDK sees the same result each time. (Lenient validation: the documented examples
    omit fields the SDK's strict mode demands, such as a thinking block's empty signature.)"""
    kind = fixture.stem.split("_")[0]
    provider, make, final = FINALS[kind]
    sdk = harness.sdk(provider, _strict_response_validation=False)
    body = make()
    harness.upstream.respond_next(200, fixture.read_bytes(), "text/event-stream; charset=utf-8")
    original = final(sdk, body, True)
    as_document = final(sdk, body, False)
    as_stream = final(sdk, body, True)
    assert harness.upstream.calls == 1
    assert _comparable(kind, as_document) == _comparable(kind, original)
    assert _comparable(kind, as_stream) == _comparable(kind, original)


@pytest.mark.parametrize("kind", list(FINALS))
@pytest.mark.parametrize("after", [0, 1, 2, 4, 7])
@pytest.mark.parametrize("how", ["error", "disconnect"])
def test_cut_or_errored_streams_are_never_stored(harness: Harness, kind: str, after: int, how: str) -> None:
    provider, make, final = FINALS[kind]
    sdk = harness.sdk(provider)
    harness.upstream.break_next_stream(after=after, how=how)  # type: ignore[arg-type]
    with pytest.raises(Exception):  # noqa: B017 - each SDK raises its own error type for a broken stream
        final(sdk, make(), True)
    assert harness.store.written == {}
    final(sdk, make(), True)  # goes upstream again, completes, and is stored
    assert harness.upstream.calls == 2
    assert len(harness.store.written) == 1


@pytest.mark.parametrize("kind", list(FINALS))
def test_a_consumer_that_stops_early_stores_nothing(harness: Harness, kind: str) -> None:
    provider, make, _ = FINALS[kind]
    sdk = harness.sdk(provider)
    method = {
        "anthropic": "messages.create",
        "chat": "chat.completions.create",
        "responses": "responses.create",
    }
    stream = sdk.call(method[kind], **make(), stream=True)
    if sdk.is_async:

        async def first_then_close() -> None:
            async for _ in stream:
                break
            await stream.close()

        sdk.run(first_then_close())
    else:
        for _ in stream:
            break
        stream.close()
    assert harness.store.written == {}
    sdk.call(method[kind], **make())
    assert harness.upstream.calls == 2


def test_malformed_sse_reaches_the_caller_as_sent_and_is_not_stored() -> None:
    upstream = FakeUpstream()
    store = MemoryStore()
    garbage = b'event: message_start\ndata: {"type": "message_start", "message": {oops\n\n'
    garbage += b"event: message_stop\n"
    upstream.respond_next(200, garbage, "text/event-stream")
    with httpx2.Client(transport=cachekit.CachingTransport(upstream, cache=store)) as client:
        body = {**anthropic_messages(), "stream": True}
        with client.stream("POST", "https://api.anthropic.com/v1/messages", json=body) as response:
            received = response.read()
    assert received == garbage
    assert len(store) == 0


class HeldStream(httpx2.BaseTransport):
    """Passes a :class:`FakeUpstream`'s streamed answer on, holding everything after the first chunk
    until ``release`` is set; ``released`` records whether it was (rather than the wait timing out)."""

    def __init__(self) -> None:
        self.upstream = FakeUpstream()
        self.release = threading.Event()
        self.released: list[bool] = []

    def handle_request(self, request: Any) -> Any:
        response = self.upstream.handle_request(request)

        def chunks() -> Iterator[bytes]:
            parts = response.iter_raw()
            yield next(parts)
            self.released.append(self.release.wait(30))
            yield from parts

        return httpx2.Response(response.status_code, headers=response.headers, content=chunks())


def test_streamed_miss_passes_chunks_through_as_they_arrive() -> None:
    """The recorder adds no buffering, nor does taking out the usage cachekit asked for on the caller's
    behalf: the first chunk reaches the caller while the upstream still holds back the rest (were it
    buffered, the upstream's wait would time out first)."""
    upstream = HeldStream()
    store = MemoryStore()
    with httpx2.Client(transport=cachekit.CachingTransport(upstream, cache=store)) as client:
        body = {**openai_chat(), "stream": True}
        body.pop("stream_options", None)
        with client.stream("POST", "https://api.openai.com/v1/chat/completions", json=body) as response:
            chunks = response.iter_raw()
            first = next(chunks)
            assert first.startswith(b"data: ")
            upstream.release.set()
            rest = b"".join(chunks)
    assert upstream.released == [True]
    [sent] = upstream.upstream.requests
    assert sent.json()["stream_options"] == {"include_usage": True}
    assert b'"usage"' not in first + rest
    assert rest.endswith(b"data: [DONE]\n\n")
    assert len(store) == 1  # stored: the stream reached its terminator


def test_sse_module_is_importable_for_fixtures() -> None:
    # Every fixture is a complete stream by the recorder's rules.
    for path in FIXTURES.glob("*.sse"):
        dialect = {"anthropic": "anthropic_messages", "chat": "openai_chat", "responses": "openai_responses"}[
            path.stem.split("_")[0]
        ]
        recorder = sse.StreamRecorder(dialect)  # type: ignore[arg-type]
        recorder.feed(path.read_bytes())
        assert recorder.complete() is not None, path.name

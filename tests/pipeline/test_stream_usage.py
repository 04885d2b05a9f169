"""Every stored answer carries its usage, and an answer is served only in a form whose fields it holds.

A Chat stream asked without ``stream_options.include_usage`` goes upstream asking for usage, so the
stored record is complete and priced; the caller gets the stream the provider sends without the
option. A record without usage (from a provider that was not asked, or written before cachekit
asked) serves only the streams that did not ask for usage. All through the real openai SDK, sync and
async (the ``harness`` fixture), over :class:`cachekit.testing.FakeUpstream`, which, like the API,
sends usage in a stream only when asked.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx2
import pytest

import cachekit
from cachekit.cost import Ledger, MemorySink
from cachekit.errors import CorruptEntryError
from cachekit.providers import sse
from cachekit.stores import record
from cachekit.testing import FakeUpstream
from tests.conftest import SDK, Harness, memory_transport
from tests.requests import openai_chat

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sse"
CHAT_URL = "https://api.openai.com/v1/chat/completions"


def chat() -> dict[str, Any]:
    """A Chat request without stream options (the caller's choice of form is added per call)."""
    body = openai_chat()
    body.pop("stream_options", None)
    return body


def drain(sdk: SDK, stream: Any) -> list[Any]:
    if sdk.is_async:

        async def collect() -> list[Any]:
            return [chunk async for chunk in stream]

        return list(sdk.run(collect()))
    return list(stream)


def raw_stream(sdk: SDK, **body: Any) -> tuple[bytes, str]:
    """The bytes of a streamed answer as the SDK's caller receives them, and its cache outcome."""
    opened = sdk.client.chat.completions.with_streaming_response.create(**body, stream=True)
    if sdk.is_async:

        async def read() -> tuple[bytes, str]:
            async with opened as response:
                data = b"".join([part async for part in response.iter_bytes()])
                return data, response.headers["x-cachekit-cache"]

        result: tuple[bytes, str] = sdk.run(read())
        return result
    with opened as response:
        return b"".join(response.iter_bytes()), response.headers["x-cachekit-cache"]


def stats(sdk: SDK) -> Any:
    return cachekit.cache_of(sdk.client).stats


def stored(harness: Harness) -> tuple[str, record.CachedResponse]:
    [(key, value)] = harness.store.written.items()
    return key, record.decode(value)


def priced_sdk(harness: Harness) -> tuple[SDK, MemorySink]:
    sink = MemorySink()
    config = cachekit.CacheConfig(store=harness.store, ledger=Ledger([sink]))
    return harness.sdk("openai", cache=config), sink


# -- a stream without usage, then the other forms ------------------------------------------------


def test_a_stream_without_usage_then_a_document_has_usage_and_the_hit_is_priced(harness: Harness) -> None:
    sdk, sink = priced_sdk(harness)
    chunks = drain(sdk, sdk.call("chat.completions.create", **chat(), stream=True))
    # The caller asked for no usage and got none: no usage-only chunk, no usage field set.
    assert chunks
    assert all(chunk.choices and chunk.usage is None for chunk in chunks)
    [sent] = harness.upstream.requests
    assert sent.json()["stream_options"] == {"include_usage": True}  # asked upstream on its behalf

    completion = sdk.call("chat.completions.with_raw_response.create", **chat())
    assert completion.headers["x-cachekit-cache"] == "hit"
    parsed = completion.parse()
    assert parsed.usage is not None
    assert parsed.usage.total_tokens > 0
    assert harness.upstream.calls == 1
    miss, hit = sink.read()
    assert (miss.outcome, hit.outcome) == ("miss", "exact_hit")
    assert hit.usage.known
    assert hit.usage == miss.usage
    assert hit.saving is not None
    assert hit.saving > 0  # the hit is priced: the cost it avoided


def test_a_stream_without_usage_then_a_stream_that_asks_gets_the_usage_chunk(harness: Harness) -> None:
    sdk = harness.sdk("openai")
    drain(sdk, sdk.call("chat.completions.create", **chat(), stream=True))
    asked = drain(
        sdk,
        sdk.call("chat.completions.create", **chat(), stream=True, stream_options={"include_usage": True}),
    )
    assert harness.upstream.calls == 1
    last = asked[-1]
    assert last.choices == []
    assert last.usage is not None
    assert last.usage.total_tokens > 0
    assert all(chunk.usage is None for chunk in asked[:-1])


def _normalized(stream: bytes) -> bytes:
    """A Chat stream with its per-call values (id, creation time) blanked, so two calls compare."""
    stream = re.sub(rb'"id":"chatcmpl-[A-Za-z0-9]+"', b'"id":"chatcmpl-X"', stream)
    return re.sub(rb'"created":\d+', b'"created":0', stream)


def test_the_callers_stream_is_the_providers_stream_without_include_usage(harness: Harness) -> None:
    """What the caller receives is byte for byte the stream the provider sends to the same request
    without the option (per-call ids aside), while the stored record carries the usage."""
    sdk = harness.sdk("openai")
    missed, outcome = raw_stream(sdk, **chat())
    assert outcome == "miss"
    [sent] = harness.upstream.requests
    body = sent.json()
    assert body.pop("stream_options") == {"include_usage": True}
    # The same request, straight to the provider, as the caller wrote it (no stream options).
    with httpx2.Client(transport=harness.upstream) as plain:
        direct = plain.post(CHAT_URL, json=body, headers={"authorization": "Bearer sk-test-1"})
    assert direct.status_code == 200
    assert b'"usage"' not in direct.content
    assert _normalized(missed) == _normalized(direct.content)

    _, entry = stored(harness)
    assert entry.usage is True
    assert sse.assemble("openai_chat", entry.body)["usage"]["total_tokens"] > 0
    replayed, outcome = raw_stream(sdk, **chat())
    assert outcome == "hit"
    assert replayed == missed  # the hit gives the caller what the miss gave it


def test_an_in_memory_stream_is_given_without_its_usage_chunk(harness: Harness) -> None:
    """A stream the inner transport read whole (a scripted or mocked answer) is rewritten too: exactly
    the provider's bytes without the usage-only chunk and the ``"usage":null`` fields."""
    sdk = harness.sdk("openai")
    fixture = (FIXTURES / "chat_usage.sse").read_bytes()
    harness.upstream.respond_next(200, fixture, "text/event-stream; charset=utf-8")
    received, _ = raw_stream(sdk, **chat())
    blocks = fixture.split(b"\n\n")
    expected = b"\n\n".join(
        block.replace(b',"usage":null', b"") for block in blocks if b'"choices":[],"usage"' not in block
    )
    assert received == expected
    assert stored(harness)[1].body == fixture  # the record keeps what the provider sent


# -- records without usage -----------------------------------------------------------------------


def test_a_stream_recorded_without_usage_serves_only_streams_that_did_not_ask(harness: Harness) -> None:
    """A Chat stream that arrived without usage (the provider did not send it) is replayed to streams
    that did not ask for usage; a document is a miss (the API always sends usage with one), counted,
    and the fresh answer overwrites the entry."""
    sdk = harness.sdk("openai")
    fixture = (FIXTURES / "chat_text.sse").read_bytes()
    harness.upstream.respond_next(200, fixture, "text/event-stream; charset=utf-8")
    first, _ = raw_stream(sdk, **chat())
    assert first == fixture
    assert stored(harness)[1].usage is False
    again, outcome = raw_stream(sdk, **chat())
    assert (again, outcome) == (fixture, "hit")

    completion = sdk.call("chat.completions.with_raw_response.create", **chat())
    assert completion.headers["x-cachekit-cache"] == "miss"
    usage = completion.parse().usage
    assert usage is not None
    assert usage.total_tokens > 0
    assert harness.upstream.calls == 2
    assert stats(sdk).incomplete_entries == 1
    assert stored(harness)[1].usage is True  # the document that overwrote the entry, and says so
    asked = drain(
        sdk,
        sdk.call("chat.completions.create", **chat(), stream=True, stream_options={"include_usage": True}),
    )
    assert asked[-1].usage is not None  # served from the document that replaced the entry
    assert harness.upstream.calls == 2


def test_a_record_written_before_usage_was_kept_is_not_served_to_forms_that_carry_it(
    harness: Harness,
) -> None:
    """An entry of an older version: a stream without usage, and no usage fact in its header."""
    sdk = harness.sdk("openai")
    drain(sdk, sdk.call("chat.completions.create", **chat(), stream=True))
    key, entry = stored(harness)
    old = replace(entry, body=sse.restream("openai_chat", entry.body, include_usage=False), usage=None)
    assert b'"usage"' not in old.body
    encoded = record.encode(old)
    assert b'"usage"' not in encoded[: encoded.index(old.body)]  # the header as an older version wrote it
    harness.store.set(key, encoded)

    again, outcome = raw_stream(sdk, **chat())
    assert (again, outcome) == (old.body, "hit")  # a stream that did not ask for usage is served
    assert stats(sdk).incomplete_entries == 0
    asked = drain(
        sdk,
        sdk.call("chat.completions.create", **chat(), stream=True, stream_options={"include_usage": True}),
    )
    assert harness.upstream.calls == 2  # a miss: the entry has no usage to give
    assert stats(sdk).incomplete_entries == 1
    assert asked[-1].usage is not None
    completion = sdk.call("chat.completions.create", **chat())  # the fresh answer replaced the entry
    assert completion.usage is not None
    assert harness.upstream.calls == 2


# -- which providers are asked ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base_url", "asked"),
    [
        ("https://api.openai.com/v1", True),
        ("https://api.deepseek.com", True),
        ("https://dashscope.aliyuncs.com/compatible-mode/v1", True),
        ("https://api.moonshot.ai/v1", False),
        ("https://open.bigmodel.cn/api/paas/v4", False),
        ("https://generativelanguage.googleapis.com/v1beta/openai", False),
        ("https://api.x.ai/v1", False),
        ("https://example.openai.azure.com/openai/v1", False),
        ("https://gateway.example/v1", False),
    ],
)
def test_usage_is_asked_only_of_providers_that_accept_the_option(
    harness: Harness, base_url: str, asked: bool
) -> None:
    """Providers not known to accept ``stream_options`` get the request as the caller wrote it; their
    stream, stored without usage, then does not answer a document (a miss)."""
    sdk = harness.sdk("openai").with_options(base_url=base_url)
    options = {"include_obfuscation": False}  # the caller's own options are kept either way
    drain(sdk, sdk.call("chat.completions.create", **chat(), stream=True, stream_options=options))
    [sent] = harness.upstream.requests
    expected = {**options, "include_usage": True} if asked else options
    assert sent.json()["stream_options"] == expected
    sdk.call("chat.completions.create", **chat())
    assert harness.upstream.calls == (1 if asked else 2)


def test_the_same_bytes_on_another_endpoint_are_understood_afresh() -> None:
    """The pipeline remembers request bytes per dialect: bytes first seen on /responses must not
    lend their form (stream options) to a Chat request."""
    upstream = FakeUpstream()
    body = {**openai_chat(), "stream": True, "stream_options": {"include_usage": True}}
    with httpx2.Client(transport=memory_transport(upstream)) as client:
        client.post("https://api.openai.com/v1/responses", json=body)
        for _ in range(2):
            with client.stream("POST", "https://api.openai.com/v1/chat/completions", json=body) as r:
                text = r.read()
    assert b'"choices":[]' in text  # the usage chunk asked for by stream_options


def test_record_keeps_the_usage_fact_and_refuses_a_bad_one() -> None:
    entry = record.CachedResponse(200, (), b"{}", 1.0, "json", usage=True)
    assert record.decode(record.encode(entry)) == entry
    unknown = replace(entry, usage=None)
    assert record.decode(record.encode(unknown)).usage is None
    tampered = record.encode(entry).replace(b'"usage":true', b'"usage":"yes"')
    with pytest.raises(CorruptEntryError):
        record.decode(tampered)

"""Streaming with replay: a streamed answer is recorded on a miss and replayed from the cache.

The first stream reaches you chunk by chunk while cachekit records the provider's own SSE events; it is
stored only once it ends with the provider's terminator (a cut or errored stream never is). The repeat
is replayed from the cache: the same events and text, no provider call. The local backend plays
Anthropic and OpenAI here; with real keys, drop `base_url` and `http_client`.
"""

import httpx2

import cachekit
from cachekit.local import LocalBackend, LocalTransport

backend = LocalBackend()
cache = cachekit.Cache(cachekit.CacheConfig(store="memory://", ledger=False))  # one cache, both clients
claude = cachekit.Anthropic(
    api_key="sk-local",
    base_url="http://local.test",
    http_client=httpx2.Client(transport=LocalTransport(backend)),
    cache=cache,
)
gpt = cachekit.OpenAI(
    api_key="sk-local",
    base_url="http://local.test/v1",
    http_client=httpx2.Client(transport=LocalTransport(backend)),
    cache=cache,
)
prompt = [{"role": "user", "content": "Write a haiku about caches."}]


def stream_claude() -> tuple[str, list[str]]:
    """`messages.stream()`, the Anthropic SDK's stream helper, unchanged."""
    with claude.messages.stream(model="claude-sonnet-4-5", max_tokens=200, messages=prompt) as stream:
        return stream.response.headers["x-cachekit-cache"], list(stream.text_stream)


def stream_gpt() -> tuple[str, list[str]]:
    """`stream=True` on Chat Completions; the raw response carries cachekit's headers."""
    raw = gpt.chat.completions.with_raw_response.create(model="gpt-4.1-mini", messages=prompt, stream=True)
    chunks = [chunk.choices[0].delta.content or "" for chunk in raw.parse() if chunk.choices]
    return raw.headers["x-cachekit-cache"], chunks


for name, stream in [("anthropic", stream_claude), ("openai", stream_gpt)]:
    calls = backend.stats.requests
    first, repeat = stream(), stream()
    for attempt, (how, chunks) in zip(("first", "repeat"), (first, repeat), strict=True):
        print(
            f"{name:9} {attempt:6} x-cachekit-cache: {how:4} {len(chunks)} chunks: {''.join(chunks)[:40]}..."
        )
    assert (first[0], repeat[0]) == ("miss", "hit")
    assert "".join(repeat[1]) == "".join(first[1])  # the same text...
    assert len(repeat[1]) > 1  # ...streamed in chunks, as the provider sent it
    assert backend.stats.requests == calls + 1  # the repeat never reached the provider

"""The exact response cache in a few lines: the second identical call never reaches the provider.

Runs offline: the provider is cachekit's in-process stand-in (`cachekit.testing.FakeUpstream`).
With a real API key, drop `base_url` and `http_client` and it talks to api.anthropic.com.
"""

from __future__ import annotations

import httpx2

import cachekit
from cachekit.testing import FakeUpstream

upstream = FakeUpstream()
client = cachekit.Anthropic(
    api_key="sk-example",
    http_client=httpx2.Client(transport=upstream),
    cache="memory://",  # or "sqlite:///path/to/cache.db"; by default SQLite under $CACHEKIT_HOME
)

request = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 200,
    "messages": [{"role": "user", "content": "Name three prime numbers."}],
}
first = client.messages.with_raw_response.create(**request)
second = client.messages.with_raw_response.create(**request)

print("first: ", first.headers["x-cachekit-cache"], first.parse().content[0].text)
print("second:", second.headers["x-cachekit-cache"], second.parse().content[0].text)
assert second.headers["x-cachekit-cache"] == "hit"
assert second.parse().id == first.parse().id
assert upstream.calls == 1
print("provider calls:", upstream.calls)

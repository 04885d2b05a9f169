"""The exact response cache in a few lines: the second identical call never reaches the provider.

Runs offline: the provider is cachekit's local backend, in process (`cachekit.local`). With a real
API key, drop `base_url` and `http_client` and it talks to api.anthropic.com.
"""

import httpx2

import cachekit
from cachekit.local import LocalBackend, LocalTransport

backend = LocalBackend()
client = cachekit.Anthropic(
    api_key="sk-local",
    base_url="http://local.test",
    http_client=httpx2.Client(transport=LocalTransport(backend)),
    # store: or "sqlite:///path/to/cache.db" (by default SQLite under $CACHEKIT_HOME). ledger=False keeps
    # this script out of your cost ledger ($CACHEKIT_HOME/ledger.sqlite3, what `cachekit report` reads).
    # price_as: the local backend plays Anthropic (its prompt-caching rules and prices).
    cache=cachekit.CacheConfig(store="memory://", ledger=False, price_as="anthropic"),
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
assert second.parse().id == first.parse().id  # the stored message itself, not a new answer
assert backend.stats.requests == 1
print("provider calls:", backend.stats.requests)

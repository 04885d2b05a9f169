"""TTLs are checked once, where they enter: at most ten years, or a clear error (docs/exact.md).

``ttl=1e308`` used to be accepted by ``CacheConfig`` and the ``x-cachekit-ttl`` header, then overflow
the Redis store's millisecond conversion on every write, so nothing was cached and nothing said so.
Every way in is covered here: ``CacheConfig(ttl=)``, ``CACHEKIT_TTL``, ``@cachekit.cached(ttl=)``,
``cachekit.policy(ttl=)`` (the semantic cache and the memo take their TTL from these) and the header,
through the real SDKs. What each store does with a TTL at its own API is in the store contract
(tests/stores/test_stores.py, tests/stores/test_encrypted.py, tests/semantic/test_index.py).
"""

from __future__ import annotations

import math
from typing import Any

import anthropic
import pytest

import cachekit
from cachekit.config import MAX_TTL
from cachekit.errors import ConfigError
from cachekit.stores import MemoryStore
from cachekit.stores.redis import RedisStore
from tests.conftest import Harness
from tests.redis_servers import RedisServer, redis7_server
from tests.requests import anthropic_messages

SERVER_FIXTURES = (redis7_server,)

#: Ten years in seconds, as docs/exact.md states the bound.
TEN_YEARS = 315_360_000

REFUSED = [0, -1, -0.5, math.nan, math.inf, -math.inf, 1e308, TEN_YEARS + 1, 10**400, True, "3600"]
ACCEPTED = [0.001, 1, 2.5, 3600, TEN_YEARS, float(TEN_YEARS)]
_RANGE = r"ttl must be a positive number of seconds, at most 315360000 \(ten years\)"


def test_the_bound_is_ten_years() -> None:
    assert MAX_TTL == TEN_YEARS


@pytest.mark.parametrize("ttl", REFUSED, ids=repr)
def test_config_refuses_a_ttl_outside_the_range_naming_it(ttl: Any) -> None:
    with pytest.raises(ConfigError, match=_RANGE + r", or None for no expiry; got"):
        cachekit.CacheConfig(ttl=ttl)


@pytest.mark.parametrize("ttl", [*ACCEPTED, None], ids=repr)
def test_config_accepts_up_to_ten_years_and_none(ttl: Any) -> None:
    assert cachekit.CacheConfig(ttl=ttl).ttl == ttl


@pytest.mark.parametrize("raw", ["1e308", "inf", "nan", "0", "-5", "soon", "315360001"])
def test_the_environment_variable_is_checked_the_same_way(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("CACHEKIT_TTL", raw)
    with pytest.raises(ConfigError, match=r"CACHEKIT_TTL must be a positive number of seconds, at most"):
        cachekit.CacheConfig.from_env()
    monkeypatch.setenv("CACHEKIT_TTL", "315360000")
    assert cachekit.CacheConfig.from_env().ttl == TEN_YEARS


@pytest.mark.parametrize("ttl", REFUSED, ids=repr)
def test_call_sites_refuse_it_when_decorated_or_entered(ttl: Any) -> None:
    with pytest.raises(ConfigError, match=_RANGE):
        cachekit.cached(ttl=ttl)
    with pytest.raises(ConfigError, match=_RANGE):
        cachekit.cached(memoize=True, cache=MemoryStore(), name="f", ttl=ttl)
    with pytest.raises(ConfigError, match=_RANGE), cachekit.policy(ttl=ttl):
        pass


@pytest.mark.parametrize("raw", ["1e308", "inf", "nan", "0", "-5", "315360001", "1e10", "soon", ""])
def test_the_header_is_a_400_naming_the_range(harness: Harness, raw: str) -> None:
    sdk = harness.sdk("anthropic", cache=MemoryStore())
    with pytest.raises(
        anthropic.BadRequestError,
        match=r"x-cachekit-ttl must be a positive number of seconds, at most 315360000",
    ):
        sdk.call("messages.create", **anthropic_messages(), extra_headers={"x-cachekit-ttl": raw})
    assert harness.upstream.calls == 0


def test_ten_years_from_the_header_is_kept_that_long(harness: Harness) -> None:
    now = [1000.0]
    store = MemoryStore(clock=lambda: now[0])
    sdk = harness.sdk("anthropic", cache=store)
    headers = {"x-cachekit-ttl": "315360000"}
    sdk.call("messages.create", **anthropic_messages(), extra_headers=headers)
    (entry,) = [e for e in store.entries() if e.key.startswith("ck")]
    assert entry.expires_at == 1000.0 + TEN_YEARS
    now[0] += TEN_YEARS - 1
    hit = sdk.call("messages.with_raw_response.create", **anthropic_messages())
    assert hit.headers["x-cachekit-cache"] == "hit"


def test_the_longest_ttl_caches_on_redis(harness: Harness, redis7_server: RedisServer) -> None:
    """What 1e308 broke: on Redis, a client whose TTL is the longest one accepted stores its answers."""
    with RedisStore(redis7_server.url, prefix="ttl-bounds:", timeout=5.0) as store:
        try:
            sdk = harness.sdk("anthropic", cache=cachekit.CacheConfig(store=store, ttl=MAX_TTL))
            sdk.call("messages.create", **anthropic_messages())
            again = sdk.call("messages.with_raw_response.create", **anthropic_messages())
            assert again.headers["x-cachekit-cache"] == "hit"
            assert harness.upstream.calls == 1
            assert cachekit.cache_of(sdk.client).stats.store_errors == 0
        finally:
            store.clear()

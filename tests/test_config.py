"""Configuration: defaults, the environment, the ``cache=`` forms, and refusals of bad values."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx2
import pytest

import cachekit
from cachekit.cache import as_cache
from cachekit.config import DEFAULT_TTL, CacheConfig, cachekit_home
from cachekit.stores import MemoryStore, SQLiteStore
from cachekit.testing import FakeUpstream


def test_defaults_are_safe() -> None:
    config = CacheConfig()
    assert config.enabled
    assert config.ttl == DEFAULT_TTL
    assert not config.share_across_credentials
    assert config.tool_order == "keep"
    assert not config.normalize_whitespace


def test_home_and_default_store_follow_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CACHEKIT_CACHE_URL", raising=False)
    monkeypatch.setenv("CACHEKIT_HOME", str(tmp_path / "home"))
    assert cachekit_home() == tmp_path / "home"
    cache, owned = as_cache(None)
    assert owned
    assert isinstance(cache.store, SQLiteStore)
    assert cache.store.path == tmp_path / "home" / "cache.sqlite3"
    cache.close()

    monkeypatch.setenv("CACHEKIT_CACHE_URL", "memory://?max_entries=3")
    cache, _ = as_cache(None)
    assert isinstance(cache.store, MemoryStore)
    assert cache.store.max_entries == 3


def test_dropin_client_uses_the_environment_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CACHEKIT_HOME", str(tmp_path))
    monkeypatch.delenv("CACHEKIT_CACHE_URL", raising=False)
    client = cachekit.OpenAI(api_key="k", http_client=httpx2.Client(transport=FakeUpstream()))
    store = cachekit.cache_of(client).store
    assert isinstance(store, SQLiteStore)
    assert store.path.parent == tmp_path
    client.close()


def test_from_env_reads_and_validates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CACHEKIT_ENABLED", "off")
    monkeypatch.setenv("CACHEKIT_TTL", "90")
    monkeypatch.setenv("CACHEKIT_NAMESPACE", "ci")
    config = CacheConfig.from_env(tenant="t")
    assert (config.enabled, config.ttl, config.namespace, config.tenant) == (False, 90.0, "ci", "t")
    monkeypatch.setenv("CACHEKIT_TTL", "a week")
    with pytest.raises(cachekit.ConfigError, match="CACHEKIT_TTL"):
        CacheConfig.from_env()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ttl": 0}, "ttl"),
        ({"ttl": -1.0}, "ttl"),
        ({"tool_order": "random"}, "tool_order"),
        ({"namespace": ""}, "namespace"),
    ],
)
def test_bad_config_values_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(cachekit.ConfigError, match=message):
        CacheConfig(**kwargs)  # type: ignore[arg-type]


def test_cache_argument_forms() -> None:
    store = MemoryStore()
    for form in (store, CacheConfig(store=store)):
        cache, _ = as_cache(form)
        assert cache.store is store
    shared, _ = as_cache(store)
    assert as_cache(shared) == (shared, False)
    with pytest.raises(cachekit.ConfigError, match="cache= takes"):
        as_cache(42)  # type: ignore[arg-type]
    with pytest.raises(cachekit.ConfigError, match="supported"):
        as_cache("ftp://nowhere")


def test_disabled_cache_still_canonicalizes_and_bypasses() -> None:
    upstream = FakeUpstream()
    client = cachekit.OpenAI(
        api_key="k",
        http_client=httpx2.Client(transport=upstream),
        cache=CacheConfig(store=MemoryStore(), enabled=False),
    )
    for _ in range(2):
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
        assert raw.headers["x-cachekit-cache"] == "bypass"
    assert upstream.calls == 2
    client.close()


def test_python_dash_m_runs_the_demo() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cachekit", "demo", "--engine", "scripted", "--no-chart"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "semantic refused: numbers" in result.stdout

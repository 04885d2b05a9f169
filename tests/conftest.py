"""Shared fixtures: an in-process upstream and the real SDK clients, sync and async, through cachekit."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import operator
import os
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

import cachekit
from cachekit.stores import MemoryStore
from cachekit.testing import FakeUpstream

# The skip policy (tests/skip_policy.py): a test that cannot run here skips, saying what is missing;
# with CACHEKIT_NO_SKIPS or CI set, every such skip is a failure (CUDA-only tests aside).
from tests.skip_policy import (  # noqa: F401 - hooks, registered by being in this module
    pytest_make_collect_report,
    pytest_pycollect_makemodule,
    pytest_runtest_makereport,
)

# torch's OpenMP threads spin while they wait for each other. On a 2-core machine that also runs this
# process's Redis servers and subprocesses (or other jobs), a spinning thread starves the one it waits
# for: the SmolLM2 tests ran ten times slower (7 min instead of 40 s for four parity cases). Waiting
# threads sleep instead; both cores are still used when they are free. Set before anything imports
# torch (test modules do, after this file; cachekit does not), and only as a default: an explicit
# setting wins. Subprocesses (the demo, examples) inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


class RecordingStore(MemoryStore):
    """A memory store that also remembers every value written, so tests can inspect what was stored."""

    def __init__(self) -> None:
        super().__init__()
        self.written: dict[str, bytes] = {}

    def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        self.written[key] = value
        super().set(key, value, ttl=ttl)


BASE_URLS = {
    "anthropic": "https://api.anthropic.com",
    "openai": "https://api.openai.com/v1",
}
_CLASSES = {"anthropic": "Anthropic", "openai": "OpenAI"}


def sdk_client(
    provider: str,
    mode: str = "sync",
    *,
    transport: Any = None,
    cache: Any = None,
    plain: bool = False,
    api_key: str | None = "sk-test-1",
    base_url: str | None = None,
    http_options: dict[str, Any] | None = None,
    **options: Any,
) -> Any:
    """The suite's one factory of SDK clients: cachekit's drop-in for ``provider`` (``"anthropic"`` or
    ``"openai"``) in ``mode`` (``"sync"`` or ``"async"``), or the SDK's own class with ``plain=True``.

    ``transport`` (a :class:`FakeUpstream`, a ``LocalTransport``, ...) goes under an ``httpx2`` client
    of the mode, made with ``http_options`` (event hooks, ...); without one the SDK makes its own client
    (real HTTP, to a ``LocalServer``). ``base_url`` defaults to the provider's API, ``max_retries`` to
    0 (tests count upstream calls); ``cache`` is the drop-in's ``cache=`` and any other keyword goes to
    the constructor.
    """
    if mode not in ("sync", "async"):
        raise ValueError(f"mode is 'sync' or 'async', not {mode!r}")
    name = ("Async" if mode == "async" else "") + _CLASSES[provider]
    if transport is not None:
        http = httpx2.AsyncClient if mode == "async" else httpx2.Client
        options["http_client"] = http(transport=transport, **(http_options or {}))
    options.setdefault("max_retries", 0)
    options["base_url"] = BASE_URLS[provider] if base_url is None else base_url
    if plain:
        if cache is not None:
            raise ValueError("a plain SDK client takes no cache")
        sdk_class = getattr(importlib.import_module(provider), name)
        return sdk_class(api_key=api_key, **options)
    return getattr(cachekit, name)(api_key=api_key, cache=cache, **options)


def memory_transport(upstream: Any, **config: Any) -> cachekit.CachingTransport:
    """cachekit's sync transport over ``upstream``, with a fresh memory store and no ledger."""
    return cachekit.CachingTransport(
        upstream, cache=cachekit.CacheConfig(store=MemoryStore(), ledger=False, **config)
    )


class SDK:
    """One real SDK client (sync or async) wrapped by cachekit, called the same way in both modes."""

    def __init__(self, client: Any, loop: asyncio.AbstractEventLoop | None) -> None:
        self.client = client
        self._loop = loop

    @property
    def is_async(self) -> bool:
        return self._loop is not None

    def call(self, method: str, /, **kwargs: Any) -> Any:
        """Call e.g. ``"messages.with_raw_response.create"`` and return its (awaited) result."""
        return self.run(operator.attrgetter(method)(self.client)(**kwargs))

    def run(self, value: Any) -> Any:
        if self._loop is not None and inspect.isawaitable(value):
            return self._loop.run_until_complete(value)
        return value

    def with_options(self, **options: Any) -> SDK:
        return SDK(self.client.with_options(**options), self._loop)

    def copy(self, **options: Any) -> SDK:
        return SDK(self.client.copy(**options), self._loop)

    def close(self) -> None:
        self.run(self.client.close())


class Harness:
    """Builds cachekit drop-in clients over one shared :class:`FakeUpstream`."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.upstream = FakeUpstream()
        self.store = RecordingStore()
        self._loop = asyncio.new_event_loop() if mode == "async" else None
        self._clients: list[SDK] = []

    def sdk(self, provider: str, *, api_key: str = "sk-test-1", cache: Any = None, **kwargs: Any) -> SDK:
        kwargs.setdefault("_strict_response_validation", True)
        sdk = SDK(
            sdk_client(
                provider,
                self.mode,
                transport=self.upstream,
                api_key=api_key,
                cache=self.store if cache is None else cache,
                **kwargs,
            ),
            self._loop,
        )
        self._clients.append(sdk)
        return sdk

    def close(self) -> None:
        for sdk in self._clients:
            sdk.close()
        if self._loop is not None:
            self._loop.close()


@pytest.fixture(autouse=True, scope="session")
def _isolated_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Everything cachekit keeps on disk by default (SQLite cache, cost ledger) goes to a temporary
    home for the whole session, never to the developer's ~/.cache/cachekit.

    Built models are the exception: they stay in the user's real model cache (``models_dir()`` as
    resolved before the home is isolated, exported as ``$CACHEKIT_MODEL_CACHE`` so subprocesses see it
    too). They are content-addressed and built under a file lock, so sharing them between runs is
    safe, and the second run converts nothing (SmolLM2 alone is 520 MB and a minute of CPU).
    """
    from cachekit.local.models import MODEL_CACHE_ENV, models_dir

    saved = {name: os.environ.get(name) for name in ("CACHEKIT_HOME", MODEL_CACHE_ENV)}
    os.environ[MODEL_CACHE_ENV] = str(models_dir())
    os.environ["CACHEKIT_HOME"] = str(tmp_path_factory.mktemp("cachekit-home"))
    os.environ.pop("CACHEKIT_CACHE_URL", None)
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(params=["sync", "async"])
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    h = Harness(request.param)
    yield h
    h.close()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"

"""A client made before ``fork()`` keeps working in every child (gunicorn ``--preload``,
``multiprocessing``, Celery prefork): each child's calls are recorded to the ledger exactly once, its
exact cache answers, and nothing it inherited (a thread, a lock held by another thread, a connection)
makes it wait.

Real forks of this process (``multiprocessing`` with the "fork" start method, and ``os.fork``), the
real OpenAI SDK through cachekit, the in-process upstream, the SQLite ledger, and a SQLite store or a
real Redis 7. ``pytest.mark.timeout`` is only a hang guard: without the fix a child waits forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import types
import uuid
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx2
import numpy as np
import pytest

import cachekit
from cachekit import transport
from cachekit.cost.ledger import CallRecord, Ledger, SQLiteSink
from cachekit.cost.usage import UsageRecord
from cachekit.pipeline.flights import Flights
from cachekit.semantic.layer import SemanticConfig, SemanticLayer
from cachekit.stores import MemoryStore, RedisStore, SQLiteStore
from tests.conftest import SDK, Harness
from tests.redis_servers import redis7_server, redis_cluster  # noqa: F401 - fixtures

pytestmark = pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork()")

REPO = Path(__file__).resolve().parent.parent
CHAT = "chat.completions.with_raw_response.create"


@contextlib.contextmanager
def _forking() -> Iterator[None]:
    # Python 3.12+ warns about fork() in a process with threads; these tests fork on purpose.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


def _fork(child: Callable[[], int]) -> int:
    """Run ``child`` in a process made by ``os.fork()``; return its exit code. The child always ends
    with ``os._exit`` (no exit hooks of this test process run there)."""
    with _forking():
        pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 70
        try:
            code = child()
        finally:
            os._exit(code)
    try:
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    except BaseException:  # the hang guard fired: a child that hangs must not outlive the test
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise


def _ask(sdk: SDK, tenant: str) -> str:
    """One chat call labelled ``tenant`` in the ledger; what cachekit did with it."""
    raw = sdk.call(
        CHAT,
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": f"What is fork safety, {tenant}?"}],
        extra_headers={"x-cachekit-tenant": tenant},
    )
    return str(raw.headers["x-cachekit-cache"])


def _outcomes(path: Path) -> dict[str | None, list[str]]:
    sink = SQLiteSink(path)
    try:
        records: list[CallRecord] = sink.read()
    finally:
        sink.close()
    by_tenant: dict[str | None, list[str]] = {}
    for record in records:
        by_tenant.setdefault(record.tenant, []).append(record.outcome)
    return {tenant: sorted(outcomes) for tenant, outcomes in by_tenant.items()}


@pytest.fixture(params=["sqlite", "redis7"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "sqlite":
        made: Any = SQLiteStore(tmp_path / "cache.db")
    else:
        server = request.getfixturevalue("redis7_server")
        # Its own prefix: the server is shared by the session. A generous timeout: the children and
        # the server share two busy cores, and a timed-out read would be a miss, not a failure.
        made = RedisStore(server.url, prefix=f"fork-{uuid.uuid4().hex[:12]}:", timeout=2.0)
    yield made
    if request.param == "redis7":
        made.clear()
    made.close()


@pytest.fixture
def client(store: Any, tmp_path: Path) -> Iterator[tuple[SDK, Ledger, Path]]:
    """A cachekit OpenAI client made in this (the parent) process, with a SQLite ledger whose writer
    writes only when flushed or closed, so records land only through what a child does at its end."""
    path = tmp_path / "ledger.sqlite3"
    ledger = Ledger([SQLiteSink(path)], flush_interval=3600)
    harness = Harness("sync")
    sdk = harness.sdk("openai", cache=cachekit.CacheConfig(store=store, ledger=ledger))
    yield sdk, ledger, path
    harness.close()
    ledger.close()


# -- a worker pool -------------------------------------------------------------------------------------

#: The client the pool's workers inherit (a pool task is a module-level function).
_INHERITED: dict[str, SDK] = {}


def _pool_task(n: int) -> list[str]:
    sdk = _INHERITED["sdk"]
    return [_ask(sdk, f"task-{n}"), _ask(sdk, f"task-{n}")]


def _flushing_pool_task(n: int) -> list[str]:
    answers = _pool_task(n)
    ledger = cachekit.cache_of(_INHERITED["sdk"].client).ledger
    assert ledger is not None
    ledger.flush()  # as docs/operations.md shows
    return answers


@pytest.mark.timeout(240)
@pytest.mark.parametrize("ending", ["close-join", "terminate"])
def test_a_worker_pool_records_every_call_once_and_hits_its_cache(
    client: tuple[SDK, Ledger, Path], ending: str
) -> None:
    sdk, ledger, path = client
    assert _ask(sdk, "parent") == "miss"  # still in the parent's queue when the pool forks
    _INHERITED["sdk"] = sdk
    context = multiprocessing.get_context("fork")
    try:
        if ending == "close-join":
            with _forking():
                pool = context.Pool(2)
            try:
                answers = pool.map(_pool_task, range(6), chunksize=1)
                # The workers end when their target returns: that is where they write their records.
                pool.close()
                pool.join()
            finally:
                pool.terminate()
        else:
            with _forking(), context.Pool(2) as pool:  # leaving the block kills the workers
                answers = pool.map(_flushing_pool_task, range(6), chunksize=1)
    finally:
        _INHERITED.clear()
    assert answers == [["miss", "hit"]] * 6  # each worker's exact cache answers the repeat
    ledger.close()
    outcomes = _outcomes(path)
    # Every worker's records landed, and the parent's record is written once (by the parent).
    assert outcomes == {
        "parent": ["miss"],
        **{f"task-{n}": ["exact_hit", "miss"] for n in range(6)},
    }


# -- os.fork, children that end with os._exit ------------------------------------------------------


@pytest.mark.timeout(240)
@pytest.mark.parametrize("flush", ["close", "flush"])
def test_os_fork_children_that_flush_before_os_exit_keep_their_records(
    client: tuple[SDK, Ledger, Path], flush: str
) -> None:
    sdk, ledger, path = client
    assert _ask(sdk, "parent") == "miss"

    def child(n: int) -> Callable[[], int]:
        def run() -> int:
            answers = [_ask(sdk, f"child-{n}"), _ask(sdk, f"child-{n}")]
            # What docs/operations.md promises a child that ends with os._exit: close the client,
            # or flush the ledger, first.
            if flush == "close":
                sdk.close()
            else:
                ledger = cachekit.cache_of(sdk.client).ledger
                assert ledger is not None
                ledger.flush()
            return 0 if answers == ["miss", "hit"] else 3

        return run

    assert [_fork(child(n)) for n in range(2)] == [0, 0]
    assert _ask(sdk, "parent") == "hit"  # the parent's own connections still work
    ledger.close()
    assert _outcomes(path) == {
        "parent": ["exact_hit", "miss"],
        "child-0": ["exact_hit", "miss"],
        "child-1": ["exact_hit", "miss"],
    }


# -- a pre-forking server's workers, which exit normally -------------------------------------------

_PREFORK = """
import os, sys
import httpx2
import cachekit
from cachekit.cost.ledger import Ledger, SQLiteSink
from cachekit.stores import SQLiteStore
from cachekit.testing import FakeUpstream

ledger = Ledger([SQLiteSink(sys.argv[1])], flush_interval=3600)
client = cachekit.OpenAI(
    api_key="sk-test", base_url="https://api.openai.com/v1", max_retries=0,
    http_client=httpx2.Client(transport=FakeUpstream()),
    cache=cachekit.CacheConfig(store=SQLiteStore(sys.argv[2]), ledger=ledger),
)

def ask(tenant):
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hello"}],
        extra_headers={"x-cachekit-tenant": tenant},
    )
    return raw.headers["x-cachekit-cache"]

ask("master")  # like an app warmed up before gunicorn --preload forks: still queued at the fork
workers = []
for n in range(2):
    pid = os.fork()
    if pid == 0:
        # A worker serves, then exits the way gunicorn's do: sys.exit, so exit hooks run.
        sys.exit(0 if [ask(f"worker-{n}"), ask(f"worker-{n}")] == ["miss", "hit"] else 3)
    workers.append(pid)
sys.exit(max(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in workers))
"""


@pytest.mark.timeout(240)
def test_a_preforking_servers_workers_write_their_records_when_they_exit(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite3"
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_PREFORK), str(ledger), str(tmp_path / "cache.db")],
        cwd=REPO,
        env={**os.environ, "CACHEKIT_HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert _outcomes(ledger) == {
        "master": ["miss"],  # written by the master alone, not once more by each worker
        "worker-0": ["exact_hit", "miss"],
        "worker-1": ["exact_hit", "miss"],
    }


# -- locks another thread held at the fork ---------------------------------------------------------

_LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()))
_OPAQUE = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.CodeType,
    types.FrameType,
    str,
    bytes,
    int,
    float,
    np.ndarray,
)
_CONTAINERS = (dict, list, tuple, set, frozenset)


def _cachekit_locks(*roots: object) -> list[Any]:
    """Every lock kept by a cachekit object reachable from ``roots``, and every module-level lock of
    a cachekit module: the locks a forked child could find held."""
    found: dict[int, Any] = {}
    seen: set[int] = set()
    stack: list[tuple[object, bool]] = [(root, False) for root in roots]
    for name, module in list(sys.modules.items()):
        if name == "cachekit" or name.startswith("cachekit."):
            stack.extend((value, True) for value in vars(module).values())
    while stack:
        obj, owned = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, _LOCK_TYPES):
            if owned:
                found[id(obj)] = obj
            continue
        if isinstance(obj, _OPAQUE):
            continue
        # A container belongs to whoever holds it; any other object to its class's package.
        mine = owned if isinstance(obj, _CONTAINERS) else type(obj).__module__.startswith("cachekit")
        stack.extend((ref, mine) for ref in gc.get_referents(obj))
    return list(found.values())


@pytest.mark.timeout(240)
def test_a_child_forked_while_another_thread_holds_every_cachekit_lock_still_serves(
    client: tuple[SDK, Ledger, Path], store: Any
) -> None:
    sdk, ledger, path = client
    assert _ask(sdk, "parent") == "miss"
    locks = _cachekit_locks(sdk.client, store, ledger)
    assert len(locks) > 20  # the walk finds the client's parts (a check on this test itself)
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        taken = [lock for lock in locks if lock.acquire(blocking=False)]
        holding.set()
        release.wait()
        for lock in taken:
            lock.release()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        holding.wait()

        def child() -> int:
            answers = [_ask(sdk, "child"), _ask(sdk, "child")]
            sdk.close()
            return 0 if answers == ["miss", "hit"] else 3

        code = _fork(child)
    finally:
        release.set()
        holder.join()
    assert code == 0
    ledger.close()
    assert _outcomes(path) == {"parent": ["miss"], "child": ["exact_hit", "miss"]}


# -- the parts with threads and connections, one at a time ----------------------------------------


@pytest.mark.timeout(60)
def test_a_sqlite_ledger_sink_writes_on_a_connection_of_its_own_in_a_child(tmp_path: Path) -> None:
    sink = SQLiteSink(tmp_path / "ledger.sqlite3")
    ledger = Ledger([sink])
    try:
        ledger.record_call("openai", "gpt-4o-mini", UsageRecord(10, 0, 0, 0, 1), tenant="parent")
        ledger.flush()
        inherited = sink._conn

        def child() -> int:
            ledger.record_call("openai", "gpt-4o-mini", UsageRecord(10, 0, 0, 0, 1), tenant="child")
            ledger.flush()
            # SQLite forbids using a connection across fork(): the child's must be its own.
            return 0 if sink._conn is not None and sink._conn is not inherited else 3

        assert _fork(child) == 0
    finally:
        ledger.close()
    assert _outcomes(tmp_path / "ledger.sqlite3") == {"parent": ["miss"], "child": ["miss"]}


@pytest.mark.timeout(60)
def test_a_child_leads_the_flights_its_parent_had_in_progress() -> None:
    flights = Flights()
    flights.join("key")  # led by this process's thread, which the child does not have
    assert _fork(lambda: 0 if flights.join("key")[1] else 3) == 0


@pytest.mark.timeout(60)
def test_deferred_stream_cleanup_runs_in_a_child() -> None:
    transport._defer.start()

    def child() -> int:
        transport._defer.start()
        done = threading.Event()
        transport._defer(done.set)
        done.wait()  # the parent's worker thread is not here: a new one must run it
        return 0

    assert _fork(child) == 0


@pytest.mark.timeout(60)
def test_the_upstream_transport_cachekit_built_is_built_anew_in_a_child() -> None:
    caching = cachekit.CachingTransport(cache=cachekit.CacheConfig(store=MemoryStore(), ledger=False))
    request = httpx2.Request("POST", "https://api.openai.com/v1/chat/completions")
    try:
        parent = caching._inner_for(request, is_async=False)  # holds the parent's connections

        def child() -> int:
            return 0 if caching._inner_for(request, is_async=False) is not parent else 3

        assert _fork(child) == 0
        assert caching._inner_for(request, is_async=False) is parent
    finally:
        caching.close()


class _Embedder:
    """Two-dimensional unit vectors: this tests the layer's worker threads, not a model."""

    model_id = "test:unit"
    dimension = 2

    def embed(self, texts: Sequence[str]) -> Any:
        return np.full((len(texts), 2), 0.5**0.5, dtype=np.float32)


@pytest.mark.timeout(60)
def test_the_semantic_layer_runs_lookups_on_threads_of_the_child() -> None:
    layer = SemanticLayer(SemanticConfig(embedder=_Embedder()))
    try:
        assert layer.run(lambda: "parent") == "parent"  # its worker threads run in the parent now
        # In the child, a lookup runs within the layer's own deadline, instead of failing after it.
        assert _fork(lambda: 0 if layer.run(lambda: "child") == "child" else 3) == 0
    finally:
        layer.close()


@pytest.mark.timeout(120)
def test_a_redis_store_talks_on_connections_of_its_own_in_a_child(redis7_server: Any) -> None:  # noqa: F811
    store = RedisStore(redis7_server.url, prefix=f"fork-{uuid.uuid4().hex[:12]}:", timeout=2.0)
    loop = asyncio.new_event_loop()
    try:
        store.set("k", b"v")
        loop.run_until_complete(store.aset("a", b"w"))
        parent_sync = store._client().client_id()
        parent_async = store._async[loop].client

        def child() -> int:
            # The same event loop object: an async client kept from the parent would share its socket.
            if loop.run_until_complete(store.aget("a")) != b"w" or store._async[loop].client is parent_async:
                return 3
            # The plain client is kept: redis-py's pool opens connections of its own in a new process.
            return 0 if store.get("k") == b"v" and store._client().client_id() != parent_sync else 4

        assert _fork(child) == 0
        assert store.get("k") == b"v"
        assert store._client().client_id() == parent_sync
    finally:
        store.clear()
        loop.run_until_complete(store.aclose())
        loop.close()


@pytest.mark.timeout(180)
def test_a_redis_cluster_store_makes_a_cluster_client_of_its_own_in_a_child(redis_cluster: Any) -> None:  # noqa: F811
    store = RedisStore(redis_cluster.url, prefix=f"fork-{uuid.uuid4().hex[:12]}:", timeout=2.0)
    try:
        store.set("k", b"v")
        parent = store._client()

        def child() -> int:
            # redis-py's cluster client keeps locks of its topology that it does not renew in a child.
            return 0 if store.get("k") == b"v" and store._client() is not parent else 3

        assert _fork(child) == 0
        assert store._client() is parent
    finally:
        store.clear()
        store.close()


def test_the_fork_registry_keeps_nothing_alive() -> None:
    from cachekit import _fork as registry

    objects, locks = len(registry._objects), len(registry._locks)
    flights = Flights()  # registers itself and its lock
    assert (len(registry._objects), len(registry._locks)) == (objects + 1, locks + 1)
    gone = weakref.ref(flights)
    del flights
    assert gone() is None
    assert (len(registry._objects), len(registry._locks)) == (objects, locks)

"""The shared store: exact responses on Redis (one server, or a Redis Cluster), sync and async at once.

URLs::

    redis://[user:password@]host[:port][/db]       one server (db defaults to 0)
    rediss://...                                   the same over TLS
    redis+cluster://host[:port][,host2[:port2]...]   a Redis Cluster; any reachable node is enough
    rediss+cluster://...                           a Redis Cluster over TLS

    query parameters: prefix, timeout, connect_timeout, max_value_bytes, ssl_ca_certs (TLS only)

Layout. Each entry is one hash under ``<prefix>{<key>}`` with two fields: ``v``, the value bytes, and
``t``, when it was written (epoch seconds, a decimal string). The braces are a Cluster *hash tag*:
only the part inside them picks the slot, so entries spread evenly over the cluster while anything
kept later beside an entry (``<prefix>{<key>}:...``) lands in the entry's slot, where one transaction
can cover both. The per-store secret lives under ``<prefix>__secret__`` (no TTL): read with ``GET``, and only
when missing created with ``SET NX`` by whichever process comes first, so every process sharing the
Redis derives the same partitions; a prefix may therefore not contain braces.

Atomicity. A write is one ``MULTI``/``EXEC`` transaction: ``UNLINK`` the key, ``HSET v t``, then
``PEXPIRE`` unless there is no TTL (the key is new after ``UNLINK``, so it has none: that is the
``PERSIST``). Redis runs a transaction with no other command in between, and the key lives in one
slot, so a reader (``HGET``) sees the whole old entry, the whole new one, or none — never a value
without its TTL, or a value from one write with the time of another — and a writer that dies midway
leaves nothing behind (``EXEC`` never arrives). Overwriting replaces the TTL too. A non-positive TTL
only deletes the key. The async cluster client sends the same three commands as one Lua script
instead (redis-py's async cluster transactions are unusable: a thread and a new event loop per
queued command, in 8.1); a script is atomic in the same way, and its first write is an ``HSET`` so
that a full Redis refuses it as it refuses the transaction.

Eviction. Configure ``maxmemory-policy volatile-lru`` (or ``volatile-ttl``): every entry carries a
TTL by default while the secret has none, so memory pressure evicts old entries and never the secret.
With ``allkeys-lru`` the secret itself can be evicted; a new one is then made, which only turns every
later lookup into a miss (processes that already read the old secret keep their own partition — no
wrong answer either way). With ``noeviction`` a full Redis refuses writes: each is a
:class:`~cachekit.errors.StoreError` that the caller counts, and reads are still served, by processes
started afterwards too (the secret is only read when it exists: a refused ``SET NX`` costs nothing).

Failures. Every call is bounded: ``timeout`` on each socket read and write, ``connect_timeout`` on
connecting, and no retries (redis-py retries by default; a cache that waits is worse than a miss).
Async calls also get one overall deadline (``connect_timeout + 2 * timeout``). One exception: on a
Cluster whose state is ``fail`` (a master lost, the rest up), redis-py's *sync* client sleeps 250 ms
and re-reads the layout before raising ``CLUSTERDOWN``; the caller's circuit breaker limits that to
its failure threshold plus one probe per cooldown (run with ``cluster-require-full-coverage no`` so
the surviving masters keep serving their slots).
Every Redis error is raised as :class:`~cachekit.errors.StoreError` naming the operation and the
server, never a credential; the caller decides to go upstream. Works with Redis 6.0+ (no modules, no
command newer than 6.2), Valkey and managed Redis.

Sync and async. One :class:`RedisStore` is both a :class:`~cachekit.stores.base.Store` and an
:class:`~cachekit.stores.base.AsyncStore`. The sync client is made on first sync use. ``redis.asyncio``
connections belong to the event loop that made them, so there is one async client per running loop,
made on first use in that loop and closed when the loop shuts down its async generators (as
``asyncio.run`` does on exit) or by :meth:`RedisStore.aclose`.

Fork. A forked child (:mod:`cachekit._fork`) keeps the sync client of one server: redis-py's
connection pool sees the new process id and opens connections of its own. A Cluster client is made
anew (redis-py's cluster topology keeps locks it does not reset after a fork), and so is every async
client: ``redis.asyncio`` pools do not check the process, so a child in the parent's event loop would
otherwise talk on the parent's sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import threading
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar
from urllib.parse import unquote
from weakref import WeakKeyDictionary

from cachekit import _fork
from cachekit._closing import AsyncClosing, Closing
from cachekit.errors import ConfigError, MissingExtraError, StoreError, StoreUnavailableError
from cachekit.stores._query import query_params
from cachekit.stores.base import EntryInfo
from cachekit.stores.memory import _check_ttl

if TYPE_CHECKING:
    import redis
    import redis.asyncio
    import redis.asyncio.client
    import redis.asyncio.cluster
    import redis.client
    import redis.cluster

    SyncClient = redis.Redis | redis.cluster.RedisCluster
    AsyncClient = redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster

__all__ = ["REDIS_SCHEMES", "SECRET_RESYNC", "RedisStore"]

T = TypeVar("T")

#: Seconds between checks that Redis still holds the secret this process uses (see
#: :attr:`RedisStore.secret`).
SECRET_RESYNC = 30.0

_log = logging.getLogger("cachekit.stores")

#: The URL schemes :class:`RedisStore` opens.
REDIS_SCHEMES = ("redis", "rediss", "redis+cluster", "rediss+cluster")

_DEFAULT_PORT = 6379
_SECRET_SUFFIX = "__secret__"
_SECRET_BYTES = 32
#: Keys per SCAN step and per pipelined batch in the operator calls.
_BATCH = 500
#: A TTL longer than this (about 30,000 years) is stored as this: PEXPIRE refuses overflowing values.
_MAX_TTL_MS = 10**15
#: The write of :meth:`RedisStore._queue_set`, as one script (used where transactions are not usable).
#: Its first write is a command Redis refuses when memory is over ``maxmemory``, as it refuses a
#: transaction's ``HSET``: a script that has already written (``UNLINK``) may go on past the limit.
_SET_SCRIPT = """
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'hash' or kind == 'none' then redis.call('HSET', KEYS[1], 't', ARGV[2]) end
redis.call('UNLINK', KEYS[1])
redis.call('HSET', KEYS[1], 'v', ARGV[1], 't', ARGV[2])
if ARGV[3] ~= '' then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return 1
"""
_QUERY_PARAMS = ("prefix", "timeout", "connect_timeout", "max_value_bytes", "ssl_ca_certs")


@dataclass(frozen=True, slots=True)
class _Target:
    """What a Redis URL says, parsed and checked."""

    scheme: str
    hosts: tuple[tuple[str, int], ...]
    username: str | None
    password: str | None
    db: int
    params: dict[str, str]

    @property
    def tls(self) -> bool:
        return self.scheme.startswith("rediss")

    @property
    def cluster(self) -> bool:
        return self.scheme.endswith("+cluster")

    @property
    def where(self) -> str:
        """The servers, for messages: ``host:port[,host:port]`` (IPv6 hosts in brackets)."""
        return ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.hosts)

    def redacted(self) -> str:
        """The URL without credentials or query: ``scheme://***@host:port/db``."""
        auth = "***@" if self.username or self.password else ""
        db = "" if self.cluster else f"/{self.db}"
        return f"{self.scheme}://{auth}{self.where}{db}"


def _redact(url: str) -> str:
    """A possibly malformed URL with any ``user:password@`` replaced, for error messages."""
    scheme, sep, rest = url.partition("://")
    # Everything up to the last "@" may be a credential, even where it holds "?", "/" or "#"
    # (a password with an unescaped "?" would otherwise split into the query).
    if "@" in rest:
        rest = "***@" + rest.rsplit("@", 1)[1]
    shown = scheme + sep + rest
    return shown if len(shown) <= 200 else shown[:200] + "..."


def _parse_url(url: str) -> _Target:
    if not isinstance(url, str):
        raise ConfigError(f"a Redis URL must be a string, not {type(url).__name__}")
    scheme, sep, rest = url.partition("://")
    scheme = scheme.strip().lower()
    if not sep or scheme not in REDIS_SCHEMES:
        raise ConfigError(
            f"{_redact(url)!r} is not a Redis URL; use one of " + ", ".join(f"{s}://" for s in REDIS_SCHEMES)
        )
    rest, _, fragment = rest.partition("#")
    if fragment:
        raise ConfigError(f"{_redact(url)!r}: a Redis URL takes no #fragment")
    location, _, query = rest.partition("?")
    netloc, slash, path = location.partition("/")
    username = password = None
    if "@" in netloc:
        userinfo, netloc = netloc.rsplit("@", 1)
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
        if not colon and username is not None:
            # redis://secret@host: redis-cli and redis-py read a lone userinfo as the password.
            username, password = None, username
        password = password or None
    shown = _redact(url)
    hosts = tuple(_parse_host(part, shown) for part in netloc.split(","))
    cluster = scheme.endswith("+cluster")
    if not cluster and len(hosts) != 1:
        raise ConfigError(f"{shown!r} names {len(hosts)} hosts; a list of hosts needs {scheme}+cluster://")
    db = 0
    if slash and path not in ("",):
        if not (path.isascii() and path.isdecimal()):
            raise ConfigError(f"{shown!r}: the path must be a database number (/0), not /{path}")
        db = int(path)
        if cluster and db != 0:
            raise ConfigError(f"{shown!r}: a Redis Cluster has only database 0")
    params = query_params(query, _QUERY_PARAMS, scheme=scheme, shown=shown)
    if "ssl_ca_certs" in params and not scheme.startswith("rediss"):
        raise ConfigError(f"{scheme}:// parameter ssl_ca_certs needs TLS: use rediss://")
    return _Target(scheme, hosts, username, password, db, params)


def _parse_host(part: str, shown: str) -> tuple[str, int]:
    if part.startswith("["):  # [IPv6]:port
        host, bracket, tail = part[1:].partition("]")
        if not bracket or (tail and not tail.startswith(":")):
            raise ConfigError(f"{shown!r}: malformed IPv6 host {part!r}")
        port_text = tail[1:] if tail else ""
    else:
        host, _, port_text = part.partition(":")
    if not host:
        raise ConfigError(f"{shown!r} names no host")
    if not port_text:
        return host, _DEFAULT_PORT
    if not (port_text.isascii() and port_text.isdecimal()) or not 0 < int(port_text) < 65536:
        raise ConfigError(f"{shown!r}: port {port_text!r} is not a number from 1 to 65535")
    return host, int(port_text)


def _seconds(value: object, name: str) -> float:
    # bool is an int subclass; True seconds is certainly a mistake.
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ConfigError(f"RedisStore {name} must be a positive, finite number of seconds, not {value!r}")
    return float(value)


def _param_seconds(raw: str, name: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"Redis URL parameter {name} must be a number of seconds, not {raw!r}") from None
    return _seconds(value, name)


def _escape_glob(text: str) -> str:
    """Escape what SCAN MATCH treats as a pattern, so ``text`` matches only itself."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _import_redis() -> None:
    try:
        import redis
        import redis.asyncio
        import redis.asyncio.cluster
        import redis.cluster  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError("redis", "redis", "the Redis store (redis:// URLs)") from exc


class RedisStore(Closing, AsyncClosing):
    """Exact cached responses on Redis or a Redis Cluster, for sync and async clients alike.

    Args:
        url: ``redis://``, ``rediss://``, ``redis+cluster://`` or ``rediss+cluster://`` (see the
            module docstring); query parameters override the keyword arguments below.
        prefix: what every key of this store starts with. Stores with different prefixes share a
            Redis without seeing each other's entries (each has its own secret).
        timeout: seconds to wait on any one socket read or write (default 50 ms).
        connect_timeout: seconds to wait for a connection; defaults to ``timeout``.
        max_value_bytes: a larger value is not stored (a warning is logged and an earlier value under
            the same key is deleted).
        ssl_ca_certs: a CA bundle to verify the server's certificate with (TLS URLs only).
        clock: the time source for the ``t`` (created at) field, in epoch seconds. Expiry is Redis's.

    Raises:
        ConfigError: a malformed URL or a bad parameter (credentials are never echoed).
        MissingExtraError: the ``redis`` package is not installed (``pip install 'cachekit-llm[redis]'``).

    Nothing connects until first use, so constructing never fails for a down server; each operation
    then raises :class:`StoreError` on any Redis failure. The store is thread-safe, and usable from
    any number of event loops (one async client per loop). Use it as a context manager, or call
    :meth:`close` (sync) / :meth:`aclose` (async).
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "cachekit:",
        timeout: float = 0.05,
        connect_timeout: float | None = None,
        max_value_bytes: int = 16 * 2**20,
        ssl_ca_certs: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        target = _parse_url(url)
        params = target.params
        prefix = params.get("prefix", prefix)
        if "timeout" in params:
            timeout = _param_seconds(params["timeout"], "timeout")
        if "connect_timeout" in params:
            connect_timeout = _param_seconds(params["connect_timeout"], "connect_timeout")
        if "max_value_bytes" in params:
            raw = params["max_value_bytes"].strip()
            if not (raw.isascii() and raw.isdecimal()):
                raise ConfigError(
                    f"Redis URL parameter max_value_bytes must be a positive integer, not {raw!r}"
                )
            max_value_bytes = int(raw)
        ssl_ca_certs = params.get("ssl_ca_certs", ssl_ca_certs)
        if not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix:
            # A brace in the prefix would become the Cluster hash tag instead of the key's own.
            raise ConfigError(f"RedisStore prefix must be a non-empty string without braces, not {prefix!r}")
        self._timeout = _seconds(timeout, "timeout")
        self._connect_timeout = (
            self._timeout if connect_timeout is None else _seconds(connect_timeout, "connect_timeout")
        )
        if isinstance(max_value_bytes, bool) or not isinstance(max_value_bytes, int) or max_value_bytes <= 0:
            raise ConfigError(
                f"RedisStore max_value_bytes must be a positive integer, not {max_value_bytes!r}"
            )
        if ssl_ca_certs is not None and not target.tls:
            raise ConfigError("RedisStore ssl_ca_certs needs TLS: use rediss://")
        _import_redis()
        import redis.exceptions

        self._target = target
        self._prefix = prefix
        self._max_value_bytes = max_value_bytes
        self._ssl_ca_certs = ssl_ca_certs
        self._clock = clock
        self._secret_key = (prefix + _SECRET_SUFFIX).encode()
        # Everything a Redis call may raise. RedisClusterException is not a RedisError; OSError
        # covers a socket error redis-py does not wrap, and asyncio.TimeoutError (distinct on 3.10).
        self._errors: tuple[type[BaseException], ...] = (
            redis.exceptions.RedisError,
            redis.exceptions.RedisClusterException,
            OSError,
            asyncio.TimeoutError,
        )
        # The ones that mean "the backend did not answer" (they open the caller's circuit breaker);
        # an error reply (OOM, a refused command) means Redis is up.
        self._unavailable: tuple[type[BaseException], ...] = (
            redis.exceptions.ConnectionError,
            redis.exceptions.TimeoutError,
            redis.exceptions.ClusterDownError,
            redis.exceptions.MasterDownError,
            redis.exceptions.BusyLoadingError,
            redis.exceptions.RedisClusterException,
            OSError,
            asyncio.TimeoutError,
        )
        self._lock = _fork.lock(self)
        self._closed = False
        self._secret: bytes | None = None
        self._secret_checked = 0.0
        self._secret_lock = _fork.lock(self)
        self._sync: SyncClient | None = None
        # One async client per event loop. An entry goes when its loop shuts down its async
        # generators (see _LoopClient), or once the loop is found closed; keyed weakly besides.
        self._async: WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopClient] = WeakKeyDictionary()
        _fork.register(self)

    def _after_fork_in_child(self) -> None:
        # The async clients' connections are the parent's: kept (their finalizers would reach into the
        # parent's event loop) and replaced on first use. A plain sync client stays: its pool resets
        # itself in a new process. A cluster client does not reset its topology's locks: replaced.
        for slot in list(self._async.values()):
            _fork.keep(slot)
        self._async = WeakKeyDictionary()
        if self._sync is not None and self._target.cluster:
            _fork.keep(self._sync)
            self._sync = None

    # -- properties --------------------------------------------------------------------------------

    @property
    def prefix(self) -> str:
        """What every key of this store starts with."""
        return self._prefix

    @property
    def url(self) -> str:
        """The URL without credentials (``***@``) or query, safe to log."""
        return self._target.redacted()

    @property
    def is_cluster(self) -> bool:
        """Whether this store talks to a Redis Cluster."""
        return self._target.cluster

    @property
    def max_value_bytes(self) -> int:
        """The largest value this store keeps."""
        return self._max_value_bytes

    @property
    def timeout(self) -> float:
        """Seconds allowed for one socket read or write."""
        return self._timeout

    @property
    def connect_timeout(self) -> float:
        """Seconds allowed for connecting."""
        return self._connect_timeout

    @property
    def secret(self) -> bytes:
        """The 32-byte secret shared by every process using this Redis and prefix.

        Read (``GET``; created with ``SET NX`` only when missing) on first access and kept in this
        object; raises :class:`StoreError` when Redis cannot be reached then. Afterwards it is checked
        against Redis at most every :data:`SECRET_RESYNC` seconds: a secret lost with a Redis restart
        (no persistence), a failover or an eviction is written back (``SET NX``) from the one this
        process holds, and if another process got there first with a new one, this process adopts
        it — so every process converges on one secret and a credential keeps one partition. A failed
        check keeps the known secret. It is a blocking call, even from async code: once at first use
        and then once per :data:`SECRET_RESYNC` seconds, each bounded by the timeouts.
        """
        secret = self._secret
        now = time.monotonic()
        if secret is not None and now - self._secret_checked < SECRET_RESYNC:
            return secret
        with self._secret_lock:
            if self._secret is not None and now - self._secret_checked < SECRET_RESYNC:
                return self._secret
            self._secret_checked = now  # also after a failure: retried next period, not per request
            client = self._client()
            try:
                found = self._read_or_create_secret(client)
            except self._errors as exc:
                if self._secret is not None:
                    return self._secret
                self._fail("secret", exc)
            if not isinstance(found, bytes) or len(found) < _SECRET_BYTES:
                if self._secret is not None:
                    return self._secret
                # Only if something other than cachekit wrote the key, or it was evicted between the
                # SET and the GET: a value we cannot trust as a key for credential HMACs.
                raise StoreError(
                    f"Redis {self._target.where}: the secret under {self._secret_key.decode()!r} is "
                    "missing or damaged; delete that key to have a new one made"
                )
            if self._secret is not None and found != self._secret:
                _log.warning(
                    "Redis %s holds a different cachekit secret than this process had (Redis lost "
                    "its data or another process made a new one); adopting it",
                    self._target.where,
                )
            self._secret = found
            return found

    def _read_or_create_secret(self, client: SyncClient) -> bytes | str | None:
        """The secret Redis holds, written first only if it is missing.

        Read first: a full Redis under ``noeviction`` refuses every ``SET`` (``NX`` included, even on
        an existing key), so writing unconditionally would cost every process started afterwards its
        cache although the entries are readable. When missing, ``SET NX`` the one this process knows
        (or a new one) and read again: of processes racing here, exactly one write wins and every
        one of them reads the winner's.
        """
        found: bytes | str | None = client.get(self._secret_key)
        if found is None:
            client.set(self._secret_key, self._secret or os.urandom(_SECRET_BYTES), nx=True)
            found = client.get(self._secret_key)
        return found

    # -- the sync Store ----------------------------------------------------------------------------

    def get(self, key: str) -> bytes | None:
        """Return the value under ``key``, or ``None`` when absent or expired."""
        client = self._client()
        try:
            value = client.hget(self._key(key), "v")
        except self._errors as exc:
            self._fail("get", exc)
        return _bytes_or_none(value)

    def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        """Store ``value`` under ``key`` in one transaction, replacing any earlier value and TTL.

        A ``ttl`` of ``None`` (or infinity) never expires; zero or less only deletes an earlier value;
        one longer than about 31,700 years is kept that long. A value over
        ``max_value_bytes`` is not stored (the earlier value is deleted, so it is not served stale).
        """
        plan = self._plan_set(value, ttl)
        client = self._client()
        name = self._key(key)
        try:
            if plan is None:
                client.unlink(name)
                return
            pipe = client.pipeline(transaction=True)
            self._queue_set(pipe, name, *plan)
            pipe.execute()
        except self._errors as exc:
            self._fail("set", exc)

    def delete(self, key: str) -> None:
        """Remove ``key`` if present."""
        client = self._client()
        try:
            client.unlink(self._key(key))
        except self._errors as exc:
            self._fail("delete", exc)

    def clear(self) -> None:
        """Delete every entry of this store (``SCAN`` on every primary); the secret is kept.

        Only keys of this store's entry layout (``<prefix>{...``) go, so a store whose prefix
        extends this one (``cachekit:`` and ``cachekit:team-a:``) keeps its entries and secret.
        """
        pattern = _escape_glob(self._prefix) + "{*"
        try:
            for node in self._nodes():
                for batch in _scan_batches(node, pattern):
                    _unlink_each(node, batch)
        except self._errors as exc:
            self._fail("clear", exc)

    def close(self) -> None:
        """Close every connection; later calls raise :class:`StoreError`. Idempotent, needs no loop.

        Async clients of loops that are still open are handed to their loops to close.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            sync, self._sync = self._sync, None
            loops = list(self._async.items())
            self._async.clear()
        for loop, slot in loops:
            slot.close_soon(loop)
        if sync is not None:
            try:
                sync.close()
            except self._errors as exc:
                self._fail("close", exc)

    # -- the AsyncStore ----------------------------------------------------------------------------

    async def aget(self, key: str) -> bytes | None:
        """See :meth:`get`."""
        client = self._aclient()
        try:
            value = await self._bounded(client.hget(self._key(key), "v"))
        except self._errors as exc:
            self._fail("get", exc)
        return _bytes_or_none(value)

    async def aset(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        """See :meth:`set`."""
        import redis.asyncio.cluster

        plan = self._plan_set(value, ttl)
        client = self._aclient()
        name = self._key(key)
        try:
            if plan is None:
                await self._bounded(client.unlink(name))
            elif isinstance(client, redis.asyncio.cluster.RedisCluster):
                # redis-py's async cluster transactions run each queued command on a new thread and
                # event loop (8.1); a script is just as atomic (Redis runs it with nothing in between).
                value, created, ms = plan
                expiry = b"" if ms is None else b"%d" % ms
                await self._bounded(client.eval(_SET_SCRIPT, 1, name, value, created, expiry))
            else:
                pipe = client.pipeline(transaction=True)
                self._queue_set(pipe, name, *plan)
                await self._bounded(pipe.execute())
        except self._errors as exc:
            self._fail("set", exc)

    async def adelete(self, key: str) -> None:
        """See :meth:`delete`."""
        client = self._aclient()
        try:
            await self._bounded(client.unlink(self._key(key)))
        except self._errors as exc:
            self._fail("delete", exc)

    async def _bounded(self, call: Awaitable[T]) -> T:
        """``call`` within one overall deadline: redis-py's async cluster client otherwise sleeps
        250 ms and re-reads the cluster layout on a ``CLUSTERDOWN`` before failing."""
        return await asyncio.wait_for(call, self._connect_timeout + 2 * self._timeout)

    async def aclose(self) -> None:
        """Close this loop's connections now, and everything else as :meth:`close` does. Idempotent."""
        loop = asyncio.get_running_loop()
        with self._lock:
            mine = self._async.pop(loop, None)
        self.close()
        if mine is not None:
            await mine.guard.aclose()

    # -- Inspectable -------------------------------------------------------------------------------

    def entries(self, prefix: str = "") -> Iterator[EntryInfo]:
        """Yield every live entry whose key starts with ``prefix`` (``SCAN`` on every primary).

        Sizes are the value's bytes; ``expires_at`` is this machine's clock plus the remaining TTL.
        """
        start = self._prefix + "{"
        pattern = _escape_glob(start + prefix) + "*"
        try:
            for node in self._nodes():
                for batch in _scan_batches(node, pattern):
                    yield from self._describe(node, batch, start, prefix)
        except self._errors as exc:
            self._fail("entries", exc)

    def delete_many(self, keys: Iterable[str]) -> int:
        """Delete ``keys``; return how many existed."""
        client = self._client()
        names = [self._key(key) for key in keys]
        deleted = 0
        try:
            for i in range(0, len(names), _BATCH):
                # One command per key: in a cluster, keys of different slots cannot share one DEL.
                pipe = client.pipeline(transaction=False)
                for name in names[i : i + _BATCH]:
                    pipe.unlink(name)
                deleted += sum(int(n) for n in pipe.execute())
        except self._errors as exc:
            self._fail("delete_many", exc)
        return deleted

    def ping(self) -> None:
        """Return if Redis (every primary of a cluster) answers ``PING``; raise :class:`StoreError`."""
        try:
            for node in self._nodes():
                node.ping()
        except self._errors as exc:
            self._fail("ping", exc)

    # -- dunder ------------------------------------------------------------------------------------

    def __repr__(self) -> str:
        return f"RedisStore({self._target.redacted()!r}, prefix={self._prefix!r})"

    # -- internals ---------------------------------------------------------------------------------

    def _key(self, key: str) -> bytes:
        return f"{self._prefix}{{{key}}}".encode()

    def _plan_set(self, value: bytes, ttl: float | None) -> tuple[bytes, bytes, int | None] | None:
        """(value, created-at field, TTL in ms or None) to write, or None to only delete the key."""
        ttl = _check_ttl(ttl)
        if ttl is not None and ttl <= 0:
            return None
        value = bytes(value)
        if len(value) > self._max_value_bytes:
            _log.warning(
                "not caching an entry of %d bytes in Redis %s: larger than max_value_bytes=%d",
                len(value),
                self._target.where,
                self._max_value_bytes,
            )
            return None
        # Clamped before rounding: a huge TTL (1e308 s) is an infinite float of milliseconds, which
        # round() refuses (an OverflowError that failed every write).
        ms = None if ttl is None else max(1, round(min(ttl * 1000, _MAX_TTL_MS)))
        return value, f"{self._clock():.6f}".encode(), ms

    @staticmethod
    def _queue_set(
        pipe: redis.client.Pipeline | redis.cluster.ClusterPipeline | redis.asyncio.client.Pipeline,
        name: bytes,
        value: bytes,
        created: bytes,
        ms: int | None,
    ) -> None:
        # UNLINK first: the hash then holds exactly v and t whatever the key held before, and a new
        # key has no TTL, so "no TTL" needs no PERSIST.
        pipe.unlink(name)
        pipe.hset(name, mapping={b"v": value, b"t": created})
        if ms is not None:
            pipe.pexpire(name, ms)

    def _fail(self, operation: str, exc: BaseException) -> NoReturn:
        message = f"Redis {self._target.where}: {operation} failed: {type(exc).__name__}: {exc}"
        # redis-py's messages name hosts, not credentials; scrub anyway, in case a future one does.
        # (Not credentials shorter than 4 characters: replacing every "u" would garble the message.)
        for credential in (self._target.password, self._target.username):
            if credential and len(credential) >= 4:
                message = message.replace(credential, "***")
        if isinstance(exc, self._unavailable):
            raise StoreUnavailableError(message) from exc
        raise StoreError(message) from exc

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"the Redis store {self._target.redacted()} is closed")

    def _client_kwargs(self) -> dict[str, Any]:
        target = self._target
        kwargs: dict[str, Any] = {
            "username": target.username,
            "password": target.password,
            "socket_timeout": self._timeout,
            "socket_connect_timeout": self._connect_timeout,
            # RESP2: understood by every server, proxy and managed service (redis-py 8 otherwise
            # negotiates RESP3 with HELLO, which some proxies refuse); nothing here needs RESP3.
            "protocol": 2,
        }
        if target.tls:
            kwargs["ssl"] = True
            if self._ssl_ca_certs is not None:
                kwargs["ssl_ca_certs"] = self._ssl_ca_certs
        return kwargs

    def _client(self) -> SyncClient:
        """The sync client, made on first use; raises StoreError when closed or unreachable (cluster)."""
        client = self._sync
        if client is not None and not self._closed:
            return client
        with self._lock:
            self._check_open()
            if self._sync is None:
                try:
                    self._sync = self._new_sync_client()
                except self._errors as exc:
                    self._fail("connect", exc)
            return self._sync

    def _new_sync_client(self) -> SyncClient:
        import redis
        import redis.cluster
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        target = self._target
        # No retries: redis-py 6+ retries failed commands (three times, with backoff) by default.
        no_retry = Retry(NoBackoff(), 0)
        if target.cluster:
            # Connects now (CLUSTER SLOTS), bounded by the timeouts; a failure is raised to the caller.
            return redis.cluster.RedisCluster(
                # ClusterNode and get_primaries lack annotations in redis-py.
                startup_nodes=[redis.cluster.ClusterNode(h, p) for h, p in target.hosts],  # type: ignore[no-untyped-call]
                retry=no_retry,
                **self._client_kwargs(),
            )
        host, port = target.hosts[0]
        return redis.Redis(host=host, port=port, db=target.db, retry=no_retry, **self._client_kwargs())

    def _nodes(self) -> list[redis.Redis]:
        """One client per primary: the whole keyspace for SCAN-based operator calls."""
        import redis.cluster

        client = self._client()
        if isinstance(client, redis.cluster.RedisCluster):
            primaries = client.get_primaries()  # type: ignore[no-untyped-call]
            return [client.get_redis_connection(node) for node in primaries]
        return [client]

    def _aclient(self) -> AsyncClient:
        """This event loop's async client, made on first use in the loop."""
        loop = asyncio.get_running_loop()
        with self._lock:
            self._check_open()
            slot = self._async.get(loop)
            if slot is not None:
                return slot.client
            # Forget clients of loops closed without shutting down their async generators: their
            # connections cannot be closed any more, and holding them would keep the loops alive.
            for old in [old for old in self._async if old.is_closed()]:
                del self._async[old]
            slot = _LoopClient(self._new_async_client(), self._async, self._lock)
            self._async[loop] = slot
        return slot.client

    def _new_async_client(self) -> AsyncClient:
        import redis.asyncio
        import redis.asyncio.cluster
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        target = self._target
        no_retry = Retry(NoBackoff(), 0)
        if target.cluster:
            # Nothing connects here: the async cluster client initializes on its first command.
            return redis.asyncio.cluster.RedisCluster(
                startup_nodes=[redis.asyncio.cluster.ClusterNode(h, p) for h, p in target.hosts],
                retry=no_retry,
                **self._client_kwargs(),
            )
        host, port = target.hosts[0]
        return redis.asyncio.Redis(
            host=host, port=port, db=target.db, retry=no_retry, **self._client_kwargs()
        )

    def _describe(
        self, node: redis.Redis, names: list[bytes], start: str, prefix: str
    ) -> Iterator[EntryInfo]:
        if not names:
            return
        pipe = node.pipeline(transaction=False)
        for name in names:
            pipe.hstrlen(name, "v")
            pipe.hget(name, "t")
            pipe.pttl(name)
        replies = pipe.execute(raise_on_error=False)
        now = self._clock()
        for i, name in enumerate(names):
            size, created, pttl = replies[3 * i : 3 * i + 3]
            if any(isinstance(r, Exception) for r in (size, created, pttl)) or pttl == -2:
                continue  # gone since the SCAN, or not one of our hashes
            text = name.decode("utf-8", "replace")
            if not (text.startswith(start) and text.endswith("}")):
                continue
            key = text[len(start) : -1]
            if not key.startswith(prefix):
                continue
            try:
                created_at = None if created is None else float(created)
            except ValueError:
                created_at = None
            expires_at = None if pttl < 0 else now + pttl / 1000
            yield EntryInfo(key=key, size=int(size), created_at=created_at, expires_at=expires_at)


def _bytes_or_none(value: bytes | str | None) -> bytes | None:
    # The clients never decode responses, so a reply is bytes; str only to satisfy the signature.
    return value.encode() if isinstance(value, str) else value


def _scan_batches(node: redis.Redis, pattern: str) -> Iterator[list[bytes]]:
    """The keys matching ``pattern`` on one node, in batches of up to ``_BATCH`` (``SCAN``)."""
    batch: list[bytes] = []
    for name in node.scan_iter(match=pattern, count=_BATCH):
        batch.append(name)
        if len(batch) >= _BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _unlink_each(node: redis.Redis, names: list[bytes]) -> None:
    # One UNLINK per key: keys on one node may still be in different slots (one command, one slot).
    if not names:
        return
    pipe = node.pipeline(transaction=False)
    for name in names:
        pipe.unlink(name)
    pipe.execute()


class _LoopClient:
    """One event loop's async client, and the async generator that closes it when the loop ends.

    ``asyncio.run`` (and ``loop.shutdown_asyncgens()``) closes every async generator started in the
    loop before the loop closes. The guard generator is started in the loop at creation, so its
    ``finally`` closes the client's connections while the loop can still run them; otherwise they
    would be left to the garbage collector on a closed loop (``ResourceWarning``s, open sockets).
    """

    def __init__(
        self,
        client: AsyncClient,
        registry: WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopClient],
        lock: threading.Lock,
    ) -> None:
        self.client = client
        # The guard must not reference the loop (the registry's key) or the entry would never go.
        self.guard = _guard(client, registry, lock)
        step = self.guard.__anext__()  # registers the generator with the running loop's hooks
        with contextlib.suppress(StopIteration):
            step.send(None)  # runs up to the first yield: no awaiting needed

    def close_soon(self, loop: asyncio.AbstractEventLoop) -> None:
        """Have ``loop`` close the client (from any thread); a closed loop's client is abandoned."""
        if loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # closed meanwhile
            loop.call_soon_threadsafe(_spawn, loop, self.guard)


#: Close tasks in flight: the event loop keeps only weak references to its tasks.
_CLOSING: set[asyncio.Task[None]] = set()


def _spawn(loop: asyncio.AbstractEventLoop, guard: AsyncGenerator[None, None]) -> None:
    task = loop.create_task(guard.aclose())
    _CLOSING.add(task)
    task.add_done_callback(_CLOSING.discard)


async def _guard(
    client: AsyncClient,
    registry: WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopClient],
    lock: threading.Lock,
) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        loop = asyncio.get_running_loop()
        with lock:
            slot = registry.get(loop)
            if slot is not None and slot.client is client:
                del registry[loop]
        await client.aclose()

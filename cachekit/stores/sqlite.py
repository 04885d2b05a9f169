"""The embedded default store: one SQLite file, shared by the threads and processes that open it.

Layout (schema version 1)::

    entries(key TEXT PRIMARY KEY, value BLOB NOT NULL, created_at REAL, expires_at REAL)
    meta(name TEXT PRIMARY KEY, value BLOB)      -- 'schema_version' and 'secret'

Concurrency: the file runs in WAL mode, so readers never block the writer nor each other, and every
write is a single ``INSERT OR REPLACE`` statement (its own transaction), so a reader in any process
sees the whole old entry or the whole new one, never half. Several processes wait for each other's
write lock up to ``timeout`` seconds (SQLite's busy timeout).

Inside a process, one connection is shared by all threads behind a lock. Measured against a
connection per thread (``threading.local``), 20,000 gets of 1,000 keys on a 2-core machine, 1/4/8
threads, thousands of gets per second (lock vs per-thread): 200-byte values 80/46/49 vs 84/27/33;
2 KB 64-79/46-55/45-51 vs 62-67/16-22/30-46; 20 KB 32/25/27 vs 30/29/30. The shared connection is as
fast or faster except for large values under many threads (GIL-bound Python overhead dominates, and
extra connections add WAL-index locking), and it makes :meth:`SQLiteStore.close` exact: no connections
are stranded in threads that have finished. A forked child opens a connection of its own on first
use: SQLite forbids using one across ``fork()`` (:mod:`cachekit._fork`).
"""

from __future__ import annotations

import logging
import math
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import TracebackType

from cachekit import _fork
from cachekit.errors import ConfigError, StoreError, StoreUnavailableError
from cachekit.stores.base import EntryInfo
from cachekit.stores.memory import _check_ttl

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]

_log = logging.getLogger("cachekit.stores")

#: The layout this code writes and reads. A file with a higher version was written by a newer
#: cachekit and is refused rather than misread.
SCHEMA_VERSION = 1

#: Seconds opening (and creating) the file may wait for other processes doing the same.
OPEN_TIMEOUT = 5.0

#: Expired rows are deleted by one in this many ``set`` calls, so the cost is amortized.
PURGE_EVERY = 256

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS entries ("
    " key TEXT PRIMARY KEY, value BLOB NOT NULL, created_at REAL, expires_at REAL)",
    "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value BLOB)",
)
_GET = "SELECT value FROM entries WHERE key = ? AND (expires_at IS NULL OR expires_at > ?)"
_SET = "INSERT OR REPLACE INTO entries (key, value, created_at, expires_at) VALUES (?, ?, ?, ?)"
_PURGE = "DELETE FROM entries WHERE expires_at IS NOT NULL AND expires_at <= ?"

# SQLite's primary result codes: "database is locked" (by another connection, or within this one)
# and "file is not a database".
_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6
_SQLITE_NOTADB = 26


class SQLiteStore:
    """A thread- and process-safe store in one SQLite file (WAL mode).

    Args:
        path: the database file; missing parent directories are created. It may be shared by any
            number of processes on one host (not over a network file system: WAL needs shared memory).
        clock: the time source for TTLs, in seconds; inject a fake one in tests.
        timeout: how long, in seconds, a get or set waits for another connection's write lock before
            failing (the cache path is bounded; opening the file waits up to :data:`OPEN_TIMEOUT`).
            Short by default (50 ms): a cache must answer well within a request's budget, so a write
            that would wait longer fails (:class:`StoreError`), and the caller skips and counts it.

    Raises:
        ConfigError: the file is not a SQLite database, belongs to another application, or was
            written by a newer cachekit (schema version higher than :data:`SCHEMA_VERSION`).
        StoreError: the file cannot be opened or initialized.

    Entries never expire for space, only by TTL; expired rows are misses and are deleted every
    :data:`PURGE_EVERY` writes or by :meth:`purge_expired`. The store is a context manager.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Callable[[], float] = time.time,
        timeout: float = 0.05,
    ) -> None:
        if not 0 <= timeout < math.inf:  # also rejects NaN
            raise ConfigError(f"SQLiteStore timeout must be a finite number of seconds >= 0, not {timeout!r}")
        self._path = Path(path)
        self._clock = clock
        self._timeout = float(timeout)
        self._lock = _fork.lock(self)
        self._closed = False
        self._sets = 0
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the directory for the SQLite store {str(self._path)!r}") from exc
        conn, self._secret = self._open()
        #: None in a forked child until it opens its own (see _after_fork_in_child).
        self._conn: sqlite3.Connection | None = conn
        _fork.register(self)

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    @property
    def secret(self) -> bytes:
        """The file's 32-byte secret: created by whichever process opened the file first, then shared."""
        return self._secret

    # Each method below takes the lock and catches sqlite3.Error inline rather than through a
    # @contextmanager helper: the generator machinery cost about a third of a small get's time.

    def get(self, key: str) -> bytes | None:
        """Return the value under ``key``, or ``None`` when absent or expired."""
        with self._lock:
            conn = self._live()
            try:
                row = conn.execute(_GET, (key, self._clock())).fetchone()
            except sqlite3.Error as exc:
                raise self._failed(exc) from exc
        return None if row is None else bytes(row[0])

    def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        """Store ``value`` under ``key`` in one statement, replacing any earlier value.

        A ``ttl`` of ``None`` (or infinity) never expires; a ``ttl`` of zero or less is already
        expired, so it only removes an earlier value (as in every store: no expired row is written).
        """
        ttl = _check_ttl(ttl)
        now = self._clock()
        expires_at = None if ttl is None else now + ttl
        with self._lock:
            conn = self._live()
            try:
                if ttl is not None and ttl <= 0:
                    conn.execute("DELETE FROM entries WHERE key = ?", (key,))
                    return
                conn.execute(_SET, (key, bytes(value), now, expires_at))
                self._sets += 1
                if self._sets % PURGE_EVERY == 0:
                    purged = conn.execute(_PURGE, (now,)).rowcount
                    if purged:
                        _log.debug("deleted %d expired entries from %s", purged, self._path)
            except sqlite3.Error as exc:
                raise self._failed(exc) from exc

    def delete(self, key: str) -> None:
        """Remove ``key`` if present."""
        self._execute("DELETE FROM entries WHERE key = ?", (key,))

    def clear(self) -> None:
        """Remove every entry; the secret and the schema version are kept."""
        self._execute("DELETE FROM entries", ())

    def purge_expired(self) -> int:
        """Delete every expired row now and return how many were deleted."""
        return self._execute(_PURGE, (self._clock(),))

    def entries(self, prefix: str = "") -> Iterator[EntryInfo]:
        """Yield every live entry whose key starts with ``prefix`` (read in one query, then yielded)."""
        sql = (
            "SELECT key, length(value), created_at, expires_at FROM entries"
            " WHERE key >= ? AND (expires_at IS NULL OR expires_at > ?)"
        )
        params: tuple[object, ...] = (prefix, self._clock())
        upper = _successor(prefix)
        if upper is not None:
            # A range, not LIKE: no wildcard escaping, and the primary key's index answers it.
            sql += " AND key < ?"
            params += (upper,)
        with self._lock:
            conn = self._live()
            try:
                rows = conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise self._failed(exc) from exc
        for key, size, created_at, expires_at in rows:
            if key.startswith(prefix):  # the range is exact; this only guards against its edge cases
                yield EntryInfo(key, int(size), created_at, expires_at)

    def delete_many(self, keys: Iterable[str]) -> int:
        """Delete ``keys`` in one transaction; return how many were live (expired rows go uncounted)."""
        unique = list(dict.fromkeys(keys))
        now = self._clock()
        deleted = 0
        with self._lock:
            conn = self._live()
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    # Chunks stay under SQLite's bound-parameter limit (999 in older builds).
                    for i in range(0, len(unique), 500):
                        chunk = unique[i : i + 500]
                        marks = ",".join("?" * len(chunk))
                        deleted += conn.execute(
                            f"SELECT COUNT(*) FROM entries WHERE key IN ({marks})"
                            " AND (expires_at IS NULL OR expires_at > ?)",
                            (*chunk, now),
                        ).fetchone()[0]
                        conn.execute(f"DELETE FROM entries WHERE key IN ({marks})", chunk)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise self._failed(exc) from exc
        return int(deleted)

    def ping(self) -> None:
        """Return if the file answers a query; :class:`StoreError` otherwise (or once closed)."""
        with self._lock:
            conn = self._live()
            try:
                conn.execute("SELECT 1 FROM entries LIMIT 1").fetchall()
            except sqlite3.Error as exc:
                raise self._failed(exc) from exc

    def close(self) -> None:
        """Close the connection; later calls raise :class:`StoreError`. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            # None in a forked child that never opened its own: the inherited one is the parent's.
            conn, self._conn = self._conn, None
            if conn is not None:
                try:
                    conn.close()
                except sqlite3.Error as exc:
                    raise StoreError(f"closing the SQLite store {str(self._path)!r} failed") from exc

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self._path)!r})"

    # -- internals ---------------------------------------------------------------------------------

    def _open(self) -> tuple[sqlite3.Connection, bytes]:
        """Connect, configure and initialize; return the connection and the file's secret.

        SQLite's busy handler does not cover every lock conflict: switching a new file to WAL while
        another process does the same fails at once with "database is locked" (SQLite refuses to wait
        where waiting could deadlock). So the whole sequence is retried, with backoff, until
        ``timeout`` has passed.
        """
        # Opening is not on a request's path and many processes may create the file at once: it waits
        # up to OPEN_TIMEOUT (at least the operation timeout), then the busy timeout drops to
        # ``timeout`` for gets and sets.
        open_timeout = max(self._timeout, OPEN_TIMEOUT)
        deadline = time.monotonic() + open_timeout
        delay = 0.001
        while True:
            conn: sqlite3.Connection | None = None
            try:
                # Autocommit (isolation_level=None): each statement is its own transaction, and the
                # one multi-statement transaction (initialization) is explicit. check_same_thread=False
                # because the one connection is shared by every thread, serialized by self._lock.
                conn = sqlite3.connect(
                    self._path, timeout=open_timeout, isolation_level=None, check_same_thread=False
                )
                # connect()'s timeout installs the same busy handler; the pragma states it explicitly
                # and caps it, since SQLite takes milliseconds as a 32-bit int.
                conn.execute(f"PRAGMA busy_timeout = {_millis(open_timeout)}")
                # The first statement that reads the file: this is where a non-database is detected.
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                conn.execute("PRAGMA synchronous = NORMAL")
                secret = self._initialize(conn)
                conn.execute(f"PRAGMA busy_timeout = {_millis(self._timeout)}")
            except sqlite3.Error as exc:
                if conn is not None:
                    conn.close()
                if _is_not_a_database(exc):
                    raise ConfigError(
                        f"{str(self._path)!r} is not a SQLite database, so it cannot be used as a cachekit "
                        "store; point the store at a new file"
                    ) from exc
                if _is_busy(exc) and time.monotonic() + delay < deadline:
                    time.sleep(delay)
                    delay = min(delay * 2, 0.05)
                    continue
                raise StoreError(f"cannot open the SQLite store {str(self._path)!r}: {exc}") from exc
            except BaseException:
                if conn is not None:
                    conn.close()
                raise
            if str(mode).lower() != "wal":
                # Possible on file systems without shared memory; correct but slower, so say so.
                _log.warning("SQLite store %s runs in journal mode %r, not WAL", self._path, mode)
            return conn, secret

    def _initialize(self, conn: sqlite3.Connection) -> bytes:
        """Create the schema and the secret if missing, check the version, and return the secret."""
        found = self._read_meta(conn)
        if found is None:
            # BEGIN IMMEDIATE takes the write lock up front, so processes that open a new file at
            # once queue here; INSERT OR IGNORE then keeps the first secret and the rest read it.
            conn.execute("BEGIN IMMEDIATE")
            try:
                self._check_foreign(conn)
                for statement in _SCHEMA:
                    conn.execute(statement)
                conn.execute(
                    "INSERT OR IGNORE INTO meta (name, value) VALUES ('schema_version', ?)", (SCHEMA_VERSION,)
                )
                conn.execute(
                    "INSERT OR IGNORE INTO meta (name, value) VALUES ('secret', ?)", (os.urandom(32),)
                )
                conn.execute("COMMIT")
            except BaseException:
                # A failed statement may already have ended the transaction.
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            found = self._read_meta(conn)
        if found is None:  # pragma: no cover - we just wrote both rows in a committed transaction
            raise StoreError(f"the SQLite store {str(self._path)!r} has no secret after initialization")
        version, secret = found
        if version > SCHEMA_VERSION:
            raise ConfigError(
                f"the SQLite store {str(self._path)!r} has schema version {version}, newer than this "
                f"cachekit understands ({SCHEMA_VERSION}); upgrade cachekit or use another file"
            )
        if len(secret) < 32:
            raise ConfigError(f"the SQLite store {str(self._path)!r} has a damaged secret; use another file")
        return secret

    def _read_meta(self, conn: sqlite3.Connection) -> tuple[int, bytes] | None:
        """The stored (schema version, secret), or ``None`` when the file is not initialized yet."""
        has_meta = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
        ).fetchone()
        if has_meta is None:
            return None
        rows = dict(conn.execute("SELECT name, value FROM meta WHERE name IN ('schema_version', 'secret')"))
        if "schema_version" not in rows or "secret" not in rows:
            return None
        version, secret = rows["schema_version"], rows["secret"]
        if isinstance(version, bool) or not isinstance(version, int) or not isinstance(secret, bytes):
            raise ConfigError(
                f"the SQLite store {str(self._path)!r} has an unreadable meta table; use another file"
            )
        return version, secret

    def _check_foreign(self, conn: sqlite3.Connection) -> None:
        """Refuse a database that already holds tables of some other application."""
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        foreign = names - {"entries", "meta"}
        if foreign:
            raise ConfigError(
                f"{str(self._path)!r} is a SQLite database of another application (tables: "
                f"{', '.join(sorted(foreign))}); point the cachekit store at a file of its own"
            )

    def _live(self) -> sqlite3.Connection:
        """The connection to use now; the caller holds the lock."""
        if self._closed:
            raise StoreError(f"the SQLite store {str(self._path)!r} is closed")
        if self._conn is None:
            _log.debug("opening a connection to %s in a forked child", self._path)
            self._conn, _ = self._open()
        return self._conn

    def _execute(self, sql: str, params: tuple[object, ...]) -> int:
        """Run one writing statement under the lock and return its row count."""
        with self._lock:
            conn = self._live()
            try:
                return conn.execute(sql, params).rowcount
            except sqlite3.Error as exc:
                raise self._failed(exc) from exc

    def _failed(self, exc: sqlite3.Error) -> StoreError:
        message = f"SQLite store {str(self._path)!r}: {type(exc).__name__}: {exc}"
        # Locked past the busy timeout: the store did not answer in time (like a Redis timeout).
        return StoreUnavailableError(message) if _is_busy(exc) else StoreError(message)

    def _after_fork_in_child(self) -> None:
        # SQLite forbids carrying a connection across fork(): the child's copy believes it holds the
        # parent's file locks. It is abandoned, not closed, since even close() acts on that belief;
        # the child opens its own on first use (_live).
        if self._conn is not None:
            _fork.keep(self._conn)
            self._conn = None
        self._sets = 0


def _successor(prefix: str) -> str | None:
    """The least string above every string that starts with ``prefix``; ``None`` if there is none.

    SQLite compares TEXT as UTF-8 bytes, which orders like Python compares code points.
    """
    chars = list(prefix)
    while chars:
        code = ord(chars.pop()) + 1
        if code <= 0x10FFFF:
            if 0xD800 <= code <= 0xDFFF:  # surrogates cannot be encoded: skip to the next scalar value
                code = 0xE000
            return "".join(chars) + chr(code)
    return None


def _millis(seconds: float) -> int:
    return min(int(seconds * 1000), 2**31 - 1)


def _is_busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return (int(code) & 0xFF) in (_SQLITE_BUSY, _SQLITE_LOCKED)
    return "database is locked" in str(exc) or "database table is locked" in str(exc)


def _is_not_a_database(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return (int(code) & 0xFF) == _SQLITE_NOTADB
    return "file is not a database" in str(exc)

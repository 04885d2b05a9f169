"""The cost ledger: one :class:`CallRecord` per call, written to pluggable sinks, with totals and budgets.

Recording is built for the request path: :meth:`Ledger.record` appends to an in-memory queue and
returns; a background thread drains the queue in batches into the slow sinks (SQLite, JSONL). The
queue is bounded: when it is full the record is dropped at once, counted in :attr:`Ledger.stats` and
logged once (not per record) until the writer catches up, because neither a wait nor a failure of the
ledger may reach the user's request. :meth:`Ledger.flush` writes everything recorded so far;
:meth:`Ledger.close` (also run at interpreter exit) flushes and closes the sinks.

After ``fork()`` a child records through the ledger it inherited: it starts a writer of its own, on
connections of its own, and writes only its own records (the parent's queued records are the
parent's to write); it flushes when it exits (:mod:`cachekit._fork`).

Outcomes and what a record says:

* ``miss`` / ``bypass`` / ``prompt_cache`` (an upstream call; ``prompt_cache`` when the provider's
  prompt cache was read): ``cost`` is what the call cost, ``cost_without_caching`` what it would have
  cost with no prompt caching, ``saving`` the difference;
* ``exact_hit`` / ``semantic_hit`` (answered locally): ``cost`` is 0, and ``cost_without_caching`` and
  ``saving`` are the avoided cost of the original call, i.e. the stored response's usage priced as a
  full-price call.

A figure that cannot be priced (unknown model or usage) is ``None`` in the record and is counted, not
summed as zero, in :meth:`Ledger.totals`.

Beside the calls, the ledger keeps the semantic cache's shadow records
(:class:`~cachekit.cost.shadow.ShadowRecord`, :meth:`Ledger.record_shadow`): what the layer would
have served while ``SemanticConfig(mode="shadow")`` only watches. They go through the same queue to the
sinks that keep them (a sink with ``write_shadow``: the three below; in SQLite a table ``shadow``
beside ``calls``, in JSON lines a line with ``"kind": "shadow"``) and are read back with
:meth:`Ledger.shadow_records`.
"""

from __future__ import annotations

import datetime as _dt
import logging
import math
import sqlite3
import threading
import time as _time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, get_args, runtime_checkable

import orjson

from cachekit import _fork
from cachekit._home import cachekit_home
from cachekit.cost.prices import PriceTable, default_prices
from cachekit.cost.shadow import ShadowRecord
from cachekit.cost.usage import TOKEN_FIELDS, UsageRecord, price_context_of_body, usage_of_body
from cachekit.errors import ConfigError

__all__ = [
    "GROUP_FIELDS",
    "OUTCOMES",
    "Budget",
    "BudgetAlert",
    "CallRecord",
    "JSONLSink",
    "Ledger",
    "LedgerContents",
    "LedgerSink",
    "LedgerStats",
    "MemorySink",
    "Outcome",
    "SQLiteSink",
    "ShadowSink",
    "Totals",
    "aggregate",
    "default_ledger_path",
    "make_record",
    "outcome_for_usage",
    "read_ledger",
]

logger = logging.getLogger("cachekit.cost")

#: How a call was answered: by the provider (using its prompt cache or not), or by a local cache.
Outcome = Literal["prompt_cache", "exact_hit", "semantic_hit", "miss", "bypass"]
#: Every Outcome, in a fixed order.
OUTCOMES: tuple[str, ...] = get_args(Outcome)
_HITS = frozenset({"exact_hit", "semantic_hit"})
_SQLITE_NOTADB = 26  # SQLite's result code for "file is not a database"

#: Fields :func:`aggregate` groups by: the record's labels plus ``day`` and ``hour`` (UTC).
GROUP_FIELDS: tuple[str, ...] = ("provider", "model", "tenant", "site", "outcome", "day", "hour")

Since = float | int | _dt.datetime | _dt.date | _dt.timedelta | None


def default_ledger_path() -> Path:
    """Where the default SQLite ledger lives: ``$CACHEKIT_HOME/ledger.sqlite3``."""
    return cachekit_home() / "ledger.sqlite3"


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One call in the ledger: when, who (tenant, call site), what model, how it was answered, what it cost.

    ``time`` is seconds since the epoch. Costs are USD; ``None`` when they could not be priced.
    """

    time: float
    provider: str
    model: str
    tenant: str | None
    site: str | None
    outcome: Outcome
    usage: UsageRecord
    cost: float | None
    cost_without_caching: float | None
    saving: float | None
    #: Why the provider's prompt cache could not read this call's prefix where the conversation's
    #: previous call would have let it: the first change (``messages_changed; at=messages.3``), as
    #: the ``x-cachekit-prefix-changed`` header said it (``None``: nothing changed, or not known).
    prefix_change: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A flat JSON-ready dict (token counts inlined), the inverse of :meth:`from_dict`."""
        u = self.usage
        return {
            "time": self.time,
            "provider": self.provider,
            "model": self.model,
            "tenant": self.tenant,
            "site": self.site,
            "outcome": self.outcome,
            "uncached_input": u.uncached_input,
            "cache_write_5m": u.cache_write_5m,
            "cache_write_1h": u.cache_write_1h,
            "cache_read": u.cache_read,
            "output": u.output,
            "reasoning": u.reasoning,
            "usage_known": u.known,
            "problems": list(u.problems),
            "cost": self.cost,
            "cost_without_caching": self.cost_without_caching,
            "saving": self.saving,
            "prefix_change": self.prefix_change,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CallRecord:
        """Rebuild a record from :meth:`to_dict` output."""
        # The usage fields are flattened into the record; only "known" is renamed there.
        usage = UsageRecord.from_dict(
            {**data, "known": data.get("usage_known", False), "problems": data.get("problems") or ()}
        )
        return cls(
            time=float(data["time"]),
            provider=str(data["provider"]),
            model=str(data["model"]),
            tenant=data.get("tenant"),
            site=data.get("site"),
            outcome=data["outcome"],
            usage=usage,
            cost=data.get("cost"),
            cost_without_caching=data.get("cost_without_caching"),
            saving=data.get("saving"),
            prefix_change=data.get("prefix_change"),
        )


def outcome_for_usage(usage: UsageRecord) -> Outcome:
    """``prompt_cache`` when an upstream call read the provider's prompt cache, else ``miss``."""
    return "prompt_cache" if usage.cache_read else "miss"


def make_record(
    prices: PriceTable,
    provider: str,
    model: str,
    usage: UsageRecord,
    *,
    outcome: Outcome | None = None,
    tenant: str | None = None,
    site: str | None = None,
    time: float | None = None,
    batch: bool = False,
    context: Mapping[str, str] | None = None,
    prefix_change: str | None = None,
) -> CallRecord:
    """Price ``usage`` and build the ledger record for one call (pure apart from the clock).

    The call is priced at the prices in force at ``time`` (now by default), with the options the
    response reported in ``context`` (see :func:`~cachekit.cost.usage.price_context_of_body`).
    For ``exact_hit`` / ``semantic_hit`` pass the *stored* response's usage: the record costs 0 and
    saves what the original call would cost at full price at ``time``.
    """
    if outcome is None:
        outcome = outcome_for_usage(usage)
    if time is None:
        time = _time.time()
    priced = prices.price(provider, model, usage, batch=batch, at=time, context=context)
    if outcome in _HITS:
        cost: float | None = 0.0
        without = priced.no_cache_usd
        saving = without
    else:
        cost, without, saving = priced.total_usd, priced.no_cache_usd, priced.saving_usd
    return CallRecord(
        time=time,
        provider=provider,
        model=model,
        tenant=tenant,
        site=site,
        outcome=outcome,
        usage=usage,
        cost=cost,
        cost_without_caching=without,
        saving=saving,
        prefix_change=prefix_change,
    )


# -- sinks ---------------------------------------------------------------------------------------------


@runtime_checkable
class LedgerSink(Protocol):
    """Where records go. ``synchronous`` sinks are written on the caller's thread (keep them cheap);
    the others are written in batches by the ledger's background thread."""

    synchronous: bool

    def write(self, records: Sequence[CallRecord]) -> None:
        """Store a batch of records."""

    def read(self, since: float | None = None) -> list[CallRecord]:
        """Every stored record with ``time >= since`` (all when ``None``), oldest first."""

    def close(self) -> None:
        """Release the sink's resources."""


@runtime_checkable
class ShadowSink(Protocol):
    """A sink that also keeps shadow records (a sink without these methods is given none)."""

    def write_shadow(self, records: Sequence[ShadowRecord]) -> None:
        """Store a batch of shadow records."""

    def read_shadow(self, since: float | None = None) -> list[ShadowRecord]:
        """Every stored shadow record with ``time >= since`` (all when ``None``), oldest first."""


def _kept_since(records: Iterable[ShadowRecord], since: float | None) -> list[ShadowRecord]:
    kept = [r for r in records if since is None or r.time >= since]
    kept.sort(key=lambda r: r.time)
    return kept


class MemorySink:
    """Keeps records in a list (tests, short scripts, a live process's own report)."""

    synchronous = True

    def __init__(self) -> None:
        self._records: list[CallRecord] = []
        self._shadow: list[ShadowRecord] = []
        self._lock = _fork.lock(self)

    def write(self, records: Sequence[CallRecord]) -> None:
        """Append the records."""
        with self._lock:
            self._records.extend(records)

    def write_shadow(self, records: Sequence[ShadowRecord]) -> None:
        """Append the shadow records."""
        with self._lock:
            self._shadow.extend(records)

    def read_shadow(self, since: float | None = None) -> list[ShadowRecord]:
        """The stored shadow records, oldest first."""
        with self._lock:
            records = list(self._shadow)
        return _kept_since(records, since)

    def read(self, since: float | None = None) -> list[CallRecord]:
        """The stored records, oldest first."""
        with self._lock:
            records = list(self._records)
        records.sort(key=lambda r: r.time)
        return records if since is None else [r for r in records if r.time >= since]

    def close(self) -> None:
        """Nothing to release."""


class JSONLSink:
    """Appends one JSON object per line to a file (easy to ship to a log pipeline)."""

    synchronous = False

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = _fork.lock(self)

    def write(self, records: Sequence[CallRecord]) -> None:
        """Append the records as JSON lines."""
        self._append(orjson.dumps(r.to_dict()) + b"\n" for r in records)

    def write_shadow(self, records: Sequence[ShadowRecord]) -> None:
        """Append the shadow records as JSON lines marked ``"kind": "shadow"``."""
        self._append(orjson.dumps({"kind": "shadow", **r.to_dict()}) + b"\n" for r in records)

    def _append(self, lines: Iterable[bytes]) -> None:
        data = b"".join(lines)
        with self._lock, self.path.open("ab") as fh:
            fh.write(data)

    def _contents(self, since: float | None) -> LedgerContents:
        if not self.path.exists():
            return LedgerContents([])
        with self._lock:
            data = self.path.read_bytes()
        contents = _jsonl_contents(data, since)
        for number in contents.skipped_lines:
            logger.warning("cachekit.cost: skipping corrupt ledger line %d of %s", number, self.path)
        return contents

    def read(self, since: float | None = None) -> list[CallRecord]:
        """Parse the file's calls; a corrupt line is skipped with a warning."""
        return self._contents(since).records

    def read_shadow(self, since: float | None = None) -> list[ShadowRecord]:
        """Parse the file's shadow records; a corrupt one is skipped with a warning."""
        return self._contents(since).shadow

    def close(self) -> None:
        """Nothing held open between writes."""


def _jsonl_contents(data: bytes, since: float | None) -> LedgerContents:
    """The calls and the shadow records (lines marked ``"kind": "shadow"``) of a JSON-lines ledger
    (``time >= since``, oldest first), and the numbers of the lines that are neither (blank lines are
    not counted)."""
    records: list[CallRecord] = []
    shadow: list[ShadowRecord] = []
    skipped: list[int] = []
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            doc = orjson.loads(line)
            if isinstance(doc, dict) and doc.get("kind") == "shadow":
                shadow.append(ShadowRecord.from_dict(doc))
                continue
            record = CallRecord.from_dict(doc)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
            skipped.append(number)
            continue
        if since is None or record.time >= since:
            records.append(record)
    records.sort(key=lambda r: r.time)
    return LedgerContents(records, len(skipped), _kept_since(shadow, since), tuple(skipped))


_COLUMNS = (
    "time",
    "provider",
    "model",
    "tenant",
    "site",
    "outcome",
    *TOKEN_FIELDS,
    "reasoning",
    "usage_known",
    "problems",
    "cost",
    "cost_without_caching",
    "saving",
    "prefix_change",
)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    id INTEGER PRIMARY KEY,
    time REAL NOT NULL,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    tenant TEXT,
    site TEXT,
    outcome TEXT NOT NULL,
    uncached_input INTEGER,
    cache_write_5m INTEGER,
    cache_write_1h INTEGER,
    cache_read INTEGER,
    output INTEGER,
    reasoning INTEGER,
    usage_known INTEGER NOT NULL,
    problems TEXT,
    cost REAL,
    cost_without_caching REAL,
    saving REAL,
    prefix_change TEXT
);
CREATE INDEX IF NOT EXISTS calls_time ON calls (time);
CREATE TABLE IF NOT EXISTS shadow (
    id INTEGER PRIMARY KEY,
    time REAL NOT NULL,
    model TEXT NOT NULL,
    partition TEXT NOT NULL,
    threshold REAL NOT NULL,
    candidate TEXT,
    similarity REAL,
    passed INTEGER NOT NULL,
    would_serve INTEGER NOT NULL,
    refused TEXT,
    score REAL,
    judge TEXT NOT NULL,
    verdict INTEGER
);
CREATE INDEX IF NOT EXISTS shadow_time ON shadow (time);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT OR IGNORE INTO meta (key, value) VALUES ('schema', '1');
"""


_SHADOW_COLUMNS = (
    "time",
    "model",
    "partition",
    "threshold",
    "candidate",
    "similarity",
    "passed",
    "would_serve",
    "refused",
    "score",
    "judge",
    "verdict",
)


def _shadow_row(r: ShadowRecord) -> tuple[Any, ...]:
    """The ``shadow`` row of a record, in :data:`_SHADOW_COLUMNS` order."""
    return (
        r.time,
        r.model,
        r.partition,
        r.threshold,
        r.candidate,
        r.similarity,
        int(r.passed),
        int(r.would_serve),
        ",".join(r.refused) or None,
        r.score,
        r.judge,
        None if r.verdict is None else int(r.verdict),
    )


def _sql_row(r: CallRecord) -> tuple[Any, ...]:
    """The ``calls`` row of a record, in :data:`_COLUMNS` order (built directly: this runs per record)."""
    u = r.usage
    return (
        r.time,
        r.provider,
        r.model,
        r.tenant,
        r.site,
        r.outcome,
        u.uncached_input,
        u.cache_write_5m,
        u.cache_write_1h,
        u.cache_read,
        u.output,
        u.reasoning,
        int(u.known),
        "\n".join(u.problems) or None,
        r.cost,
        r.cost_without_caching,
        r.saving,
        r.prefix_change,
    )


def _add_missing_columns(conn: sqlite3.Connection) -> None:
    """Bring a ledger written by an earlier cachekit up to date: columns added since are added (empty
    in the old rows), so old and new records read alike."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(calls)")}
    if "prefix_change" not in have:
        conn.execute("ALTER TABLE calls ADD COLUMN prefix_change TEXT")


class SQLiteSink:
    """The default sink: a SQLite file (WAL mode), one row per call, written in batched transactions.

    A forked child writes on a connection of its own, opened on its first write (SQLite forbids using
    a connection across ``fork()``).
    """

    synchronous = False

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_ledger_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = _fork.lock(self)
        self._closed = False
        placeholders = ", ".join("?" for _ in _COLUMNS)
        self._insert = f"INSERT INTO calls ({', '.join(_COLUMNS)}) VALUES ({placeholders})"
        shadow_placeholders = ", ".join("?" for _ in _SHADOW_COLUMNS)
        self._insert_shadow = (
            f"INSERT INTO shadow ({', '.join(_SHADOW_COLUMNS)}) VALUES ({shadow_placeholders})"
        )
        self._conn: sqlite3.Connection | None = self._connect()
        self._conn.executescript(_SCHEMA)
        _add_missing_columns(self._conn)
        _fork.register(self)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=10)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
        except sqlite3.DatabaseError:  # pragma: no cover - filesystems without shared memory
            logger.warning("cachekit.cost: %s cannot use WAL mode; using the default journal", self.path)
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def _live(self) -> sqlite3.Connection:
        """The open connection (the caller holds the lock); a forked child opens its own here."""
        if self._conn is None:
            if self._closed:
                raise sqlite3.ProgrammingError(f"the ledger sink {str(self.path)!r} is closed")
            self._conn = self._connect()
        return self._conn

    def _after_fork_in_child(self) -> None:
        if self._conn is not None:
            _fork.keep(self._conn)  # the parent's: never used nor closed here
            self._conn = None

    def write(self, records: Sequence[CallRecord]) -> None:
        """Insert the batch in one transaction."""
        self._insert_rows(self._insert, [_sql_row(record) for record in records])

    def write_shadow(self, records: Sequence[ShadowRecord]) -> None:
        """Insert the shadow records in one transaction."""
        self._insert_rows(self._insert_shadow, [_shadow_row(record) for record in records])

    def _insert_rows(self, statement: str, rows: list[tuple[Any, ...]]) -> None:
        with self._lock:
            conn = self._live()
            conn.execute("BEGIN")
            try:
                conn.executemany(statement, rows)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _select(self, table: str, columns: Sequence[str], since: float | None) -> list[Any]:
        query, params = _select(table, columns, since)
        with self._lock:
            if self._closed:  # read-only access after close: a short-lived connection
                conn = sqlite3.connect(self.path, timeout=10)
                try:
                    return conn.execute(query, params).fetchall()
                finally:
                    conn.close()
            return self._live().execute(query, params).fetchall()

    def read(self, since: float | None = None) -> list[CallRecord]:
        """Rows with ``time >= since``, oldest first."""
        return [_record_of_row(row) for row in self._select("calls", _COLUMNS, since)]

    def read_shadow(self, since: float | None = None) -> list[ShadowRecord]:
        """Shadow rows with ``time >= since``, oldest first."""
        return [_shadow_of_row(row) for row in self._select("shadow", _SHADOW_COLUMNS, since)]

    def close(self) -> None:
        """Close the connection (:meth:`read` still works, on a short-lived connection)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                conn, self._conn = self._conn, None
                if conn is not None:
                    conn.close()


def _select(table: str, columns: Sequence[str], since: float | None) -> tuple[str, tuple[float, ...]]:
    """The query of a table's rows with ``time >= since``, oldest first, and its parameters."""
    query = f"SELECT {', '.join(columns)} FROM {table}"
    params: tuple[float, ...] = ()
    if since is not None:
        query += " WHERE time >= ?"
        params = (since,)
    return query + " ORDER BY time, id", params


def _record_of_row(row: Sequence[Any], columns: Sequence[str] = _COLUMNS) -> CallRecord:
    d = dict(zip(columns, row, strict=True))
    d["problems"] = d["problems"].split("\n") if d["problems"] else []
    return CallRecord.from_dict(d)


def _shadow_of_row(row: Sequence[Any]) -> ShadowRecord:
    d = dict(zip(_SHADOW_COLUMNS, row, strict=True))
    d["refused"] = d["refused"].split(",") if d["refused"] else []
    return ShadowRecord.from_dict(d)


@dataclass(frozen=True, slots=True)
class LedgerContents:
    """What :func:`read_ledger` found: the call records, how many lines of a JSON-lines ledger were
    not records (``skipped``; their numbers in ``skipped_lines``), and the semantic cache's shadow
    records (:mod:`cachekit.cost.shadow`)."""

    records: list[CallRecord]
    skipped: int = 0
    shadow: list[ShadowRecord] = field(default_factory=list)
    skipped_lines: tuple[int, ...] = ()


def read_ledger(path: str | Path, since: float | None = None) -> LedgerContents:
    """The records of the ledger file ``path`` (``time >= since``, oldest first), read without
    writing anything: not to the file, not beside it.

    A name ending in ``.jsonl`` is read as JSON lines (lines that are not records are counted in
    :attr:`LedgerContents.skipped`); any other file as a SQLite ledger, opened read-only: a file that
    is empty, not a SQLite database, or a database without the ledger's table (a cachekit store, say)
    is refused, never turned into a ledger. A ledger in WAL mode whose write-ahead log exists (its
    writer is running, or did not checkpoint) is read with the log; otherwise the file alone is read
    as immutable, so SQLite creates no ``-wal`` or ``-shm`` file beside it.

    Raises:
        FileNotFoundError: no file at ``path``.
        ConfigError: ``path`` is a directory, or not a ledger (the message says what it is).
    """
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path} is a directory, not a ledger file")
    if path.suffix == ".jsonl":
        return _jsonl_contents(path.read_bytes(), since)
    if not path.exists():
        raise FileNotFoundError(2, "no such file", str(path))
    if path.stat().st_size == 0:
        raise ConfigError(
            f"{path} is an empty file, not a ledger (a JSON-lines ledger's name ends in .jsonl)"
        )
    live = Path(f"{path}-wal").exists()
    uri = path.resolve().as_uri() + ("?mode=ro" if live else "?mode=ro&immutable=1")
    try:
        conn = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as exc:
        raise ConfigError(f"{path} cannot be opened as a ledger: {exc}") from exc
    try:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "calls" not in tables:
            what = "a cachekit cache store" if {"entries", "meta"} <= tables else "a SQLite database"
            raise ConfigError(
                f"{path} is {what} without a calls table, not a cost ledger (the default ledger is "
                f"{default_ledger_path()})"
            )
        # A ledger written by an earlier cachekit lacks the columns added since (read-only: they are
        # not added here); its records read as if those fields were empty.
        have = {row[1] for row in conn.execute("PRAGMA table_info(calls)")}
        columns = tuple(name for name in _COLUMNS if name in have)
        rows = conn.execute(*_select("calls", columns, since)).fetchall()
        # A ledger written before shadow mode existed has no shadow table: it holds no shadow records.
        shadow_rows = (
            conn.execute(*_select("shadow", _SHADOW_COLUMNS, since)).fetchall() if "shadow" in tables else []
        )
    except sqlite3.DatabaseError as exc:
        # sqlite_errorcode is Python 3.11+; the message is SQLite's own, the same in every version.
        if getattr(exc, "sqlite_errorcode", None) == _SQLITE_NOTADB or "not a database" in str(exc):
            raise ConfigError(
                f"{path} is not a SQLite ledger (a JSON-lines ledger's name ends in .jsonl)"
            ) from None
        raise ConfigError(f"{path} cannot be read as a ledger: {exc}") from exc
    finally:
        conn.close()
    return LedgerContents(
        [_record_of_row(row, columns) for row in rows], shadow=[_shadow_of_row(row) for row in shadow_rows]
    )


# -- totals --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Totals:
    """Sums over a group of records. Costs sum only the priced records; ``unpriced_calls`` counts the rest.

    ``tokens`` are billed tokens: those of upstream calls only (a local cache hit bills none).
    """

    group: dict[str, str | None]
    calls: int
    tokens: dict[str, int]
    cost_usd: float
    cost_without_caching_usd: float
    saving_usd: float
    unpriced_calls: int
    unknown_usage_calls: int
    outcomes: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "group": dict(self.group),
            "calls": self.calls,
            "tokens": dict(self.tokens),
            "cost_usd": self.cost_usd,
            "cost_without_caching_usd": self.cost_without_caching_usd,
            "saving_usd": self.saving_usd,
            "unpriced_calls": self.unpriced_calls,
            "unknown_usage_calls": self.unknown_usage_calls,
            "outcomes": dict(self.outcomes),
        }


def _group_value(record: CallRecord, name: str) -> str | None:
    if name == "day":
        return _dt.datetime.fromtimestamp(record.time, _dt.timezone.utc).strftime("%Y-%m-%d")
    if name == "hour":
        return _dt.datetime.fromtimestamp(record.time, _dt.timezone.utc).strftime("%Y-%m-%d %H:00")
    value: str | None = getattr(record, name)
    return value


def aggregate(records: Iterable[CallRecord], group_by: Sequence[str] = ("model",)) -> list[Totals]:
    """Group records by ``group_by`` (any of :data:`GROUP_FIELDS`; ``()`` for one grand total) and sum them.

    Groups come back sorted by their labels (``None`` first).
    """
    if isinstance(group_by, str):
        group_by = (group_by,)
    for name in group_by:
        if name not in GROUP_FIELDS:
            raise ValueError(f"cannot group by {name!r}; choose from {', '.join(GROUP_FIELDS)}")
    acc: dict[tuple[str | None, ...], dict[str, Any]] = {}
    for record in records:
        key = tuple(_group_value(record, name) for name in group_by)
        slot = acc.get(key)
        if slot is None:
            slot = acc[key] = {
                "calls": 0,
                "tokens": dict.fromkeys(TOKEN_FIELDS, 0),
                "cost": 0.0,
                "without": 0.0,
                "saving": 0.0,
                "unpriced": 0,
                "unknown": 0,
                "outcomes": {},
            }
        slot["calls"] += 1
        slot["outcomes"][record.outcome] = slot["outcomes"].get(record.outcome, 0) + 1
        usage = record.usage
        if not usage.known:
            slot["unknown"] += 1
        elif record.outcome not in _HITS:  # a hit's usage is the stored call's: nothing was billed
            for name in TOKEN_FIELDS:
                slot["tokens"][name] += getattr(usage, name) or 0
        if record.cost is None or record.cost_without_caching is None or record.saving is None:
            slot["unpriced"] += 1
        if record.cost is not None:
            slot["cost"] += record.cost
        if record.cost_without_caching is not None and record.saving is not None:
            slot["without"] += record.cost_without_caching
            slot["saving"] += record.saving
    return [
        Totals(
            group=dict(zip(group_by, key, strict=True)),
            calls=slot["calls"],
            tokens=slot["tokens"],
            cost_usd=slot["cost"],
            cost_without_caching_usd=slot["without"],
            saving_usd=slot["saving"],
            unpriced_calls=slot["unpriced"],
            unknown_usage_calls=slot["unknown"],
            outcomes=dict(sorted(slot["outcomes"].items())),
        )
        for key, slot in sorted(acc.items(), key=lambda kv: tuple((v is not None, v or "") for v in kv[0]))
    ]


def _since_ts(since: Since) -> float | None:
    if since is None:
        return None
    if isinstance(since, _dt.timedelta):
        return _time.time() - since.total_seconds()
    if isinstance(since, _dt.datetime):
        if since.tzinfo is None:
            since = since.replace(tzinfo=_dt.timezone.utc)
        return since.timestamp()
    if isinstance(since, _dt.date):
        return _dt.datetime(since.year, since.month, since.day, tzinfo=_dt.timezone.utc).timestamp()
    return float(since)


# -- budgets -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BudgetAlert:
    """Passed to a budget's callback once, when the spend it watches first exceeds its limit."""

    budget: Budget
    spent_usd: float
    record: CallRecord


@dataclass(frozen=True, slots=True)
class Budget:
    """A spending limit on the calls of one tenant and/or call site (both ``None``: every call).

    Spend is the ``cost`` of the calls this ledger records while it is open. ``callback`` runs once, on
    the recording thread, when the spend first exceeds ``limit_usd``; an exception it raises is logged.
    """

    limit_usd: float
    callback: Callable[[BudgetAlert], object]
    tenant: str | None = None
    site: str | None = None
    name: str | None = None

    def matches(self, record: CallRecord) -> bool:
        """Whether ``record`` counts against this budget."""
        return (self.tenant is None or record.tenant == self.tenant) and (
            self.site is None or record.site == self.site
        )


class _BudgetState:
    __slots__ = ("budget", "fired", "spent")

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.spent = 0.0
        self.fired = False


# -- the ledger ----------------------------------------------------------------------------------------


@dataclass
class LedgerStats:
    """Counters for what did not go to plan: records dropped (a full queue, or recorded after close)
    and failed sink writes. A forked child counts its own, from zero."""

    dropped: int = 0
    write_errors: int = 0


class Ledger:
    """Records calls to sinks (SQLite under ``$CACHEKIT_HOME`` by default), sums them, watches budgets.

    Use as a context manager, or call :meth:`close`; it is also closed at interpreter exit, and when a
    forked child that inherited it exits (see :mod:`cachekit._fork` for children that end otherwise).

    Args:
        sinks: where records go (default: one :class:`SQLiteSink` under ``$CACHEKIT_HOME``).
        prices: the price table (default: the bundled one).
        budgets: spending limits to watch.
        max_pending: records the queue holds for the background writer; beyond it records are dropped.
        batch_size: records per sink write; a full batch wakes the writer early.
        flush_interval: seconds the writer sleeps between batches.
        overflow_timeout: seconds :meth:`record` may wait for room in a full queue before dropping.
            0 by default: the request path never waits for the ledger. A batch job that would rather
            slow down than lose a record may allow a wait.
    """

    def __init__(
        self,
        sinks: Iterable[LedgerSink] | None = None,
        *,
        prices: PriceTable | None = None,
        budgets: Iterable[Budget] = (),
        max_pending: int = 65536,
        batch_size: int = 1024,
        flush_interval: float = 0.25,
        overflow_timeout: float = 0.0,
    ) -> None:
        if not 0 <= overflow_timeout < math.inf:  # also rejects NaN
            raise ConfigError(
                f"overflow_timeout must be a finite number of seconds >= 0, not {overflow_timeout!r}"
            )
        self.prices = prices if prices is not None else default_prices()
        self.sinks: tuple[LedgerSink, ...] = tuple(sinks) if sinks is not None else (SQLiteSink(),)
        self._sync = tuple(s for s in self.sinks if getattr(s, "synchronous", False))
        self._async = tuple(s for s in self.sinks if not getattr(s, "synchronous", False))
        self._max_pending = max_pending
        self._batch_size = batch_size
        self._flush_interval = flush_interval
        self._overflow_timeout = overflow_timeout
        self._budgets = [_BudgetState(b) for b in budgets]
        self._closed = False
        self._own_process_parts()
        _fork.register(self)
        _fork.at_exit(self)

    def _own_process_parts(self) -> None:
        """What each process has its own of: the queue, the writer thread (started by the first record
        that needs it), the locks and the counters."""
        self._pending: deque[CallRecord | ShadowRecord] = deque()
        self._thread: threading.Thread | None = None
        self._stopping = self._closed
        #: Set while records are being dropped on a full queue: warned when it starts and when it ends.
        self._overflowing = False
        self._wake = threading.Event()
        self._room = threading.Condition(threading.Lock())
        self._start_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._stats_lock = threading.Lock()
        self._budget_lock = threading.Lock()
        self.stats = LedgerStats()

    def _after_fork_in_child(self) -> None:
        # The parent's writer does not run here and its queue holds the parent's records, which the
        # parent writes: this process starts from an empty queue, and a writer of its own on first use.
        self._own_process_parts()

    # hot path

    def record(self, record: CallRecord) -> None:
        """Add one record. Cheap: slow sinks are written later by the background thread."""
        if self._closed:
            self._drop(record, "the ledger is closed")
            return
        for sink in self._sync:
            try:
                sink.write((record,))
            except Exception:
                self._write_failed(sink)
        self._enqueue(record)
        if self._budgets:
            self._check_budgets(record)

    def _enqueue(self, record: CallRecord | ShadowRecord) -> None:
        """Queue a record for the background writer (dropped, and counted, when the queue is full)."""
        if self._async:
            if self._thread is None:
                self._start_writer()
            pending = self._pending
            if len(pending) >= self._max_pending and not self._room_after_wait():
                self._dropped_on_full_queue()
            else:
                pending.append(record)
                if len(pending) >= self._batch_size:
                    self._wake.set()

    def record_shadow(self, record: ShadowRecord) -> None:
        """Add one shadow record of the semantic cache (:mod:`cachekit.cost.shadow`), for the sinks
        that keep them (:class:`ShadowSink`). Cheap, like :meth:`record`."""
        if self._closed:
            self._drop(record, "the ledger is closed")
            return
        for sink in self._sync:
            if isinstance(sink, ShadowSink):
                try:
                    sink.write_shadow((record,))
                except Exception:
                    self._write_failed(sink)
        if any(isinstance(sink, ShadowSink) for sink in self._async):
            self._enqueue(record)

    def record_call(
        self,
        provider: str,
        model: str,
        usage: UsageRecord,
        *,
        outcome: Outcome | None = None,
        tenant: str | None = None,
        site: str | None = None,
        time: float | None = None,
        batch: bool = False,
        context: Mapping[str, str] | None = None,
        prefix_change: str | None = None,
    ) -> CallRecord:
        """Price ``usage`` (see :func:`make_record`), record it and return the record."""
        record = make_record(
            self.prices,
            provider,
            model,
            usage,
            outcome=outcome,
            tenant=tenant,
            site=site,
            time=time,
            batch=batch,
            context=context,
            prefix_change=prefix_change,
        )
        self.record(record)
        return record

    def record_body(
        self,
        provider: str,
        dialect: str,
        model: str,
        body: Mapping[str, Any],
        *,
        outcome: Outcome | None = None,
        tenant: str | None = None,
        site: str | None = None,
        time: float | None = None,
        prefix_change: str | None = None,
    ) -> CallRecord:
        """Normalize the usage of a response ``body`` (see :func:`usage_of_body`) and record the call,
        priced with the options the body reports (:func:`price_context_of_body`)."""
        usage = usage_of_body(provider, dialect, body)
        context = price_context_of_body(provider, dialect, body)
        return self.record_call(
            provider,
            model,
            usage,
            outcome=outcome,
            tenant=tenant,
            site=site,
            time=time,
            context=context,
            prefix_change=prefix_change,
        )

    def _start_writer(self) -> None:
        with self._start_lock:
            if self._thread is None and not self._stopping:
                thread = threading.Thread(target=self._run, name="cachekit-ledger", daemon=True)
                thread.start()
                self._thread = thread

    def _room_after_wait(self) -> bool:
        """Whether the full queue has room after waiting for the writer: only with ``overflow_timeout``."""
        if not self._overflow_timeout:
            return False
        self._wake.set()
        with self._room:
            return self._room.wait_for(
                lambda: len(self._pending) < self._max_pending or self._stopping, self._overflow_timeout
            )

    def _dropped_on_full_queue(self) -> None:
        self._wake.set()
        with self._stats_lock:
            self.stats.dropped += 1
            starts = not self._overflowing
            self._overflowing = True
        if starts:  # once per overflow, not per record: a full queue must not flood the log too
            logger.warning(
                "cachekit.cost: the ledger's write queue is full (%d records); dropping records until "
                "its writer catches up (counted in Ledger.stats.dropped)",
                self._max_pending,
            )

    def _drop(self, record: CallRecord | ShadowRecord, why: str) -> None:
        with self._stats_lock:
            self.stats.dropped += 1
            dropped = self.stats.dropped
        if dropped == 1 or dropped % 1000 == 0:
            logger.warning("cachekit.cost: ledger record dropped (%s); %d dropped so far", why, dropped)

    def _write_failed(self, sink: LedgerSink) -> None:
        with self._stats_lock:
            self.stats.write_errors += 1
        logger.warning("cachekit.cost: ledger sink %s failed to write", type(sink).__name__, exc_info=True)

    def _check_budgets(self, record: CallRecord) -> None:
        if record.cost is None:
            return
        alerts = []
        with self._budget_lock:
            for state in self._budgets:
                if state.fired or not state.budget.matches(record):
                    continue
                state.spent += record.cost
                if state.spent > state.budget.limit_usd:
                    state.fired = True
                    alerts.append(BudgetAlert(state.budget, state.spent, record))
        for alert in alerts:
            try:
                alert.budget.callback(alert)
            except Exception:
                logger.warning("cachekit.cost: budget callback failed", exc_info=True)

    # background writer

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(self._flush_interval)
            self._wake.clear()
            self._drain()

    def _drain(self) -> None:
        with self._write_lock:
            pending = self._pending
            while pending:
                batch: list[CallRecord] = []
                shadow: list[ShadowRecord] = []
                try:
                    while len(batch) + len(shadow) < self._batch_size:
                        record = pending.popleft()
                        if isinstance(record, ShadowRecord):
                            shadow.append(record)
                        else:
                            batch.append(record)
                except IndexError:
                    pass
                if self._overflow_timeout:
                    with self._room:
                        self._room.notify_all()
                for sink in self._async:
                    try:
                        if batch:
                            sink.write(batch)
                        if shadow and isinstance(sink, ShadowSink):
                            sink.write_shadow(shadow)
                    except Exception:
                        self._write_failed(sink)
        if self._overflowing and not self._pending:
            with self._stats_lock:
                self._overflowing = False
                dropped = self.stats.dropped
            logger.warning("cachekit.cost: the ledger's writer caught up; %d records dropped so far", dropped)

    def flush(self) -> None:
        """Write every record recorded so far to every sink before returning."""
        self._drain()

    def close(self) -> None:
        """Flush, stop the writer thread and close the sinks. Safe to call twice.

        Records made after close (or by another thread while it runs) are dropped and counted.
        """
        if self._closed:
            return
        self._closed = True
        self._stopping = True
        self._wake.set()
        with self._room:
            self._room.notify_all()
        with self._start_lock:
            thread = self._thread
        if thread is not None:
            thread.join(timeout=30)
        self._drain()
        while self._pending:  # recorded by another thread after the final drain: too late
            self._drop(self._pending.popleft(), "the ledger is closed")
        for sink in self.sinks:
            try:
                sink.close()
            except Exception:
                logger.warning(
                    "cachekit.cost: closing ledger sink %s failed", type(sink).__name__, exc_info=True
                )

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # reading

    def records(self, since: Since = None) -> list[CallRecord]:
        """The recorded calls since ``since`` (epoch seconds, datetime, date, or a timedelta ago)."""
        if not self._closed:
            self.flush()
        if not self.sinks:
            return []
        return self.sinks[0].read(_since_ts(since))

    def shadow_records(self, since: Since = None) -> list[ShadowRecord]:
        """The semantic cache's shadow records since ``since`` (see :meth:`records`), from the first
        sink that keeps them."""
        if not self._closed:
            self.flush()
        for sink in self.sinks:
            if isinstance(sink, ShadowSink):
                return sink.read_shadow(_since_ts(since))
        return []

    def totals(self, group_by: Sequence[str] = ("model",), since: Since = None) -> list[Totals]:
        """Sums grouped by any of :data:`GROUP_FIELDS` (see :func:`aggregate`)."""
        return aggregate(self.records(since), group_by)

"""Reports never write to what they read: ``cachekit report --ledger X`` and ``cachekit stats --ledger
X`` leave X, and the folder it is in, byte for byte as they were (no ``-wal``/``-shm`` beside it, no
table added); a file that is not a ledger is refused, never turned into one.

Real SQLite files: a ledger written by the ledger's own SQLite sink (WAL mode), the cache's own store.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from cachekit import cli
from cachekit.cost import JSONLSink, Ledger, SQLiteSink, UsageRecord
from cachekit.stores.sqlite import SQLiteStore

USAGE = UsageRecord(1_000, 2_000, 0, 0, 100)


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        status = cli.main(list(argv), out=out)
    return status, out.getvalue(), err.getvalue()


def snapshot(folder: Path) -> dict[str, str]:
    """Every file of ``folder``, by name, with a digest of its bytes."""
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(folder.iterdir())}


def tables(path: Path) -> set[str]:
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
    try:
        return {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        conn.close()


@contextlib.contextmanager
def ledger_at(path: Path, calls: int) -> Iterator[Ledger]:
    """A ledger on a SQLite sink at ``path``, with ``calls`` calls recorded and flushed."""
    ledger = Ledger([SQLiteSink(path)])
    try:
        for n in range(calls):
            ledger.record_call("anthropic", "claude-sonnet-4-5", USAGE, time=1_780_000_000.0 + n)
        ledger.flush()
        yield ledger
    finally:
        ledger.close()


@pytest.mark.parametrize("command", ["report", "stats"])
def test_a_closed_ledger_is_read_and_nothing_is_written(tmp_path: Path, command: str) -> None:
    folder = tmp_path / "ledger"
    folder.mkdir()
    path = folder / "ledger.sqlite3"
    with ledger_at(path, 3):
        pass
    before = snapshot(folder)
    assert list(before) == ["ledger.sqlite3"]  # closed: its write-ahead log is gone
    store = f"sqlite://{tmp_path / 'store.db'}"
    SQLiteStore(tmp_path / "store.db").close()
    argv = [command, "--ledger", str(path), "--json"] + (["--store", store] if command == "stats" else [])
    status, out, err = run(*argv)
    assert (status, err) == (0, "")
    assert '"calls": 3' in out
    assert snapshot(folder) == before  # not a byte, not a file beside it


def test_a_ledger_being_written_is_read_with_its_log_and_nothing_is_added(tmp_path: Path) -> None:
    """The application still runs: its calls sit in the write-ahead log, not yet in the file."""
    path = tmp_path / "ledger.sqlite3"
    with ledger_at(path, 2):
        before = snapshot(tmp_path)
        assert {"ledger.sqlite3-wal", "ledger.sqlite3-shm"} <= set(before)
        status, out, err = run("report", "--ledger", str(path), "--json")
        assert (status, err) == (0, "")
        assert '"calls": 2' in out  # the calls in the log are read too
        after = snapshot(tmp_path)
        assert set(after) == set(before)  # no file added
        # The database and its log are untouched; the shared-memory index is where every reader of a
        # live WAL database takes its read lock (SQLite's own coordination, not the data).
        del after["ledger.sqlite3-shm"], before["ledger.sqlite3-shm"]
        assert after == before


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [
        ("calls.json", b"", "empty file"),  # an empty JSON file: never turned into a SQLite ledger
        ("calls.json", b'{"calls": []}\n', "not a SQLite ledger"),
        ("notes.txt", b"not a database at all\n", "not a SQLite ledger"),
    ],
)
@pytest.mark.parametrize("command", ["report", "stats"])
def test_a_file_that_is_not_a_ledger_is_refused_and_left_alone(
    tmp_path: Path, command: str, name: str, content: bytes, says: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    before = snapshot(tmp_path)
    argv = [command, "--ledger", str(path)] + (["--store", "memory://"] if command == "stats" else [])
    status, out, err = run(*argv)
    assert status == 2
    assert out == ""
    assert err.startswith(f"cachekit {command}: {path} ")
    assert says in err
    assert snapshot(tmp_path) == before
    assert path.read_bytes() == content


@pytest.mark.parametrize("command", ["report", "stats"])
def test_the_cache_s_own_database_gets_no_ledger_table(tmp_path: Path, command: str) -> None:
    """Given the store's file as a ledger by mistake: refused, and no ``calls`` table is added to it."""
    path = tmp_path / "cache.sqlite3"
    SQLiteStore(path).close()
    before, names = snapshot(tmp_path), tables(path)
    argv = [command, "--ledger", str(path)] + (["--store", "memory://"] if command == "stats" else [])
    status, out, err = run(*argv)
    assert (status, out) == (2, "")
    assert "is a cachekit cache store" in err
    assert "not a cost ledger" in err
    assert tables(path) == names
    assert "calls" not in names
    assert snapshot(tmp_path) == before


def test_lines_of_a_jsonl_ledger_that_are_not_records_are_counted_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    with Ledger([JSONLSink(path)]) as ledger:
        for n in range(2):
            ledger.record_call("anthropic", "claude-sonnet-4-5", USAGE, time=1_780_000_000.0 + n)
    path.write_bytes(path.read_bytes() + b"{not json\n[1, 2]\n")
    status, out, err = run("report", "--ledger", str(path), "--json")
    assert status == 0
    assert '"calls": 2' in out
    assert err == f"cachekit report: skipped 2 lines of {path} that are not ledger records\n"
    path.write_bytes(b"{not json\n\n[1, 2]\n")  # nothing but such lines: no ledger at all
    status, out, err = run("report", "--ledger", str(path))
    assert (status, out) == (2, "")
    assert err == f"cachekit report: {path} holds no ledger records (2 lines, none of them a record)\n"


def test_stats_without_a_ledger_yet_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CACHEKIT_HOME", str(tmp_path / "home"))
    status, out, err = run("stats", "--store", "memory://")
    assert (status, err) == (0, "")
    assert "ledger: no calls recorded (no ledger file yet; name one with --ledger PATH)" in out
    assert not (tmp_path / "home").exists()  # and nothing was made to say it

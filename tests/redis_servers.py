"""Real Redis servers for tests, benchmarks and fault injection: found, started, broken and stopped.

Not a conftest: test modules import what they use: the fixtures by name (``from
tests.redis_servers import redis7_server``), or the classes, e.g. ``RedisServer(redis7_binary())``
for a private server that a test may kill, pause or restart.

* :func:`redis7_binary` / :func:`redis8_binary` find the servers: ``CACHEKIT_REDIS7_SERVER`` /
  ``CACHEKIT_REDIS8_SERVER``, else ``redis-server`` on PATH when it is that version. Tests never install
  a server: ``scripts/test`` provides both before pytest starts (``scripts/_redis.sh``: the
  distribution's Redis 7, and a Redis 8 on PATH or unpacked from Debian 13's packages) and exports the
  two variables. Where a server is missing the test skips, saying how to get one; with
  ``CACHEKIT_NO_SKIPS`` or ``CI`` set that skip is a failure (``tests/skip_policy.py``).
* :class:`RedisServer` is one ``redis-server`` on a free loopback port in a temporary directory, with
  ``start``/``stop``/``restart``/``pause``/``debug_sleep``; :class:`RedisCluster3` is three cluster
  masters joined without ``redis-cli``.
* The fixtures ``redis7_server``, ``redis8_server`` and ``redis_cluster`` are session-wide and
  started on first use: one of each per test process, shared by every module that imports them, so
  tests isolate their data by key prefix and must not stop them (start a private
  :class:`RedisServer` to break one).

No process outlives the session: every server is stopped by its fixture's finalizer, and an
``atexit`` hook kills whatever is left (a test that forgot ``stop()``, an interrupted run).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

__all__ = [
    "RedisCluster3",
    "RedisServer",
    "escape_glob",
    "free_port",
    "redis7_binary",
    "redis7_server",
    "redis8_binary",
    "redis8_server",
    "redis_cluster",
    "server_version",
]

#: How to get a server, said by every skip for a missing one.
_HOW = (
    "Run the tests with scripts/test, which provides every server before pytest starts, or point "
    "{var} at a redis-server {major}.x executable ({where})."
)
_WHERE = {
    7: "Debian 12's `apt-get install redis-server` is 7.0",
    8: "`bash scripts/_redis.sh redis8` finds or unpacks one and prints its path",
}

_binaries: dict[int, str] = {}
_binaries_lock = threading.Lock()


def server_version(binary: str) -> tuple[int, int, int] | None:
    """The ``(major, minor, patch)`` that ``binary --version`` reports, or ``None`` if it does not run."""
    try:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"\bv=(\d+)\.(\d+)\.(\d+)", out)
    return None if found is None else (int(found[1]), int(found[2]), int(found[3]))


def _shown(version: tuple[int, int, int] | None) -> str:
    return "does not run" if version is None else "is version " + ".".join(map(str, version))


def _binary(major: int) -> str:
    """The Redis ``major``.x server of ``CACHEKIT_REDIS{major}_SERVER``, else ``redis-server`` on PATH
    when it is that version. Nothing is installed here: where there is none, the calling test skips,
    saying how to get one (a failure in a strict run: tests/skip_policy.py). A variable that names
    something else fails the test: that is a mistake, not a missing server."""
    var = f"CACHEKIT_REDIS{major}_SERVER"
    how = _HOW.format(var=var, major=major, where=_WHERE[major])
    with _binaries_lock:
        if major in _binaries:
            return _binaries[major]
        env = os.environ.get(var)
        if env:
            version = server_version(env)
            if version is None or version[0] != major:
                pytest.fail(f"{var} = {env!r} {_shown(version)}, not Redis {major}.x. {how}", pytrace=False)
            _binaries[major] = env
            return env
        found = shutil.which("redis-server")
        version = None if found is None else server_version(found)
        if found is not None and version is not None and version[0] == major:
            _binaries[major] = found
            return found
    on_path = (
        "there is no redis-server on PATH" if found is None else f"redis-server on PATH {_shown(version)}"
    )
    pytest.skip(f"no Redis {major}.x server: {var} is not set and {on_path}. {how}")


def redis7_binary() -> str:
    """The path of a Redis 7.x server; skips the calling test, saying how to get one, if there is none."""
    return _binary(7)


def redis8_binary() -> str:
    """The path of a Redis 8.x server; skips the calling test, saying how to get one, if there is none."""
    return _binary(8)


def escape_glob(text: str) -> str:
    """Escape what Redis's MATCH patterns treat specially, so ``text`` matches only itself."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _resp(*args: str | bytes | int | float) -> bytes:
    """One command in the Redis protocol (RESP2 array of bulk strings)."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


#: Every server started and not stopped yet, for the atexit sweep.
_RUNNING: set[RedisServer] = set()


class _Started:
    """``with server:`` starts it and cleans it up afterwards (the class defines both)."""

    def start(self) -> Any:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def cleanup(self) -> None:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()


class RedisServer(_Started):
    """One ``redis-server`` on 127.0.0.1, in a directory of its own.

    Args:
        binary: the server executable (:func:`redis7_binary`, :func:`redis8_binary`).
        port: the port; by default a free one, kept across :meth:`restart`.
        dir: the working directory (AOF, logs, cluster config); by default a new temporary one.
        password: started with ``--requirepass`` when given.
        appendonly: persist with an append-only file (``appendfsync always``) so :meth:`restart`
            keeps the data; off by default (``--save ""`` too: nothing is persisted).
        extra_args: more ``redis-server`` arguments, e.g. ``("--maxmemory", "10mb")``.
    """

    def __init__(
        self,
        binary: str,
        *,
        port: int | None = None,
        dir: str | os.PathLike[str] | None = None,
        password: str | None = None,
        appendonly: bool = False,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.binary = binary
        self._fixed_port = port is not None
        self.port = port if port is not None else free_port()
        self._own_dir = dir is None
        self.dir = Path(tempfile.mkdtemp(prefix="cachekit-redis-")) if dir is None else Path(dir)
        self.password = password
        self.appendonly = appendonly
        self.extra_args = tuple(extra_args)
        self.proc: subprocess.Popen[bytes] | None = None
        version = server_version(binary)
        if version is None:
            raise RuntimeError(f"{binary!r} does not run")
        self.version = version

    @property
    def url(self) -> str:
        """``redis://[:password@]127.0.0.1:port/0``."""
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _args(self) -> list[str]:
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.dir),
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", "always",
            "--daemonize", "no",
            "--logfile", str(self.dir / f"redis-{self.port}.log"),
        ]  # fmt: skip
        if self.version >= (7, 0, 0):
            # DEBUG SLEEP (fault injection) is refused by 7+ unless enabled.
            args += ["--enable-debug-command", "yes"]
        if self.password:
            args += ["--requirepass", self.password]
        return args + list(self.extra_args)

    def start(self, timeout: float = 15.0) -> RedisServer:
        """Start the server and wait until it answers; return ``self``."""
        if self.running:
            return self
        for attempt in range(5):
            # start_new_session: the server gets its own process group, so stop() reaches a wrapper
            # script's child too, and a Ctrl-C meant for pytest does not kill it mid-test.
            self.proc = subprocess.Popen(
                self._args(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
            _RUNNING.add(self)
            if self._wait_ready(timeout):
                return self
            err = self._reap()
            in_use = "in use" in err or "Address already" in err or "bind" in err.lower()
            if not in_use or self._fixed_port or attempt == 4:
                raise RuntimeError(f"redis-server on port {self.port} did not start: {err[-2000:]}")
            self.port = free_port()  # somebody took the free port between probe and bind: retry
        raise AssertionError("unreachable")  # pragma: no cover

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                return False
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock,
            ):
                sock.sendall(_resp("PING"))
                reply = sock.recv(64)
                # +PONG, or -NOAUTH with a password: either way the server is serving commands.
                # -LOADING means it is still reading its AOF.
                if reply.startswith((b"+PONG", b"-NOAUTH")):
                    return True
            time.sleep(0.01)
        return False

    def _reap(self) -> str:
        proc, self.proc = self.proc, None
        if proc is None:
            return ""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
        log = self.dir / f"redis-{self.port}.log"
        text = err.decode(errors="replace")
        if log.is_file():
            text += log.read_text(errors="replace")[-4000:]
        return text

    def stop(self, *, kill: bool = False, timeout: float = 10.0) -> None:
        """Stop the server: ``SIGTERM`` (a clean shutdown), or ``SIGKILL`` with ``kill=True``.

        Idempotent. A server that does not exit within ``timeout`` after ``SIGTERM`` is killed.
        """
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
        if proc.stderr is not None:
            proc.stderr.close()
        self.proc = None
        _RUNNING.discard(self)

    def restart(self, *, kill: bool = False, appendonly: bool | None = None) -> RedisServer:
        """Stop and start again on the same port and directory (what survives depends on ``appendonly``)."""
        self.stop(kill=kill)
        if appendonly is not None:
            self.appendonly = appendonly
        return self.start()

    def cleanup(self) -> None:
        """Stop the server and remove its directory if it made one."""
        self.stop(kill=True)
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def command(self, *args: str | bytes | int | float, timeout: float = 10.0) -> Any:
        """Run one command on a fresh connection and return its reply (redis-py, bytes replies; its type
        is the command's, hence ``Any``)."""
        import redis

        client = redis.Redis(host="127.0.0.1", port=self.port, password=self.password, socket_timeout=timeout)
        try:
            return client.execute_command(*args)
        finally:
            client.close()

    def client(self, **kwargs: object) -> Any:
        """A redis-py client (bytes replies) for checking what is stored; the caller closes it."""
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password, **kwargs)  # type: ignore[arg-type]

    def delete_prefix(self, prefix: str) -> int:
        """Delete every key that starts with ``prefix``; return how many there were."""
        client = self.client(socket_timeout=10)
        try:
            names = list(client.scan_iter(match=escape_glob(prefix) + "*", count=1000))
            for name in names:
                client.delete(name)
            return len(names)
        finally:
            client.close()

    def pause(self, seconds: float, *, mode: str = "ALL") -> None:
        """``CLIENT PAUSE``: the server holds every client's commands (or writes, mode WRITE) for a while.

        Returns at once; commands sent meanwhile wait, then run.
        """
        self.command("CLIENT", "PAUSE", max(1, round(seconds * 1000)), mode)

    def debug_sleep(self, seconds: float, *, wait: bool = False) -> threading.Thread:
        """``DEBUG SLEEP``: the whole server blocks, answering nobody, for ``seconds``.

        Returns once the server is asleep (or, with ``wait=True``, awake again). The returned thread
        finishes when the server answers the DEBUG command; join it to wait for the server.
        """
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=seconds + 30)
        if self.password:
            sock.sendall(_resp("AUTH", self.password))
            if not sock.recv(64).startswith(b"+OK"):
                sock.close()
                raise RuntimeError("AUTH failed")
        sock.sendall(_resp("DEBUG", "SLEEP", seconds))

        def answer() -> None:
            with sock, contextlib.suppress(OSError):
                sock.recv(64)

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        # The server reads the command within microseconds; give it a moment so that a command
        # sent right after this returns finds it asleep.
        time.sleep(0.02)
        if wait:
            thread.join()
        return thread

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"RedisServer(v{'.'.join(map(str, self.version))}, port={self.port}, {state})"


class RedisCluster3(_Started):
    """A Redis Cluster of three masters (no replicas) on loopback, slots split in three equal ranges."""

    RANGES = ((0, 5460), (5461, 10922), (10923, 16383))

    def __init__(self, binary: str, *, node_timeout_ms: int = 2000, extra_args: Sequence[str] = ()) -> None:
        cluster_args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        cluster_args += ["--cluster-node-timeout", str(node_timeout_ms), *extra_args]
        # The cluster bus listens on port + 10000 unless told otherwise (Redis 7+: --cluster-port),
        # which fails for a free port above 55535.
        self.bus_ports = [free_port() for _ in range(3)]
        self.nodes = [
            RedisServer(binary, extra_args=[*cluster_args, "--cluster-port", str(bus)])
            for bus in self.bus_ports
        ]

    @property
    def url(self) -> str:
        """``redis+cluster://127.0.0.1:<first port>``: the client discovers the other nodes."""
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    def start(self, timeout: float = 30.0) -> RedisCluster3:
        """Start the nodes, assign the slots, introduce the nodes, and wait for ``cluster_state:ok``."""
        try:
            for node in self.nodes:
                node.start()
            for node, (low, high) in zip(self.nodes, self.RANGES, strict=True):
                if node.version >= (7, 0, 0):
                    node.command("CLUSTER", "ADDSLOTSRANGE", low, high)
                else:
                    node.command("CLUSTER", "ADDSLOTS", *range(low, high + 1))
            for node, bus in zip(self.nodes[1:], self.bus_ports[1:], strict=True):
                self.nodes[0].command("CLUSTER", "MEET", "127.0.0.1", node.port, bus)
            self._wait_ok(timeout)
        except BaseException:
            self.cleanup()
            raise
        return self

    def _wait_ok(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        info = ""
        while time.monotonic() < deadline:
            states = []
            for node in self.nodes:
                raw = node.command("CLUSTER", "INFO")
                info = raw.decode() if isinstance(raw, bytes) else str(raw)
                fields = dict(line.split(":", 1) for line in info.split() if ":" in line)
                states.append(
                    fields.get("cluster_state") == "ok"
                    and fields.get("cluster_known_nodes") == "3"
                    and fields.get("cluster_slots_ok") == "16384"
                )
            if all(states):
                return
            time.sleep(0.05)
        raise RuntimeError(
            f"the cluster did not reach cluster_state:ok in {timeout}s; last CLUSTER INFO:\n{info}"
        )

    def delete_prefix(self, prefix: str) -> int:
        """Delete every key that starts with ``prefix`` on every node; return how many there were."""
        return sum(node.delete_prefix(prefix) for node in self.nodes)

    def node_for_slot(self, slot: int) -> RedisServer:
        """The node that serves ``slot`` (slots are assigned in :data:`RANGES`)."""
        for node, (low, high) in zip(self.nodes, self.RANGES, strict=True):
            if low <= slot <= high:
                return node
        raise ValueError(f"no slot {slot}")

    def flushall(self) -> None:
        for node in self.nodes:
            node.command("FLUSHALL")

    def cleanup(self) -> None:
        """Stop every node and remove their directories."""
        for node in self.nodes:
            node.cleanup()

    stop = cleanup

    def __repr__(self) -> str:
        return f"RedisCluster3(ports={self.ports})"


@atexit.register
def _kill_leftovers() -> None:
    for server in list(_RUNNING):
        with contextlib.suppress(Exception):
            server.cleanup()


# -- session-wide servers, shared by every module that imports these fixtures ----------------------

_shared: dict[str, RedisServer | RedisCluster3] = {}
_shared_lock = threading.Lock()


def _shared_server(kind: str) -> RedisServer | RedisCluster3:
    # A process-wide registry rather than the fixture's own cache: a fixture imported into two test
    # modules is registered twice by pytest and would otherwise start two servers.
    with _shared_lock:
        server = _shared.get(kind)
        if server is None:
            if kind == "redis7":
                server = RedisServer(redis7_binary()).start()
            elif kind == "redis8":
                server = RedisServer(redis8_binary()).start()
            else:
                server = RedisCluster3(redis7_binary()).start()
            _shared[kind] = server
        return server


def _stop_shared() -> None:
    with _shared_lock:
        for server in _shared.values():
            server.cleanup()
        _shared.clear()


atexit.register(_stop_shared)


def _session_fixture(kind: str, expected: type[Any], name: str, doc: str) -> Any:
    """A session-scoped fixture yielding the shared server ``kind``; the data is isolated by key
    prefix and the server is never stopped by a test."""

    @pytest.fixture(scope="session", name=name)
    def fixture() -> Iterator[Any]:
        server = _shared_server(kind)
        assert isinstance(server, expected)
        yield server
        _stop_shared()

    fixture.__doc__ = doc
    return fixture


redis7_server = _session_fixture("redis7", RedisServer, "redis7_server", "A Redis 7 server for the session.")
redis8_server = _session_fixture("redis8", RedisServer, "redis8_server", "A Redis 8 server for the session.")
redis_cluster = _session_fixture(
    "cluster", RedisCluster3, "redis_cluster", "A three-master Redis 7 cluster for the session."
)

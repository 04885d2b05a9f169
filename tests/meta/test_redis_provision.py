"""The Redis servers are provided before pytest starts, never by a test.

``scripts/test`` calls ``ck_redis`` (``scripts/_redis.sh``), which finds or installs both servers and
exports them, or stops the run saying why; ``bash scripts/_redis.sh redis8`` prints a Redis 8 or says
why there is none. ``tests/redis_servers.py`` only reads what it was given (or ``redis-server`` on
PATH): a test that asks for a missing server skips, saying how to get one, and runs nothing to get it;
with ``CACHEKIT_NO_SKIPS`` set that skip is a failure. Here the script and pytest run for real, on a
PATH without ``apt-get`` and ``dpkg-deb`` and with only a Redis 7 ``redis-server``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.redis_servers import redis7_binary, redis8_binary

ROOT = Path(__file__).resolve().parents[2]
#: What the script would use to get a Redis 8: without them it can only say why it cannot.
WITHHELD = {"apt-get", "apt-cache", "dpkg-deb", "redis-server", "bash"}


@pytest.fixture
def path_without_apt(tmp_path: Path) -> str:
    """A PATH holding every tool of the system's own but the package tools, a Redis 7 server, and a
    ``bash`` that notes each run in ``bash-runs.log`` beside the folder (to see whether a test ran a
    script) before running the real one."""
    tools = tmp_path / "bin"
    tools.mkdir()
    for folder in ("/usr/local/bin", "/usr/bin", "/bin"):
        for entry in sorted(Path(folder).glob("*")) if Path(folder).is_dir() else []:
            link = tools / entry.name
            if entry.name not in WITHHELD and not entry.is_dir() and not os.path.lexists(link):
                link.symlink_to(entry)
    (tools / "redis-server").symlink_to(redis7_binary())
    real_bash = next(Path(f) / "bash" for f in ("/usr/bin", "/bin") if (Path(f) / "bash").is_file())
    log = tmp_path / "bash-runs.log"
    (tools / "bash").write_text(f'#!{real_bash}\necho "$*" >>"{log}"\nexec {real_bash} "$@"\n')
    (tools / "bash").chmod(0o755)
    return str(tools)


def _environ(path: str, home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CACHEKIT_REDIS", "CACHEKIT_NO_SKIPS"))}
    env.pop("CI", None)
    return {**env, "PATH": path, "CACHEKIT_REDIS8_HOME": str(home), **extra}


def _run(args: list[str], env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_the_script_says_why_there_is_no_redis8(path_without_apt: str, tmp_path: Path) -> None:
    proc = _run(
        ["bash", str(ROOT / "scripts" / "_redis.sh"), "redis8"],
        _environ(path_without_apt, tmp_path / "cache"),
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("scripts/_redis.sh: no Redis 8: no redis-server 8 on PATH (found ")
    assert ", 7.x) and no apt-get/dpkg-deb to get one." in last
    assert "CACHEKIT_REDIS8_SERVER" in last
    assert not (tmp_path / "cache" / "redis-server").exists()


def _ck_redis(path: str, home: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    """``scripts/test``'s provisioning step, as it calls it; prints the variables it exported."""
    script = (
        f'source "{ROOT / "scripts" / "_redis.sh"}"\n'
        'ck_redis || { echo "stopped"; exit 1; }\n'
        'echo "7=$CACHEKIT_REDIS7_SERVER"; echo "8=$CACHEKIT_REDIS8_SERVER"\n'
    )
    return _run(["bash", "-c", script], _environ(path, home, **extra))


def test_provisioning_stops_the_run_when_there_is_no_redis8(path_without_apt: str, tmp_path: Path) -> None:
    proc = _ck_redis(path_without_apt, tmp_path / "cache")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout == "stopped\n"
    assert "scripts/_redis.sh: no Redis 8: no redis-server 8 on PATH" in proc.stderr


def test_provisioning_exports_both_servers(path_without_apt: str, tmp_path: Path) -> None:
    redis8 = redis8_binary()
    proc = _ck_redis(path_without_apt, tmp_path / "cache", CACHEKIT_REDIS8_SERVER=redis8)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Redis 7: the redis-server on PATH (the fixture's link to a 7.x).
    assert f"7={path_without_apt}/redis-server\n8={redis8}\n" in proc.stdout


def test_provisioning_refuses_a_redis8_variable_that_is_not_redis8(
    path_without_apt: str, tmp_path: Path
) -> None:
    proc = _ck_redis(path_without_apt, tmp_path / "cache", CACHEKIT_REDIS8_SERVER=redis7_binary())
    assert proc.returncode == 1
    assert "is not Redis 8.x (found " in proc.stderr


NEEDS_REDIS8 = (
    "from tests.redis_servers import redis8_binary\n\ndef test_needs_redis8():\n    redis8_binary()\n"
)


@pytest.mark.parametrize("strict", [False, True], ids=["by hand", "CACHEKIT_NO_SKIPS=1"])
def test_a_test_without_its_server_gets_none_installed_and_says_how(
    strict: bool, path_without_apt: str, tmp_path: Path
) -> None:
    tests = tmp_path / "suite"
    tests.mkdir()
    (tests / "test_needs_redis8.py").write_text(NEEDS_REDIS8)
    env = _environ(path_without_apt, tmp_path / "cache", CACHEKIT_NO_SKIPS="1" if strict else "0")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # the installed plugins are not under test: faster
    proc = _run(
        [sys.executable, "-m", "pytest", "-q", "-rsf", "-p", "no:cacheprovider", "-p", "tests.skip_policy"],
        env,
        tests,
    )
    out = proc.stdout
    assert proc.returncode == (1 if strict else 0), out + proc.stderr
    assert ("1 failed" if strict else "1 skipped") in out
    assert (
        "no Redis 8.x server: CACHEKIT_REDIS8_SERVER is not set and redis-server on PATH is version 7." in out
    )
    assert "Run the tests with scripts/test, which provides every server before pytest starts" in out
    assert ("must skip nothing" in out) is strict
    # Nothing was run to get one: no script (the fake bash notes every run), nothing unpacked.
    assert not (tmp_path / "bash-runs.log").exists()
    assert not (tmp_path / "cache").exists()

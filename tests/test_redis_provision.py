"""Where no Redis 8 can be had, ``scripts/_redis.sh`` says why and the Redis 8 tests skip with that reason.

The project finds its own Redis 8 (``bash scripts/_redis.sh redis8``: on PATH, the distribution's
package, or Debian 13's packages unpacked privately on Debian 12); the suite's Redis 8 tests are the
check that it does. Here the script runs for real on a PATH without ``apt-get`` and ``dpkg-deb`` and
with only a Redis 7 ``redis-server``: it must not error, and a test asking for Redis 8 is skipped.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.redis_servers import redis7_binary

ROOT = Path(__file__).resolve().parents[1]
#: What the script would use to get a Redis 8: without them it can only say why it cannot.
WITHHELD = {"apt-get", "apt-cache", "dpkg-deb", "redis-server"}


@pytest.fixture
def path_without_apt(tmp_path: Path) -> str:
    """A PATH holding every tool of the system's own but the package tools, and a Redis 7 server."""
    tools = tmp_path / "bin"
    tools.mkdir()
    for folder in ("/usr/local/bin", "/usr/bin", "/bin"):
        for entry in sorted(Path(folder).glob("*")) if Path(folder).is_dir() else []:
            link = tools / entry.name
            if entry.name not in WITHHELD and not entry.is_dir() and not os.path.lexists(link):
                link.symlink_to(entry)
    (tools / "redis-server").symlink_to(redis7_binary())
    return str(tools)


def _environ(path: str, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEKIT_REDIS8_")}
    return {**env, "PATH": path, "CACHEKIT_REDIS8_HOME": str(home)}


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


def test_the_redis8_tests_skip_with_the_scripts_reason(path_without_apt: str, tmp_path: Path) -> None:
    (tmp_path / "test_needs_redis8.py").write_text(
        "from tests.redis_servers import redis8_binary\n\ndef test_needs_redis8():\n    redis8_binary()\n"
    )
    env = _environ(path_without_apt, tmp_path / "cache")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = _run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(tmp_path)], env, tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 skipped" in proc.stdout
    assert "no Redis 8 server: no redis-server 8 on PATH (found " in proc.stdout
    assert "no apt-get/dpkg-deb to get one" in proc.stdout

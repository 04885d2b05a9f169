"""tests/skip_policy.py: what cannot run here skips by hand and fails in CI; collection never breaks.

The policy runs for real: pytest in a subprocess over a small suite with every kind of skip, once as
a developer runs it and once as CI does (``CACHEKIT_NO_SKIPS=1``, or ``CI=true`` alone). The last test
collects this repository's own suite in an environment that holds cachekit's core dependencies and the
test tools only (no SDK, no Redis client, no numpy, no OpenTelemetry SDK...), as a fresh venv with
``pip install -e . pytest ...`` has them: every module collects, or skips saying what it needs.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests import skip_policy

ROOT = Path(__file__).resolve().parents[2]

SUITE = {
    "pytest.ini": """
        [pytest]
        markers =
            cuda: needs a CUDA device
        """,
    "test_items.py": """
        import pytest

        @pytest.fixture
        def server():
            pytest.skip("no server here")

        def test_passes():
            pass

        def test_skips():
            pytest.skip("no thing here")

        @pytest.mark.skipif(True, reason="not on this machine")
        def test_skipif():
            pass

        def test_fixture_skips(server):
            pass

        @pytest.mark.cuda
        def test_cuda_only():
            pytest.skip("no CUDA device")

        @pytest.mark.xfail(reason="known", strict=True)
        def test_xfails():
            raise AssertionError
        """,
    "test_importorskip.py": """
        import pytest

        pytest.importorskip("no_such_package_of_the_suite")

        def test_never_collected():
            pass
        """,
    "test_missing_import.py": """
        import no_such_optional_package_either

        def test_never_collected():
            pass
        """,
}


def _run_suite(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    for name, text in SUITE.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    environ = {k: v for k, v in os.environ.items() if k not in ("CI", skip_policy.STRICT_ENV)}
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), environ.get("PYTHONPATH", "")])
    environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # the installed plugins are not under test: faster
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rA",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.skip_policy",
            *args,
        ],
        cwd=tmp_path,
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _summary(out: str) -> str:
    return out.strip().splitlines()[-1].split(" in ")[0]


def test_by_hand_what_cannot_run_skips_saying_why(tmp_path: Path) -> None:
    proc = _run_suite(tmp_path)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert _summary(out) == "1 passed, 6 skipped, 1 xfailed"
    # Reported where the module imports it.
    assert (
        "test_missing_import.py:2: needs 'no_such_optional_package_either', which is not installed: "
        "scripts/test installs every test dependency"
    ) in out
    assert "could not import 'no_such_package_of_the_suite'" in out


@pytest.mark.parametrize("switch", [{"CACHEKIT_NO_SKIPS": "1"}, {"CI": "true"}], ids=["NO_SKIPS", "CI"])
def test_in_ci_every_skip_fails_but_cuda_only_tests(tmp_path: Path, switch: dict[str, str]) -> None:
    proc = _run_suite(tmp_path, "--continue-on-collection-errors", **switch)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    # The three item skips fail (pytest counts a failed setup as an error: skipif and the fixture's
    # skip happen in setup); the CUDA-only test still skips; xfail is not a skip; the two modules that
    # could not be imported are collection errors.
    assert _summary(out) == "1 failed, 1 passed, 1 skipped, 1 xfailed, 4 errors"
    assert "FAILED test_items.py::test_skips" in out
    for name in ("test_skipif", "test_fixture_skips"):
        assert f"ERROR test_items.py::{name}" in out
    assert "SKIPPED [1] test_items.py:" in out
    assert "no CUDA device" in out
    assert "ERROR test_importorskip.py" in out
    assert "ERROR test_missing_import.py" in out
    assert "must skip nothing: this skip is a failure" in out
    assert "no server here" in out
    assert "needs 'no_such_optional_package_either'" in out


def test_strict_can_be_turned_off_where_ci_is_set(tmp_path: Path) -> None:
    proc = _run_suite(tmp_path, CI="true", CACHEKIT_NO_SKIPS="0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _summary(proc.stdout) == "1 passed, 6 skipped, 1 xfailed"


def test_a_missing_module_of_the_project_is_an_error_not_a_skip(tmp_path: Path) -> None:
    (tmp_path / "test_own.py").write_text("import cachekit.no_such_module\n\ndef test_x():\n    pass\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.skip_policy",
            "test_own.py",
        ],
        cwd=tmp_path,
        env={
            **os.environ,
            "CACHEKIT_NO_SKIPS": "0",
            "PYTHONPATH": str(ROOT),
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr  # interrupted: an error during collection
    assert "ModuleNotFoundError: No module named 'cachekit.no_such_module'" in proc.stdout


def test_a_skip_names_the_extra_that_installs_the_package() -> None:
    assert skip_policy._extras_providing("numpy") == ["ann", "semantic", "semantic-torch"]
    assert skip_policy._extras_providing("prometheus_client") == ["metrics", "proxy", "dev"]
    assert skip_policy._extras_providing("anthropic")[0] == "anthropic"
    assert skip_policy._missing_reason("redis") == (
        "needs 'redis', which is not installed (extra redis): scripts/test installs every test dependency"
    )
    assert skip_policy._extras_providing("no_such_package") == []


# -- the whole suite, collected without the optional packages ----------------------------------------

#: What a minimal test environment has besides cachekit's core: the dev extra without the exporters'
#: SDKs (prometheus-client, opentelemetry-sdk), whose tests must skip rather than break collection.
WITHOUT = {"prometheus-client", "opentelemetry-sdk"}


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.split(r"[\s\[<>=!~;(]", requirement, maxsplit=1)[0]).lower()


def _minimal_distributions() -> set[str]:
    """cachekit-llm and the dev extra (less :data:`WITHOUT`), with everything they depend on."""
    from packaging.requirements import Requirement

    tomllib = pytest.importorskip("tomllib")
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    todo = ["cachekit-llm", *(name for name in map(_name, dev) if name not in WITHOUT)]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for requirement in importlib.metadata.distribution(name).requires or []:
            parsed = Requirement(requirement)
            if parsed.marker is None or parsed.marker.evaluate({"extra": ""}):
                todo.append(_name(parsed.name))
    return seen


def _site_without_extras(view: Path) -> None:
    """``view``: links to what the minimal distributions installed (packages, modules, metadata)."""
    view.mkdir()
    for name in _minimal_distributions():
        dist = importlib.metadata.distribution(name)
        base = Path(str(dist.locate_file("")))
        for top in {Path(str(f)).parts[0] for f in dist.files or []}:
            source, link = base / top, view / top
            if top not in ("..", "__pycache__") and source.exists() and not os.path.lexists(link):
                link.symlink_to(source)


@pytest.mark.slow
def test_the_suite_collects_without_the_optional_packages(tmp_path: Path) -> None:
    view = tmp_path / "site"
    _site_without_extras(view)
    # -S: not the venv's site-packages; the view and the checkout instead.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(view), str(ROOT)]), "CACHEKIT_NO_SKIPS": "0"}
    python = [sys.executable, "-S"]
    modules = ("anthropic", "numpy", "redis", "prometheus_client", "opentelemetry", "pytest_timeout")
    probe = f"import importlib.util as u; print([m for m in {modules!r} if u.find_spec(m) is None])"
    missing = subprocess.run([*python, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert missing.stdout.strip() == str(list(modules[:-1]))
    proc = subprocess.run(
        [*python, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out = proc.stdout
    assert proc.returncode == 0, out[-5000:] + proc.stderr[-5000:]
    assert "error" not in _summary(out), _summary(out)
    for needed in ("anthropic", "numpy", "redis", "prometheus_client"):
        assert f"needs '{needed}', which is not installed" in out

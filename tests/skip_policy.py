"""The suite's rule for tests that cannot run here: skipped on a developer's machine, failed in CI.

A test that needs something this machine lacks (a Redis server, an optional package such as the
OpenTelemetry SDK, a framework) is *skipped*, with a reason that names what is missing and how to get
it, so that ``pytest tests/test_x.py`` runs everything else. A run that must prove that everything ran
turns every such skip into a *failure*, so that a green run means no test was left out:

* strict when ``CACHEKIT_NO_SKIPS`` is set to anything but ``0``/``false``/``no``/``off``/empty, or,
  where it is not set at all, when ``CI`` is (GitHub Actions, GitLab and most CI systems set
  ``CI=true``). ``scripts/test`` (and so ``.ci/run``) sets ``CACHEKIT_NO_SKIPS=1``;
* the only skips a strict run allows are those of tests marked ``cuda`` (they need a CUDA device,
  which a CPU machine cannot provide); ``xfail`` is not a skip and is left to ``xfail_strict``.

It is one mechanism for every kind of skip: a test's own ``pytest.skip``/``importorskip``/``skipif``,
a fixture's (``tests.redis_servers`` skips when a server is missing), and a module that cannot be
imported because an optional package is missing. That last case is made a skip here as well
(:func:`pytest_pycollect_makemodule`), so that a venv without the optional packages still collects
every module: test modules import ``anthropic``, ``numpy``, ``redis``... at their top like any code.
A missing module of the project's own (``cachekit``, ``tests``) stays a collection error: that is a
bug, not a missing extra.

``tests/conftest.py`` imports the hooks; a pytest run elsewhere takes them with
``-p tests.skip_policy``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "ALLOWED_MARKERS",
    "STRICT_ENV",
    "Module",
    "pytest_make_collect_report",
    "pytest_pycollect_makemodule",
    "pytest_runtest_makereport",
    "strict",
]

#: The switch; ``CI`` decides only where this is not set.
STRICT_ENV = "CACHEKIT_NO_SKIPS"
#: Markers whose tests may skip even in a strict run: what they need cannot be installed.
ALLOWED_MARKERS = ("cuda",)
#: Top-level modules of the project itself: one missing is a bug, never a skip.
OWN_MODULES = ("cachekit", "tests")

ROOT = Path(__file__).resolve().parents[1]
_FALSE = {"", "0", "false", "no", "off"}


def strict() -> bool:
    """Whether this run must skip nothing (see the module's docstring)."""
    value = os.environ.get(STRICT_ENV)
    if value is None:
        value = os.environ.get("CI", "")
    return value.strip().lower() not in _FALSE


def _why(reason: str) -> str:
    source = STRICT_ENV if os.environ.get(STRICT_ENV) is not None else "CI"
    return (
        f"{reason}\n[a run with {source} set must skip nothing: this skip is a failure. "
        "scripts/test provides every server and package the tests need]"
    )


def _skip_reason(longrepr: object) -> str:
    # A skip's longrepr is (path, line, "Skipped: reason").
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    """In a strict run, a skipped test (setup, call or teardown) is reported as failed."""
    report = yield
    if (
        report.skipped
        and not hasattr(report, "wasxfail")
        and strict()
        and not any(item.get_closest_marker(name) for name in ALLOWED_MARKERS)
    ):
        report.outcome = "failed"
        report.longrepr = _why(_skip_reason(report.longrepr))
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, Any]:
    """A module skipped for a missing package is reported at its import line; in a strict run, a
    skipped module (``importorskip`` at its top, a missing package) is a collection error."""
    report = yield
    if report.skipped and isinstance(collector, Module) and collector.missing is not None:
        reason, line = collector.missing
        report.longrepr = (str(collector.path), line, f"Skipped: {reason}")
    if report.skipped and strict():
        report.outcome = "failed"
        report.longrepr = _why(_skip_reason(report.longrepr))
    return report


class Module(pytest.Module):
    # Named as pytest's own, so that --collect-only shows <Module ...> as usual.
    """A test module whose import fails for want of an optional package is skipped, saying which."""

    #: Why it was skipped and the line of the import that failed, once known.
    missing: tuple[str, int | None] | None = None

    def collect(self) -> Any:
        try:
            self.obj  # noqa: B018 - imports the module, as collecting it would
        except pytest.Collector.CollectError as error:
            missing = error.__cause__
            if not isinstance(missing, ModuleNotFoundError) or missing.name is None:
                raise
            top = missing.name.partition(".")[0]
            if top in OWN_MODULES:
                raise
            self.missing = (_missing_reason(top), self._import_line(missing))
            pytest.skip(self.missing[0], allow_module_level=True)
        return super().collect()

    def _import_line(self, error: BaseException) -> int | None:
        """The line of this module where the failed import is."""
        line = None
        tb = error.__traceback__
        while tb is not None:
            if Path(tb.tb_frame.f_code.co_filename) == self.path:
                line = tb.tb_lineno
            tb = tb.tb_next
        return line


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Module:
    """Collect test modules as :class:`Module` (a missing optional package skips the module)."""
    module: pytest.Module = Module.from_parent(parent, path=module_path)
    return module


def _missing_reason(module: str) -> str:
    extras = _extras_providing(module)
    which = f" (extra {', '.join(extras)})" if extras else ""
    return f"needs {module!r}, which is not installed{which}: scripts/test installs every test dependency"


def _extras_providing(module: str) -> list[str]:
    """The extras of pyproject.toml that require a distribution of that import name (best effort:
    the distribution's normalized name), ``all`` and ``dev`` last."""
    try:
        import tomllib  # type: ignore[import-not-found, unused-ignore]  # Python 3.11+; mypy checks as 3.10
    except ModuleNotFoundError:  # Python 3.10: the reason just names no extra
        return []
    try:
        project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    except (OSError, KeyError, ValueError):
        return []
    found = []
    for extra, requirements in project.get("optional-dependencies", {}).items():
        for requirement in requirements:
            name = re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0]
            if re.sub(r"[-_.]+", "_", name).lower() == module.lower():
                found.append(extra)
                break
    return sorted(found, key=lambda extra: (extra in ("all", "dev"), extra))

"""The tests' own layout (docs/architecture.md, "Where a test goes"): ``tests/`` mirrors the package,
regressions live with the suite of what they test, and SDK clients come from one factory."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import cachekit

TESTS = Path(__file__).resolve().parents[1]
PACKAGE = Path(cachekit.__file__).resolve().parent
#: Test folders with no package folder of the same name: end to end, and the project itself.
OWN_FOLDERS = {"dropin", "meta"}
#: Modules that build an SDK client by hand on purpose, and why.
BUILT_BY_HAND = {
    "test_config.py": "a drop-in made as a user makes it, to test what it takes from the environment",
    "test_transport.py": "the plain SDK over CachingTransport, composed as the docs show",
}
_SDK_CLASSES = {"Anthropic", "AsyncAnthropic", "OpenAI", "AsyncOpenAI"}


def _folders(root: Path) -> set[str]:
    return {p.parent.name for p in root.glob("*/__init__.py")}


def test_the_tests_mirror_the_package() -> None:
    packages = _folders(PACKAGE)
    tests = _folders(TESTS)
    assert packages - tests == set(), "a folder of cachekit/ without its folder of tests"
    assert tests - packages - OWN_FOLDERS == set(), "a folder of tests/ that mirrors nothing"


def test_no_module_of_regressions() -> None:
    named = [p.relative_to(TESTS).as_posix() for p in TESTS.rglob("test_*.py")]
    assert [n for n in named if re.search(r"regression|issue_?\d", n)] == []


def test_mypy_checks_every_test_body() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    mypy = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())["tool"]["mypy"]
    assert {"cachekit", "tests"} <= set(mypy["files"])
    assert mypy["strict"] is True  # cachekit's own code
    (tests,) = [o for o in mypy["overrides"] if "tests.*" in o["module"]]
    assert tests["check_untyped_defs"] is True


def _hand_built_clients(source: str) -> list[int]:
    """Lines that call an SDK class (cachekit's or the SDK's own) with an ``http_client`` made here:
    what the factory in conftest.py does."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _SDK_CLASSES
            and any(
                k.arg == "http_client"
                and isinstance(k.value, ast.Call)
                and isinstance(k.value.func, ast.Attribute)
                and k.value.func.attr in ("Client", "AsyncClient")
                for k in node.keywords
            )
        ):
            lines.append(node.lineno)
    return lines


def test_sdk_clients_come_from_the_one_factory() -> None:
    found = {}
    for path in sorted(TESTS.rglob("*.py")):
        if path.name == "conftest.py" or path.name in BUILT_BY_HAND:
            continue
        lines = _hand_built_clients(path.read_text())
        if lines:
            found[path.relative_to(TESTS).as_posix()] = lines
    assert found == {}, "build SDK clients with tests.conftest.sdk_client (or the harness fixture)"


def test_the_factory_check_sees_a_hand_built_client() -> None:
    source = "c = cachekit.AsyncOpenAI(api_key='k', http_client=httpx2.AsyncClient(transport=t))\n"
    assert _hand_built_clients(source) == [1]
    assert _hand_built_clients("c = sdk_client('openai', 'async', transport=t)\n") == []
    for name in BUILT_BY_HAND:
        assert _hand_built_clients((TESTS / name).read_text()), f"{name} builds no client by hand any more"

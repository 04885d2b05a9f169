"""Release hygiene that needs no build: one version, in one place; a Keep-a-Changelog changelog.

``scripts/smoke`` builds the sdist and the wheel and installs the wheel into a fresh virtual
environment; these checks keep the sources it builds from consistent.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import cachekit

ROOT = Path(__file__).resolve().parents[1]


def test_the_version_lives_in_cachekit_version_only() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["dynamic"] == ["version"]
    assert "version" not in project["project"]
    assert project["tool"]["hatch"]["version"]["path"] == "cachekit/_version.py"
    source = (ROOT / "cachekit/_version.py").read_text()
    assert re.findall(r'^__version__ = "([^"]+)"$', source, re.MULTILINE) == [cachekit.__version__]


def test_no_other_file_of_the_package_spells_the_version() -> None:
    pattern = re.compile(r"""__version__\s*=\s*["']""")
    offenders = [
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "cachekit").rglob("*.py")
        if path.name != "_version.py" and pattern.search(path.read_text())
    ]
    assert offenders == []


def test_the_version_is_pep_440() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+(?:(?:a|b|rc)\d+)?(?:\.post\d+)?(?:\.dev\d+)?", cachekit.__version__)


def test_the_changelog_keeps_a_changelog() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n")
    assert "keepachangelog.com" in text
    assert "## [Unreleased]" in text
    sections = re.findall(r"^## \[([^\]]+)\]", text, re.MULTILINE)
    assert sections[0] == "Unreleased"
    for kind in re.findall(r"^### (.+)$", text, re.MULTILINE):
        assert kind in {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}, kind
    # A released version's heading carries its date: ## [1.2.3] - 2026-01-31
    for line in re.findall(r"^## \[(?!Unreleased\]).*$", text, re.MULTILINE):
        assert re.fullmatch(r"## \[\d+\.\d+\.\d+[^\]]*\] - \d{4}-\d{2}-\d{2}", line), line

"""Release hygiene that needs no build: one version, in one place; one distribution name, the one every
install line names; a Keep-a-Changelog changelog.

``scripts/smoke`` builds the sdist and the wheel and installs the wheel into a fresh virtual
environment; these checks keep the sources it builds from consistent.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import cachekit

ROOT = Path(__file__).resolve().parents[1]
#: The name on the package index. ``cachekit`` there is an unrelated project that also imports as
#: ``cachekit``: an install line naming it installs the wrong package.
DISTRIBUTION = "cachekit-llm"
#: What a user reads install lines in: the README, the docs, the examples' README, the package's own
#: messages and docstrings, and the scripts.
USER_FACING = ["README.md", "docs/*.md", "examples/*.md", "cachekit/**/*.py", "scripts/*"]


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


def test_the_distribution_is_cachekit_llm_and_the_import_and_command_stay_cachekit() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == DISTRIBUTION
    assert project["scripts"] == {"cachekit": "cachekit.cli:main"}
    (everything,) = project["optional-dependencies"]["all"]
    assert everything.startswith(DISTRIBUTION + "[")  # the `all` extra names its own distribution
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    assert tool["hatch"]["build"]["targets"]["wheel"]["packages"] == ["cachekit"]


def test_every_install_line_names_the_distribution() -> None:
    files = sorted({path for pattern in USER_FACING for path in ROOT.glob(pattern) if path.is_file()})
    text = {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8") for path in files}
    # `cachekit[extra]` (not preceded by a name character or a dash, so `cachekit-llm[extra]` passes).
    other_project = re.compile(r"(?<![\w-])cachekit\[\w")
    wrong = [(name, m[0]) for name, body in text.items() for m in other_project.finditer(body)]
    assert wrong == []
    installs = [name for name, body in text.items() if f"pip install '{DISTRIBUTION}[" in body]
    assert {"README.md", "docs/index.md", "examples/README.md"} <= set(installs)


def test_missing_extra_messages_name_the_distribution() -> None:
    from cachekit.errors import MissingExtraError, install_command

    assert install_command("anthropic") == f"pip install '{DISTRIBUTION}[anthropic]'"
    assert install_command("semantic", "report") == f"pip install '{DISTRIBUTION}[semantic,report]'"
    assert f"pip install '{DISTRIBUTION}[redis]'" in str(MissingExtraError("redis", "redis", "RedisStore"))


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

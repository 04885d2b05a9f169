"""Release hygiene that needs no build: one version, in one place; one distribution name, the one every
install line names; a Keep-a-Changelog changelog.

``scripts/smoke`` builds the sdist and the wheel and installs the wheel into a fresh virtual
environment; these checks keep the sources it builds from consistent.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pytest

import cachekit

ROOT = Path(__file__).resolve().parents[2]
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


def _user_facing() -> dict[str, str]:
    files = sorted({path for pattern in USER_FACING for path in ROOT.glob(pattern) if path.is_file()})
    return {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8") for path in files}


def test_every_install_line_names_the_distribution() -> None:
    text = _user_facing()
    # `cachekit[extra]` (not preceded by a name character or a dash, so `cachekit-llm[extra]` passes).
    other_project = re.compile(r"(?<![\w-])cachekit\[\w")
    wrong = [(name, m[0]) for name, body in text.items() for m in other_project.finditer(body)]
    assert wrong == []


def test_the_first_install_is_from_a_checkout_or_a_wheel_until_it_is_published() -> None:
    """cachekit-llm is not on the package index: no page may tell a new user to install it from there,
    and the pages a new user starts from say how to install it from a checkout (the wheel: scripts/build)."""
    text = _user_facing()
    from_index = re.compile(rf"pip install {DISTRIBUTION}(?![\w\[-])|Published as")
    assert [(name, m[0]) for name, body in text.items() for m in from_index.finditer(body)] == []
    for page in ("README.md", "docs/index.md", "examples/README.md"):
        assert "pip install '.[" in text[page], page
    for page in ("README.md", "docs/index.md"):
        assert "./scripts/build" in text[page], page
        assert "pip install dist/cachekit_llm-VERSION-py3-none-any.whl" in text[page], page
        assert "release.md" in text[page]
    assert (ROOT / "scripts" / "build").is_file()
    assert (ROOT / "docs" / "release.md").is_file()


#: PyTorch's CPU wheels: the docs' torch line and the scripts' install use the same index.
TORCH_CPU = "pip install torch --index-url https://download.pytorch.org/whl/cpu"


def test_the_torch_extras_say_how_to_get_the_cpu_build_first() -> None:
    text = _user_facing()
    for page, extra in (
        ("README.md", "semantic"),
        ("docs/index.md", "semantic"),
        ("docs/semantic.md", "semantic"),
        ("docs/local.md", "local"),
    ):
        body = text[page]
        assert TORCH_CPU in body, page
        # The CPU build first, then the extra (which keeps the torch it finds).
        assert body.index(TORCH_CPU) < body.index(f"pip install '.[{extra}]'", body.index(TORCH_CPU)), page
    venv = (ROOT / "scripts" / "_venv.sh").read_text()
    assert "CK_TORCH_INDEX=${CACHEKIT_TORCH_INDEX-https://download.pytorch.org/whl/cpu}" in venv
    assert '--extra-index-url "$CK_TORCH_INDEX" "torch==' in venv


class _Recorder:
    """Stands in for pytest's option parser: notes the ini options a plugin's ``pytest_addoption``
    registers, and accepts anything else it does (groups, command-line options)."""

    def __init__(self) -> None:
        self.ini: list[str] = []

    def addini(self, name: str, *args: Any, **kwargs: Any) -> None:
        self.ini.append(name)

    def getgroup(self, *args: Any, **kwargs: Any) -> _Recorder:
        return self

    def addoption(self, *args: Any, **kwargs: Any) -> None:
        pass

    _addoption = addoption


def _plugin_ini_options(config: pytest.Config) -> dict[str, str]:
    """Each ini option that an installed plugin (not pytest itself) registers: its distribution."""
    found = {}
    for plugin, dist in config.pluginmanager.list_plugin_distinfo():
        addoption = getattr(plugin, "pytest_addoption", None)
        if addoption is None:
            continue
        recorder = _Recorder()
        known = {"parser": recorder, "pluginmanager": config.pluginmanager}
        addoption(**{name: known[name] for name in inspect.signature(addoption).parameters})
        found.update(dict.fromkeys(recorder.ini, dist.project_name))
    return found


def _pip_install_lines(text: str) -> list[str]:
    return [m[0] for m in re.finditer(r"pip install [^\n`]*", text)]


def test_the_documented_pytest_install_lines_have_every_plugin_the_config_needs(
    pytestconfig: pytest.Config,
) -> None:
    """The repository's pytest configuration is strict (``--strict-config``): an option no installed
    plugin provides stops pytest (``Unknown config option: timeout``). Every install line in the docs
    that installs pytest must install the plugins that provide the configured options, or the ``dev``
    extra, which must list them."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    configured = set(project["tool"]["pytest"]["ini_options"])
    plugins = _plugin_ini_options(pytestconfig)
    needed = {plugins[key] for key in configured if key in plugins}
    assert "pytest-timeout" in needed  # `timeout` is configured: the check reads what it should
    dev = {
        re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower()
        for r in project["project"]["optional-dependencies"]["dev"]
    }
    assert {name.lower() for name in needed} <= dev
    lines = [
        (page, line)
        for page, body in _user_facing().items()
        if page.endswith(".md")
        for line in _pip_install_lines(body)
        if re.search(r"(?<![\w-])pytest(?![\w-])", line)
    ]
    assert "examples/README.md" in {page for page, _ in lines}  # the examples' own pytest command
    for page, line in lines:
        words = set(line.replace("'", " ").replace('"', " ").split())
        extras = {e for w in words if "[" in w for e in w[w.index("[") + 1 : w.rindex("]")].split(",")}
        missing = [name for name in sorted(needed) if name not in words and "dev" not in extras]
        assert missing == [], f"{page}: `{line}` lacks {missing}, which the pytest config needs"


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

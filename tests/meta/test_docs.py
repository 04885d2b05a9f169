"""The documentation's generated parts (docs/hooks) and the pages' consistency with the project.

The site itself is built by ``scripts/docs`` (``mkdocs build --strict``); these tests need no MkDocs:
they run the hook's generators on the real data files and pages, and the docstring converter on
samples.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from cachekit.cost import default_prices, genai, normalize
from cachekit.providers import PROVIDERS
from cachekit.providers.cache_rules import default_cache_rules

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_docs_hooks_{name}", DOCS / "hooks" / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


generated = _load("generated")
rst = _load("rst_docstrings")

PAGES = sorted(p for p in DOCS.glob("**/*.md") if "hooks" not in p.parts)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_every_marker_of_every_page_expands(page: Path, caplog: pytest.LogCaptureFixture) -> None:
    text = page.read_text()
    with caplog.at_level(logging.WARNING, logger="mkdocs.hooks.cachekit"):
        expanded = generated.expand(text, str(page))
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    assert "<!-- cachekit:" not in expanded


#: Markers whose text names what genai-prices covers: generated without it, they read differently.
NEEDS_GENAI_PRICES = ("<!-- cachekit:prices ", "<!-- cachekit:providers -->")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_every_generated_section_is_committed_and_current(
    page: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The pages are read in the repository (there is no hosted site): every generated section is in
    the file, and is what the generator prints from today's data and code."""
    name = page.relative_to(ROOT).as_posix()
    text = page.read_text()
    assert generated.bare_markers(text) == [], f"{name} lacks generated text: run scripts/gen-docs, commit"
    if any(marker in text for marker in NEEDS_GENAI_PRICES):
        pytest.importorskip("genai_prices")
    with caplog.at_level(logging.WARNING, logger="mkdocs.hooks.cachekit"):
        fresh = generated.refresh(text, str(page))
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    assert fresh == text, f"{name} is stale: run scripts/gen-docs and commit it"


def test_a_data_change_makes_the_page_stale_and_the_check_names_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("genai_prices")
    page = tmp_path / "providers.md"
    page.write_text((DOCS / "providers.md").read_text())
    assert generated.main(["--check", str(page)]) == 0
    import cachekit.providers

    # A provider dropped from the registry: the routing table the page commits is no longer true.
    monkeypatch.setattr(cachekit.providers, "PROVIDERS", cachekit.providers.PROVIDERS[:-1])
    assert generated.main(["--check", str(page)]) == 1
    assert capsys.readouterr().out == f"{page}: stale (run scripts/gen-docs)\n"


def test_regenerating_makes_bare_markers_blocks_and_keeps_blocks_apart() -> None:
    page = (
        "<!-- cachekit:usage glm -->\n\ntext\n\n<!-- cachekit:usage kimi -->\nold\n<!-- /cachekit:usage -->\n"
    )
    assert generated.bare_markers(page) == ["<!-- cachekit:usage glm -->"]
    fresh = generated.refresh(page)
    glm, kimi = generated.usage_section("glm"), generated.usage_section("kimi")
    assert fresh == (
        f"<!-- cachekit:usage glm -->\n{glm}\n<!-- /cachekit:usage -->\n\ntext\n\n"
        f"<!-- cachekit:usage kimi -->\n{kimi}\n<!-- /cachekit:usage -->\n"
    )
    assert generated.bare_markers(fresh) == []
    assert generated.refresh(fresh) == fresh


def test_an_unknown_marker_or_provider_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    text = "<!-- cachekit:nope -->\n\n<!-- cachekit:prices nobody -->\n"
    with caplog.at_level(logging.WARNING, logger="mkdocs.hooks.cachekit"):
        assert generated.expand(text, "page.md") == text
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert "unknown marker cachekit:nope" in messages[0]
    assert "nobody" in messages[1]


def test_every_provider_has_a_section_and_usage_notes() -> None:
    page = (DOCS / "providers.md").read_text()
    for provider in PROVIDERS:
        for kind in ("cache-rules", "prices", "usage"):
            assert f"<!-- cachekit:{kind} {provider.name} -->" in page
        assert provider.name in generated.USAGE_ROWS
        assert provider.name in generated.USAGE_EXAMPLES


def test_the_rules_tables_carry_every_row_with_its_source_and_date() -> None:
    rows = json.loads((ROOT / "cachekit/providers/cache_rules.json").read_text())["rules"]
    tables = {name: generated.cache_rules_table(name) for name in {p.name for p in PROVIDERS}}
    for row in rows:
        table = tables[row["provider"]]
        label = f"`{row['prefix']}`" if row["prefix"] else "*(default)*"
        line = next(line for line in table.splitlines() if line.startswith(f"| {label} |"))
        assert f"]({row['source']}), {row['checked']}" in line
        assert f"{row.get('min_cacheable_tokens', 0):,}" in line or "min_cacheable_tokens" not in row
    assert len(default_cache_rules().providers) == sum("| *(default)* |" in t for t in tables.values())


def test_the_price_tables_carry_every_row_with_its_source_and_date() -> None:
    for row in default_prices():
        table = generated.prices_table(row.provider)
        line = next(line for line in table.splitlines() if line.startswith(f"| `{row.model}`"))
        assert f"]({row.source}), {row.checked}" in line
        assert f"| {row.rates.input:g} |" in line


def test_a_provider_without_rows_says_so() -> None:
    ruled = set(default_cache_rules().providers)
    priced = {row.provider for row in default_prices()}
    for provider in PROVIDERS:
        if provider.name not in ruled:
            assert "has no row" in generated.cache_rules_table(provider.name)
        if provider.name not in priced:
            # genai-prices prices the providers it covers; only the rest have no price at all.
            covered = genai.pricing_pages(provider.name) is not None
            expected = "Priced by [genai-prices]" if covered else "has no row"
            assert expected in generated.prices_table(provider.name)


def test_usage_rows_come_from_the_usage_module() -> None:
    rows = generated.usage_rows()
    wanted = {label for labels in generated.USAGE_ROWS.values() for label in labels}
    assert wanted <= set(rows)
    assert "cache_read_input_tokens" in rows["Anthropic Messages"]
    assert "prompt_cache_hit_tokens" in rows["DeepSeek (chat)"]


@pytest.mark.parametrize("provider", sorted(generated.USAGE_EXAMPLES))
def test_usage_examples_are_read_by_cachekit(provider: str) -> None:
    for dialect, usage in generated.USAGE_EXAMPLES[provider]:
        record = normalize(provider, dialect, usage)
        assert record.known, record.problems
        assert record.input_total
        assert record.output


def test_cli_sections_cover_every_command() -> None:
    commands = generated.cli_commands()
    assert {"demo", "report", "serve", "diff"} <= set(commands)
    text = generated.cli_sections()
    for command in commands:
        assert f"## {command}\n" in text
        assert f"usage: cachekit {command}" in text


def test_the_pages_readme_links_to_exist_and_are_in_the_site() -> None:
    readme = (ROOT / "README.md").read_text()
    config = (ROOT / "mkdocs.yml").read_text()
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / target).is_file(), target
        assert target.removeprefix("docs/") in config, f"{target} is not in the mkdocs.yml nav"


def test_every_page_is_in_the_nav() -> None:
    config = (ROOT / "mkdocs.yml").read_text()
    for page in PAGES:
        assert f": {page.relative_to(DOCS).as_posix()}" in config, page


def test_every_extra_is_listed_on_the_quickstart() -> None:
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    index = (DOCS / "index.md").read_text()
    for extra in extras:
        assert f"| `{extra}` |" in index, extra


def test_sphinx_roles_become_optional_links() -> None:
    text = "Use :class:`~cachekit.cache.Cache` or :func:`cachekit.wrap`, not :meth:`Foo.bar`."
    out = rst.rst_to_markdown(text)
    for role in (":class:", ":func:", ":meth:"):
        assert role not in out
    assert '<autoref identifier="cachekit.cache.Cache" optional><code>Cache</code></autoref>' in out
    assert '<autoref identifier="cachekit.wrap" optional><code>cachekit.wrap</code></autoref>' in out
    assert '<autoref identifier="Foo.bar" optional><code>Foo.bar</code></autoref>' in out


def test_literal_block_markers_and_simple_tables_become_markdown() -> None:
    text = "\n".join(
        [
            "Layout::",
            "",
            "    a b",
            "",
            "::",
            "",
            "=====  ===========",
            "name   meaning",
            "=====  ===========",
            "one    the first,",
            "       continued",
            "two    a | pipe",
            "=====  ===========",
        ]
    )
    out = rst.rst_to_markdown(text).splitlines()
    assert out[0] == "Layout:"
    assert "::" not in out
    assert "| name | meaning |" in out
    assert "| one | the first, continued |" in out
    assert "| two | a \\| pipe |" in out


def _drawn_tree(tree: str) -> dict[str, str]:
    """Each exception a text tree draws, with the one drawn as its parent (``""`` for the root)."""
    drawn: dict[str, str] = {}
    parents: list[tuple[int, str]] = []
    lines = tree.strip("\n").splitlines()
    indent = len(lines[0]) - len(lines[0].lstrip())  # the root's: the tree is drawn right of it
    for line in lines:
        match = re.match(r"^([│├└─ ]*)(\w+)", line[indent:])
        assert match, line
        depth, name = len(match.group(1)), match.group(2)
        while parents and parents[-1][0] >= depth:
            parents.pop()
        drawn[name] = parents[-1][1] if parents else ""
        parents.append((depth, name))
    return drawn


def _page_tree() -> str:
    text = (DOCS / "operations.md").read_text()
    return text[text.index("```text\nCachekitError\n") + len("```text\n") :].split("```", 1)[0]


def _module_tree() -> str:
    from cachekit import errors

    doc = errors.__doc__ or ""
    return doc[doc.index("    CachekitError\n") :].split("\n\n", 1)[0]


@pytest.mark.parametrize("tree", [_page_tree, _module_tree], ids=["docs/operations.md", "cachekit.errors"])
def test_the_exception_tree_drawn_is_the_one_in_errors(tree: Callable[[], str]) -> None:
    """docs/operations.md and cachekit.errors' docstring draw cachekit's exceptions: every one of
    cachekit.errors, each under its parent, and nothing else."""
    import inspect

    from cachekit import errors

    drawn = _drawn_tree(tree())
    exceptions = {
        name: obj
        for name, obj in vars(errors).items()
        if inspect.isclass(obj) and issubclass(obj, errors.CachekitError)
    }
    assert set(drawn) == set(exceptions), set(drawn) ^ set(exceptions)
    for name, parent in drawn.items():
        if name != "CachekitError":
            assert exceptions[name].__bases__[0].__name__ == parent, name


#: ``cachekit/...`` paths, and paths of the package's folders written without it (``pipeline/key.py``),
#: as the pages name them: a Python or data file, or a folder (a trailing ``/``). Module paths are lower
#: case: ``pipeline/X.py`` stands for any stage.
_PATH = re.compile(r"(?<![\w/.$~-])((?:[a-z_]+/)+(?:[a-z0-9_-]+\.(?:py|json))?)(?![\w/])")
#: Dotted names under cachekit: modules, and names in them (``cachekit.shape.planner.plan_breakpoints``).
_DOTTED = re.compile(r"(?<![\w/.-])cachekit(?:\.[A-Za-z_]\w*)+")
_LOGGER = re.compile(r"""getLogger\(\s*["'](cachekit[\w.]*)["']""")


def _doc_pages() -> list[Path]:
    return [*PAGES, ROOT / "README.md"]


def _loggers() -> set[str]:
    """The logger names cachekit logs under: a page may name one (``cachekit.flights``) as a logger."""
    return {name for path in (ROOT / "cachekit").rglob("*.py") for name in _LOGGER.findall(path.read_text())}


def _resolves(dotted: str) -> bool:
    """``dotted`` is a module of cachekit, or a name defined in one."""
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def test_every_module_path_the_pages_name_exists() -> None:
    """Each ``cachekit/x/y.py`` path (or ``x/y.py`` under cachekit/) and each ``cachekit.x.y`` name
    in docs/ and the README is there: moving a module without its pages fails here."""
    loggers = _loggers()
    missing: list[str] = []
    for page in _doc_pages():
        text = page.read_text()
        where = str(page.relative_to(ROOT))
        for path in set(_PATH.findall(text)):
            if path.endswith("/") and not path.startswith("cachekit/"):
                continue  # a folder named alone may be anything (`dist/`, a JSON path `tools/*/...`)
            # From the repository's root (cachekit/..., tests/..., docs/...), else from cachekit/.
            if not (ROOT / path).exists() and not (ROOT / "cachekit" / path).exists():
                missing.append(f"{where}: {path}")
        for dotted in set(_DOTTED.findall(text)):
            if dotted not in loggers and not _resolves(dotted):
                missing.append(f"{where}: {dotted}")
    assert not missing, missing


def test_the_path_check_sees_paths_and_names_in_prose() -> None:
    text = (
        "`cachekit/exact/keys.py`, `pipeline/gaps.py`, :mod:`cachekit.gaps`, `cachekit.flights`, `cachekit/`"
    )
    assert sorted(_PATH.findall(text)) == ["cachekit/", "cachekit/exact/keys.py", "pipeline/gaps.py"]
    assert sorted(_DOTTED.findall(text)) == ["cachekit.flights", "cachekit.gaps"]
    assert not _resolves("cachekit.gaps")
    assert not _resolves("cachekit.exact.keys")
    assert _resolves("cachekit.stores.keys.store_key")
    assert "cachekit.flights" in _loggers()  # a logger, not a module


def test_the_architecture_page_names_every_module_of_the_pipeline() -> None:
    """Each module of ``cachekit/pipeline/`` is on the architecture page, as a stage in its table or
    as one of what runs them: a new module there is described where a newcomer reads about it."""
    text = (DOCS / "architecture.md").read_text()
    modules = sorted(p.name for p in (ROOT / "cachekit" / "pipeline").glob("*.py") if p.name != "__init__.py")
    assert len(modules) > 10
    assert [m for m in modules if f"pipeline/{m}`" not in text and f"(`{m}`)" not in text] == []

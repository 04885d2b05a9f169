"""No module of cachekit imports itself through others, and no import runs upward: not at import time,
not for type checking, not inside a function. A cycle makes the import order matter and the layers
impossible to read bottom-up (``config`` and ``cost.ledger`` used to import each other).

The layers (:data:`LAYERS`, bottom first) are the folders and top-level modules of ``cachekit/``: a
module imports its own folder and the layers below its own, never a layer above, and the folders of
one layer never import each other. A new folder or top-level module takes a place in the table."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
from pathlib import Path

import cachekit

PACKAGE = Path(cachekit.__file__).parent
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


#: The folders and top-level modules of cachekit, in layers, bottom first (``cachekit`` is the
#: package's ``__init__``: the public face, which replay and the command line build on).
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "_version",
        "_types",
        "_home",
        "_fork",
        "_closing",
        "_progress",
        "_format",
        "_asgi_http",
    ),  # import nothing of cachekit
    ("_http", "errors"),
    ("_asgi",),  # the HTTP server layer of serve and proxy
    ("providers", "stores", "cost"),  # what each provider is; where bytes are kept; what calls cost
    ("shape",),  # canonical form, blocks, lint, breakpoints and their lifetimes
    ("semantic",),
    ("config", "ops"),
    ("context", "local"),
    ("pipeline",),  # the stages, over everything above
    ("cache",),
    ("transport", "decorator"),
    ("clients", "proxy"),  # proxy: the HTTP front for any client
    ("cachekit", "testing"),
    ("replay",),
    ("cli",),
    ("__main__",),
)


def unit_of(module: str) -> str:
    """The folder or top-level module of cachekit that ``module`` belongs to (``cachekit`` for the
    package's ``__init__``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """``importer -> imported`` for each import of a layer's own or a higher layer's folder."""
    layer = {unit: i for i, units in enumerate(LAYERS) for unit in units}
    return sorted(
        f"{module} -> {other}"
        for module, imported in graph.items()
        for other in imported
        if unit_of(module) != unit_of(other) and layer[unit_of(other)] >= layer[unit_of(module)]
    )


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, name: str, modules: set[str]) -> set[str]:
    """The cachekit modules ``path`` imports anywhere in its source (``from a import b`` names the
    module ``a.b`` when there is one, else ``a``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in modules:
                    found.add(full)
                elif base in modules:
                    found.add(base)
    found.discard(name)
    return found


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    modules = set(paths)
    return {name: imports_of(path, name, modules) for name, path in paths.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_import_graph_sees_type_checking_and_deferred_imports() -> None:
    graph = import_graph()
    assert "cachekit.cost.ledger" in graph["cachekit.config"]  # under TYPE_CHECKING
    assert "cachekit.semantic.layer" in graph["cachekit.pipeline.semantic"]  # inside a function


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_every_folder_and_top_level_module_has_one_layer() -> None:
    listed = [unit for units in LAYERS for unit in units]
    assert len(listed) == len(set(listed))
    assert {unit_of(module) for module in import_graph()} == set(listed)


def test_the_layer_check_finds_an_upward_import_and_one_between_siblings() -> None:
    graph = {
        "cachekit.stores.keys": {"cachekit._types", "cachekit.pipeline.key"},  # upward
        "cachekit.providers.sse": {"cachekit.providers.answers", "cachekit.stores.record"},  # sideways
        "cachekit.pipeline.key": {"cachekit.stores.keys", "cachekit.pipeline.view"},  # down, and its own
    }
    assert upward_imports(graph) == [
        "cachekit.providers.sse -> cachekit.stores.record",
        "cachekit.stores.keys -> cachekit.pipeline.key",
    ]


def test_no_import_runs_upward() -> None:
    assert upward_imports(import_graph()) == []


# -- the stages: the driver alone wires them ---------------------------------------------------------

#: A row of docs/architecture.md's stage table: its number and name, then its modules, the stage first.
_STAGE_ROW = re.compile(r"^\| \d [^|]*\| `pipeline/(\w+)\.py`", re.MULTILINE)
DRIVER = "cachekit.pipeline.driver"


def stage_modules() -> set[str]:
    """The stage modules, as the architecture page's stage table names them."""
    return {f"cachekit.pipeline.{name}" for name in _STAGE_ROW.findall(ARCHITECTURE.read_text())}


def is_logic(obj: object) -> bool:
    """A function, or a class that is not a dataclass (a stage, or anything else with behaviour to
    call): what one stage must not take from another. Values (frozen dataclasses), type aliases and
    constants pass."""
    if inspect.isroutine(obj):
        return True
    return inspect.isclass(obj) and not dataclasses.is_dataclass(obj)


def stage_logic_imports(stages: set[str]) -> list[str]:
    """``importer -> stage.name`` for each function or class with behaviour (or a whole stage module)
    that a module of ``cachekit/pipeline/`` other than the driver imports from a stage module."""
    found: list[str] = []
    for path in sorted((PACKAGE / "pipeline").glob("*.py")):
        name = module_name(path)
        if name in (DRIVER, "cachekit.pipeline"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.extend(f"{name} -> {a.name}" for a in node.names if a.name in stages - {name})
            elif isinstance(node, ast.ImportFrom) and node.module is not None:
                for alias in node.names:
                    whole = f"{node.module}.{alias.name}"
                    other = node.module in stages - {name}
                    if whole in stages - {name} or (
                        other and is_logic(getattr(importlib.import_module(node.module), alias.name))
                    ):
                        found.append(f"{name} -> {whole}")
    return sorted(found)


def test_the_stage_table_names_the_stages() -> None:
    stages = stage_modules()
    assert {"cachekit.pipeline.controls", "cachekit.pipeline.exact", "cachekit.pipeline.upstream"} <= stages
    assert "cachekit.pipeline.driver" not in stages
    assert "cachekit.pipeline.entries" not in stages  # named in the table, but never first in a row


def test_the_stage_check_tells_logic_from_values() -> None:
    from cachekit.pipeline.controls import CACHE_HEADER, Control
    from cachekit.pipeline.entries import lookup
    from cachekit.pipeline.key import Call
    from cachekit.pipeline.shape import Shaper

    assert is_logic(lookup)
    assert is_logic(Shaper)
    assert not is_logic(Call)
    assert not is_logic(Control)
    assert not is_logic(CACHE_HEADER)


def test_no_stage_calls_another() -> None:
    """A stage takes from another stage only values (frozen dataclasses) and constants: no function,
    no stage; what they both need is in a module that is no stage. Only the driver wires them."""
    assert stage_logic_imports(stage_modules()) == []


def test_the_driver_runs_every_stage() -> None:
    assert stage_modules() <= import_graph()[DRIVER]

"""No module of cachekit imports itself through others, and no import runs upward: not at import time,
not for type checking, not inside a function. A cycle makes the import order matter and the layers
impossible to read bottom-up (``config`` and ``cost.ledger`` used to import each other).

The layers (:data:`LAYERS`, bottom first) are the folders and top-level modules of ``cachekit/``: a
module imports its own folder and the layers below its own, never a layer above, and the folders of
one layer never import each other. A new folder or top-level module takes a place in the table."""

from __future__ import annotations

import ast
from pathlib import Path

import cachekit

PACKAGE = Path(cachekit.__file__).parent


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

"""Modules that moved into a stage's folder keep their old import paths.

``import cachekit.planner`` (a path the documentation and existing code use) gives the module now at
``cachekit.shape.planner``: the very same module object, never a second copy. The finder sits last on
``sys.meta_path``, so it only answers for a name no file provides.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

__all__ = ["MOVED", "install"]

#: Old module path → where the module is now.
MOVED: dict[str, str] = {
    "cachekit.canonical": "cachekit.shape.canonical",
    "cachekit.blocks": "cachekit.shape.blocks",
    "cachekit.lint": "cachekit.shape.lint",
    "cachekit.planner": "cachekit.shape.planner",
    "cachekit.tokens": "cachekit.shape.tokens",
    "cachekit.diff": "cachekit.shape.diff",
    "cachekit.keys": "cachekit.exact.keys",
    "cachekit.flights": "cachekit.exact.flights",
    "cachekit.echo": "cachekit.exact.echo",
    "cachekit.sse": "cachekit.exact.sse",
}


class _Alias(importlib.abc.Loader):
    """Loads an old path as the module at its new one."""

    def __init__(self, target: str) -> None:
        self._target = target
        self._spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self._target)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system stamped the old path's spec on the module: give it back its own.
        module.__spec__ = self._spec


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        moved = MOVED.get(fullname)
        if moved is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(moved))


def install() -> None:
    """Answer the old paths (once per process)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedFinder())

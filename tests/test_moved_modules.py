"""Modules that moved into a stage's folder (``cachekit.shape``, ``cachekit.exact``) keep their old
import paths: the documentation and existing code import ``cachekit.planner``, ``cachekit.lint``, ..."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import cachekit
from cachekit import _moved


@pytest.mark.parametrize("old", sorted(_moved.MOVED))
def test_an_old_path_is_the_moved_module_itself(old: str) -> None:
    new = _moved.MOVED[old]
    module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert module.__name__ == new
    assert module.__spec__ is not None
    assert module.__spec__.name == new  # its own spec, not the alias's


def test_from_imports_of_old_paths_work_in_a_fresh_process() -> None:
    code = (
        "from cachekit.planner import Planner\n"
        "from cachekit.lint import PrefixLinter, lint_request\n"
        "import cachekit.blocks, cachekit.shape.blocks\n"
        "assert cachekit.blocks is cachekit.shape.blocks\n"
        "assert Planner.__module__ == 'cachekit.shape.planner'\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.stdout.strip() == "ok", result.stderr


def test_the_finder_answers_only_for_moved_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(_moved.MOVED, "cachekit.an_old_name", "cachekit.errors")
    monkeypatch.delitem(sys.modules, "cachekit.an_old_name", raising=False)
    assert importlib.import_module("cachekit.an_old_name") is importlib.import_module("cachekit.errors")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("cachekit.never_was_here")
    sys.modules.pop("cachekit.an_old_name")
    delattr(cachekit, "an_old_name")

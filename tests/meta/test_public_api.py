"""The public surface: a sorted ``__all__``, docstrings everywhere, lazy SDK imports, clear extras errors."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import subprocess
import sys

import pytest

import cachekit
from cachekit import errors


def test_all_is_sorted_and_complete() -> None:
    assert list(cachekit.__all__) == sorted(cachekit.__all__)
    for name in cachekit.__all__:
        assert getattr(cachekit, name) is not None


def _public_modules() -> list[str]:
    names = ["cachekit"]
    for info in pkgutil.walk_packages(cachekit.__path__, "cachekit."):
        if not any(part.startswith("_") for part in info.name.split(".")[1:]):
            names.append(info.name)
    return names


@pytest.mark.parametrize("module_name", _public_modules())
def test_every_public_name_has_a_docstring(module_name: str) -> None:
    module = importlib.import_module(module_name)
    assert module.__doc__, f"{module_name} has no module docstring"
    for name in getattr(module, "__all__", []):
        obj = getattr(module, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert inspect.getdoc(obj), f"{module_name}.{name} has no docstring"
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if not attr.startswith("_") and (
                        inspect.isfunction(member) or isinstance(member, property)
                    ):
                        assert inspect.getdoc(member), f"{module_name}.{name}.{attr} has no docstring"


def _exception_classes() -> dict[str, type[BaseException]]:
    """Every exception class a public module of cachekit offers by a public name (``module.Name``)."""
    found: dict[str, type[BaseException]] = {}
    for module_name in _public_modules():
        module = importlib.import_module(module_name)
        for name, obj in vars(module).items():
            if (
                not name.startswith("_")
                and inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__.startswith("cachekit")
            ):
                found[f"{module_name}.{name}"] = obj
    return found


def test_every_public_exception_is_in_the_one_tree() -> None:
    """An exception a caller can meet is a CachekitError (a warning, a Warning), is importable from
    cachekit.errors and from cachekit itself; exceptions that never leave cachekit are private (``_``)."""
    found = _exception_classes()
    assert "cachekit.shape.planner.PlanError" in found  # the walk sees the modules that raise them
    for where, cls in sorted(found.items()):
        assert issubclass(cls, (errors.CachekitError, Warning)), f"{where} is not a CachekitError"
        assert getattr(errors, cls.__name__, None) is cls, f"{where} is not in cachekit.errors"
        assert cls.__name__ in errors.__all__, where
        assert getattr(cachekit, cls.__name__, None) is cls, f"{where} is not exported by cachekit"


@pytest.mark.parametrize(
    ("name", "builtin"),
    [
        ("ConfigError", ValueError),
        ("CacheRulesError", ValueError),
        ("UnknownProviderError", LookupError),
        ("PriceTableError", ValueError),
        ("MissingExtraError", ImportError),
        ("MemoizeError", TypeError),
        ("PlanError", ValueError),
        ("RequestRefusedError", ValueError),
        ("StreamError", ValueError),
        ("TraceError", ValueError),
        ("DimensionMismatchError", ValueError),
    ],
)
def test_an_error_keeps_its_builtin_base(name: str, builtin: type[Exception]) -> None:
    """``except ValueError`` (and the like) written before the error joined the tree still catches it."""
    assert issubclass(getattr(errors, name), builtin)


def test_import_does_not_import_the_sdks() -> None:
    code = "import sys, cachekit; print('anthropic' in sys.modules, 'openai' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_missing_sdk_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['anthropic'] = None\n"
        "import cachekit\n"
        "try:\n    cachekit.Anthropic\nexcept cachekit.MissingExtraError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install 'cachekit-llm[anthropic]'" in out


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = cachekit.Nope


def test_cli_demo_runs_offline() -> None:
    import io

    from cachekit.cli import main

    out = io.StringIO()
    assert main(["demo", "--engine", "scripted", "--no-chart"], out=out) == 0
    text = out.getvalue()
    rows = re.findall(r"^\s*(?:turn \d+|q\d+)\s.*?\s(miss|hit|semantic)\s", text, re.MULTILINE)
    assert rows == ["miss"] * 5 + ["miss", "hit", "semantic", "miss", "miss", "miss"], text
    assert "saved by layer" in text

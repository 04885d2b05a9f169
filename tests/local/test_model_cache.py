"""The model cache: where built models live, and that a test run reuses what an earlier run built.

The suite isolates ``$CACHEKIT_HOME`` in a temporary folder, but a converted SmolLM2 is 520 MB and a
minute of CPU: the model cache stays the user's own (``$CACHEKIT_MODEL_CACHE``), shared by every run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cachekit.config import cachekit_home
from cachekit.local.models import MODEL_CACHE_ENV, models_dir


def test_the_model_cache_variable_names_the_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CACHEKIT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(MODEL_CACHE_ENV)
    assert models_dir() == tmp_path / "home" / "models"  # the default: under cachekit's home
    monkeypatch.setenv(MODEL_CACHE_ENV, str(tmp_path / "models"))
    assert models_dir() == tmp_path / "models"
    assert models_dir(tmp_path / "other") == tmp_path / "other" / "models"  # an explicit home wins


def test_the_suite_builds_models_outside_its_temporary_home() -> None:
    cache = Path(os.environ[MODEL_CACHE_ENV])
    assert models_dir() == cache
    assert not cache.is_relative_to(cachekit_home())  # survives the run's temporary home


def test_a_new_run_with_a_fresh_home_builds_nothing(tmp_path: Path) -> None:
    """A second process (as a second test run is) with a home of its own finds the model built before."""
    pytest.importorskip("transformers")
    from cachekit.local.models import resolve_model, smollm2_gguf

    try:
        smollm2_gguf()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    built = resolve_model("tiny", progress=False)
    marker = built.path / "cachekit-model.json"
    stamp = marker.stat().st_mtime_ns
    script = "from cachekit.local.models import resolve_model as r; print(r('tiny', progress=False).path)"
    env = {**os.environ, "CACHEKIT_HOME": str(tmp_path / "next-run")}
    run = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stderr
    assert Path(run.stdout.strip()) == built.path
    assert marker.stat().st_mtime_ns == stamp  # not rebuilt
    assert not (tmp_path / "next-run" / "models").exists()


def test_a_build_clears_what_an_interrupted_build_left(tmp_path: Path) -> None:
    """A shared cache outlives any run: the temporary folder of a build killed outright is removed by
    the next build of that model (never a folder of another model)."""
    from cachekit.local.models import _build_once

    target = tmp_path / "models" / "some-model-0123"
    leftover = tmp_path / "models" / "some-model-0123.tmp-x1y2"
    other = tmp_path / "models" / "other-model-4567.tmp-x1y2"
    for folder in (leftover, other):
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(b"half")

    def build(tmp: Path) -> dict[str, str]:
        (tmp / "config.json").write_text("{}")
        return {"name": "some-model", "revision": "0123"}

    assert _build_once(target, build)["revision"] == "0123"
    assert (target / "config.json").is_file()
    assert not leftover.exists()
    assert other.exists()

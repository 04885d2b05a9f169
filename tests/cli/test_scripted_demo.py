"""``cachekit demo --engine scripted`` needs no model: no download, no conversion, and with
``--no-semantic`` no torch at all, only the SDK (README, docs/index.md).

Run where torch, transformers, sentence-transformers and huggingface_hub cannot be imported, as on a
machine with only ``pip install '.[anthropic]'``: their import fails (``sys.modules[name] = None``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: What only the model and the semantic cache need.
HEAVY = ("torch", "transformers", "sentence_transformers", "huggingface_hub", "safetensors")

WRAPPER = (
    "import sys\n"
    f"for name in {HEAVY!r}:\n"
    "    sys.modules[name] = None\n"
    "from cachekit.cli import main\n"
    "status = main(sys.argv[1:])\n"
    f"loaded = sorted(name for name in {HEAVY!r} if sys.modules.get(name) is not None)\n"
    "print('loaded:', loaded)\n"
    "sys.exit(status)\n"
)


def demo(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WRAPPER, "demo", "--engine", "scripted", "--no-chart", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "CACHEKIT_HOME": str(home), "HF_HOME": str(home / "hf")},
        check=False,
    )


def test_the_scripted_demo_without_the_semantic_cache_needs_no_torch_and_no_model(tmp_path: Path) -> None:
    result = demo(tmp_path, "--no-semantic")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "the semantic cache is off (--no-semantic)" in result.stdout
    assert "cost: plain SDK $" in result.stdout  # it ran to the end, every layer but the semantic one
    assert "loaded: []" in result.stdout
    assert not (tmp_path / "models").exists()  # nothing converted
    assert not (tmp_path / "hf").exists()  # nothing fetched


def test_the_semantic_cache_says_what_it_needs_and_how_to_do_without(tmp_path: Path) -> None:
    result = demo(tmp_path)
    assert result.returncode == 1
    assert result.stdout == "loaded: []\n"  # nothing ran
    assert result.stderr.count("\n") == 1
    assert "pip install 'cachekit-llm[semantic]'" in result.stderr
    assert "--no-semantic" in result.stderr

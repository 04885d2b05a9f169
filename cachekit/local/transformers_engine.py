"""The local backend's real-model engine: a transformers causal LM with a persistent prefix KV cache.

:class:`TransformersEngine` implements :class:`~cachekit.local.engine.Engine`. A prompt is rendered with
the model's chat template, tokenized, and cut into blocks of ``block_size`` tokens; each full block is
named by a chained hash (:mod:`cachekit.local.kv.hashing`) whose root is bound to the model, its
revision, the tokenizer, the dtype (and KV quantization) and the block size, and whose first block is
salted with the tenant (``Prompt.salt``). The block pool (:mod:`cachekit.local.kv.pool`) gives back the
longest cached prefix; only the rest of the prompt is prefilled, and the new full blocks are cached for
the next request. A full hit still recomputes the last prompt token, from the cached keys and values
of the others, because the next token's logits come from it. Decoding is greedy, so an answer is a
deterministic function of the prompt, and reusing a prefix gives the tokens a full prefill gives.

Answers are text only: the engine never returns a tool call (``Generation.tool_call`` is always None).
Tool definitions, earlier tool calls and tool results are still rendered into the prompt, so what the
model sees matches what a provider would bill:

* when the chat template handles tools itself (it mentions ``tools``), it gets them the standard
  transformers way (``tools=`` JSON schemas, ``tool_calls`` on assistant messages, ``tool`` messages);
* otherwise, as with SmolLM2, whose template has no tool support, the engine follows SmolLM2's
  function-calling format: the tool list goes into the system turn as JSON inside ``<tools></tools>``,
  an assistant's calls are written as a JSON list inside ``<tool_call></tool_call>``, and a tool result
  comes back as a user turn wrapped in ``<tool_response></tool_response>``.

Thread-safety: one lock serializes the model's work (each prefill, with its cache lookup and insert, and
each decode step). It is not held while a generation is suspended at a ``yield``, so a caller that stops
iterating, or interleaves two streams in one thread, cannot deadlock the engine; generations running
at once simply take turns step by step, each with its own KV cache.
"""

from __future__ import annotations

import inspect
import json
import logging
import time
import weakref
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch

from cachekit import _fork
from cachekit.errors import ConfigError
from cachekit.local.engine import GenerationState, Prompt, Tokenizer, ToolCall, Turn
from cachekit.local.kv.hashing import BlockHash, block_hashes, root_hash
from cachekit.local.kv.pool import Block, BlockPool, PoolStats
from cachekit.local.kv.tensors import (
    KVBlock,
    KVCodec,
    KVScheme,
    SafetensorsSpill,
    cache_from_blocks,
    extract_block,
)
from cachekit.local.models import resolve_model

__all__ = [
    "HFTokenizer",
    "IncrementalDecoder",
    "RunStats",
    "StopMatcher",
    "TextGeneration",
    "TransformersEngine",
]

_log = logging.getLogger("cachekit.local.transformers")

# float64 is for exactness checks on the CPU (the tiny models' parity to 1e-4 absolute).
_DTYPES = {
    "float64": torch.float64,
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
_SCHEMES: dict[str | None, KVScheme] = {None: "none", "int8": "int8", "int4": "int4"}
_DEFAULT_BUDGET = 512 * 1024 * 1024
_REPLACEMENT = "\ufffd"


# --- observability -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunStats:
    """What one generation did, for tests and benchmarks (``engine.last_run``).

    ``reused_tokens`` came from the prefix cache and ``prefilled_tokens`` were computed, adding up to
    ``prompt_tokens``. ``lookup_s`` is the time spent hashing the prompt's blocks and matching them in
    the pool; ``time_to_first_token_s`` runs from the start of the generation until the first output
    token is known. ``pool`` is the pool's counters when the generation ended.
    """

    prompt_tokens: int
    reused_tokens: int
    prefilled_tokens: int
    output_tokens: int
    time_to_first_token_s: float
    lookup_s: float
    pool: PoolStats


# --- tokenizer, detokenization, stop sequences ------------------------------------------------------------


class HFTokenizer:
    """A transformers tokenizer as a :class:`~cachekit.local.engine.Tokenizer`.

    ``encode`` adds no special tokens (a rendered chat prompt already holds the ones it needs);
    ``decode`` leaves special tokens out of the text.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.hf = tokenizer

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``."""
        return list(self.hf.encode(text, add_special_tokens=False))

    def decode(self, tokens: list[int]) -> str:
        """The text of ``tokens``."""
        return str(self.hf.decode(tokens, skip_special_tokens=True))


class IncrementalDecoder:
    """Turns generated token ids into text pieces as they arrive, never splitting a UTF-8 character.

    A byte-level tokenizer may spread one character over several tokens; until the rest arrives, the
    decoded text ends in U+FFFD and nothing is emitted. Each step decodes only the tokens since the last
    emitted piece (plus the previous piece, for tokenizers whose decoding of a token depends on what
    precedes it), so the cost per token stays flat. The pieces concatenate to ``decode(all tokens)``.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._decode = tokenizer.decode
        self._tokens: list[int] = []
        self._prefix = 0  # start of the context decoded with the new tokens
        self._read = 0  # tokens up to here have been emitted

    def add(self, token: int) -> str:
        """Add one token; returns the text it completes (possibly empty)."""
        self._tokens.append(token)
        return self._emit(final=False)

    def flush(self) -> str:
        """The text still held back (an incomplete character at the very end is emitted as U+FFFD)."""
        return self._emit(final=True)

    def _emit(self, *, final: bool) -> str:
        seen = self._decode(self._tokens[self._prefix : self._read])
        text = self._decode(self._tokens[self._prefix :])
        if len(text) > len(seen) and (final or not text.endswith(_REPLACEMENT)):
            self._prefix, self._read = self._read, len(self._tokens)
            return text[len(seen) :]
        return ""


class StopMatcher:
    """Cuts streamed text at the first stop sequence, holding back text that may be the start of one."""

    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = [stop for stop in stops if stop]
        self._pending = ""

    def feed(self, text: str) -> tuple[str, str | None]:
        """Add text; returns what may be emitted now and the stop sequence found (None if none yet).

        Once a stop sequence is found, the text before it is returned and everything after is dropped.
        """
        self._pending += text
        # The stop that completes first, as if the text came one character at a time (the longest of
        # those ending together), so the result never depends on how the text was cut into pieces.
        found: tuple[tuple[int, int], str] | None = None
        for stop in self._stops:
            at = self._pending.find(stop)
            if at >= 0 and (found is None or (at + len(stop), at) < found[0]):
                found = ((at + len(stop), at), stop)
        if found is not None:
            out = self._pending[: found[0][1]]
            self._pending = ""
            return out, found[1]
        hold = 0
        for stop in self._stops:
            for size in range(min(len(stop) - 1, len(self._pending)), hold, -1):
                if self._pending.endswith(stop[:size]):
                    hold = size
                    break
        out = self._pending[: len(self._pending) - hold]
        self._pending = self._pending[len(self._pending) - hold :]
        return out, None

    def flush(self) -> str:
        """The held-back text, at the end of the answer (it turned out not to start a stop sequence)."""
        out, self._pending = self._pending, ""
        return out


# --- chat rendering ------------------------------------------------------------------------------------


def _tool_list(prompt: Prompt) -> list[dict[str, Any]]:
    return [
        {"name": t.name, "description": t.description, "parameters": dict(t.parameters)} for t in prompt.tools
    ]


def _json(value: Any) -> str:
    # Sorted keys: the same tools and arguments must render to the same tokens, or the prefix cache misses.
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _tools_system_text(prompt: Prompt) -> str:
    """The tool list in SmolLM2's function-calling format (for templates without tool support)."""
    return (
        "You may call functions to answer. The functions you can call are listed, as JSON, between "
        "<tools> and </tools>:\n"
        f"<tools>{_json(_tool_list(prompt))}</tools>\n"
        "To call functions, answer with nothing but a JSON list of calls between <tool_call> and "
        "</tool_call>, like this:\n"
        '<tool_call>[{"name": "function_name", "arguments": {"argument": "value"}}]</tool_call>\n'
        "If no function fits, say so."
    )


def _schema_text(schema: Any) -> str:
    if not schema:
        return "Answer with a single JSON value and nothing else."
    return (
        f"Answer with a single JSON value, and nothing else, that satisfies this JSON schema: {_json(schema)}"
    )


def _messages(prompt: Prompt, *, native_tools: bool) -> list[dict[str, Any]]:
    """The prompt's turns as chat-template messages (see the module docstring for the tool formats)."""
    system_parts: list[str] = []
    if prompt.tools and not native_tools:
        system_parts.append(_tools_system_text(prompt))
    turns: list[Turn] = list(prompt.turns)
    if turns and turns[0].role == "system":
        system_parts.append(turns.pop(0).text)
    if prompt.output_schema is not None:
        system_parts.append(_schema_text(prompt.output_schema))
    messages: list[dict[str, Any]] = []
    if system_parts:
        messages.append({"role": "system", "content": "\n\n".join(part for part in system_parts if part)})
    for turn in turns:
        messages.append(_message(turn, native_tools=native_tools))
    return messages


def _message(turn: Turn, *, native_tools: bool) -> dict[str, Any]:
    if turn.role == "tool":
        if native_tools:
            return {"role": "tool", "content": turn.text, "tool_call_id": turn.tool_call_id or ""}
        return {"role": "user", "content": f"<tool_response>\n{turn.text}\n</tool_response>"}
    if turn.role == "assistant" and turn.tool_calls:
        calls = [{"name": call.name, "arguments": dict(call.arguments)} for call in turn.tool_calls]
        if native_tools:
            return {
                "role": "assistant",
                "content": turn.text,
                "tool_calls": [
                    {
                        "type": "function",
                        "id": call.id,
                        "function": {"name": call.name, "arguments": dict(call.arguments)},
                    }
                    for call in turn.tool_calls
                ],
            }
        written = f"<tool_call>{_json(calls)}</tool_call>"
        return {"role": "assistant", "content": f"{turn.text}\n{written}" if turn.text else written}
    return {"role": turn.role, "content": turn.text}


# --- the engine ------------------------------------------------------------------------------------------


def _device(requested: str | torch.device | None) -> torch.device:
    """The torch device to run on: ``requested``, checked to exist on this machine, or CUDA when
    there is a GPU, else the CPU.

    Raises:
        ConfigError: a device name torch does not know, or one this machine does not have.
    """
    if requested is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(requested)
    except (RuntimeError, TypeError):
        raise ConfigError(
            f"unknown device {str(requested)!r}: use cpu, cuda or cuda:N (or none: cuda when there is a GPU)"
        ) from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(
                f"device {str(requested)!r}: torch {torch.__version__} finds no CUDA GPU here; use cpu"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(
                f"device {str(requested)!r}: this machine has {torch.cuda.device_count()} CUDA GPU(s), "
                f"numbered from 0; use cuda:0 to cuda:{torch.cuda.device_count() - 1}"
            )
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"device {str(requested)!r}: no Apple GPU (MPS) is available here; use cpu")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"device {str(requested)!r}: cachekit runs models on cpu, cuda or mps")
    return device


class TransformersEngine:
    """A transformers causal LM answering prompts greedily, with a persistent prefix KV cache.

    ``model`` is ``"smollm2"``, ``"tiny"``, ``"tiny-qwen2"`` or a local model folder
    (:func:`~cachekit.local.models.resolve_model`). ``device`` defaults to CUDA when available, else CPU.
    ``kv_budget_bytes`` bounds the memory of cached blocks; ``spill_dir`` adds a disk tier that evicted
    blocks go to and that :meth:`close` flushes every block to, so the cache survives a restart.
    ``quantize`` (``"int8"`` or ``"int4"``) stores blocks quantized, holding 3-6 times as many prefixes in
    the same budget at some cost in fidelity (reuse is then no longer exact). ``max_new_tokens`` caps an
    answer when the prompt sets no ``max_tokens``.
    """

    def __init__(
        self,
        model: str = "smollm2",
        *,
        device: str | torch.device | None = None,
        dtype: str = "float32",
        block_size: int = 16,
        kv_budget_bytes: int = _DEFAULT_BUDGET,
        spill_dir: str | Path | None = None,
        quantize: str | None = None,
        max_new_tokens: int = 256,
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
        if block_size < 1:
            raise ValueError(f"block_size must be positive, got {block_size}")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be positive, got {max_new_tokens}")
        if quantize not in _SCHEMES:
            raise ValueError(f"quantize must be None, 'int8' or 'int4', got {quantize!r}")
        scheme = _SCHEMES[quantize]
        self.device = _device(device)  # before the model is resolved: a first use converts it, for minutes
        resolved = resolve_model(model)
        self.dtype = _DTYPES[dtype]
        self.block_size = block_size
        self.max_new_tokens = max_new_tokens
        self.quantize = quantize
        self.name = resolved.name
        self.model_path = resolved.path

        hf_tokenizer = AutoTokenizer.from_pretrained(str(resolved.path), local_files_only=True)
        self.hf_tokenizer = hf_tokenizer
        self.tokenizer: Tokenizer = HFTokenizer(hf_tokenizer)
        # Any: transformers' auto classes are only partly typed.
        self._model = cast(
            Any,
            AutoModelForCausalLM.from_pretrained(str(resolved.path), dtype=self.dtype, local_files_only=True),
        )
        self._model.to(self.device).eval()
        self._config = self._model.config
        window = getattr(self._config, "max_position_embeddings", None)
        self.context_window: int | None = int(window) if window else None
        self._eos = self._eos_ids(hf_tokenizer)
        template = getattr(hf_tokenizer, "chat_template", None) or ""
        self._native_tools = "tools" in template
        self._has_template = bool(template)
        # Renamed from past_key_values in transformers 5; ask the model which one it takes.
        self._cache_arg = (
            "cache" if "cache" in inspect.signature(self._model.forward).parameters else "past_key_values"
        )
        self._sanitize = (
            "sanitize_control_tokens" in inspect.signature(hf_tokenizer.apply_chat_template).parameters
        )

        layers, heads, head_dim, self._reuse_supported = self._probe_cache()
        self._codec = KVCodec(
            scheme, shape=(layers, 2, heads, block_size, head_dim), dtype=self.dtype, device=self.device
        )
        self._root = root_hash(
            model=resolved.name,
            revision=resolved.revision,
            tokenizer=_tokenizer_digest(resolved.path),
            # A quantized block holds different values than a full one: keep their chains apart.
            dtype=dtype if scheme == "none" else f"{dtype}+kv-{scheme}",
            block_size=block_size,
        )
        self.spill = SafetensorsSpill(Path(spill_dir), self._codec) if spill_dir is not None else None
        self.pool: BlockPool[KVBlock] = BlockPool(
            budget_bytes=kv_budget_bytes, size_of=lambda block: block.nbytes, spill=self.spill
        )
        self.last_run: RunStats | None = None
        self._lock = _fork.lock(self)
        self._closed = False
        _log.info(
            "loaded %s on %s (%s, KV blocks of %d tokens, %s)",
            self.name,
            self.device,
            dtype,
            block_size,
            scheme,
        )

    # --- Engine protocol ---

    def render(self, prompt: Prompt) -> str:
        """The prompt as the model sees it: its chat template applied, with the assistant turn opened."""
        messages = _messages(prompt, native_tools=self._native_tools)
        if not self._has_template:
            return _chatml(messages)
        return str(self._apply_template(messages, prompt, tokenize=False))

    def encode_prompt(self, prompt: Prompt) -> list[int]:
        """The rendered prompt's token ids.

        Where transformers can, text from the caller that spells a control token (``<|im_end|>``) is
        encoded as plain text, so a user cannot forge turns.
        """
        if not self._has_template or not self._sanitize:
            return self.tokenizer.encode(self.render(prompt))
        messages = _messages(prompt, native_tools=self._native_tools)
        ids = cast(
            list[int], self._apply_template(messages, prompt, tokenize=True, sanitize_control_tokens=True)
        )
        return [int(token) for token in ids]

    def prompt_tokens(self, prompt: Prompt) -> int:
        """How many tokens ``prompt`` occupies in this engine's context."""
        return len(self.encode_prompt(prompt))

    def generate(self, prompt: Prompt) -> TextGeneration:
        """Start answering ``prompt`` (the work happens while the result is iterated)."""
        self._check_open()
        limit = prompt.max_tokens if prompt.max_tokens is not None else self.max_new_tokens
        if limit < 0:
            raise ValueError(f"max_tokens must not be negative, got {limit}")
        ids = self.encode_prompt(prompt)
        # max_tokens=0 pre-warms: the prompt is prefilled and its blocks cached, nothing is generated.
        room = self._room(len(ids), limit) if limit else 0
        return TextGeneration(self, ids, max_tokens=room, stops=prompt.stop, salt=prompt.salt)

    def close(self) -> None:
        """Flush every cached block to the spill folder (when there is one) and free the model."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self.spill is not None:
                saved = self.pool.flush()
                _log.info("flushed %d KV blocks to %s", saved, self.spill.directory)
            del self._model
            if self.device.type == "cuda":
                torch.cuda.empty_cache()

    def __enter__(self) -> TransformersEngine:
        """The engine itself; :meth:`close` runs on exit."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the engine."""
        self.close()

    # --- lower level, for tests and benchmarks ---

    @property
    def root(self) -> BlockHash:
        """The root of this engine's block hash chains."""
        return self._root

    @property
    def codec(self) -> KVCodec:
        """How this engine encodes its cached blocks."""
        return self._codec

    def greedy(
        self, token_ids: Sequence[int], max_new_tokens: int, *, salt: bytes = b"", reuse: bool = True
    ) -> tuple[list[int], torch.Tensor]:
        """Greedy continuation of raw ``token_ids``: the new tokens (ending at EOS, which is included, or
        after ``max_new_tokens``) and the logits of the first step (float32, on the CPU).

        ``reuse=False`` runs a full prefill that neither reads nor writes the prefix cache (the baseline
        the cache must match). Sets :attr:`last_run`.
        """
        self._check_open()
        ids = [int(token) for token in token_ids]
        limit = self._room(len(ids), max_new_tokens)
        sequence = _Sequence(self, ids, salt=salt, reuse=reuse)
        tokens: list[int] = []
        try:
            with self._lock, torch.inference_mode():
                token, logits = sequence.prefill()
                first_logits = logits.float().cpu()
                tokens.append(token)
                while token not in self._eos and len(tokens) < limit:
                    token = int(sequence.step(token).argmax())
                    tokens.append(token)
        finally:
            self.last_run = sequence.finish(len(tokens))
        return tokens, first_logits

    # --- internals ---

    def _apply_template(self, messages: list[dict[str, Any]], prompt: Prompt, **options: Any) -> Any:
        """The chat template over ``messages`` (the tool list passed natively when the template takes it)."""
        tools: list[dict[str, Any] | Callable[..., Any]] | None = None
        if self._native_tools and prompt.tools:
            tools = [{"type": "function", "function": tool} for tool in _tool_list(prompt)]
        return self.hf_tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, return_dict=False, **options
        )

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the engine is closed")

    def _room(self, prompt_tokens: int, wanted: int) -> int:
        """How many tokens may be generated: ``wanted``, within the context window."""
        if prompt_tokens < 1:
            raise ValueError("the prompt has no tokens")
        if self.context_window is None:
            return wanted
        room = self.context_window - prompt_tokens
        if room < 1:
            raise ValueError(
                f"the prompt has {prompt_tokens} tokens; "
                f"the context window of {self.name} is {self.context_window}"
            )
        return min(wanted, room)

    def _eos_ids(self, hf_tokenizer: Any) -> frozenset[int]:
        ids: set[int] = set()
        for source in (getattr(self._model, "generation_config", None), self._model.config):
            value = getattr(source, "eos_token_id", None)
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, (list, tuple)):
                ids.update(int(v) for v in value)
        if hf_tokenizer.eos_token_id is not None:
            ids.add(int(hf_tokenizer.eos_token_id))
        return frozenset(ids)

    def _probe_cache(self) -> tuple[int, int, int, bool]:
        """Run one token through the model to learn its cache's layout: (layers, kv heads, head dim) and
        whether prefixes can be reused (every layer a plain, full-attention dynamic layer)."""
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer

        cache = DynamicCache(config=self._config)
        with torch.inference_mode():
            self._forward([0], cache)
        layers: list[Any] = list(cache.layers)
        plain = all(type(layer) is DynamicLayer and not layer.is_sliding for layer in layers)
        if not plain:
            _log.warning("%s has sliding-window or non-attention layers: prefix reuse is off", self.name)
        keys = layers[0].keys
        return len(layers), int(keys.shape[1]), int(keys.shape[3]), plain

    def _forward(self, ids: Sequence[int], cache: object) -> torch.Tensor:
        """The logits after ``ids``, continuing (and extending) ``cache``."""
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=self.device)
        output = self._model(
            input_ids=input_ids, use_cache=True, logits_to_keep=1, **{self._cache_arg: cache}
        )
        logits: torch.Tensor = output.logits[0, -1]
        return logits


def _chatml(messages: Sequence[dict[str, Any]]) -> str:
    """ChatML, for a model folder whose tokenizer has no chat template."""
    body = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return body + "<|im_start|>assistant\n"


def _tokenizer_digest(folder: Path) -> str:
    """A digest of the tokenizer files: the token ids a block's hash covers mean what these files say."""
    import hashlib

    digest = hashlib.sha256(b"cachekit.local.tokenizer.v1\0")
    for path in sorted(folder.glob("*")):
        if path.is_file() and (
            "token" in path.name or path.name in ("vocab.json", "merges.txt", "chat_template.jinja")
        ):
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


class _Sequence:
    """One prompt's trip through the model: prefix lookup, prefill, decode steps, and the block
    references it holds until :meth:`finish`. The caller holds the engine's lock around each call."""

    def __init__(self, engine: TransformersEngine, ids: list[int], *, salt: bytes, reuse: bool) -> None:
        self._engine = engine
        self._ids = ids
        self._salt = salt
        self._reuse = reuse and engine._reuse_supported
        self._held: list[Block[KVBlock]] = []
        self._cache: object = None
        self._started = time.perf_counter()
        self._lookup_s = 0.0
        self._ttft = 0.0
        self._reused = 0
        self._done = False

    def prefill(self) -> tuple[int, torch.Tensor]:
        """Reuse the longest cached prefix, prefill the rest, cache the new full blocks; returns the first
        output token and its logits."""
        engine = self._engine
        size = engine.block_size
        total = len(self._ids)
        hashes: list[BlockHash] = []
        if self._reuse:
            hashes = block_hashes(engine.root, self._ids, size, salt=self._salt)
            self._held.extend(engine.pool.match(hashes))
        self._lookup_s = time.perf_counter() - self._started
        matched = len(self._held)
        # A full hit leaves the last prompt token to compute: its logits give the first output token.
        self._reused = min(matched * size, total - 1)
        blocks = [engine.codec.decode(block.payload) for block in self._held]
        self._cache = cache_from_blocks(blocks, self._reused, engine._config)
        logits = engine._forward(self._ids[self._reused :], self._cache)
        token = int(logits.argmax())
        self._ttft = time.perf_counter() - self._started
        for index in range(matched, len(hashes)):
            payload = engine.codec.encode(extract_block(self._cache, index * size, size))
            block = engine.pool.insert(hashes[index], payload)
            if block is None:  # the budget is full of referenced blocks; later blocks would be unreachable
                break
            self._held.append(block)
        return token, logits

    def step(self, token: int) -> torch.Tensor:
        """The logits after feeding one more token."""
        return self._engine._forward([token], self._cache)

    def finish(self, output_tokens: int) -> RunStats:
        """Release the block references (once) and describe the run."""
        if not self._done:
            self._done = True
            self._cache = None
            held, self._held = self._held, []
            self._engine.pool.release(held)
        total = len(self._ids)
        return RunStats(
            prompt_tokens=total,
            reused_tokens=self._reused,
            prefilled_tokens=total - self._reused,
            output_tokens=output_tokens,
            time_to_first_token_s=self._ttft,
            lookup_s=self._lookup_s,
            pool=self._engine.pool.stats,
        )


class TextGeneration(GenerationState):
    """A text answer being generated (:class:`~cachekit.local.engine.Generation`).

    Iterate it once to get the text pieces. The references on cached blocks are released when the
    iteration ends, fails, or is abandoned (breaking out of a ``for`` loop closes the iterator; call
    :meth:`close` if you keep an iterator you stop using). ``finish_reason`` is ``"end"`` (EOS),
    ``"length"`` (``max_tokens`` or the context window) or ``"stop_sequence"``.
    """

    tool_call: ToolCall | None = None

    def __init__(
        self,
        engine: TransformersEngine,
        ids: list[int],
        *,
        max_tokens: int,
        stops: Sequence[str],
        salt: bytes,
    ) -> None:
        self._engine = engine
        self._ids = ids
        self._max_tokens = max_tokens
        self._stops = tuple(stops)
        self._salt = salt
        self._iterator: weakref.ref[Generator[str, None, None]] | None = None

    def __iter__(self) -> Iterator[str]:
        """The answer's text pieces, as they are decoded (only one iteration is possible)."""
        if self._iterator is not None:
            raise RuntimeError("a generation can be iterated only once")
        iterator = self._run()
        # Held weakly: a caller that drops its iterator gets it closed (and its blocks released) at once.
        self._iterator = weakref.ref(iterator)
        return iterator

    def close(self) -> None:
        """Stop the generation and release what it holds (a no-op once it has ended)."""
        iterator = self._iterator() if self._iterator is not None else None
        if iterator is not None:
            iterator.close()

    def _run(self) -> Generator[str, None, None]:
        engine = self._engine
        sequence = _Sequence(engine, self._ids, salt=self._salt, reuse=True)
        decoder = IncrementalDecoder(engine.tokenizer)
        stopper = StopMatcher(self._stops)
        try:
            with engine._lock, torch.inference_mode():
                engine._check_open()
                token, _ = sequence.prefill()
            if self._max_tokens == 0:
                self._finish = "length"
                return
            while True:
                self._output_tokens += 1
                if token in engine._eos:
                    self._finish = "end"
                    break
                text, stop = stopper.feed(decoder.add(token))
                if stop is not None:  # finished before the last piece goes out, for callers that stop there
                    self._finish, self._stop_sequence = "stop_sequence", stop
                    if text:
                        yield text
                    return
                if text:
                    yield text
                if self._output_tokens >= self._max_tokens:
                    self._finish = "length"
                    break
                with engine._lock, torch.inference_mode():
                    engine._check_open()
                    token = int(sequence.step(token).argmax())
            text, stop = stopper.feed(decoder.flush())
            tail = text + ("" if stop is not None else stopper.flush())
            if stop is not None:
                self._finish, self._stop_sequence = "stop_sequence", stop
            if tail:
                yield tail
        finally:
            engine.last_run = sequence.finish(self._output_tokens)

"""The torch side of the prefix KV cache: what a block holds, how it leaves and re-enters a transformers
cache, how it is quantized, and how it is spilled to disk.

A block's payload (:class:`KVBlock`) holds the keys and values of ``block_size`` consecutive tokens for
every layer, stacked into one tensor of shape ``(layers, 2, kv_heads, block_size, head_dim)`` (index 0 of
the second axis: keys, 1: values), so moving a block is one tensor copy rather than ``2 * layers``.

Quantization (:class:`KVCodec`) is a plain symmetric absmax scheme, chosen for being small and exact
about what it loses: keys get one scale per channel (per layer, head and ``head_dim`` channel, over the
block's tokens), because a few key channels carry outliers far larger than the rest; values get one
scale per token. ``int8`` keeps 255 levels, ``int4`` 15 (two values packed per byte). Scales stay
float32. Blocks are dequantized to the model's dtype on reuse; the tokens prefilled after them are
computed at full precision.

:class:`SafetensorsSpill` is the pool's second tier: one safetensors file per block, named by the
block's hash and written atomically (temporary file, then rename), so blocks survive a restart.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch

from cachekit.local.kv.hashing import BlockHash

if TYPE_CHECKING:
    from transformers import DynamicCache, PreTrainedConfig

__all__ = [
    "KVBlock",
    "KVCodec",
    "KVScheme",
    "SafetensorsSpill",
    "cache_from_blocks",
    "extract_block",
]

_log = logging.getLogger("cachekit.local.kv.tensors")

KVScheme = Literal["none", "int8", "int4"]
"""How a block's tensors are stored: at the model's dtype, or quantized to 8 or 4 bits."""

_LEVELS = {"int8": 127, "int4": 7}  # symmetric: values in [-levels, levels]
_INT4_OFFSET = 8  # an int4 value q in [-7, 7] is stored as the nibble q + 8
_SPILL_FORMAT = "cachekit.kv.block.v1"


@dataclass(frozen=True, eq=False)
class KVBlock:
    """One block's keys and values for every layer: the block pool's payload.

    ``data`` is ``(layers, 2, kv_heads, block_size, head_dim)`` at the model's dtype for scheme
    ``"none"``; int8 of that shape for ``"int8"``; uint8 of ``(..., head_dim // 2)`` for ``"int4"``.
    ``k_scale`` (``(layers, kv_heads, 1, head_dim)``) and ``v_scale`` (``(layers, kv_heads, block_size,
    1)``) are the float32 dequantization scales of a quantized block, ``None`` otherwise.
    """

    scheme: KVScheme
    data: torch.Tensor
    k_scale: torch.Tensor | None = None
    v_scale: torch.Tensor | None = None

    @property
    def nbytes(self) -> int:
        """The memory the block occupies (what the pool's byte budget counts)."""
        total = self.data.nbytes
        for scale in (self.k_scale, self.v_scale):
            if scale is not None:
                total += scale.nbytes
        return total

    def tensors(self) -> dict[str, torch.Tensor]:
        """The block's tensors by name (what a spill file stores)."""
        named = {"data": self.data}
        if self.k_scale is not None:
            named["k_scale"] = self.k_scale
        if self.v_scale is not None:
            named["v_scale"] = self.v_scale
        return named


class KVCodec:
    """Turns a block's full-precision K/V tensor into a :class:`KVBlock` and back.

    ``shape`` is the full-precision block shape ``(layers, 2, kv_heads, block_size, head_dim)``; ``dtype``
    and ``device`` are the model's, which decoded blocks are returned in.
    """

    def __init__(
        self,
        scheme: KVScheme,
        *,
        shape: tuple[int, int, int, int, int],
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        if scheme not in ("none", "int8", "int4"):
            raise ValueError(f"unknown KV quantization {scheme!r}: use None, 'int8' or 'int4'")
        if scheme == "int4" and shape[-1] % 2:
            raise ValueError(f"int4 packs two values per byte and needs an even head_dim, got {shape[-1]}")
        self.scheme: KVScheme = scheme
        self.shape = shape
        self.dtype = dtype
        self.device = device

    def encode(self, kv: torch.Tensor) -> KVBlock:
        """The payload for a full-precision block tensor (which is copied, never kept as a view)."""
        if tuple(kv.shape) != self.shape:
            raise ValueError(f"block tensor has shape {tuple(kv.shape)}, expected {self.shape}")
        if self.scheme == "none":
            # contiguous copy: a view would pin the whole prefill's cache tensor in memory.
            return KVBlock("none", kv.to(self.dtype).clone(memory_format=torch.contiguous_format))
        levels = _LEVELS[self.scheme]
        full = kv.float()
        keys, values = full[:, 0], full[:, 1]
        k_scale = _scale(keys.abs().amax(dim=2, keepdim=True), levels)  # per channel, over tokens
        v_scale = _scale(values.abs().amax(dim=3, keepdim=True), levels)  # per token, over channels
        quantized = torch.stack(
            (
                (keys / k_scale).round().clamp(-levels, levels),
                (values / v_scale).round().clamp(-levels, levels),
            ),
            dim=1,
        )
        if self.scheme == "int8":
            data = quantized.to(torch.int8)
        else:
            nibbles = (quantized + _INT4_OFFSET).to(torch.uint8)
            data = nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)
        return KVBlock(self.scheme, data.contiguous(), k_scale.contiguous(), v_scale.contiguous())

    def decode(self, block: KVBlock) -> torch.Tensor:
        """The block's K/V tensor at the model's dtype and device (dequantized when quantized)."""
        if block.scheme == "none":
            return block.data.to(device=self.device, dtype=self.dtype)
        if block.k_scale is None or block.v_scale is None:
            raise ValueError(f"a {block.scheme} block without its scales")
        data = block.data.to(self.device)
        if block.scheme == "int8":
            quantized = data.float()
        else:
            low = (data & 0x0F).float() - _INT4_OFFSET
            high = (data >> 4).float() - _INT4_OFFSET
            quantized = torch.stack((low, high), dim=-1).flatten(-2)
        keys = quantized[:, 0] * block.k_scale.to(self.device)
        values = quantized[:, 1] * block.v_scale.to(self.device)
        return torch.stack((keys, values), dim=1).to(self.dtype)

    def accepts(self, block: KVBlock) -> bool:
        """Whether ``block`` has exactly the layout this codec writes (a spilled file may not)."""
        layers, _, heads, tokens, dim = self.shape
        if block.scheme != self.scheme:
            return False
        if self.scheme == "none":
            return tuple(block.data.shape) == self.shape and block.data.dtype == self.dtype
        packed_dim = dim if self.scheme == "int8" else dim // 2
        data_dtype = torch.int8 if self.scheme == "int8" else torch.uint8
        return (
            tuple(block.data.shape) == (layers, 2, heads, tokens, packed_dim)
            and block.data.dtype == data_dtype
            and block.k_scale is not None
            and tuple(block.k_scale.shape) == (layers, heads, 1, dim)
            and block.v_scale is not None
            and tuple(block.v_scale.shape) == (layers, heads, tokens, 1)
        )

    def block_nbytes(self) -> int:
        """The size of one encoded block, for sizing budgets."""
        return self.encode(torch.zeros(self.shape, dtype=self.dtype, device=self.device)).nbytes


def _scale(absmax: torch.Tensor, levels: int) -> torch.Tensor:
    # An all-zero channel or token would give a zero scale and 0/0 on encode; any positive scale
    # encodes its zeros exactly, so use 1 there.
    return torch.where(absmax > 0, absmax / levels, torch.ones_like(absmax))


# --- transformers caches ---------------------------------------------------------------------------------


def extract_block(cache: DynamicCache, start: int, block_size: int) -> torch.Tensor:
    """Tokens ``[start, start + block_size)`` of a batch-of-one transformers cache, as one block tensor.

    ``cache`` is a ``DynamicCache`` whose layers hold ``keys``/``values`` of shape
    ``(1, kv_heads, seq, head_dim)``. The result is a new tensor (``torch.stack`` copies).
    """
    stop = start + block_size
    layers: Sequence[Any] = cache.layers  # plain DynamicLayers: the engine checks before reusing prefixes
    return torch.stack(
        [torch.stack((layer.keys[0, :, start:stop], layer.values[0, :, start:stop])) for layer in layers]
    )


def cache_from_blocks(blocks: Sequence[torch.Tensor], length: int, config: PreTrainedConfig) -> DynamicCache:
    """A fresh ``DynamicCache`` for ``config`` holding the first ``length`` tokens of ``blocks`` (decoded
    block tensors, in prompt order), ready for the next prefill to continue at position ``length``."""
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    if length == 0 or not blocks:
        return cache
    joined = torch.cat(list(blocks), dim=3)[:, :, :, :length]
    for index in range(joined.shape[0]):
        cache.update(joined[index, 0].unsqueeze(0), joined[index, 1].unsqueeze(0), index)
    return cache


# --- the spill tier ----------------------------------------------------------------------------------


class SafetensorsSpill:
    """The pool's disk tier: one safetensors file per block under ``directory``, named by its hash.

    Files are written to a temporary name and renamed, so a reader never sees half a block, and a crash
    leaves at worst a stray temporary file. A file that cannot be read back, or whose layout ``codec``
    does not accept, is deleted and reported as missing (the block is then simply recomputed and saved
    again). The folder is not size-limited: delete it to reclaim the space.
    """

    def __init__(self, directory: Path, codec: KVCodec) -> None:
        self.directory = Path(directory)
        self._codec = codec
        self.directory.mkdir(parents=True, exist_ok=True)

    def _path(self, block_hash: bytes) -> Path:
        name = block_hash.hex()
        return self.directory / name[:2] / f"{name}.safetensors"

    def save(self, block_hash: BlockHash, payload: KVBlock) -> None:
        """Write ``payload`` under ``block_hash`` atomically (replacing any older copy: same content)."""
        from safetensors.torch import save

        path = self._path(block_hash)
        path.parent.mkdir(parents=True, exist_ok=True)
        tensors = {name: tensor.detach().cpu().contiguous() for name, tensor in payload.tensors().items()}
        blob = save(tensors, metadata={"format": _SPILL_FORMAT, "scheme": payload.scheme})
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            tmp.write_bytes(blob)
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)

    def load(self, block_hash: BlockHash) -> KVBlock | None:
        """The block stored under ``block_hash`` on the codec's device, or None (missing or unreadable)."""
        from safetensors import safe_open

        path = self._path(block_hash)
        try:
            with safe_open(str(path), framework="pt", device=str(self._codec.device)) as file:
                meta = file.metadata() or {}
                names = set(file.keys())
                tensors = {name: file.get_tensor(name) for name in names}
        except FileNotFoundError:
            return None
        except Exception as exc:  # safetensors raises its own error types for damaged files
            _log.warning("dropping unreadable KV block file %s: %s", path.name, exc)
            path.unlink(missing_ok=True)
            return None
        scheme = meta.get("scheme")
        block = None
        if meta.get("format") == _SPILL_FORMAT and scheme in ("none", "int8", "int4") and "data" in tensors:
            block = KVBlock(scheme, tensors["data"], tensors.get("k_scale"), tensors.get("v_scale"))
        if block is None or not self._codec.accepts(block):
            _log.warning("dropping KV block file %s: not in this engine's layout", path.name)
            path.unlink(missing_ok=True)
            return None
        return block

    def __contains__(self, block_hash: object) -> bool:
        """Whether a file for ``block_hash`` exists."""
        return isinstance(block_hash, bytes) and self._path(block_hash).is_file()

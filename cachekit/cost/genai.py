"""Prices from `genai-prices`, the maintained, dated price database (extra: ``prices``).

cachekit prices a call from genai-prices first: it knows each model's prices over time (a call recorded
before a price change keeps the old price), time-of-day prices (DeepSeek's peak and off-peak hours),
prompt-length tiers, batch prices and the price variants a response reports (OpenAI's service tiers,
Anthropic's fast ``speed``). cachekit's own table (``prices.json``) prices what genai-prices lacks.

Everything here works offline: the package ships its data. ``update_from_network()`` (opt-in, never
called by cachekit itself) swaps in the newest data file from the package's maintainers.

genai-prices needs Python 3.11 or later; without it (or on 3.10) :func:`available` is false and
cachekit prices from its own table, saying so in each :class:`~cachekit.cost.prices.Cost`'s ``source``.
"""

from __future__ import annotations

import datetime as _dt
import functools
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cachekit.cost.usage import UsageRecord
from cachekit.errors import install_command

__all__ = [
    "GenaiPrice",
    "available",
    "knows",
    "lookup",
    "missing_reason",
    "model_ids",
    "pricing_pages",
    "update_from_network",
    "version",
]

logger = logging.getLogger("cachekit.cost")

# cachekit's provider names -> genai-prices provider ids, tried in order. GLM serves both Z.ai's
# international endpoint and Zhipu's (open.bigmodel.cn), whose prices differ only in currency rows.
_PROVIDERS: Mapping[str, tuple[str, ...]] = {
    "anthropic": ("anthropic",),
    "openai": ("openai",),
    "gemini": ("google",),
    "deepseek": ("deepseek",),
    "kimi": ("moonshotai",),
    "glm": ("zai", "zhipuai"),
    "xai": ("x-ai",),
}

# Price keys of genai-prices' ModelPrice that hold cachekit's five token kinds.
_KEYS = {
    "input": "input_mtok",
    "cache_write_5m": "cache_write_mtok",
    "cache_write_1h": "cache_write_1h_mtok",
    "cache_read": "cache_read_mtok",
    "output": "output_mtok",
}


@functools.lru_cache(maxsize=1)
def _module() -> Any:
    """The imported package, or ``None`` when it is not installed (or cannot run on this Python)."""
    try:
        import genai_prices
        from genai_prices import data_snapshot
    except ImportError as exc:
        logger.debug("genai-prices unavailable: %s", exc)
        return None
    return (genai_prices, data_snapshot)


def available() -> bool:
    """Whether genai-prices is installed and importable."""
    return _module() is not None


def version() -> str | None:
    """The installed genai-prices version, or ``None``."""
    mod = _module()
    return None if mod is None else str(mod[0].__version__)


def missing_reason() -> str:
    """Why genai-prices is not used, for messages: the extra to install."""
    return f"genai-prices is not installed (Python 3.11+: {install_command('prices')})"


@dataclass(frozen=True, slots=True)
class GenaiPrice:
    """One model's prices in genai-prices at one moment, for one request context.

    ``rates`` are USD per million tokens by cachekit's token kind (``None`` where the database has no
    such price); ``tiers`` the prompt-length thresholds above which other rates apply;
    ``ignored`` the context keys the database has no variant for (priced as standard).
    """

    provider: str
    model: str
    model_name: str | None
    rates: Mapping[str, float | None]
    tiers: tuple[int, ...]
    pricing_urls: tuple[str, ...]
    ignored: tuple[str, ...]
    source: str
    _prices: Any

    def cost(self, usage: UsageRecord) -> tuple[float, float, bool]:
        """(cost, cost without caching, a prompt-length tier applied) of ``usage`` in USD.

        The arithmetic is genai-prices' own for text tokens, done here on the resolved prices (its
        ``calc_price`` costs a millisecond a call, on the request path): a tier's rate applies to
        every token once the prompt (reads and writes included) exceeds its start; a token kind with
        no price of its own bills as its parent (cache reads and writes as input, long-retention
        writes as standard writes).
        """
        uncached = usage.uncached_input or 0
        w5, w1, read = usage.cache_write_5m or 0, usage.cache_write_1h or 0, usage.cache_read or 0
        total_in = uncached + w5 + w1 + read
        output = usage.output or 0
        rate = functools.partial(_rate, self._prices, total_in)
        plain = rate("input_mtok") or 0.0
        write = rate("cache_write_mtok")
        write = plain if write is None else write
        long_write = rate("cache_write_1h_mtok")
        long_write = write if long_write is None else long_write
        hit = rate("cache_read_mtok")
        hit = plain if hit is None else hit
        out = rate("output_mtok") or 0.0
        micro = uncached * plain + w5 * write + w1 * long_write + read * hit + output * out
        without = total_in * plain + output * out
        return micro / 1_000_000, without / 1_000_000, any(total_in > start for start in self.tiers)


def _rate(prices: Any, total_in: int, key: str) -> float | None:
    """The rate of ``key`` for a prompt of ``total_in`` tokens (a tier's once it is exceeded)."""
    value = getattr(prices, key)
    if value is None:
        return None
    tiers = getattr(value, "tiers", None)
    if tiers is None:
        return float(value)
    chosen = value.base
    for tier in tiers:  # sorted ascending by start
        if total_in > tier.start:
            chosen = tier.price
    return float(chosen)


def _genai_ids(provider: str) -> tuple[str, ...]:
    """genai-prices' ids for cachekit's ``provider`` (another name, e.g. a ``price_as``, as is)."""
    name = provider.strip().lower()
    return _PROVIDERS.get(name, (name,))


def _snapshot() -> Any:
    mod = _module()
    return None if mod is None else mod[1].get_snapshot()


def _find(provider: str, model: str) -> tuple[Any, Any] | None:
    snapshot = _snapshot()
    if snapshot is None:
        return None
    for genai_id in _genai_ids(provider):
        try:
            provider_model: tuple[Any, Any] = tuple(snapshot.find_provider_model(model, None, genai_id, None))
            return provider_model
        except LookupError:
            continue
    return None


def knows(provider: str, model: str) -> bool:
    """Whether genai-prices has ``model`` of cachekit's ``provider`` (its own name-matching rules:
    aliases, dated snapshots); false when the package is not installed."""
    return _find(provider, model) is not None


def model_ids(providers: Iterable[str]) -> set[str]:
    """Every model id genai-prices prices for cachekit's ``providers`` (empty without genai-prices)."""
    snapshot = _snapshot()
    if snapshot is None:
        return set()
    wanted = {genai_id for provider in providers for genai_id in _genai_ids(provider)}
    return {model.id for found in snapshot.providers if found.id in wanted for model in found.models}


def pricing_pages(provider: str) -> tuple[str, ...] | None:
    """The price pages genai-prices reads for cachekit's ``provider`` (``None``: not covered)."""
    snapshot = _snapshot()
    if snapshot is None:
        return None
    for genai_id in _genai_ids(provider):
        try:
            found = snapshot.find_provider(None, genai_id, None)
        except LookupError:
            continue
        return tuple(found.pricing_urls or ())
    return None


def _number(value: Any) -> float | None:
    if value is None:
        return None
    base = getattr(value, "base", value)  # TieredPrices: the base rate
    return float(base)


def _variant_keys(model: Any, at: _dt.datetime) -> set[tuple[str, str]]:
    keys: set[tuple[str, str]] = set()
    for variant in model.price_variants or ():
        if variant.constraint is not None and not variant.constraint.active(at):
            continue
        keys.update(variant.when.items())
    return keys


def lookup(
    provider: str,
    model: str,
    *,
    at: _dt.datetime,
    context: Mapping[str, str] | None = None,
) -> GenaiPrice | None:
    """The prices genai-prices has for ``model`` of ``provider`` at ``at`` (``None`` if it lacks them).

    ``context`` holds what the response reported (``service_tier``, ``speed``, ``processing``...);
    a key/value the model has no price variant for is listed in :attr:`GenaiPrice.ignored`.
    """
    found = _find(provider, model)
    if found is None:
        return None
    genai_provider, genai_model = found
    context = dict(context or {})
    offered = _variant_keys(genai_model, at)
    ignored = tuple(sorted(f"{k}={v}" for k, v in context.items() if (k, v) not in offered))
    used = {k: v for k, v in context.items() if (k, v) in offered}
    prices = genai_model.get_prices(at, used)
    rates = {kind: _number(getattr(prices, key)) for kind, key in _KEYS.items()}
    if rates["input"] is None and rates["output"] is None:
        return None  # priced per character, second or image only: no token price to give, never 0
    tiers: set[int] = set()
    for key in _KEYS.values():
        value = getattr(prices, key)
        tiers.update(tier.start for tier in getattr(value, "tiers", ()) or ())
    snapshot = _snapshot()
    source = f"genai-prices {version()}"
    if getattr(snapshot, "from_auto_update", False):
        source += f" (data fetched {snapshot.timestamp:%Y-%m-%d %H:%M})"
    return GenaiPrice(
        provider=genai_provider.id,
        model=genai_model.id,
        model_name=genai_model.name,
        rates=rates,
        tiers=tuple(sorted(tiers)),
        pricing_urls=tuple(genai_provider.pricing_urls or ()),
        ignored=ignored,
        source=source,
        _prices=prices,
    )


def update_from_network(timeout: float = 30.0) -> bool:
    """Fetch the newest price data from genai-prices' maintainers (network; opt-in, never automatic).

    Returns whether new data was installed for this process. Raises what the fetch raised.
    """
    mod = _module()
    if mod is None:
        raise RuntimeError(missing_reason())
    updater = mod[0].UpdatePrices(update_interval=24 * 3600)
    updater.start()
    try:
        return bool(updater.wait(timeout))
    finally:
        updater.stop()

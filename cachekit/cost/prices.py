"""The dated price table: USD per million tokens per provider and model, from a data file.

The bundled ``prices.json`` has one row per model: ``input``, ``cache_write_5m``, ``cache_write_1h``,
``cache_read`` and ``output`` prices (``null`` where a model has no such tier), an optional
``long_context`` block (above ``threshold_tokens`` of input, cache reads and writes included, every
token bills at that block's prices), an optional ``batch_multiplier``, an optional ``released`` date
(the model's release, as its ``source`` page states it), and the ``source`` URL and ``checked`` date
the figures come from. Prices change: override them with
``PriceTable.load(overrides=path_or_rows)``, which merges field by field over the bundled rows (an
override row for a model the table lacks must carry at least ``input`` and ``output``).

Where prices come from, first match wins (:attr:`Cost.source` names it):

1. a row of your own (``overrides=`` or a price file passed as ``path``);
2. `genai-prices` (see :mod:`cachekit.cost.genai`), at the call's time and with the variants the
   response reported;
3. a row of the bundled ``prices.json``: only for what genai-prices lacks, or when it is not installed.

``multipliers`` in the bundled file apply a documented factor the database does not model (Anthropic's
``inference_geo: "us"``) to every token of a call whose response reports it.

Model names resolve in this order, per provider, case-insensitively:

1. the exact model name of a row;
2. one of the row's ``aliases`` (``claude-sonnet-4-0`` for ``claude-sonnet-4``);
3. the name without a dated-snapshot suffix: ``-YYYYMMDD`` (``claude-sonnet-4-5-20250929`` →
   ``claude-sonnet-4-5``), ``-YYYY-MM-DD`` (``gpt-4o-2024-08-06`` → ``gpt-4o``), ``-MMDD``
   (``gpt-4-0613``) or ``-latest``, then steps 1 and 2 again.

Nothing else is guessed: a model that does not resolve has no price, :meth:`PriceTable.price` returns
``None`` figures (never 0) and logs one warning per model.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
import math
import re
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

from cachekit import _fork
from cachekit.cost import genai
from cachekit.cost.usage import UsageRecord
from cachekit.errors import PriceTableError

__all__ = [
    "QUOTE_PROVIDERS",
    "Cost",
    "ModelPrice",
    "Multiplier",
    "PriceQuote",
    "PriceTable",
    "PriceTableError",
    "Rates",
    "close_models",
    "default_prices",
    "find_quote",
    "format_quote",
    "release_date",
]

logger = logging.getLogger("cachekit.cost")

_RATE_FIELDS = ("input", "cache_write_5m", "cache_write_1h", "cache_read", "output")
_REQUIRED_RATES = ("input", "output")
_ROW_FIELDS = frozenset(
    {"provider", "model", "aliases", *_RATE_FIELDS}
    | {"long_context", "batch_multiplier", "source", "checked", "note", "released"}
)
_LONG_FIELDS = frozenset({"threshold_tokens", *_RATE_FIELDS})
_SNAPSHOT = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2}|\d{4}|latest)$")
_DATED = re.compile(r"-(\d{4})-?(\d{2})-?(\d{2})$")  # a snapshot's date: -YYYYMMDD or -YYYY-MM-DD


@dataclass(frozen=True, slots=True)
class Rates:
    """USD per million tokens for each kind of token; ``None`` where the model has no such tier."""

    input: float
    cache_write_5m: float | None
    cache_write_1h: float | None
    cache_read: float | None
    output: float


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """One row of the table: a model's rates, its long-context and batch rules, and where they come from."""

    provider: str
    model: str
    rates: Rates
    long_context: Rates | None = None
    long_context_threshold: int | None = None
    batch_multiplier: float | None = None
    source: str | None = None
    checked: str | None = None
    aliases: tuple[str, ...] = ()
    note: str | None = None
    #: ``"bundled"`` for a row of cachekit's own file, ``"yours"`` for an override or a file you passed.
    origin: str = "bundled"
    #: The model's release date, ``YYYY-MM-DD``, where the row's source states it.
    released: str | None = None

    def rates_for(self, input_tokens: int) -> Rates:
        """The rates that apply to a request with ``input_tokens`` of input (cache reads/writes included)."""
        if (
            self.long_context is not None
            and self.long_context_threshold is not None
            and input_tokens > self.long_context_threshold
        ):
            return self.long_context
        return self.rates


@dataclass(frozen=True, slots=True)
class Cost:
    """What one call cost, what it would have cost without any caching, and the difference (USD).

    Each figure is ``None`` when it cannot be computed (unknown model, unknown usage, a token kind the
    model has no price for); ``problem`` then says why. ``model`` is the price row that was used,
    ``source`` where its prices came from, ``unpriced`` the reported request options (``key=value``)
    that no price data covers (the call is priced at standard rates for them).
    """

    total_usd: float | None
    no_cache_usd: float | None
    saving_usd: float | None
    model: str | None = None
    long_context: bool = False
    problem: str | None = None
    source: str | None = None
    unpriced: tuple[str, ...] = ()

    @classmethod
    def unknown(cls, problem: str, model: str | None = None) -> Cost:
        """A cost that could not be computed, with the reason."""
        return cls(None, None, None, model, False, problem)


def _is_date(value: Any) -> bool:
    if not isinstance(value, str) or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        return False
    try:
        _dt.date.fromisoformat(value)
    except ValueError:
        return False
    return True


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class _RowError(Exception):
    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field_name = field_name


def _rates(raw: Mapping[str, Any], prefix: str = "") -> Rates:
    values: dict[str, float | None] = {}
    for name in _RATE_FIELDS:
        value = raw.get(name)
        if value is None:
            if name in _REQUIRED_RATES:
                raise _RowError(prefix + name, "is required")
            values[name] = None
            continue
        if not _number(value) or value < 0:
            raise _RowError(prefix + name, f"must be a non-negative number (USD per MTok), got {value!r}")
        values[name] = float(value)
    return Rates(
        input=values["input"] or 0.0,
        cache_write_5m=values["cache_write_5m"],
        cache_write_1h=values["cache_write_1h"],
        cache_read=values["cache_read"],
        output=values["output"] or 0.0,
    )


def _build_row(raw: Mapping[str, Any], *, strict: bool) -> ModelPrice:
    """Validate one raw row; ``strict`` (the bundled file) also requires ``source`` and ``checked``."""
    for key in raw:
        if key not in _ROW_FIELDS:
            raise _RowError(str(key), "is not a price-table field")
    for key in ("provider", "model"):
        value = raw.get(key)
        if not isinstance(value, str) or not value.strip():
            raise _RowError(key, f"must be a non-empty string, got {value!r}")
    rates = _rates(raw)
    long_rates: Rates | None = None
    threshold: int | None = None
    long_raw = raw.get("long_context")
    if long_raw is not None:
        if not isinstance(long_raw, Mapping):
            raise _RowError("long_context", "must be an object with threshold_tokens and prices")
        for key in long_raw:
            if key not in _LONG_FIELDS:
                raise _RowError(f"long_context.{key}", "is not a long-context field")
        threshold = long_raw.get("threshold_tokens")
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold <= 0:
            raise _RowError("long_context.threshold_tokens", f"must be a positive integer, got {threshold!r}")
        long_rates = _rates(long_raw, "long_context.")
    batch = raw.get("batch_multiplier")
    if batch is not None and (not _number(batch) or not 0 < batch <= 1):
        raise _RowError("batch_multiplier", f"must be a number in (0, 1], got {batch!r}")
    source = raw.get("source")
    if (source is not None or strict) and (
        not isinstance(source, str) or not source.startswith(("https://", "http://"))
    ):
        raise _RowError("source", f"must be the http(s) URL the prices were read from, got {source!r}")
    checked = raw.get("checked")
    if (checked is not None or strict) and not _is_date(checked):
        raise _RowError("checked", f"must be the date the prices were checked, YYYY-MM-DD, got {checked!r}")
    aliases = raw.get("aliases", ())
    if not isinstance(aliases, (list, tuple)) or not all(isinstance(a, str) and a.strip() for a in aliases):
        raise _RowError("aliases", "must be a list of model names")
    note = raw.get("note")
    if note is not None and not isinstance(note, str):
        raise _RowError("note", "must be a string")
    released = raw.get("released")
    if released is not None and not _is_date(released):
        raise _RowError("released", f"must be the model's release date, YYYY-MM-DD, got {released!r}")
    return ModelPrice(
        provider=raw["provider"].strip().lower(),
        model=raw["model"].strip(),
        rates=rates,
        long_context=long_rates,
        long_context_threshold=threshold,
        batch_multiplier=float(batch) if batch is not None else None,
        source=source,
        checked=checked,
        aliases=tuple(a.strip() for a in aliases),
        note=note,
        released=released,
    )


def _row_label(index: int, raw: Any) -> str:
    model = raw.get("model") if isinstance(raw, Mapping) else None
    return f"row {index}" + (f" (model {model!r})" if isinstance(model, str) else "")


def _raw_rows(data: Any, origin: str) -> list[Any]:
    """The list of raw rows in a document: ``{"models": [...]}`` or a bare list."""
    if isinstance(data, Mapping):
        if "models" not in data:
            raise PriceTableError(f"{origin}: no 'models' list")
        data = data["models"]
    if not isinstance(data, list):
        raise PriceTableError(f"{origin}: 'models' must be a list of rows")
    return data


def _read_document(source: str | Path | Mapping[str, Any] | Sequence[Any]) -> tuple[list[Any], str]:
    if isinstance(source, (str, Path)):
        path = Path(source)
        origin = str(path)
        try:
            text = path.read_bytes()
        except OSError as exc:
            raise PriceTableError(f"{origin}: cannot read the price file: {exc}") from exc
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise PriceTableError(
                f"{origin}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
            ) from exc
        return _raw_rows(data, origin), origin
    return _raw_rows(source, "price overrides"), "price overrides"


@dataclass(frozen=True, slots=True)
class Multiplier:
    """A documented price factor for a request option the price data does not model.

    Applies to every token of a call of ``provider`` whose response reports ``key`` = ``value``.
    """

    provider: str
    key: str
    value: str
    factor: float
    source: str
    checked: str
    note: str | None = None

    def matches(self, provider: str, key: str, value: str) -> bool:
        """Whether this multiplier prices option ``key=value`` of a ``provider`` call."""
        return provider.strip().lower() == self.provider and key == self.key and value == self.value


def _multiplier(raw: Any, origin: str) -> Multiplier:
    try:
        factor = raw["factor"]
        if not _number(factor) or factor <= 0 or not _is_date(raw["checked"]):
            raise ValueError(raw)
        return Multiplier(
            provider=str(raw["provider"]).lower(),
            key=str(raw["key"]),
            value=str(raw["value"]),
            factor=float(factor),
            source=str(raw["source"]),
            checked=str(raw["checked"]),
            note=raw.get("note"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise PriceTableError(f"{origin}: malformed multiplier {raw!r}") from exc


def _moment(at: float | _dt.datetime | None) -> _dt.datetime:
    """A call's time as an aware UTC datetime (naive datetimes are UTC, numbers epoch seconds)."""
    if at is None:
        return _dt.datetime.now(_dt.timezone.utc)
    if isinstance(at, _dt.datetime):
        return at if at.tzinfo is not None else at.replace(tzinfo=_dt.timezone.utc)
    return _dt.datetime.fromtimestamp(at, _dt.timezone.utc)


@dataclass(frozen=True, slots=True)
class PriceQuote:
    """The prices cachekit uses for one model at one moment (``cachekit prices MODEL``).

    ``rates`` in USD per million tokens (base rates when ``tiers`` lists prompt-length thresholds),
    ``source`` where they come from, ``urls`` the provider pages behind them, ``unpriced`` options
    no price data covers.
    """

    provider: str
    model: str
    rates: Rates
    source: str
    urls: tuple[str, ...]
    tiers: tuple[int, ...] = ()
    unpriced: tuple[str, ...] = ()
    factor: float = 1.0


def _key(provider: str, model: str) -> tuple[str, str]:
    return provider.strip().lower(), model.strip().lower()


class PriceTable:
    """Model prices with name resolution, long-context and batch rules; prices :class:`UsageRecord` s."""

    def __init__(
        self,
        rows: Iterable[ModelPrice],
        *,
        use_genai: bool = True,
        multipliers: Iterable[Multiplier] = (),
    ) -> None:
        #: Whether genai-prices is consulted (when installed) before the bundled rows.
        self.use_genai = use_genai
        self.multipliers = tuple(multipliers)
        self._rows: dict[tuple[str, str], ModelPrice] = {}
        self._names: dict[tuple[str, str], ModelPrice] = {}
        for row in rows:
            key = _key(row.provider, row.model)
            if key in self._rows:
                raise PriceTableError(f"model {row.model!r} of {row.provider!r} appears twice")
            self._rows[key] = row
        for row in self._rows.values():
            for name in (row.model, *row.aliases):
                key = _key(row.provider, name)
                other = self._names.get(key)
                if other is not None and other is not row:
                    raise PriceTableError(
                        f"name {name!r} of {row.provider!r} names both {other.model!r} and {row.model!r}"
                    )
                self._names[key] = row
        self._resolved: dict[tuple[str, str], ModelPrice | None] = {}
        self._warned: set[tuple[str, ...]] = set()
        self._lock = _fork.lock(self)

    @classmethod
    def load(
        cls,
        path: str | Path | None = None,
        *,
        overrides: str | Path | Mapping[str, Any] | Sequence[Any] | None = None,
        use_genai: bool = True,
    ) -> PriceTable:
        """Load a price file (the bundled one by default) and merge ``overrides`` (a file or rows) over it.

        Rows of a file you pass and override rows are yours: they win over genai-prices. The bundled
        rows price only what genai-prices lacks (``use_genai=False``: the table alone).
        Raises :class:`PriceTableError` naming the row and field of the first malformed entry.
        """
        multipliers: list[Multiplier] = []
        if path is None:
            document = orjson.loads(resources.files("cachekit.cost").joinpath("prices.json").read_bytes())
            base, origin = _raw_rows(document, "cachekit/cost/prices.json"), "cachekit/cost/prices.json"
            multipliers = [_multiplier(raw, origin) for raw in document.get("multipliers", ())]
        else:
            base, origin = _read_document(path)
        merged: dict[tuple[str, str], dict[str, Any]] = {}
        # Rows of cachekit's own file; every other row (your file, your overrides) is yours.
        yours: set[tuple[str, str]] = set()
        for index, raw in enumerate(base):
            row = _validated(raw, index, origin, strict=True)
            key = _key(row.provider, row.model)
            if key in merged:
                label = _row_label(index, raw)
                raise PriceTableError(f"{origin}: {label}: field 'model' repeats an earlier row")
            merged[key] = dict(raw)
            if path is not None:
                yours.add(key)
        if overrides is not None:
            extra, extra_origin = _read_document(overrides)
            for index, raw in enumerate(extra):
                if not isinstance(raw, Mapping):
                    raise PriceTableError(f"{extra_origin}: row {index}: must be an object")
                provider, model = raw.get("provider"), raw.get("model")
                if not isinstance(provider, str) or not isinstance(model, str):
                    _validated(raw, index, extra_origin, strict=False)  # names the bad field
                    continue
                key = _key(provider, model)
                combined = {**merged.get(key, {}), **raw}
                _validated(combined, index, extra_origin, strict=False)
                merged[key] = combined
                yours.add(key)
        rows = (
            dataclasses.replace(row, origin="yours") if key in yours else row
            for key, row in ((key, _build_row(raw, strict=False)) for key, raw in merged.items())
        )
        return cls(rows, use_genai=use_genai, multipliers=multipliers)

    @property
    def rows(self) -> tuple[ModelPrice, ...]:
        """Every row of the table."""
        return tuple(self._rows.values())

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[ModelPrice]:
        return iter(self._rows.values())

    def lookup(self, provider: str, model: str) -> ModelPrice | None:
        """The row for ``model`` of ``provider`` (see the module docstring for the resolution order)."""
        key = (provider, model)
        try:
            return self._resolved[key]
        except KeyError:
            pass
        pkey = provider.strip().lower()
        name = model.strip().lower()
        row = self._names.get((pkey, name))
        if row is None:
            stripped = _SNAPSHOT.sub("", name)
            if stripped != name:
                row = self._names.get((pkey, stripped))
        if len(self._resolved) < 4096:
            self._resolved[key] = row
        return row

    def _warn_once(self, key: tuple[str, ...], message: str, *args: object) -> None:
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
        logger.warning(message, *args)

    def price(
        self,
        provider: str,
        model: str,
        usage: UsageRecord,
        *,
        batch: bool = False,
        at: float | _dt.datetime | None = None,
        context: Mapping[str, str] | None = None,
    ) -> Cost:
        """Price one call's usage: its cost, its cost without caching, and the saving.

        Without caching every input token (written, read or not) would have billed at the plain input
        price of the same tier; output is the same either way. ``batch`` applies the model's batch
        price. ``at`` is when the call was made (epoch seconds or a datetime; now by default): prices
        in force then apply. ``context`` holds the options the response reported (see
        :func:`~cachekit.cost.usage.price_context_of_body`). Unknown model or unknown usage gives
        ``None`` figures, never 0.
        """
        context = dict(context or {})
        if context.pop("processing", None) == "batch":  # a batch result reports itself
            batch = True
        found, row = self._source(provider, model, _moment(at), context, batch)
        if found is not None:
            return self._price_genai(found, usage, batch, provider, context)
        if row is None:
            self._warn_once(
                ("model", provider, model),
                "cachekit.cost: no price for model %r of %r; cost unknown",
                model,
                provider,
            )
            return Cost.unknown(f"no price for model {model!r} of {provider!r}")
        return self._price_row(row, usage, batch, context)

    def quote(
        self,
        provider: str,
        model: str,
        *,
        at: float | _dt.datetime | None = None,
        context: Mapping[str, str] | None = None,
    ) -> PriceQuote | None:
        """The rates :meth:`price` would use for ``model`` of ``provider`` (``None``: no price)."""
        context = dict(context or {})
        found, row = self._source(provider, model, _moment(at), context, False)
        if found is not None:
            factor, unpriced = self._scale(provider, context, found.ignored)
            r = found.rates
            rates = Rates(
                r["input"] or 0.0,
                r["cache_write_5m"],
                r["cache_write_1h"],
                r["cache_read"],
                r["output"] or 0.0,
            )
            urls, tiers, source = found.pricing_urls, found.tiers, found.source
            return PriceQuote(provider, found.model, rates, source, urls, tiers, tuple(unpriced), factor)
        if row is None:
            return None
        factor, unpriced = self._scale(provider, context, (f"{k}={v}" for k, v in context.items()))
        tiers = (row.long_context_threshold,) if row.long_context_threshold else ()
        urls = (row.source,) if row.source else ()
        source = self._row_source(row, quoted=True)
        return PriceQuote(provider, row.model, row.rates, source, urls, tiers, tuple(unpriced), factor)

    def _source(
        self, provider: str, model: str, when: _dt.datetime, context: Mapping[str, str], batch: bool
    ) -> tuple[genai.GenaiPrice | None, ModelPrice | None]:
        """Where ``model``'s price comes from: your row, else genai-prices, else the bundled row."""
        row = self.lookup(provider, model)
        if row is None or row.origin == "bundled":
            found = self._genai(provider, model, when, context, batch)
            if found is not None:
                return found, None
        return None, row

    def _row_source(self, row: ModelPrice, *, quoted: bool = False) -> str:
        """How :attr:`Cost.source` names a row of the table."""
        if row.origin == "yours":
            return "your price rows"
        # A quote lists the row's URL under its source line; a cost names it here, its only place.
        source = (
            f"cachekit/cost/prices.json (checked {row.checked}{'' if quoted else ': ' + str(row.source)})"
        )
        if self.use_genai and not genai.available():
            source += "; " + genai.missing_reason()
        return source

    def _genai(
        self, provider: str, model: str, when: _dt.datetime, context: Mapping[str, str], batch: bool
    ) -> genai.GenaiPrice | None:
        if not self.use_genai:
            return None
        asked = {**context, "processing": "batch"} if batch else context
        try:
            return genai.lookup(provider, model, at=when, context=asked)
        except Exception as exc:  # a broken data file must not lose the call: fall back to the table
            self._warn_once(("genai", provider, model), "cachekit.cost: genai-prices failed: %s", exc)
            return None

    def _scale(
        self, provider: str, context: Mapping[str, str], unpriced: Iterable[str]
    ) -> tuple[float, list[str]]:
        """The product of the multipliers that apply, and the options still unpriced after them."""
        factor, left = 1.0, []
        for option in unpriced:
            key, _, value = option.partition("=")
            match = next((m for m in self.multipliers if m.matches(provider, key, value)), None)
            if match is None:
                left.append(option)
            else:
                factor *= match.factor
        return factor, left

    def _price_genai(
        self,
        found: genai.GenaiPrice,
        usage: UsageRecord,
        batch: bool,
        provider: str,
        context: Mapping[str, str],
    ) -> Cost:
        name = found.model
        if batch and "processing=batch" in found.ignored:
            return Cost.unknown(f"model {name!r} has no batch price", name)
        if not usage.known:
            return Cost.unknown("usage unknown: " + "; ".join(usage.problems), name)
        if usage.input_total is None or usage.output is None:
            return Cost.unknown("usage incomplete", name)
        options = [o for o in found.ignored if o != "processing=batch"]
        factor, unpriced = self._scale(provider, context, options)
        total, without, long_context = found.cost(usage)
        total, without = total * factor, without * factor
        return Cost(total, without, without - total, name, long_context, None, found.source, tuple(unpriced))

    def _price_row(
        self, row: ModelPrice, usage: UsageRecord, batch: bool, context: Mapping[str, str]
    ) -> Cost:
        """Price ``usage`` from one row of the table (yours, or the bundled fallback)."""
        source = self._row_source(row)
        if not usage.known:
            return Cost.unknown("usage unknown: " + "; ".join(usage.problems), row.model)
        uncached, read = usage.uncached_input, usage.cache_read
        w5, w1 = usage.cache_write_5m, usage.cache_write_1h
        if uncached is None or w5 is None or w1 is None or read is None or usage.output is None:
            return Cost.unknown("usage incomplete", row.model)
        input_total = uncached + w5 + w1 + read
        rates = row.rates_for(input_total)
        micro = usage.output * rates.output
        if usage.uncached_input:
            micro += usage.uncached_input * rates.input
        for name, tokens, rate in (
            ("cache_write_5m", usage.cache_write_5m, rates.cache_write_5m),
            ("cache_write_1h", usage.cache_write_1h, rates.cache_write_1h),
            ("cache_read", usage.cache_read, rates.cache_read),
        ):
            if not tokens:
                continue
            if rate is None:
                self._warn_once(
                    ("tier", row.provider, row.model, name),
                    "cachekit.cost: model %r of %r has no %s price; cost unknown",
                    row.model,
                    row.provider,
                    name,
                )
                return Cost.unknown(f"model {row.model!r} has no {name} price", row.model)
            micro += tokens * rate
        no_cache_micro = input_total * rates.input + usage.output * rates.output
        if batch:
            if row.batch_multiplier is None:
                return Cost.unknown(f"model {row.model!r} has no batch price", row.model)
            micro *= row.batch_multiplier
            no_cache_micro *= row.batch_multiplier
        factor, unpriced = self._scale(row.provider, context, (f"{k}={v}" for k, v in context.items()))
        total = micro * factor / 1_000_000
        no_cache = no_cache_micro * factor / 1_000_000
        return Cost(
            total,
            no_cache,
            no_cache - total,
            row.model,
            rates is not row.rates,
            None,
            source,
            tuple(unpriced),
        )


def _validated(raw: Any, index: int, origin: str, *, strict: bool) -> ModelPrice:
    if not isinstance(raw, Mapping):
        raise PriceTableError(f"{origin}: row {index}: must be an object, got {type(raw).__name__}")
    try:
        return _build_row(raw, strict=strict)
    except _RowError as exc:
        raise PriceTableError(f"{origin}: {_row_label(index, raw)}: field {exc.field_name!r} {exc}") from None


@dataclass
class _Default:
    table: PriceTable | None = None
    lock: threading.Lock = field(default_factory=_fork.lock)


_DEFAULT = _Default()


def default_prices() -> PriceTable:
    """The bundled price table, loaded once per process."""
    if _DEFAULT.table is None:
        with _DEFAULT.lock:
            if _DEFAULT.table is None:
                _DEFAULT.table = PriceTable.load()
    return _DEFAULT.table


#: The providers ``cachekit prices MODEL`` tries, in order, when none is named.
QUOTE_PROVIDERS = ("anthropic", "openai", "gemini", "deepseek", "kimi", "glm", "xai", "bailian")


def find_quote(
    model: str,
    provider: str | None = None,
    *,
    at: float | _dt.datetime | None = None,
    context: Mapping[str, str] | None = None,
    table: PriceTable | None = None,
) -> PriceQuote | None:
    """The quote for ``model`` of ``provider``, or of the first of :data:`QUOTE_PROVIDERS` that prices it."""
    table = table or default_prices()
    for name in (provider,) if provider else QUOTE_PROVIDERS:
        quote = table.quote(name, model, at=at, context=context)
        if quote is not None:
            return quote
    return None


def release_date(model: str, provider: str, *, table: PriceTable | None = None) -> _dt.date | None:
    """The day ``model`` of ``provider`` was released, where cachekit knows it: the date a dated
    snapshot carries in its name (``gpt-4o-2024-08-06``, ``claude-sonnet-4-5-20250929``), else the
    ``released`` date of its price row; ``None`` otherwise."""
    dated = _DATED.search(model.strip())
    if dated is not None:
        try:
            return _dt.date(int(dated.group(1)), int(dated.group(2)), int(dated.group(3)))
        except ValueError:
            pass  # digits that are no date: not a snapshot's
    row = (table or default_prices()).lookup(provider, model)
    return _dt.date.fromisoformat(row.released) if row is not None and row.released else None


def close_models(model: str, provider: str | None = None, *, table: PriceTable | None = None) -> list[str]:
    """Up to three priced model names close to ``model`` (of ``provider``, else of any provider
    cachekit quotes), closest first: what ``cachekit prices`` suggests for a name it cannot price."""
    import difflib

    providers = (provider,) if provider else QUOTE_PROVIDERS
    names: set[str] = set()
    for row in table or default_prices():
        if row.provider in providers:
            names.update((row.model, *row.aliases))
    names.update(genai.model_ids(providers))
    return difflib.get_close_matches(model.strip(), sorted(names), n=3, cutoff=0.6)


def format_quote(quote: PriceQuote, at: _dt.datetime) -> str:
    """A few lines for a terminal: the rates, the moment, the options and where they come from."""

    def usd(value: float | None) -> str:
        return "-" if value is None else f"${value * quote.factor:g}"

    r = quote.rates
    lines = [
        f"{quote.provider} {quote.model} at {at:%Y-%m-%d %H:%M} UTC, USD per million tokens:",
        f"  input {usd(r.input)}  cache write {usd(r.cache_write_5m)}"
        f" (long retention {usd(r.cache_write_1h)})  cache read {usd(r.cache_read)}  output {usd(r.output)}",
    ]
    if quote.tiers:
        lines.append("  other rates above " + ", ".join(f"{t:,}" for t in quote.tiers) + " prompt tokens")
    if quote.factor != 1.0:
        lines.append(f"  x{quote.factor:g} for the options given (cachekit's multipliers)")
    if quote.unpriced:
        lines.append("  not in the price data, priced as standard: " + ", ".join(quote.unpriced))
    lines.append(f"source: {quote.source}")
    lines.extend(f"  {url}" for url in _links(quote.urls))
    return "\n".join(lines) + "\n"


#: A path segment naming a language other than English (``zh-CN``, ``ja``, ``de-de``): a link to a page
#: localized for someone else. English ones (``en``, ``en-us``) are the pages' own default.
_LOCALE = re.compile(r"/(?:zh|ja|ko|de|fr|es|pt|it|ru)(?:-[a-z]{2,4})?/", re.IGNORECASE)


def _links(urls: Iterable[str]) -> list[str]:
    """The source links as shown: each page once (a trailing slash or a ``#fragment`` makes no other
    page), and none localized for another language (its English page is shown instead)."""
    shown: list[str] = []
    seen: set[str] = set()
    for given in urls:
        url = _LOCALE.sub("/en/", given, count=1)
        key = url.split("#", 1)[0].rstrip("/").lower()
        if key not in seen:
            seen.add(key)
            shown.append(url)
    return shown

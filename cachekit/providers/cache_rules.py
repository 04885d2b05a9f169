"""The providers' prompt-caching rules per model family, from the dated data file ``cache_rules.json``.

Each row of the file names a provider and a model-name ``prefix`` and gives that family's rules: the
minimum cacheable prompt length, the breakpoint limit and lookback window (explicit caching), the
hit increment (OpenAI's automatic caching), the TTL options, and the context window, with the URL
and date they were read from. The row with the empty prefix is the provider's default; other rows
inherit the fields they leave out from it.

A model matches a row when its name equals the prefix or continues it after a separator (``-``,
``_``, ``:``, ``@``), case-insensitively, and the longest matching prefix wins: so
``claude-opus-4-5-20251101`` takes the ``claude-opus-4-5`` row, ``claude-opus-4-10`` would not take
``claude-opus-4-1``, and ``gpt-5.5`` does not take ``gpt-5`` (a version dot is not a separator).

A model no family row names falls to its provider's default row, with one exception the data states:
a row with ``later_versions`` (OpenAI's ``gpt-5.6``: "GPT-5.6 models and later model families") also
covers later versions of its name that no row names yet, the latest such row whose version is not
above the model's: ``gpt-6.2-sol`` takes ``gpt-6.1``'s explicit rules, never the default row's
automatic caching of the models before GPT-5.6. So which rules a new model gets is always a decision
in the data: a row, the documented "and later" rule, or the default (:meth:`CacheRulesTable.resolve`
says which).

The file is validated on load; a malformed one raises :class:`CacheRulesError` naming the row and
the field. Prices are not here: they live in ``cachekit/cost/prices.json``.
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

import orjson

from cachekit.errors import CacheRulesError, UnknownProviderError

__all__ = [
    "CacheRules",
    "CacheRulesError",
    "CacheRulesTable",
    "UnknownProviderError",
    "cache_rules",
    "default_cache_rules",
]

CacheMode = Literal["explicit", "automatic"]
OverLimit = Literal["error", "write_latest"]
#: The fields a content block may carry a breakpoint in: Anthropic's ``cache_control`` and OpenAI's
#: (GPT-5.6 and later, Qwen4) ``prompt_cache_breakpoint``.
MARKER_FIELDS = ("cache_control", "prompt_cache_breakpoint")

_BUNDLED = "cachekit/providers/cache_rules.json"
_SEPARATORS = ("-", "_", ":", "@")
_ROW_FIELDS = frozenset(
    {
        "provider",
        "prefix",
        "mode",
        "min_cacheable_tokens",
        "max_breakpoints",
        "lookback_positions",
        "tool_runs_one_position",
        "automatic_caching",
        "increment_tokens",
        "ttl_seconds",
        "context_window",
        "markers",
        "marker_types",
        "marker_roles",
        "implicit_breakpoint",
        "over_limit",
        "ttl_order",
        "later_versions",
        "source",
        "context_window_source",
        "checked",
        "note",
    }
)
# Fields a row may not inherit: where the numbers come from is per row.
_OWN_FIELDS = frozenset(
    {"provider", "prefix", "source", "context_window_source", "checked", "note", "later_versions"}
)
# A model name's version: the digits (and dotted digits) after the name's stem, up to a separator.
_VERSION = re.compile(r"([a-z][a-z-]*?-?)(\d+(?:\.\d+)*)(?=$|[-_:@])")


@dataclass(frozen=True, slots=True)
class CacheRules:
    """One model family's prompt-caching rules, as the provider documents them.

    ``mode`` is ``"explicit"`` (Anthropic-style ``cache_control`` breakpoints: ``max_breakpoints``,
    ``lookback_positions`` and ``automatic_caching`` apply) or ``"automatic"`` (OpenAI: every prompt
    of at least ``min_cacheable_tokens`` is cached and hits come in ``increment_tokens`` steps).
    ``ttl_seconds`` maps each lifetime option (``"5m"``/``"1h"``, or ``"in_memory"``/``"24h"``) to
    seconds. ``context_window`` is ``None`` when no documented figure was found (not enforced).
    """

    provider: str
    prefix: str
    mode: CacheMode
    min_cacheable_tokens: int
    max_breakpoints: int | None
    lookback_positions: int | None
    tool_runs_one_position: bool
    automatic_caching: bool
    increment_tokens: int | None
    ttl_seconds: Mapping[str, float] = field(hash=False)
    context_window: int | None
    source: str
    checked: str
    context_window_source: str | None = None
    note: str | None = None
    markers: tuple[str, ...] = ("cache_control",)
    """Explicit mode: the block fields the API takes a breakpoint in, the one cachekit writes first."""
    marker_types: frozenset[str] | None = None
    """Explicit mode: the content-block types that may carry a breakpoint (``None``: the Messages API's
    own list, :data:`cachekit.shape.blocks` ``_MARKABLE_TYPES``)."""
    marker_roles: frozenset[str] | None = None
    """Explicit mode: the message roles whose blocks may carry one (``None``: any role)."""
    implicit_breakpoint: bool = False
    """The provider places its own breakpoint at the end of the newest user or tool message unless the
    request turns it off (OpenAI ``prompt_cache_options.mode="explicit"``); it takes one write."""
    over_limit: OverLimit = "error"
    """More breakpoints than ``max_breakpoints``: refused (Anthropic), or only the latest are written
    (OpenAI: "writes up to the latest four explicit breakpoints")."""
    ttl_order: bool = True
    """Longer lifetimes must come before shorter ones (Anthropic refuses a 1h after a 5m marker)."""
    later_versions: bool = False
    """The provider says these rules hold for later versions too: a later version of the name that no
    row names takes this row (see the module docstring)."""

    def lifetime(self, tier: str) -> float:
        """Seconds of a lifetime *tier*: ``"5m"`` is the provider's shortest option, ``"1h"`` its
        longest (30m and 12h at OpenAI), any other name an option of its own."""
        return self.ttl_seconds[self.tier_name(tier)]

    def tier_name(self, tier: str) -> str:
        """The provider's name for lifetime tier ``tier`` (see :meth:`lifetime`)."""
        if tier in self.ttl_seconds:
            return tier
        ordered = sorted(self.ttl_seconds, key=self.ttl_seconds.__getitem__)
        if tier == "5m":
            return ordered[0]
        if tier == "1h":
            return ordered[-1]
        raise KeyError(f"{tier!r} is not a cache lifetime of {self.provider} {self.prefix!r}")

    def tier_of(self, name: str) -> str:
        """The lifetime tier (``"5m"`` short, ``"1h"`` long) of the provider's option ``name``."""
        seconds = self.ttl(name)
        return "5m" if seconds <= min(self.ttl_seconds.values()) else "1h"

    def ttl(self, name: str) -> float:
        """Seconds of the lifetime option ``name``; :class:`KeyError` names the options when it is unknown."""
        try:
            return self.ttl_seconds[name]
        except KeyError:
            options = ", ".join(repr(key) for key in self.ttl_seconds)
            raise KeyError(
                f"{name!r} is not a cache lifetime of {self.provider} {self.prefix!r} ({options})"
            ) from None

    def matches(self, model: str) -> bool:
        """Whether ``model`` belongs to this family (see the module docstring for the rule)."""
        return _matches(self.prefix, model.strip().lower())


class _RowError(Exception):
    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field_name = field_name


def _matches(prefix: str, name: str) -> bool:
    if not prefix:
        return True
    if not name.startswith(prefix):
        return False
    return len(name) == len(prefix) or name[len(prefix)] in _SEPARATORS


def _positive_int(raw: Mapping[str, Any], key: str, *, allow_zero: bool = False) -> int:
    value = raw.get(key)
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise _RowError(key, f"must be an integer >= {low}, got {value!r}")
    return value


def _optional_int(raw: Mapping[str, Any], key: str) -> int | None:
    return None if raw.get(key) is None else _positive_int(raw, key)


def _flag(raw: Mapping[str, Any], key: str) -> bool:
    value = raw.get(key)
    if not isinstance(value, bool):
        raise _RowError(key, f"must be true or false, got {value!r}")
    return value


def _url(raw: Mapping[str, Any], key: str, *, required: bool) -> str | None:
    value = raw.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.startswith(("https://", "http://")):
        raise _RowError(key, f"must be the http(s) URL the rule was read from, got {value!r}")
    return value


def _date(raw: Mapping[str, Any]) -> str:
    value = raw.get("checked")
    try:
        if not isinstance(value, str) or len(value) != 10:
            raise ValueError(value)
        _dt.date.fromisoformat(value)
    except ValueError:
        raise _RowError("checked", f"must be the date the rule was read, YYYY-MM-DD, got {value!r}") from None
    return value


def _ttls(raw: Mapping[str, Any]) -> Mapping[str, float]:
    value = raw.get("ttl_seconds")
    if not isinstance(value, Mapping) or not value:
        raise _RowError(
            "ttl_seconds", f"must be a non-empty object of lifetime name to seconds, got {value!r}"
        )
    ttls: dict[str, float] = {}
    for name, seconds in value.items():
        if (
            not isinstance(name, str)
            or not name
            or isinstance(seconds, bool)
            or not isinstance(seconds, (int, float))
            or not math.isfinite(seconds)
            or seconds <= 0
        ):
            raise _RowError(f"ttl_seconds.{name}", f"must be a positive number of seconds, got {seconds!r}")
        ttls[name] = float(seconds)
    return MappingProxyType(ttls)


def _build(raw: Mapping[str, Any]) -> CacheRules:
    """Validate one row (already merged over its provider's default) into :class:`CacheRules`."""
    for key in raw:
        if key not in _ROW_FIELDS:
            raise _RowError(str(key), "is not a cache-rules field")
    provider = raw.get("provider")
    if not isinstance(provider, str) or not provider.strip():
        raise _RowError("provider", f"must be a non-empty string, got {provider!r}")
    prefix = raw.get("prefix")
    if not isinstance(prefix, str) or prefix != prefix.strip():
        raise _RowError("prefix", f"must be a string without surrounding spaces, got {prefix!r}")
    mode = raw.get("mode")
    if mode not in ("explicit", "automatic"):
        raise _RowError("mode", f"must be 'explicit' or 'automatic', got {mode!r}")
    minimum = _positive_int(raw, "min_cacheable_tokens")
    ttls = _ttls(raw)
    if mode == "explicit":
        max_breakpoints: int | None = _positive_int(raw, "max_breakpoints")
        # null: no lookback limit (OpenAI: "without a content-block lookback limit").
        lookback: int | None = _optional_int(raw, "lookback_positions")
        tool_runs = _flag(raw, "tool_runs_one_position")
        automatic = _flag(raw, "automatic_caching")
        if raw.get("increment_tokens") is not None:
            raise _RowError("increment_tokens", "applies to automatic caching only")
        increment = None
        extra = _explicit_fields(raw)
        # Each breakpoint field names its own lifetimes: cache_control 5m/1h, prompt_cache_breakpoint 30m/12h.
        known = _FIELD_TTLS[extra.get("markers", ("cache_control",))[0]]
        for name in ttls:
            if name not in known:
                raise _RowError(
                    f"ttl_seconds.{name}",
                    f"explicit caching knows the lifetimes {' and '.join(map(repr, known))} only",
                )
    else:
        for key in (
            "max_breakpoints",
            "lookback_positions",
            "tool_runs_one_position",
            "automatic_caching",
            *_EXPLICIT_ONLY,
        ):
            if raw.get(key) is not None:
                raise _RowError(key, "applies to explicit (breakpoint) caching only")
        max_breakpoints = lookback = None
        tool_runs = automatic = False
        increment = _positive_int(raw, "increment_tokens")
        extra = {}
    note = raw.get("note")
    if note is not None and not isinstance(note, str):
        raise _RowError("note", f"must be a string, got {note!r}")
    if raw.get("later_versions") is not None:
        extra["later_versions"] = _flag(raw, "later_versions")
        if _version(prefix.lower()) is None:
            raise _RowError("later_versions", f"needs a versioned prefix (like gpt-5.6), got {prefix!r}")
    return CacheRules(
        provider=provider.strip().lower(),
        prefix=prefix.lower(),
        mode=mode,
        min_cacheable_tokens=minimum,
        max_breakpoints=max_breakpoints,
        lookback_positions=lookback,
        tool_runs_one_position=tool_runs,
        automatic_caching=automatic,
        increment_tokens=increment,
        ttl_seconds=ttls,
        context_window=_optional_int(raw, "context_window"),
        source=_url(raw, "source", required=True) or "",
        checked=_date(raw),
        context_window_source=_url(raw, "context_window_source", required=False),
        note=note,
        **extra,
    )


_FIELD_TTLS = {"cache_control": ("5m", "1h"), "prompt_cache_breakpoint": ("30m", "12h")}
_EXPLICIT_ONLY = ("markers", "marker_types", "marker_roles", "implicit_breakpoint", "over_limit", "ttl_order")


def _names(raw: Mapping[str, Any], key: str, allowed: tuple[str, ...] | None = None) -> tuple[str, ...]:
    value = raw.get(key)
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(item, str) and item for item in value)
        or (allowed is not None and not set(value) <= set(allowed))
    ):
        detail = f" of {', '.join(allowed)}" if allowed else ""
        raise _RowError(key, f"must be a non-empty list of names{detail}, got {value!r}")
    return tuple(value)


def _explicit_fields(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The optional fields of an explicit-caching row (see :class:`CacheRules`), validated."""
    extra: dict[str, Any] = {}
    if raw.get("markers") is not None:
        extra["markers"] = _names(raw, "markers", MARKER_FIELDS)
    for key in ("marker_types", "marker_roles"):
        if raw.get(key) is not None:
            extra[key] = frozenset(_names(raw, key))
    for key in ("implicit_breakpoint", "ttl_order"):
        if raw.get(key) is not None:
            extra[key] = _flag(raw, key)
    if raw.get("over_limit") is not None:
        if raw["over_limit"] not in ("error", "write_latest"):
            raise _RowError("over_limit", f"must be 'error' or 'write_latest', got {raw['over_limit']!r}")
        extra["over_limit"] = raw["over_limit"]
    return extra


def _version(name: str) -> tuple[str, tuple[int, ...]] | None:
    """A model name's stem and version (``gpt-6.2-sol`` -> ``("gpt-", (6, 2))``), or ``None``."""
    match = _VERSION.match(name)
    if match is None:
        return None
    return match.group(1), tuple(int(part) for part in match.group(2).split("."))


def _label(index: int, raw: Any) -> str:
    if not isinstance(raw, Mapping):
        return f"row {index}"
    return f"row {index} ({raw.get('provider')!r} {raw.get('prefix')!r})"


class CacheRulesTable:
    """Every provider's cache rules, looked up by provider and model name."""

    def __init__(self, rows: list[CacheRules]) -> None:
        self._by_provider: dict[str, list[CacheRules]] = {}
        for row in rows:
            self._by_provider.setdefault(row.provider, []).append(row)
        for family in self._by_provider.values():
            # Longest prefix first, so the first match is the most specific one.
            family.sort(key=lambda r: len(r.prefix), reverse=True)

    @classmethod
    def load(cls, path: str | Path | None = None) -> CacheRulesTable:
        """Load and validate a rules file (the bundled one by default).

        Raises :class:`CacheRulesError` naming the file, the row and the field of the first problem.
        """
        if path is None:
            origin = _BUNDLED
            text = resources.files("cachekit.providers").joinpath("cache_rules.json").read_bytes()
        else:
            origin = str(path)
            try:
                text = Path(path).read_bytes()
            except OSError as exc:
                raise CacheRulesError(f"{origin}: cannot read the cache-rules file: {exc}") from exc
        try:
            document = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise CacheRulesError(f"{origin}: invalid JSON: {exc}") from exc
        if not isinstance(document, Mapping) or not isinstance(document.get("rules"), list):
            raise CacheRulesError(f"{origin}: must be an object with a 'rules' list")
        return cls(_validated_rows(document["rules"], origin))

    @property
    def providers(self) -> tuple[str, ...]:
        """The providers the table has rules for, sorted."""
        return tuple(sorted(self._by_provider))

    def __iter__(self) -> Iterator[CacheRules]:
        for provider in self.providers:
            yield from self._by_provider[provider]

    def lookup(self, provider: str, model: str) -> CacheRules:
        """The rules for ``model`` of ``provider``: the longest matching prefix, else the default row.

        Raises :class:`UnknownProviderError` for a provider the table has no rules for.
        """
        family = self._by_provider.get(provider.strip().lower())
        if family is None:
            known = ", ".join(self.providers)
            raise UnknownProviderError(f"no prompt-caching rules for provider {provider!r}; known: {known}")
        return self.resolve(provider, model)[0]

    def resolve(self, provider: str, model: str) -> tuple[CacheRules, Literal["family", "later", "default"]]:
        """:meth:`lookup`, and how the row was chosen: ``family`` (its prefix names the model),
        ``later`` (a ``later_versions`` row: the provider's "and later") or ``default``."""
        family = self._by_provider.get(provider.strip().lower())
        if family is None:
            known = ", ".join(self.providers)
            raise UnknownProviderError(f"no prompt-caching rules for provider {provider!r}; known: {known}")
        name = model.strip().lower()
        for row in family:
            if row.prefix and _matches(row.prefix, name):
                return row, "family"
        later = self._later(family, name)
        if later is not None:
            return later, "later"
        default = next((row for row in family if not row.prefix), None)
        assert default is not None, "validation guarantees a default row per provider"
        return default, "default"

    @staticmethod
    def _later(family: list[CacheRules], name: str) -> CacheRules | None:
        """The ``later_versions`` row of the highest version not above ``name``'s, on the same stem."""
        wanted = _version(name)
        if wanted is None:
            return None
        best: tuple[tuple[int, ...], CacheRules] | None = None
        for row in family:
            own = _version(row.prefix) if row.later_versions else None
            if own is None or own[0] != wanted[0] or own[1] > wanted[1]:
                continue
            if best is None or own[1] > best[0]:
                best = (own[1], row)
        return None if best is None else best[1]


def _validated_rows(raw_rows: list[Any], origin: str) -> list[CacheRules]:
    defaults: dict[str, Mapping[str, Any]] = {}
    for index, raw in enumerate(raw_rows):
        if not isinstance(raw, Mapping):
            raise CacheRulesError(f"{origin}: row {index}: must be an object")
        provider = raw.get("provider")
        if raw.get("prefix") == "" and isinstance(provider, str):
            key = provider.strip().lower()
            if key in defaults:
                raise CacheRulesError(f"{origin}: {_label(index, raw)}: a second default row for {key!r}")
            defaults[key] = raw
    rows: list[CacheRules] = []
    seen: set[tuple[str, str]] = set()
    for index, raw in enumerate(raw_rows):
        provider = raw.get("provider")
        base = defaults.get(provider.strip().lower()) if isinstance(provider, str) else None
        if base is None:
            raise CacheRulesError(
                f"{origin}: {_label(index, raw)}: field 'provider' has no default row (prefix \"\")"
            )
        inherited = {k: v for k, v in base.items() if k not in _OWN_FIELDS}
        try:
            row = _build({**inherited, **raw})
        except _RowError as exc:
            raise CacheRulesError(f"{origin}: {_label(index, raw)}: field {exc.field_name!r} {exc}") from None
        if (row.provider, row.prefix) in seen:
            raise CacheRulesError(f"{origin}: {_label(index, raw)}: field 'prefix' repeats an earlier row")
        seen.add((row.provider, row.prefix))
        rows.append(row)
    return rows


@functools.lru_cache(maxsize=1)
def default_cache_rules() -> CacheRulesTable:
    """The bundled table, loaded and validated once."""
    return CacheRulesTable.load()


@functools.lru_cache(maxsize=1024)
def cache_rules(provider: str, model: str) -> CacheRules:
    """The bundled rules for ``model`` of ``provider`` (cached); :class:`UnknownProviderError` if none."""
    return default_cache_rules().lookup(provider, model)

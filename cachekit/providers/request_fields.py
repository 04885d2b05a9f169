"""The request fields each endpoint takes, from the data file ``request_fields.json``.

For each endpoint (a :data:`~cachekit._types.Dialect`, plus ``openai_responses_compact`` for
``POST /v1/responses/compact``): the top-level fields the official SDKs type, those they type only
in their beta namespace (Anthropic: taken only with an ``anthropic-beta`` header, a given one for some
fields), the fields the API takes that the SDKs do not type (each with where that is documented),
and the ``type`` tags of its items (Responses input items, Messages content blocks).

``tests/local/test_request_fields.py`` walks the installed SDKs' request types and fails when they
type a field or an item type the file does not list, so a new SDK field is added here on purpose.
The local backend refuses the rest as the providers do (:mod:`cachekit.local.parse`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from types import MappingProxyType

import orjson

__all__ = ["EndpointFields", "endpoint_fields"]


@dataclass(frozen=True)
class EndpointFields:
    """What one endpoint takes (see the module docstring)."""

    fields: tuple[str, ...]
    beta_fields: tuple[str, ...] = ()
    extensions: Mapping[str, str] = field(default_factory=dict)
    beta_headers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    item_types: tuple[str, ...] = ()
    beta_item_types: tuple[str, ...] = ()
    beta_item_headers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def unknown_field(self, names: Iterable[str], betas: frozenset[str]) -> str | None:
        """The first of ``names`` the endpoint does not take with these ``anthropic-beta`` values."""
        for name in names:
            if name in self.fields or name in self.extensions:
                continue
            if name in self.beta_fields and _enabled(self.beta_headers.get(name), betas):
                continue
            return name
        return None

    def knows_item(self, kind: str, betas: frozenset[str]) -> bool:
        """Whether an item of type ``kind`` is taken with these ``anthropic-beta`` values."""
        if kind in self.item_types:
            return True
        return kind in self.beta_item_types and _enabled(self.beta_item_headers.get(kind), betas)

    def items_taken(self, betas: frozenset[str]) -> tuple[str, ...]:
        """The item types taken with these ``anthropic-beta`` values, in the SDK's order."""
        return self.item_types + tuple(
            kind for kind in self.beta_item_types if _enabled(self.beta_item_headers.get(kind), betas)
        )


def _enabled(needed: tuple[str, ...] | None, betas: frozenset[str]) -> bool:
    # No header named for it: any beta request may carry it (cachekit does not know which one).
    return bool(betas) and (needed is None or not betas.isdisjoint(needed))


@functools.lru_cache(maxsize=1)
def _table() -> Mapping[str, EndpointFields]:
    raw = orjson.loads(resources.files("cachekit.providers").joinpath("request_fields.json").read_bytes())
    table: dict[str, EndpointFields] = {}
    for name, entry in raw["dialects"].items():
        table[name] = EndpointFields(
            fields=tuple(entry.get("fields", ())),
            beta_fields=tuple(entry.get("beta_fields", ())),
            extensions=MappingProxyType(dict(entry.get("extensions", {}))),
            beta_headers=MappingProxyType(
                {key: tuple(value) for key, value in entry.get("beta_headers", {}).items()}
            ),
            item_types=tuple(entry.get("item_types", ())),
            beta_item_types=tuple(entry.get("beta_item_types", ())),
            beta_item_headers=MappingProxyType(
                {key: tuple(value) for key, value in entry.get("beta_item_headers", {}).items()}
            ),
        )
    return MappingProxyType(table)


def endpoint_fields(endpoint: str) -> EndpointFields:
    """What ``endpoint`` takes (a dialect, or ``openai_responses_compact``); :class:`KeyError` if unknown."""
    return _table()[endpoint]

"""The query string of a store URL, checked once for every scheme."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import parse_qs

from cachekit.errors import ConfigError

__all__ = ["query_params"]


def query_params(query: str, allowed: Sequence[str], *, scheme: str, shown: str) -> dict[str, str]:
    """``query`` as ``{name: value}``: every name known to ``scheme``, each given once.

    ``shown`` is how errors name the URL (already free of credentials).
    """
    try:
        parsed = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError as exc:
        raise ConfigError(f"{shown!r} has a malformed query string") from exc
    unknown = sorted(set(parsed) - set(allowed))
    if unknown:
        raise ConfigError(
            f"{scheme}:// does not take the parameter(s) {', '.join(unknown)}; it takes {', '.join(allowed)}"
        )
    params: dict[str, str] = {}
    for name, values in parsed.items():
        if len(values) != 1:
            raise ConfigError(f"{scheme}:// parameter {name} is given {len(values)} times; give it once")
        params[name] = values[0]
    return params

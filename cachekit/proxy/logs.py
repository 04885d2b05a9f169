"""Structured log lines: one JSON object per record, with the fields the proxy attaches.

The proxy's request lines carry only what :mod:`cachekit.proxy.app` puts in ``extra={"fields": ...}``
(API, status, cache outcome, timings, bytes): never a header value, a body, a query string or a key.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

__all__ = ["JSONFormatter"]


class JSONFormatter(logging.Formatter):
    """``{"time", "level", "logger", "message", ...fields}`` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one JSON line."""
        line: dict[str, Any] = {
            "time": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update(fields)
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()

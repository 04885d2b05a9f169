"""Where cachekit keeps its files (a leaf module: the configuration and the ledger both need it)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cachekit_home"]


def cachekit_home() -> Path:
    """The folder cachekit keeps files in: ``$CACHEKIT_HOME``, else ``~/.cache/cachekit``."""
    configured = os.environ.get("CACHEKIT_HOME")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "cachekit"

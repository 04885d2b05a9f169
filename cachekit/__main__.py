"""``python -m cachekit``: the same as the ``cachekit`` command."""

from __future__ import annotations

import sys

from cachekit.cli import main

sys.exit(main())

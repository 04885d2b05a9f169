"""The local backend's compaction items: opaque to clients, readable by the backend that made them.

A provider's compaction item (Responses ``compaction``, Messages ``compaction`` block) carries the
summarized context as encrypted content that only that provider reads. The local backend's carries
what its engines need of the context it stands for: how many answers it summarized, so a script's
turn index (:attr:`cachekit.local.engine.Prompt.answer_index`) keeps counting across a compaction.
The content is base64 of a version tag, a tag over the tenant's salt (another API key's item is
foreign) and a small JSON document; anything else is a foreign item, accepted as context that
summarized nothing the backend can count.
"""

from __future__ import annotations

import base64
import binascii
import hashlib

import orjson

__all__ = ["open_item", "seal"]

_DOMAIN = b"cachekit.local.compaction.v1\x00"
_MAGIC = b"ckc1"
_TAG = 16


def _tag(salt: bytes, body: bytes) -> bytes:
    return hashlib.sha256(_DOMAIN + len(salt).to_bytes(2, "big") + salt + body).digest()[:_TAG]


def seal(salt: bytes, answers: int) -> str:
    """The encrypted content of a compaction that summarized ``answers`` answers, for tenant ``salt``."""
    body = orjson.dumps({"answers": answers})
    return base64.b64encode(_MAGIC + _tag(salt, body) + body).decode()


def open_item(salt: bytes, content: object) -> int | None:
    """How many answers a compaction item of tenant ``salt`` summarized; ``None`` for a foreign one."""
    if not isinstance(content, str):
        return None
    try:
        raw = base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError):
        return None
    if not raw.startswith(_MAGIC) or len(raw) < len(_MAGIC) + _TAG:
        return None
    tag, body = raw[len(_MAGIC) : len(_MAGIC) + _TAG], raw[len(_MAGIC) + _TAG :]
    if tag != _tag(salt, body):
        return None
    try:
        answers = orjson.loads(body).get("answers")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return answers if isinstance(answers, int) and not isinstance(answers, bool) and answers >= 0 else None

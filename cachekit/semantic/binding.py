"""Index entries bound to their partition: a write to the vector index cannot re-point a question.

A semantic hit serves the exact-store entry that an index entry names. The index lives where the store
does (a Redis that others may write to), so its entries are not trusted as they are read back:

* each entry carries a MAC (HMAC-SHA256 under the store's secret, domain-separated and versioned) over
  its semantic partition, the key of the answer it points at and the digest of its question text;
  without the secret nobody can make an entry that verifies, nor move one to another partition,
  another answer or another question;
* the answer's key must lie in the requester's own exact partition (exact keys carry their namespace
  and partition in the clear, :func:`cachekit.stores.keys.store_key`): even someone who read the secret
  cannot serve one tenant's answer to another, and with encryption at rest the answer under that key
  is the genuine one (its ciphertext is bound to its key).

An entry that fails a check is a counted miss (:class:`~cachekit.semantic.layer.SemanticStats`
``unverified``, by reason): ``foreign`` (the answer lies outside the requester's partition),
``forged`` (the MAC does not verify) or ``unsigned`` (no MAC: written by a cachekit from before
binding; never served, it expires with its answer).
"""

from __future__ import annotations

import hashlib
import hmac

from cachekit.semantic.base import Candidate
from cachekit.stores.keys import digest_fields

__all__ = ["EntryBinding"]

_DOMAIN = b"cachekit/semantic-entry/v1"
#: Written before every MAC, so a later format can be told apart (an unknown version never verifies).
_VERSION = "v1:"


class EntryBinding:
    """Seals and checks the index entries one requester may be served.

    Args:
        secret: the store's secret (the MAC key, under this module's own domain).
        owner: what the key of every answer the requester may be served starts with: the exact key's
            kind, namespace and partition (:func:`cachekit.stores.keys.key_prefix`).
    """

    __slots__ = ("_secret", "owner")

    def __init__(self, secret: bytes, owner: str) -> None:
        self._secret = secret
        self.owner = owner

    def seal(self, partition: str, entry_key: str, question: str) -> str:
        """The MAC of an index entry: ``v1:`` and 64 hex digits."""
        question_digest = hashlib.sha256(question.encode("utf-8", "surrogatepass")).digest()
        fields = (partition.encode(), entry_key.encode("utf-8", "surrogatepass"), question_digest)
        return _VERSION + digest_fields(fields, domain=_DOMAIN, secret=self._secret)

    def check(self, partition: str, candidate: Candidate) -> str | None:
        """``None`` when ``candidate`` (found in ``partition``) may be served; else why not:
        ``foreign``, ``unsigned`` or ``forged`` (see the module docstring)."""
        if not self._owns(candidate.entry_key):
            return "foreign"
        if not candidate.mac:
            return "unsigned"
        expected = self.seal(partition, candidate.entry_key, candidate.text)
        if not hmac.compare_digest(candidate.mac.encode("utf-8", "surrogatepass"), expected.encode()):
            return "forged"
        return None

    def _owns(self, entry_key: str) -> bool:
        """Whether ``entry_key`` is a key of the owner's partition: its prefix, then one digest."""
        digest = entry_key[len(self.owner) :]
        return entry_key.startswith(self.owner) and bool(digest) and ":" not in digest

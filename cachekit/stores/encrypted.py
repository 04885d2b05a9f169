"""Encryption at rest: a store wrapper that seals every value with AES-256-GCM.

**The threat.** A shared store — Redis above all, but also a SQLite file on a shared disk or in a
backup — holds complete provider responses: model output that may quote prompts, documents and
personal data. Anyone who can read the store (an exposed Redis port, a leaked password, a replica,
an RDB/AOF dump or a copied file) reads every cached answer; anyone who can write to it can plant an
answer that cachekit would serve as a cache hit. :class:`EncryptedStore` wraps any store so that what
it holds is unreadable and unforgeable without the encryption key:

* each value is encrypted with AES-256-GCM under a fresh random 96-bit nonce;
* the associated data binds the ciphertext to its **cache key** (and to the key id), so a valid entry
  copied under another cache key — poisoning by someone with write access — fails authentication;
* whatever fails to open (a wrong or unknown key, a tampered, truncated or plaintext value) is a
  **miss**: logged as a warning without key material or value bytes, counted in
  :attr:`~EncryptedStore.rejected`, and overwritten by the fresh answer. Plaintext of an
  unauthenticated value is never returned.

**Key rotation.** Keys are named by short key ids. New writes use the *current* key; every configured
key decrypts, so entries written under an older key keep hitting until they expire. To rotate: add a
new key as current and keep the old one; once the old entries have expired (or been purged), drop it
— the entries still under it then become misses. With random nonces, encrypt fewer than about 2**32
values under one key (NIST SP 800-38D); rotate well before that.

**Configuration.** The keys are read from the environment variable ``CACHEKIT_ENCRYPTION_KEYS`` as a
comma-separated list ``key_id:base64key`` (standard or URL-safe base64 of 32 random bytes, padding
optional), the current key first::

    CACHEKIT_ENCRYPTION_KEYS="k2:<base64 of 32 bytes>,k1:<base64 of 32 bytes>"

:func:`keys_from_spec` parses that format and :func:`generate_key` makes a new key.

**What it does not protect.** Cache keys are already keyed hashes (HMACs of the request under the
store's secret), so they are stored as they are: they reveal the namespace and partition in their
readable prefix but nothing about the request, and they do stay visible. So do the metadata the
store keeps: value sizes (ciphertext length is the plaintext
length plus a fixed overhead), creation and expiry times, the number of entries and access patterns.
The store's ``secret`` is passed through unchanged, and it does not protect against anyone who holds
the encryption key or controls the process that uses it. Deleting or evicting entries (denial of
service) is not prevented either; it only causes misses.

Stored format::

    b"CKE1" | key-id length (1 byte) | key id (ASCII) | nonce (12 bytes) | ciphertext + GCM tag (16 bytes)

    associated data = b"CKE1" | key-id length | key id | cache key (UTF-8)

``cryptography`` is the optional extra ``encryption`` (``pip install 'cachekit-llm[encryption]'``); it
is imported only when an :class:`EncryptedStore` is created.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Protocol, cast, overload

from cachekit import _fork
from cachekit._closing import AsyncClosing, Closing
from cachekit.errors import ConfigError, MissingExtraError
from cachekit.stores.base import (
    AsyncStore,
    EntryInfo,
    Inspectable,
    Store,
    is_async_store,
    is_inspectable,
    is_store,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = [
    "ENV_VAR",
    "EncryptedAsyncStore",
    "EncryptedDualStore",
    "EncryptedStore",
    "EncryptedSyncStore",
    "generate_key",
    "keys_from_spec",
]

_log = logging.getLogger("cachekit.stores")

#: The environment variable that holds the encryption keys (see :func:`keys_from_spec`).
ENV_VAR = "CACHEKIT_ENCRYPTION_KEYS"

_MAGIC = b"CKE1"
_KEY_SIZE = 32
_NONCE_SIZE = 12
_TAG_SIZE = 16
_KEY_ID = re.compile(r"[A-Za-z0-9_.-]{1,32}")
# A base64 text of 32 bytes, standard or URL-safe alphabet, with or without padding.
_B64 = re.compile(r"[A-Za-z0-9+/_-]{43}={0,1}")


def generate_key() -> str:
    """Return a new random 32-byte key as standard base64, for a ``key_id:base64key`` spec entry."""
    return base64.b64encode(os.urandom(_KEY_SIZE)).decode("ascii")


def keys_from_spec(spec: str) -> dict[str, bytes]:
    """Parse ``"kid1:<base64>,kid2:<base64>"`` (the format of ``CACHEKIT_ENCRYPTION_KEYS``).

    Entries are separated by commas (whitespace around them is ignored); each is a key id
    (``[A-Za-z0-9_.-]``, 1 to 32 characters), a colon, and the standard or URL-safe base64 of exactly
    32 bytes (padding optional). The result keeps the spec's order, so the first entry is the current
    key of an :class:`EncryptedStore` built from it unless ``current=`` says otherwise.

    Raises:
        ConfigError: an empty spec or entry, a bad or repeated key id, or a key that is not the
            base64 of 32 bytes. The message never contains key material.
    """
    if not isinstance(spec, str):
        raise ConfigError(f"{ENV_VAR} must be a string, not {type(spec).__name__}")
    if not spec.strip():
        raise ConfigError(f"{ENV_VAR} is empty; expected 'key_id:base64key[,key_id:base64key...]'")
    keys: dict[str, bytes] = {}
    for number, entry in enumerate(spec.split(","), start=1):
        kid, sep, encoded = entry.strip().partition(":")
        # The entry may be a bare key (the id forgotten): never echo it.
        if not sep:
            raise ConfigError(f"entry {number} of {ENV_VAR} is not of the form 'key_id:base64key'")
        kid, encoded = kid.strip(), encoded.strip()
        if not _KEY_ID.fullmatch(kid):
            raise ConfigError(
                f"entry {number} of {ENV_VAR}: the key id must be 1 to 32 characters of "
                "A-Z a-z 0-9 _ . - (the part before the colon)"
            )
        if kid in keys:
            raise ConfigError(f"{ENV_VAR} names the key id {kid!r} twice")
        keys[kid] = _decode_key(encoded, kid)
    return keys


def _decode_key(encoded: str, kid: str) -> bytes:
    problem = f"the key {kid!r} in {ENV_VAR} is not the base64 of 32 bytes (make one with generate_key())"
    if not _B64.fullmatch(encoded):
        raise ConfigError(problem)
    standard = encoded.rstrip("=").replace("-", "+").replace("_", "/")
    try:
        key = base64.b64decode(standard + "=", validate=True)
    except binascii.Error:
        raise ConfigError(problem) from None
    if len(key) != _KEY_SIZE:  # pragma: no cover - 43 base64 characters are always 32 bytes
        raise ConfigError(problem)
    return key


def _crypto() -> tuple[type[AESGCM], type[Exception]]:
    """Import ``cryptography`` lazily: the AES-GCM class and the exception of a failed tag check."""
    try:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        raise MissingExtraError("cryptography", "encryption", "EncryptedStore (encryption at rest)") from None
    return AESGCM, InvalidTag


class _DualStore(Store, AsyncStore, Protocol):
    """A store that implements both :class:`Store` and :class:`AsyncStore` (the Redis store)."""


def _pick_class(inner: object) -> type[EncryptedStore]:
    # Judged without reading attributes: isinstance() on these Protocols would read ``secret``, a
    # round trip for a Redis store (and a failure when Redis is down while the client is built).
    sync, asynchronous, inspectable = is_store(inner), is_async_store(inner), is_inspectable(inner)
    if sync and asynchronous:
        return _InspectableDualStore if inspectable else EncryptedDualStore
    if sync:
        return _InspectableSyncStore if inspectable else EncryptedSyncStore
    if asynchronous:
        return _InspectableAsyncStore if inspectable else EncryptedAsyncStore
    raise TypeError(
        f"EncryptedStore wraps a Store or an AsyncStore; {type(inner).__name__} implements neither"
    )


class EncryptedStore:
    """Wrap ``inner`` so that every value is stored encrypted and authenticated (AES-256-GCM).

    Args:
        inner: the store that holds the ciphertext: a :class:`~cachekit.stores.base.Store`, an
            :class:`~cachekit.stores.base.AsyncStore`, or both.
        keys: key id → 32-byte key. Every key decrypts; see :func:`keys_from_spec` for the
            ``CACHEKIT_ENCRYPTION_KEYS`` format and :func:`generate_key` to make one.
        current: the key id that encrypts new writes; by default the first one in ``keys``.

    ``EncryptedStore(...)`` returns the subclass that exposes exactly the protocols ``inner`` has:
    :class:`EncryptedSyncStore` (``get``/``set``/``delete``/``clear``/``close``),
    :class:`EncryptedAsyncStore` (``aget``/``aset``/``adelete``/``aclose``) or
    :class:`EncryptedDualStore` (both), each also passing through the
    :class:`~cachekit.stores.base.Inspectable` operator calls when ``inner`` has them (entries then
    report the encrypted size). ``isinstance`` checks against the protocols answer as for ``inner``.

    A value that cannot be opened is a miss (``None``), logged and counted in :attr:`rejected`; errors
    of the inner store (:class:`~cachekit.errors.StoreError`) propagate unchanged.

    Raises:
        ConfigError: no keys, a key that is not 32 bytes, a bad key id, or an unknown ``current``.
            Messages never contain key material.
        MissingExtraError: ``cryptography`` is not installed (extra ``encryption``).
        TypeError: ``inner`` is not a store.
    """

    # __weakref__: the fork registry holds its counter's lock weakly (cachekit._fork).
    __slots__ = (
        "__weakref__",
        "_ciphers",
        "_counter_lock",
        "_current",
        "_inner",
        "_invalid_tag",
        "_rejected",
    )
    _inner: Store | AsyncStore
    #: key id -> its AES-GCM cipher; the raw keys themselves are not kept.
    _ciphers: dict[str, AESGCM]
    _current: str
    _invalid_tag: type[Exception]
    _counter_lock: threading.Lock
    _rejected: int

    @overload
    def __new__(
        cls, inner: _DualStore, keys: Mapping[str, bytes], *, current: str | None = None
    ) -> EncryptedDualStore: ...

    @overload
    def __new__(
        cls, inner: Store, keys: Mapping[str, bytes], *, current: str | None = None
    ) -> EncryptedSyncStore: ...

    @overload
    def __new__(
        cls, inner: AsyncStore, keys: Mapping[str, bytes], *, current: str | None = None
    ) -> EncryptedAsyncStore: ...

    def __new__(
        cls, inner: Store | AsyncStore, keys: Mapping[str, bytes], *, current: str | None = None
    ) -> EncryptedStore:
        chosen = _pick_class(inner)
        if not issubclass(chosen, cls):
            raise TypeError(f"{cls.__name__} cannot wrap {type(inner).__name__}; use EncryptedStore(...)")
        key_ids = _check_keys(keys)
        if current is None:
            current = key_ids[0]
        elif not isinstance(current, str) or current not in keys:
            raise ConfigError(
                f"the current encryption key id {current!r} is not one of the configured key ids "
                f"{', '.join(key_ids)}"
            )
        aesgcm, invalid_tag = _crypto()
        # Everything is set up here rather than in __init__: mypy then types EncryptedStore(...) by
        # the overloads above (the subclass that matches the inner store).
        self = object.__new__(chosen)
        self._inner = inner
        self._ciphers = {kid: aesgcm(bytes(keys[kid])) for kid in key_ids}
        self._current = current
        self._invalid_tag = invalid_tag
        self._counter_lock = _fork.lock(self)
        self._rejected = 0
        return self

    @staticmethod
    def keys_from_spec(spec: str) -> dict[str, bytes]:
        """Parse a ``CACHEKIT_ENCRYPTION_KEYS`` value; see the module function :func:`keys_from_spec`."""
        return keys_from_spec(spec)

    @property
    def inner(self) -> Store | AsyncStore:
        """The wrapped store (it holds only ciphertext)."""
        return self._inner

    @property
    def secret(self) -> bytes:
        """The inner store's secret, unchanged (cache keys stay the same with or without encryption)."""
        return self._inner.secret

    @property
    def current_key_id(self) -> str:
        """The key id that encrypts new writes."""
        return self._current

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Every key id that decrypts, in the order given."""
        return tuple(self._ciphers)

    @property
    def rejected(self) -> int:
        """How many stored values were refused (unknown key, failed authentication, not encrypted,
        truncated) and answered as misses."""
        with self._counter_lock:
            return self._rejected

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self._inner!r}, key_ids={list(self._ciphers)!r}, "
            f"current={self._current!r})"
        )

    # -- the one sealing/opening mechanism, shared by the sync and async paths ------------------------

    def _seal(self, key: str, value: bytes) -> bytes:
        kid = self._current.encode("ascii")
        prefix = _MAGIC + bytes((len(kid),)) + kid
        nonce = os.urandom(_NONCE_SIZE)
        sealed = self._ciphers[self._current].encrypt(nonce, bytes(value), prefix + _key_bytes(key))
        return prefix + nonce + sealed

    def _open(self, key: str, stored: bytes | None) -> bytes | None:
        if stored is None:
            return None
        stored = bytes(stored)
        if not stored.startswith(_MAGIC):
            self._reject(key, "it is not encrypted (no CKE1 header)")
            return None
        start = len(_MAGIC) + 1
        if len(stored) < start:
            self._reject(key, "it is truncated")
            return None
        kid_end = start + stored[len(_MAGIC)]
        if len(stored) < kid_end + _NONCE_SIZE + _TAG_SIZE:
            self._reject(key, "it is truncated")
            return None
        raw_kid = stored[start:kid_end]
        kid = raw_kid.decode("ascii", "replace")
        cipher = self._ciphers.get(kid) if raw_kid.isascii() else None
        if cipher is None:
            # Key ids are not secret; the stored one may be anything, so it is shown escaped.
            self._reject(key, f"it was written with the key id {kid[:32]!r}, which is not configured")
            return None
        nonce = stored[kid_end : kid_end + _NONCE_SIZE]
        try:
            return cipher.decrypt(nonce, stored[kid_end + _NONCE_SIZE :], stored[:kid_end] + _key_bytes(key))
        except self._invalid_tag:
            self._reject(key, "it failed authentication (altered, moved from another key, or a wrong key)")
            return None

    def _reject(self, key: str, reason: str) -> None:
        with self._counter_lock:
            self._rejected += 1
        _log.warning("encrypted cache entry %s is ignored and will be overwritten: %s", key[-16:], reason)


def _key_bytes(key: str) -> bytes:
    # surrogatepass: any str is a valid cache key for the inner stores, so it must not fail here.
    return key.encode("utf-8", "surrogatepass")


def _check_keys(keys: object) -> list[str]:
    """Validate the ``keys`` argument; return its key ids. Messages never show key material."""
    if not isinstance(keys, Mapping):
        raise ConfigError(
            "EncryptedStore keys must be a mapping of key id to 32 raw bytes; "
            "parse a 'key_id:base64key' spec with keys_from_spec()"
        )
    if not keys:
        raise ConfigError("EncryptedStore needs at least one encryption key")
    key_ids = list(keys)
    for kid in key_ids:
        if not isinstance(kid, str) or not _KEY_ID.fullmatch(kid):
            shown = repr(kid) if isinstance(kid, str) and len(kid) <= 64 else f"of type {type(kid).__name__}"
            raise ConfigError(
                f"encryption key id {shown} is invalid: use 1 to 32 characters of A-Z a-z 0-9 _ . -"
            )
        key = keys[kid]
        if not isinstance(key, (bytes, bytearray, memoryview)):
            raise ConfigError(
                f"the encryption key {kid!r} must be 32 raw bytes, not {type(key).__name__} "
                "(parse base64 with keys_from_spec())"
            )
        if len(bytes(key)) != _KEY_SIZE:
            raise ConfigError(f"the encryption key {kid!r} must be exactly 32 bytes (AES-256)")
    return key_ids


class EncryptedSyncStore(EncryptedStore, Closing):
    """An :class:`EncryptedStore` over a synchronous :class:`~cachekit.stores.base.Store`."""

    __slots__ = ()
    _inner: Store

    def get(self, key: str) -> bytes | None:
        """Decrypt and return the value under ``key``; ``None`` when absent or when it cannot be opened."""
        return self._open(key, self._inner.get(key))

    def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        """Encrypt ``value`` with the current key, bound to ``key``, and store it."""
        self._inner.set(key, self._seal(key, value), ttl=ttl)

    def delete(self, key: str) -> None:
        """Remove ``key`` from the inner store."""
        self._inner.delete(key)

    def clear(self) -> None:
        """Clear the inner store."""
        self._inner.clear()

    def close(self) -> None:
        """Close the inner store."""
        self._inner.close()


class EncryptedAsyncStore(EncryptedStore, AsyncClosing):
    """An :class:`EncryptedStore` over an :class:`~cachekit.stores.base.AsyncStore`."""

    __slots__ = ()
    _inner: AsyncStore

    async def aget(self, key: str) -> bytes | None:
        """See :meth:`EncryptedSyncStore.get`."""
        return self._open(key, await self._inner.aget(key))

    async def aset(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        """See :meth:`EncryptedSyncStore.set`."""
        await self._inner.aset(key, self._seal(key, value), ttl=ttl)

    async def adelete(self, key: str) -> None:
        """Remove ``key`` from the inner store."""
        await self._inner.adelete(key)

    async def aclose(self) -> None:
        """Close the inner store."""
        await self._inner.aclose()


class EncryptedDualStore(EncryptedSyncStore, EncryptedAsyncStore):
    """An :class:`EncryptedStore` over a store that is both sync and async (the Redis store)."""

    __slots__ = ()
    _inner: _DualStore


class _InspectablePassThrough(EncryptedStore):
    """The :class:`~cachekit.stores.base.Inspectable` calls, passed to the inner store."""

    __slots__ = ()

    def entries(self, prefix: str = "") -> Iterator[EntryInfo]:
        """The inner store's entries; ``size`` is that of the stored (encrypted) value."""
        return cast(Inspectable, self._inner).entries(prefix)

    def delete_many(self, keys: Iterable[str]) -> int:
        """Delete ``keys`` from the inner store; return how many existed."""
        return cast(Inspectable, self._inner).delete_many(keys)

    def ping(self) -> None:
        """Probe the inner store."""
        cast(Inspectable, self._inner).ping()


class _InspectableSyncStore(_InspectablePassThrough, EncryptedSyncStore):
    __slots__ = ()


class _InspectableAsyncStore(_InspectablePassThrough, EncryptedAsyncStore):
    __slots__ = ()


class _InspectableDualStore(_InspectablePassThrough, EncryptedDualStore):
    __slots__ = ()

"""EncryptedStore: AES-256-GCM at rest over any store, with key rotation, tamper and move detection."""

from __future__ import annotations

import asyncio
import base64
import importlib
import logging
import math
import sys
import threading
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import given, settings
from hypothesis import strategies as st

import cachekit
import cachekit.stores
from cachekit.errors import ConfigError, MissingExtraError, StoreError
from cachekit.stores.base import AsyncStore, EntryInfo, Inspectable, Store
from cachekit.stores.encrypted import (
    ENV_VAR,
    EncryptedAsyncStore,
    EncryptedDualStore,
    EncryptedStore,
    EncryptedSyncStore,
    generate_key,
    keys_from_spec,
)
from cachekit.stores.memory import MemoryStore
from cachekit.stores.record import CachedResponse, encode
from cachekit.stores.redis import RedisStore
from cachekit.stores.sqlite import SQLiteStore
from cachekit.testing import FakeUpstream
from tests.redis_servers import RedisServer, free_port, redis7_server
from tests.requests import CHAT_URL, chat_question

K1 = bytes(range(32))
K2 = bytes(range(100, 132))
K3 = bytes(range(200, 232))
#: ``CacheConfig(encryption_keys=...)`` with one fresh key.
KEY_SPEC = "k1:" + generate_key()
PLAINTEXT = b'{"content":"the secret answer is forty-two","model":"claude"}'
#: The session's Redis 7, imported as a fixture (named here so linters see it used).
SERVER_FIXTURES = (redis7_server,)
KEY_A = "ck:v1:" + "a" * 64
KEY_B = "ck:v1:" + "b" * 64


def _encodings(material: bytes) -> list[str]:
    """The ways a key or a value could leak into a log line."""
    return [
        repr(material),
        material.hex(),
        base64.b64encode(material).decode(),
        base64.urlsafe_b64encode(material).decode(),
        base64.b64encode(material).decode().rstrip("="),
        material.decode("latin-1"),
    ]


def _assert_no_material(text: str, *materials: bytes) -> None:
    for material in materials:
        for form in _encodings(material):
            assert form not in text, f"key material or value bytes leaked: {form[:12]}..."


# -- in-test stores ---------------------------------------------------------------------------------


class AsyncMemoryStore:
    """A tiny async-only store (implements AsyncStore and nothing of Store)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.ttls: dict[str, float | None] = {}
        self.closed = False
        self._secret = b"s" * 32

    @property
    def secret(self) -> bytes:
        return self._secret

    async def aget(self, key: str) -> bytes | None:
        await asyncio.sleep(0)
        return self.data.get(key)

    async def aset(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        await asyncio.sleep(0)
        self.data[key] = value
        self.ttls[key] = ttl

    async def adelete(self, key: str) -> None:
        self.data.pop(key, None)

    async def aclose(self) -> None:
        self.closed = True


class PlainStore:
    """A sync store with nothing beyond the Store protocol (MemoryStore also has the operator calls)."""

    def __init__(self) -> None:
        self._inner = MemoryStore()

    @property
    def secret(self) -> bytes:
        return self._inner.secret

    def get(self, key: str) -> bytes | None:
        return self._inner.get(key)

    def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        self._inner.set(key, value, ttl=ttl)

    def delete(self, key: str) -> None:
        self._inner.delete(key)

    def clear(self) -> None:
        self._inner.clear()

    def close(self) -> None:
        self._inner.close()


class AsyncFacade:
    """The AsyncStore methods over a sync store's own (mixed into a sync store class)."""

    async def aget(self: Any, key: str) -> bytes | None:
        return self.get(key)

    async def aset(self: Any, key: str, value: bytes, *, ttl: float | None = None) -> None:
        self.set(key, value, ttl=ttl)

    async def adelete(self: Any, key: str) -> None:
        self.delete(key)

    async def aclose(self: Any) -> None:
        self.close()


class PlainDualStore(PlainStore, AsyncFacade):
    """Both store protocols and nothing else."""


class DualMemoryStore(MemoryStore, AsyncFacade):
    """Both protocols over one dict, like the Redis store."""


class InspectableMemoryStore(MemoryStore):
    """A memory store with the operator calls."""

    pinged = 0

    def entries(self, prefix: str = "") -> Iterator[EntryInfo]:
        for key, (value, expires_at) in list(self._entries.items()):
            if key.startswith(prefix):
                yield EntryInfo(key, len(value), None, expires_at)

    def delete_many(self, keys: Iterable[str]) -> int:
        found = 0
        for key in keys:
            if self.get(key) is not None:
                found += 1
                self.delete(key)
        return found

    def ping(self) -> None:
        self.pinged += 1


class InspectableAsyncStore(AsyncMemoryStore):
    def entries(self, prefix: str = "") -> Iterator[EntryInfo]:
        for key, value in self.data.items():
            if key.startswith(prefix):
                yield EntryInfo(key, len(value), None, None)

    def delete_many(self, keys: Iterable[str]) -> int:
        return sum(self.data.pop(k, None) is not None for k in keys)

    def ping(self) -> None:
        pass


class InspectableDualStore(DualMemoryStore, InspectableMemoryStore):
    pass


@pytest.fixture(params=["memory", "sqlite"])
def inner(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryStore | SQLiteStore]:
    store: MemoryStore | SQLiteStore
    store = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "c.db")
    yield store
    store.close()


# -- round trip and what the inner store holds ------------------------------------------------------


def test_round_trip_and_no_plaintext_in_inner(inner: MemoryStore | SQLiteStore) -> None:
    enc = EncryptedStore(inner, {"k1": K1})
    assert isinstance(enc, EncryptedSyncStore)
    enc.set(KEY_A, PLAINTEXT)
    assert enc.get(KEY_A) == PLAINTEXT
    assert enc.get(KEY_B) is None
    raw = inner.get(KEY_A)
    assert raw is not None
    assert raw.startswith(b"CKE1\x02k1")
    assert len(raw) == 4 + 1 + 2 + 12 + len(PLAINTEXT) + 16
    for fragment in (PLAINTEXT, b"secret answer", b"forty-two"):
        assert fragment not in raw
    assert enc.rejected == 0


def test_sqlite_file_holds_no_plaintext(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    with EncryptedStore(SQLiteStore(path), {"k1": K1}) as enc:
        for i in range(20):
            enc.set(f"{KEY_A}{i}", PLAINTEXT + str(i).encode())
        assert enc.get(f"{KEY_A}7") == PLAINTEXT + b"7"
    on_disk = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert b"ck:v1:aaaa" in on_disk  # the search does see the file's contents
    assert b"forty-two" not in on_disk


def test_empty_value_round_trips(inner: MemoryStore | SQLiteStore) -> None:
    enc = EncryptedStore(inner, {"k1": K1})
    enc.set(KEY_A, b"")
    assert enc.get(KEY_A) == b""


def test_nonces_are_fresh(inner: MemoryStore | SQLiteStore) -> None:
    enc = EncryptedStore(inner, {"k1": K1})
    enc.set(KEY_A, PLAINTEXT)
    first = inner.get(KEY_A)
    enc.set(KEY_A, PLAINTEXT)
    second = inner.get(KEY_A)
    assert first is not None
    assert second is not None
    assert first[7:19] != second[7:19]
    assert first != second


def test_stored_format_is_the_documented_one() -> None:
    inner = MemoryStore()
    EncryptedStore(inner, {"key.2": K2}).set(KEY_A, PLAINTEXT)
    raw = inner.get(KEY_A)
    assert raw is not None
    assert raw[:4] == b"CKE1"
    kid_len = raw[4]
    assert raw[5 : 5 + kid_len] == b"key.2"
    nonce, sealed = raw[5 + kid_len : 17 + kid_len], raw[17 + kid_len :]
    aad = b"CKE1" + bytes([kid_len]) + b"key.2" + KEY_A.encode()
    assert AESGCM(K2).decrypt(nonce, sealed, aad) == PLAINTEXT


def test_ttl_delete_clear_close_and_secret_pass_through() -> None:
    now = [1000.0]
    inner = MemoryStore(clock=lambda: now[0])
    enc = EncryptedStore(inner, {"k1": K1})
    assert enc.secret == inner.secret
    enc.set(KEY_A, PLAINTEXT, ttl=10)
    enc.set(KEY_B, PLAINTEXT)
    now[0] += 11
    assert enc.get(KEY_A) is None
    assert inner.get(KEY_A) is None
    assert enc.get(KEY_B) == PLAINTEXT
    enc.delete(KEY_B)
    assert inner.get(KEY_B) is None
    enc.set(KEY_B, PLAINTEXT)
    enc.clear()
    assert len(inner) == 0
    enc.close()
    with pytest.raises(StoreError):
        inner.get(KEY_A)
    assert enc.rejected == 0  # expiry and absence are plain misses, not rejections


@pytest.mark.parametrize("kind", ["memory", "sqlite", "redis7"])
def test_ttls_at_the_edges_mean_what_they_mean_to_the_inner_store(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """0, negative, fractional, NaN, infinite and huge TTLs through encryption, on each kind of store."""
    now = [1000.0]
    inner: MemoryStore | SQLiteStore | RedisStore
    if kind == "memory":
        inner = MemoryStore(clock=lambda: now[0])
    elif kind == "sqlite":
        inner = SQLiteStore(tmp_path / "c.db", clock=lambda: now[0])
    else:
        server = request.getfixturevalue("redis7_server")
        inner = RedisStore(server.url, prefix=f"enc-{uuid.uuid4().hex}:", clock=lambda: now[0], timeout=5.0)
    with EncryptedStore(inner, {"k1": K1}) as enc:
        for ttl in (0, -1, -math.inf):
            enc.set(KEY_A, PLAINTEXT)
            enc.set(KEY_A, PLAINTEXT, ttl=ttl)
            assert enc.get(KEY_A) is None  # nothing stored, the earlier value gone
        enc.set(KEY_A, PLAINTEXT)
        with pytest.raises(ValueError, match="NaN"):
            enc.set(KEY_A, b"other", ttl=math.nan)
        assert enc.get(KEY_A) == PLAINTEXT
        for ttl in (math.inf, 1e308):
            enc.set(KEY_B, PLAINTEXT, ttl=ttl)
            assert enc.get(KEY_B) == PLAINTEXT
            (entry,) = [e for e in inner.entries() if e.key == KEY_B]
            if ttl == math.inf:
                assert entry.expires_at is None
            else:
                assert entry.expires_at is not None
                assert entry.expires_at > now[0] + 1e11
        enc.set(KEY_B, PLAINTEXT, ttl=0.5)
        (entry,) = [e for e in inner.entries() if e.key == KEY_B]
        assert entry.expires_at is not None
        assert now[0] < entry.expires_at <= now[0] + 0.5


def test_inner_store_errors_propagate() -> None:
    inner = MemoryStore()
    enc = EncryptedStore(inner, {"k1": K1})
    inner.close()
    with pytest.raises(StoreError, match="closed"):
        enc.get(KEY_A)
    with pytest.raises(StoreError, match="closed"):
        enc.set(KEY_A, PLAINTEXT)
    assert enc.rejected == 0


def test_repr_and_properties_show_no_key_material() -> None:
    inner = MemoryStore()
    enc = EncryptedStore(inner, {"k1": K1, "k2": K2}, current="k2")
    assert enc.inner is inner
    assert enc.key_ids == ("k1", "k2")
    assert enc.current_key_id == "k2"
    assert "k1" in repr(enc)
    assert "'k2'" in repr(enc)
    _assert_no_material(repr(enc), K1, K2)
    assert EncryptedStore(inner, {"k1": K1, "k2": K2}).current_key_id == "k1"


def test_an_encrypted_redis_store_that_is_down_does_not_stop_the_client() -> None:
    """Building a client makes no store round trip, encrypted wrapper included: a Redis that is down
    makes calls bypasses, never errors (found in review: it failed before its fix)."""
    url = f"redis://127.0.0.1:{free_port()}/0"
    cache = cachekit.Cache(cachekit.CacheConfig(store=url, encryption_keys=KEY_SPEC, ledger=False))
    with httpx2.Client(transport=cachekit.CachingTransport(FakeUpstream(), cache=cache)) as client:
        response = client.post(CHAT_URL, json=chat_question("q"))
    assert response.status_code == 200
    assert response.headers["x-cachekit-cache"] == "bypass"
    cache.close()


def test_encryption_over_a_real_redis_store(redis7_server: RedisServer) -> None:
    """The encrypted wrapper over a real Redis: hits, and neither question nor answer in what Redis
    holds (found in review)."""
    store = RedisStore(redis7_server.url, prefix="enc-regress:")
    try:
        config = cachekit.CacheConfig(store=store, encryption_keys=KEY_SPEC, ledger=False)
        with httpx2.Client(transport=cachekit.CachingTransport(FakeUpstream(), cache=config)) as client:
            first = client.post(CHAT_URL, json=chat_question("secret question"))
            second = client.post(CHAT_URL, json=chat_question("secret question"))
        assert [first.headers["x-cachekit-cache"], second.headers["x-cachekit-cache"]] == ["miss", "hit"]
        [entry] = list(store.entries(""))
        raw = store.get(entry.key)
        assert raw is not None
        assert raw.startswith(b"CKE1")
        assert b"secret question" not in raw
        assert b"Fake reply" not in raw
    finally:
        store.clear()
        store.close()


# -- keys: wrong key, rotation -----------------------------------------------------------------------


def test_wrong_key_is_a_miss_not_an_error(inner: MemoryStore | SQLiteStore) -> None:
    EncryptedStore(inner, {"k1": K1}).set(KEY_A, PLAINTEXT)
    same_id_other_key = EncryptedStore(inner, {"k1": K2})
    assert same_id_other_key.get(KEY_A) is None
    assert same_id_other_key.rejected == 1
    other_id = EncryptedStore(inner, {"k2": K1})
    assert other_id.get(KEY_A) is None
    assert other_id.rejected == 1
    # The miss is overwritten by the fresh answer, which the new key then reads.
    same_id_other_key.set(KEY_A, b"fresh")
    assert same_id_other_key.get(KEY_A) == b"fresh"


def test_rotation(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    with EncryptedStore(SQLiteStore(path), {"kid1": K1}) as old:
        old.set(KEY_A, b"old answer")
    with EncryptedStore(SQLiteStore(path), {"kid2": K2, "kid1": K1}) as rotated:
        assert rotated.current_key_id == "kid2"
        assert rotated.get(KEY_A) == b"old answer"
        rotated.set(KEY_B, b"new answer")
        raw = rotated.inner
        assert isinstance(raw, SQLiteStore)
        stored_b = raw.get(KEY_B)
        assert stored_b is not None
        assert stored_b.startswith(b"CKE1\x04kid2")
        assert rotated.rejected == 0
    with EncryptedStore(SQLiteStore(path), {"kid2": K2}) as new_only:
        assert new_only.get(KEY_B) == b"new answer"
        assert new_only.get(KEY_A) is None
        assert new_only.rejected == 1
    # Rotation with an explicit current among several keys.
    with EncryptedStore(SQLiteStore(path), {"kid1": K1, "kid2": K2}, current="kid2") as both:
        assert both.get(KEY_A) == b"old answer"
        assert both.get(KEY_B) == b"new answer"


# -- forged, moved, tampered, truncated values ------------------------------------------------------


def test_value_moved_to_another_key_is_a_miss(inner: MemoryStore | SQLiteStore) -> None:
    enc = EncryptedStore(inner, {"k1": K1})
    enc.set(KEY_A, PLAINTEXT)
    enc.set(KEY_B, b"the answer to B")
    stolen = inner.get(KEY_A)
    assert stolen is not None
    inner.set(KEY_B, stolen)  # cache poisoning by someone with write access to the store
    assert enc.get(KEY_B) is None
    assert enc.rejected == 1
    assert enc.get(KEY_A) == PLAINTEXT  # the original is untouched


def test_every_tampered_byte_is_a_miss() -> None:
    inner = MemoryStore()
    enc = EncryptedStore(inner, {"k1": K1, "k3": K3})
    enc.set(KEY_A, PLAINTEXT)
    good = inner.get(KEY_A)
    assert good is not None
    attempts = 0
    for position in range(len(good)):
        for mask in (0x01, 0x02, 0x80, 0xFF):
            bad = bytearray(good)
            bad[position] ^= mask
            inner.set(KEY_A, bytes(bad))
            assert enc.get(KEY_A) is None, (position, mask)
            attempts += 1
    assert enc.rejected == attempts
    inner.set(KEY_A, good)
    assert enc.get(KEY_A) == PLAINTEXT


def test_truncated_values_are_misses() -> None:
    inner = MemoryStore()
    enc = EncryptedStore(inner, {"k1": K1})
    enc.set(KEY_A, PLAINTEXT)
    good = inner.get(KEY_A)
    assert good is not None
    for length in range(len(good)):
        inner.set(KEY_A, good[:length])
        assert enc.get(KEY_A) is None, length
    inner.set(KEY_A, good + b"\x00")
    assert enc.get(KEY_A) is None
    assert enc.rejected == len(good) + 1


@pytest.mark.parametrize(
    "foreign",
    [
        PLAINTEXT,
        b"",
        b"CKE",
        b"CKE1",
        b"CKE1\x00",
        b"CKE1\x02k1",
        b"CKE1\x02k1" + bytes(27),
        b"CKE1\x00" + bytes(40),
        b"CKE1\xffk1" + bytes(60),
        b"CKE1\x02\xff\xfe" + bytes(40),
        encode(CachedResponse(200, (("content-type", "application/json"),), PLAINTEXT, 1.0)),
    ],
    ids=lambda v: repr(v[:12]),
)
def test_plaintext_and_foreign_values_are_misses(foreign: bytes) -> None:
    inner = MemoryStore()
    enc = EncryptedStore(inner, {"k1": K1})
    inner.set(KEY_A, foreign)
    assert enc.get(KEY_A) is None
    assert enc.rejected == 1


def test_rejection_log_has_no_key_material(caplog: pytest.LogCaptureFixture) -> None:
    inner = MemoryStore()
    writer = EncryptedStore(inner, {"k1": K1})
    reader = EncryptedStore(inner, {"k1": K2, "k3": K3})
    writer.set(KEY_A, PLAINTEXT)
    stored = inner.get(KEY_A)
    assert stored is not None
    inner.set(KEY_B, PLAINTEXT)
    inner.set("hostile", b"CKE1\x05\n\x1b[0m" + bytes(40))
    with caplog.at_level(logging.WARNING, logger="cachekit.stores"):
        assert reader.get(KEY_A) is None  # authentication
        assert reader.get(KEY_B) is None  # plaintext
        assert writer.get("hostile") is None  # unknown, hostile key id
    records = [r for r in caplog.records if r.name == "cachekit.stores"]
    assert [r.levelno for r in records] == [logging.WARNING] * 3
    messages = [r.getMessage() for r in records]
    assert "authentication" in messages[0]
    assert KEY_A[-16:] in messages[0]
    assert "not encrypted" in messages[1]
    assert "not configured" in messages[2]
    assert "\n" not in messages[2]
    assert "\x1b" not in messages[2]
    _assert_no_material("\n".join(messages) + caplog.text, K1, K2, K3, PLAINTEXT, stored, stored[7:])


def test_rejection_counter_counts_every_thread() -> None:
    inner = MemoryStore()
    enc = EncryptedStore(inner, {"k1": K1})
    inner.set(KEY_A, b"not encrypted")
    logging.getLogger("cachekit.stores").disabled = True
    try:
        threads = [threading.Thread(target=lambda: [enc.get(KEY_A) for _ in range(300)]) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        logging.getLogger("cachekit.stores").disabled = False
    assert enc.rejected == 8 * 300


# -- protocols: sync, async, both, inspectable -------------------------------------------------------


def test_protocol_exposure_matches_the_inner_store() -> None:
    sync = EncryptedStore(PlainStore(), {"k1": K1})
    assert type(sync) is EncryptedSyncStore
    assert isinstance(sync, Store)
    assert not isinstance(sync, AsyncStore)
    assert not isinstance(sync, Inspectable)
    assert not hasattr(sync, "aget")

    asynchronous = EncryptedStore(AsyncMemoryStore(), {"k1": K1})
    assert type(asynchronous) is EncryptedAsyncStore
    assert isinstance(asynchronous, AsyncStore)
    assert not isinstance(asynchronous, Store)
    assert not isinstance(asynchronous, Inspectable)
    assert not hasattr(asynchronous, "get")

    dual = EncryptedStore(PlainDualStore(), {"k1": K1})
    assert type(dual) is EncryptedDualStore
    assert isinstance(dual, Store)
    assert isinstance(dual, AsyncStore)
    assert not isinstance(dual, Inspectable)

    for inner in (InspectableMemoryStore(), InspectableAsyncStore(), InspectableDualStore()):
        wrapped = EncryptedStore(inner, {"k1": K1})
        assert isinstance(wrapped, Inspectable)
        assert isinstance(wrapped, Store) == isinstance(inner, Store)
        assert isinstance(wrapped, AsyncStore) == isinstance(inner, AsyncStore)


def test_wrong_inner_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="neither"):
        EncryptedStore(object(), {"k1": K1})  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="cannot wrap"):
        EncryptedSyncStore(AsyncMemoryStore(), {"k1": K1})
    # A subclass given a store it can wrap (or a richer one) works.
    assert type(EncryptedSyncStore(PlainDualStore(), {"k1": K1})) is EncryptedDualStore


def test_async_round_trip_and_checks() -> None:
    inner = AsyncMemoryStore()
    enc = EncryptedStore(inner, {"k1": K1})
    assert enc.secret == inner.secret

    async def run() -> None:
        await enc.aset(KEY_A, PLAINTEXT, ttl=30)
        assert inner.ttls[KEY_A] == 30
        assert PLAINTEXT not in inner.data[KEY_A]
        assert await enc.aget(KEY_A) == PLAINTEXT
        assert await enc.aget(KEY_B) is None
        inner.data[KEY_B] = inner.data[KEY_A]  # moved
        assert await enc.aget(KEY_B) is None
        inner.data[KEY_B] = PLAINTEXT  # plaintext
        assert await enc.aget(KEY_B) is None
        await enc.adelete(KEY_A)
        assert KEY_A not in inner.data
        async with enc:
            pass
        assert inner.closed

    asyncio.run(run())
    assert enc.rejected == 2


def test_dual_store_sync_and_async_paths_share_one_format() -> None:
    inner = DualMemoryStore()
    enc = EncryptedStore(inner, {"k1": K1})

    async def run() -> None:
        enc.set(KEY_A, b"written sync")
        await enc.aset(KEY_B, b"written async")
        assert await enc.aget(KEY_A) == b"written sync"
        assert enc.get(KEY_B) == b"written async"
        await enc.aclose()

    asyncio.run(run())
    with pytest.raises(StoreError):
        enc.get(KEY_A)


def test_inspectable_pass_through_reports_encrypted_sizes() -> None:
    inner = InspectableMemoryStore()
    enc = EncryptedStore(inner, {"k1": K1})
    enc.set(KEY_A, PLAINTEXT)
    enc.set(KEY_B, b"x")
    enc.set("other", b"y")
    assert isinstance(enc, Inspectable)  # passed through from the inner store
    entries = {e.key: e for e in enc.entries("ck:")}
    assert set(entries) == {KEY_A, KEY_B}
    assert entries[KEY_A].size == 4 + 1 + 2 + 12 + len(PLAINTEXT) + 16
    enc.ping()
    assert inner.pinged == 1
    assert enc.delete_many([KEY_A, "missing"]) == 1
    assert enc.get(KEY_A) is None
    assert enc.get(KEY_B) == b"x"


# -- configuration -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("keys", "current", "match"),
    [
        ({}, None, "at least one"),
        ({"k1": K1[:31]}, None, "exactly 32 bytes"),
        ({"k1": K1 + b"!"}, None, "exactly 32 bytes"),
        ({"k1": K1, "k2": b""}, None, "'k2' must be exactly 32 bytes"),
        ({"k1": base64.b64encode(K1).decode()}, None, "raw bytes"),
        ({"": K1}, None, "key id"),
        ({"a b": K1}, None, "key id"),
        ({"k:1": K1}, None, "key id"),
        ({"x" * 33: K1}, None, "key id"),
        ({"clé": K1}, None, "key id"),
        ({1: K1}, None, "key id"),
        ({"k1": K1}, "k2", "current encryption key id 'k2'"),
        (base64.b64encode(K1).decode(), None, "keys_from_spec"),
        ([("k1", K1)], None, "mapping"),
    ],
)
def test_bad_configuration(keys: object, current: str | None, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        EncryptedStore(MemoryStore(), keys, current=current)  # type: ignore[call-overload]
    _assert_no_material(str(info.value), K1, K1[:31], K1 + b"!")


def test_generate_key_and_spec_round_trip() -> None:
    a, b = generate_key(), generate_key()
    assert a != b
    assert len(base64.b64decode(a, validate=True)) == 32
    spec = f" new:{a} ,\told.1:{base64.urlsafe_b64encode(K1).decode().rstrip('=')}\n"
    keys = keys_from_spec(spec)
    assert list(keys) == ["new", "old.1"]
    assert keys["new"] == base64.b64decode(a)
    assert keys["old.1"] == K1
    assert EncryptedStore.keys_from_spec(spec) == keys
    enc = EncryptedStore(MemoryStore(), keys)
    assert enc.current_key_id == "new"
    enc.set(KEY_A, PLAINTEXT)
    assert enc.get(KEY_A) == PLAINTEXT
    assert ENV_VAR == "CACHEKIT_ENCRYPTION_KEYS"
    assert ENV_VAR in (sys.modules[EncryptedStore.__module__].__doc__ or "")


K1_B64 = base64.b64encode(K1).decode()
K1_URL = base64.urlsafe_b64encode(bytes(range(224, 256))).decode()


def test_spec_accepts_both_alphabets() -> None:
    assert keys_from_spec(f"a:{K1_B64}") == {"a": K1}
    assert keys_from_spec(f"a:{K1_B64.rstrip('=')}") == {"a": K1}
    assert "-" in K1_URL or "_" in K1_URL
    assert keys_from_spec(f"a:{K1_URL}") == {"a": bytes(range(224, 256))}


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("", "empty"),
        ("  \n", "empty"),
        (",", "entry 1"),
        (f"a:{K1_B64},", "entry 2"),
        (f"a:{K1_B64},,b:{K1_B64}", "entry 2"),
        (K1_B64, "entry 1 .* not of the form"),
        (f"a:{K1_B64[:-4]}", "not the base64 of 32 bytes"),
        (f"a:{base64.b64encode(K1 + b'!').decode()}", "not the base64 of 32 bytes"),
        (f"a:{K1_B64[:-2]}!=", "not the base64 of 32 bytes"),
        (f"a:{K1_B64[:10]} {K1_B64[10:]}", "not the base64 of 32 bytes"),
        (f"a:{K1_B64}==", "not the base64 of 32 bytes"),
        (f"a b:{K1_B64}", "entry 1 of .*: the key id"),
        (f":{K1_B64}", "entry 1 of .*: the key id"),
        (f"{'x' * 33}:{K1_B64}", "entry 1 of .*: the key id"),
        (f"a:{K1_B64},a:{K1_B64}", "twice"),
    ],
)
def test_bad_specs(spec: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        keys_from_spec(spec)
    message = str(info.value)
    assert ENV_VAR in message
    _assert_no_material(message, K1, K1 + b"!")
    assert K1_B64[:12] not in message


def test_spec_must_be_a_string() -> None:
    with pytest.raises(ConfigError, match="string"):
        keys_from_spec(K1)  # type: ignore[arg-type]


# -- the optional extra ------------------------------------------------------------------------------


def test_missing_cryptography_raises_missing_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "cryptography" or m.startswith("cryptography.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "cryptography", None)
    # The module itself imports without cryptography (it is imported lazily).
    monkeypatch.setattr(cachekit.stores, "encrypted", sys.modules["cachekit.stores.encrypted"], raising=False)
    monkeypatch.delitem(sys.modules, "cachekit.stores.encrypted")
    fresh = importlib.import_module("cachekit.stores.encrypted")
    assert fresh.keys_from_spec(f"a:{K1_B64}") == {"a": K1}
    assert len(base64.b64decode(fresh.generate_key())) == 32
    with pytest.raises(MissingExtraError) as info:
        fresh.EncryptedStore(MemoryStore(), {"k1": K1})
    assert info.value.extra == "encryption"
    assert info.value.package == "cryptography"
    assert "pip install 'cachekit-llm[encryption]'" in str(info.value)
    assert isinstance(info.value, ImportError)
    _assert_no_material(str(info.value), K1)


# -- properties --------------------------------------------------------------------------------------

_KIDS = st.from_regex(r"[A-Za-z0-9_.-]{1,32}", fullmatch=True)


@settings(max_examples=150, deadline=None)
@given(
    kid=_KIDS,
    key=st.binary(min_size=32, max_size=32),
    cache_key=st.text(max_size=80),
    value=st.binary(max_size=300),
    data=st.data(),
)
def test_property_round_trip_and_bit_flips(
    kid: str, key: bytes, cache_key: str, value: bytes, data: st.DataObject
) -> None:
    inner = MemoryStore()
    enc = EncryptedStore(inner, {kid: key})
    enc.set(cache_key, value)
    assert enc.get(cache_key) == value
    stored = inner.get(cache_key)
    assert stored is not None
    assert len(stored) == 4 + 1 + len(kid) + 12 + len(value) + 16
    if len(value) >= 8:
        assert value not in stored
    bits = data.draw(st.lists(st.integers(0, len(stored) * 8 - 1), min_size=1, max_size=8, unique=True))
    logger = logging.getLogger("cachekit.stores")
    logger.disabled = True
    try:
        for bit in bits:
            flipped = bytearray(stored)
            flipped[bit // 8] ^= 1 << (bit % 8)
            inner.set(cache_key, bytes(flipped))
            assert enc.get(cache_key) is None, bit
    finally:
        logger.disabled = False
    assert enc.rejected == len(bits)
    inner.set(cache_key, stored)
    assert enc.get(cache_key) == value

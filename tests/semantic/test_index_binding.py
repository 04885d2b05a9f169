"""Semantic index entries are bound to their partition: write access to the index cannot re-point them.

A semantic hit serves the exact-store entry its index entry names. The index is as writable as the
store (Redis), so each entry carries a MAC under the store's secret over (semantic partition, entry
key, question), and the entry key must lie in the requester's exact partition. An entry that fails
either check is a counted miss, logged without prompt text; an entry written without a MAC (by an
older cachekit) is a miss too.

The attacks run on a real Redis 8 (exact store and vector index, encryption at rest on, as
docs/security.md describes), through the real ``openai`` SDK, sync and async; the attacker is a raw
Redis client rewriting vector-set attributes.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import numpy as np
import orjson
import pytest
import redis

import cachekit
from cachekit.semantic import Candidate, SemanticConfig
from cachekit.semantic.base import VectorIndex
from cachekit.semantic.binding import EntryBinding
from cachekit.semantic.index_memory import MemoryVectorIndex
from cachekit.semantic.index_redis import RedisVectorIndex
from cachekit.stores.keys import EXACT_KIND, key_prefix
from tests.conftest import Harness
from tests.redis_servers import RedisServer, escape_glob, redis8_server

pytestmark = pytest.mark.slow

#: The session's Redis 8 server, imported as a fixture (named here so linters see it used).
SERVER_FIXTURES = (redis8_server,)

QUESTION = "How do I reset my account password?"
PARAPHRASE = "How can I reset the password of my account?"
PARAPHRASE_2 = "How could I reset my account's password?"
OTHER = "What are your support opening hours?"
ENCRYPTION_KEYS = {"k1": bytes(range(32))}


def chat(question: str) -> dict[str, Any]:
    return {
        "model": "gpt-4.1-mini",
        "temperature": 0,
        "messages": [
            {"role": "system", "content": "You are the help desk of Example Corp."},
            {"role": "user", "content": question},
        ],
    }


class Shared:
    """One Redis 8 holding the exact store and the vector index of every client, and a raw client on it
    playing someone with write access to that Redis."""

    def __init__(self, harness: Harness, server: RedisServer) -> None:
        self.harness = harness
        self.prefix = f"bind-{uuid.uuid4().hex[:8]}:"
        # Generous socket timeouts: the machine running the tests may be busy; speed is not tested here.
        self.url = f"{server.url}?prefix={self.prefix}&timeout=5"
        self.raw = redis.Redis.from_url(server.url)

    def sdk(self, api_key: str) -> Any:
        config = cachekit.CacheConfig(
            store=self.url,
            ledger=False,
            encryption_keys=ENCRYPTION_KEYS,
            semantic=SemanticConfig(index=self.url, timeout=60),
        )
        return self.harness.sdk("openai", api_key=api_key, cache=config)

    def vector_sets(self) -> set[bytes]:
        return set(self.raw.scan_iter(match=escape_glob(self.prefix) + "{sem:*}:vs"))

    def entries(self, vector_set: bytes) -> dict[str, tuple[Any, dict[str, Any]]]:
        """The set's entries by question text: (element, attributes)."""
        found = {}
        for element in self.raw.zrange(vector_set[: -len(b":vs")] + b":ord", 0, -1):
            attributes = orjson.loads(self.raw.execute_command("VGETATTR", vector_set, element))
            found[attributes["t"]] = (element, attributes)
        return found

    def rewrite(self, vector_set: bytes, element: bytes, attributes: dict[str, Any]) -> None:
        self.raw.execute_command("VSETATTR", vector_set, element, orjson.dumps(attributes))

    def close(self) -> None:
        for key in self.raw.scan_iter(match=escape_glob(self.prefix) + "*"):
            self.raw.unlink(key)
        self.raw.close()


@pytest.fixture
def shared(harness: Harness, redis8_server: RedisServer) -> Any:
    world = Shared(harness, redis8_server)
    yield world
    world.close()


def ask(sdk: Any, question: str) -> tuple[str, str]:
    """How the cache served ``question``, and the id of the answer (new for every upstream call)."""
    raw = sdk.call("chat.completions.with_raw_response.create", **chat(question))
    return raw.headers["x-cachekit-cache"], sdk.run(raw.parse()).id


def unverified(sdk: Any) -> dict[str, int]:
    layer = cachekit.cache_of(sdk.client).pipeline.semantic
    assert layer is not None
    return dict(layer.stats.unverified)


def ask_after_attack(
    sdk: Any, question: str, planted: str, caplog: pytest.LogCaptureFixture
) -> tuple[str, list[str]]:
    """Ask ``question`` once the index was tampered with: it must be a miss, not the ``planted``
    answer. Returns the fresh answer's id and the semantic layer's warnings (checked for prompts)."""
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="cachekit"):
        outcome, answer = ask(sdk, question)
    assert answer != planted
    assert outcome == "miss"
    records = [r for r in caplog.records if r.name.startswith("cachekit")]
    for record in records:  # never the prompts
        message = record.getMessage()
        assert not any(q in message for q in (QUESTION, PARAPHRASE, PARAPHRASE_2, OTHER)), message
    return answer, [r.getMessage() for r in records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("copied", ["all attributes", "entry key only"])
def test_a_vector_pointed_at_another_tenants_entry_is_a_miss(
    shared: Shared, copied: str, caplog: pytest.LogCaptureFixture
) -> None:
    tenant_a, tenant_b = shared.sdk("sk-tenant-a"), shared.sdk("sk-tenant-b")
    outcome, a_answer = ask(tenant_a, QUESTION)
    assert outcome == "miss"
    [a_set] = shared.vector_sets()
    outcome, b_answer = ask(tenant_b, QUESTION)
    assert outcome == "miss"
    [b_set] = shared.vector_sets() - {a_set}
    assert ask(tenant_b, PARAPHRASE) == ("semantic", b_answer)  # a genuine hit works

    # Someone with write access points B's vector at A's (valid, encrypted) entry.
    [(_, a_attributes)] = shared.entries(a_set).values()
    [(b_element, b_attributes)] = shared.entries(b_set).values()
    forged = a_attributes if copied == "all attributes" else {**b_attributes, "k": a_attributes["k"]}
    shared.rewrite(b_set, b_element, forged)
    _, warned = ask_after_attack(tenant_b, PARAPHRASE_2, a_answer, caplog)
    assert unverified(tenant_b) == {"foreign": 1}
    assert any("outside" in m for m in warned)
    # A's own entry is untouched and still serves A.
    assert ask(tenant_a, PARAPHRASE) == ("semantic", a_answer)


@pytest.mark.parametrize("mac", ["another entry's", "made up", "absent"])
def test_a_vector_pointed_at_another_answer_of_its_partition_is_a_miss(
    shared: Shared, mac: str, caplog: pytest.LogCaptureFixture
) -> None:
    tenant = shared.sdk("sk-tenant-b")
    assert ask(tenant, QUESTION)[0] == "miss"
    outcome, other_answer = ask(tenant, OTHER)
    assert outcome == "miss"
    [vector_set] = shared.vector_sets()  # one partition: only the last question differs
    entries = shared.entries(vector_set)
    element, attributes = entries[QUESTION]
    # The question's vector and text now lead to the answer of another question of the same tenant.
    forged = {"k": entries[OTHER][1]["k"], "t": QUESTION}
    if mac == "another entry's":
        forged["m"] = attributes["m"]  # genuine, but over the question's own entry key
    elif mac == "made up":
        forged["m"] = "v1:" + "0" * 64
    shared.rewrite(vector_set, element, forged)
    answer, warned = ask_after_attack(tenant, PARAPHRASE, other_answer, caplog)
    assert unverified(tenant) == {"unsigned" if mac == "absent" else "forged": 1}
    # An entry of an older cachekit is expected after an upgrade: logged, but not as a warning.
    assert bool(warned) is (mac != "absent")
    # The answer fetched just now was indexed with a valid MAC: its paraphrase is a genuine hit.
    assert ask(tenant, PARAPHRASE_2) == ("semantic", answer)


# -- the binding itself ----------------------------------------------------------------------------

SECRET = b"s" * 32
OWNER = key_prefix(EXACT_KIND, "default", "cred:0123")
ENTRY = OWNER + "ab" * 32


def test_the_mac_covers_partition_entry_and_question() -> None:
    binding = EntryBinding(SECRET, OWNER)
    mac = binding.seal("sem1:p", ENTRY, QUESTION)
    assert mac.startswith("v1:")
    assert binding.check("sem1:p", Candidate(ENTRY, 0.9, QUESTION, mac)) is None
    changed = [
        ("sem1:q", Candidate(ENTRY, 0.9, QUESTION, mac)),  # another semantic partition
        ("sem1:p", Candidate(OWNER + "cd" * 32, 0.9, QUESTION, mac)),  # another entry of the owner
        ("sem1:p", Candidate(ENTRY, 0.9, PARAPHRASE, mac)),  # another question text
        ("sem1:p", Candidate(ENTRY, 0.9, QUESTION, "v2:" + mac[3:])),  # an unknown version
    ]
    assert [binding.check(p, c) for p, c in changed] == ["forged", "forged", "forged", "forged"]
    other_secret = EntryBinding(b"t" * 32, OWNER)
    assert other_secret.check("sem1:p", Candidate(ENTRY, 0.9, QUESTION, mac)) == "forged"
    assert binding.check("sem1:p", Candidate(ENTRY, 0.9, QUESTION)) == "unsigned"


@pytest.mark.parametrize(
    "entry_key",
    [
        key_prefix(EXACT_KIND, "default", "cred:4567") + "ab" * 32,  # another credential
        key_prefix(EXACT_KIND, "other", "cred:0123") + "ab" * 32,  # another namespace
        key_prefix("ckm2", "default", "cred:0123") + "ab" * 32,  # a memo entry
        OWNER + "ab" * 32 + ":x",  # not a key cachekit writes
        "ck3:default:cred%3A0123",
        "",
    ],
)
def test_an_entry_key_outside_the_owner_is_foreign_even_with_a_valid_mac(entry_key: str) -> None:
    binding = EntryBinding(SECRET, OWNER)
    mac = binding.seal("sem1:p", entry_key, QUESTION)  # e.g. someone who read the store's secret
    assert binding.check("sem1:p", Candidate(entry_key, 0.9, QUESTION, mac)) == "foreign"


def test_both_indexes_keep_the_mac(redis8_server: RedisServer) -> None:
    vector = np.ones(8, dtype=np.float32) / np.sqrt(8)
    prefix = f"bind-{uuid.uuid4().hex[:8]}:"
    redis_index = RedisVectorIndex(redis8_server.url, prefix=prefix, timeout=5)
    indexes: list[VectorIndex] = [MemoryVectorIndex(), redis_index]
    try:
        for index in indexes:
            index.add("sem1:p", ENTRY, vector, QUESTION, ttl=60, mac="v1:abc")
            index.add("sem1:p", OWNER + "cd" * 32, vector, OTHER, ttl=60)
            found = {c.entry_key: c.mac for c in index.search("sem1:p", vector, k=4, min_similarity=0.5)}
            assert found == {ENTRY: "v1:abc", OWNER + "cd" * 32: ""}, index
    finally:
        redis_index.clear()
        for index in indexes:
            index.close()

"""Cache lifetimes chosen before the gap (issue 19): learned per tenant and model, kept in the store.

Real parts: the ``anthropic`` SDK (sync and async) through cachekit to the local backend, whose
accounting bills prompts by Anthropic's caching rules on a manual clock shared with cachekit; real
SQLite files and a real Redis 7 server hold the timing statistics between "processes" (a new
:class:`~cachekit.cache.Cache` on the same store: a new pipeline, planner and memory).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import pytest

from cachekit.cache import Cache
from cachekit.config import CacheConfig
from cachekit.errors import ConfigError, StoreUnavailableError
from cachekit.local import ByteTokenizer, LocalBackend, LocalTransport, ManualClock, ScriptedEngine
from cachekit.stores.base import Store
from cachekit.stores.memory import MemoryStore
from cachekit.stores.redis import RedisStore
from cachekit.stores.sqlite import SQLiteStore
from tests.conftest import sdk_client
from tests.redis_servers import RedisServer, redis7_server

#: The session's Redis 7 server, imported as a fixture (named here so linters see it used).
SERVER_FIXTURES = (redis7_server,)

MODEL = "claude-sonnet-4-5"
SYSTEM = " ".join(f"Clause {i}: refunds need a booking id and the traveller's name." for i in range(120))
SIX_MINUTES = 360.0
TWO_MINUTES = 120.0


@dataclass
class Provider:
    """The upstream every process talks to: one backend (its prompt cache) and one clock."""

    clock: ManualClock
    backend: LocalBackend


@pytest.fixture
def provider() -> Iterator[Provider]:
    clock = ManualClock(1_000.0)
    backend = LocalBackend(ScriptedEngine(ByteTokenizer()), rules="anthropic", clock=clock)
    yield Provider(clock, backend)
    backend.close()


@pytest.fixture(params=["memory", "sqlite", "redis7"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Store]]:
    """Opens the same store again for each new process: one memory store object, one SQLite file, or
    one Redis key prefix on the session's Redis 7 server."""
    opened: list[Store] = []
    shared = MemoryStore()
    prefix = f"ttl-{uuid.uuid4().hex}:"

    def open_one() -> Store:
        store: Store
        if request.param == "memory":
            store = shared
        elif request.param == "sqlite":
            store = SQLiteStore(tmp_path / "cache.sqlite3")
        else:
            server: RedisServer = request.getfixturevalue("redis7_server")
            store = RedisStore(server.url, prefix=prefix, timeout=5.0)
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        store.close()


def _client(provider: Provider, store: Store | None = None, *, api_key: str = "key-a", **config: Any) -> Any:
    """A new process: a new cache (pipeline, planner, memory) on ``store``, talking to ``provider``."""
    cache = Cache(
        CacheConfig(
            store=MemoryStore() if store is None else store,
            ledger=False,
            lint="off",
            price_as="anthropic",
            **config,
        ),
        clock=provider.clock,
    )
    return sdk_client(
        "anthropic",
        transport=LocalTransport(provider.backend),
        api_key=api_key,
        base_url="http://provider.invalid",
        cache=cache,
    )


def _messages(conversation: str, turns: int) -> list[dict[str, Any]]:
    """The messages of a conversation's request number ``turns`` (1-based)."""
    messages: list[dict[str, Any]] = []
    for turn in range(turns):
        if turn:
            messages.append({"role": "assistant", "content": f"Answer {turn} in {conversation}."})
        messages.append(
            {"role": "user", "content": f"Question {turn + 1} of {conversation}: can I move my flight?"}
        )
    return messages


@dataclass
class Sent:
    breakpoints: str
    written_1h: int
    written_5m: int
    read: int


def _send(client: Any, messages: list[dict[str, Any]], **extra: Any) -> Sent:
    raw = client.messages.with_raw_response.create(
        model=MODEL, max_tokens=16, system=SYSTEM, messages=messages, **extra
    )
    usage = raw.parse().usage
    created = usage.cache_creation
    return Sent(
        raw.headers["x-cachekit-breakpoints"],
        created.ephemeral_1h_input_tokens if created else 0,
        created.ephemeral_5m_input_tokens if created else 0,
        usage.cache_read_input_tokens or 0,
    )


def _conversations(client: Any, provider: Provider, names: list[str], turns: int, pause: float) -> list[Sent]:
    sent = []
    for name in names:
        for turn in range(1, turns + 1):
            provider.clock.advance(pause)
            sent.append(_send(client, _messages(name, turn)))
    return sent


def test_six_minute_pauses_get_1h_writes_from_the_first_turn_in_a_new_process(
    provider: Provider, open_store: Callable[[], Store]
) -> None:
    first = _client(provider, open_store())
    _conversations(first, provider, ["alpha", "beta"], turns=4, pause=SIX_MINUTES)
    first.close()

    provider.clock.advance(SIX_MINUTES)
    second = _client(provider, open_store())  # a new process on the same store
    opening = _send(second, _messages("gamma", 1))
    second.close()
    assert "=1h/conversation" in opening.breakpoints
    assert opening.written_1h > 0
    assert opening.written_5m == 0
    provider.clock.advance(SIX_MINUTES)
    third = _client(provider, open_store())
    follow_up = _send(third, _messages("gamma", 2))  # six minutes later: the 1h entry is read
    third.close()
    assert follow_up.read >= opening.written_1h


def test_the_statistics_are_the_tenants_own(provider: Provider, open_store: Callable[[], Store]) -> None:
    first = _client(provider, open_store())
    _conversations(first, provider, ["alpha", "beta"], turns=4, pause=SIX_MINUTES)
    first.close()
    other = _client(provider, open_store(), api_key="key-b")  # another credential: another partition
    opening = _send(other, _messages("gamma", 1))
    other.close()
    assert "=1h" not in opening.breakpoints
    assert opening.written_1h == 0


def test_async_clients_learn_and_read_the_same_statistics(provider: Provider) -> None:
    store = MemoryStore()

    async def run() -> str:
        results = []
        for process in range(2):
            client = sdk_client(
                "anthropic",
                "async",
                transport=LocalTransport(provider.backend),
                api_key="key-a",
                base_url="http://provider.invalid",
                cache=Cache(
                    CacheConfig(store=store, ledger=False, lint="off", price_as="anthropic"),
                    clock=provider.clock,
                ),
            )
            names = ["alpha", "beta"] if process == 0 else ["gamma"]
            turns = 4 if process == 0 else 1
            for name, turn in itertools.product(names, range(1, turns + 1)):
                provider.clock.advance(SIX_MINUTES)
                raw = await client.messages.with_raw_response.create(
                    model=MODEL, max_tokens=16, system=SYSTEM, messages=_messages(name, turn)
                )
                results.append(raw.headers["x-cachekit-breakpoints"])
            await client.close()
        return results[-1]

    assert "=1h/conversation" in asyncio.run(run())


def test_a_system_prompt_read_within_five_minutes_is_never_written_for_an_hour(provider: Provider) -> None:
    client = _client(provider)
    # One-question conversations every two minutes share the system prompt; one six-minute pause.
    sent = _conversations(client, provider, [f"q{i}" for i in range(6)], turns=1, pause=TWO_MINUTES)
    sent += _conversations(client, provider, ["after-lunch"], turns=1, pause=SIX_MINUTES)
    sent += _conversations(client, provider, [f"r{i}" for i in range(3)], turns=1, pause=TWO_MINUTES)
    client.close()
    assert all("system=5m" in s.breakpoints for s in sent)
    assert all(s.written_1h == 0 for s in sent)
    assert sum(s.read for s in sent[1:]) > 0  # the 5-minute entry served them


@pytest.mark.parametrize("ttl", ["5m", "1h"])
def test_a_fixed_lifetime_is_honoured(provider: Provider, ttl: str) -> None:
    client = _client(provider, breakpoints=ttl)
    sent = _conversations(client, provider, ["alpha"], turns=3, pause=SIX_MINUTES)
    client.close()
    for s in sent:
        lifetimes = {part.split("=")[1].split("/")[0] for part in s.breakpoints.split(", ")}
        assert lifetimes == {ttl}
        assert (s.written_1h > 0) == (ttl == "1h") or s.written_1h == s.written_5m == 0
        assert s.written_5m == 0 if ttl == "1h" else s.written_1h == 0


def test_a_fixed_lifetime_per_request_overrides_the_learned_one(provider: Provider) -> None:
    client = _client(provider)
    _conversations(client, provider, ["alpha", "beta"], turns=4, pause=SIX_MINUTES)
    provider.clock.advance(SIX_MINUTES)
    sent = _send(client, _messages("gamma", 1), extra_headers={"x-cachekit-breakpoints": "5m"})
    client.close()
    assert "1h" not in sent.breakpoints
    assert sent.written_1h == 0


@pytest.mark.parametrize(("gap", "expected"), [(SIX_MINUTES, "1h"), (TWO_MINUTES, "5m"), ("360", "1h")])
def test_an_expected_gap_decides_from_the_first_turn(
    provider: Provider, gap: float | str, expected: str
) -> None:
    client = _client(provider, breakpoints=gap)
    sent = _send(client, _messages("alpha", 1))
    client.close()
    assert f"={expected}/conversation" in sent.breakpoints


def test_the_header_takes_the_same_values(provider: Provider) -> None:
    client = _client(provider)
    sent = _send(client, _messages("alpha", 1), extra_headers={"x-cachekit-breakpoints": "400"})
    assert "=1h/conversation" in sent.breakpoints
    with pytest.raises(anthropic.BadRequestError, match="x-cachekit-breakpoints"):
        _send(client, _messages("alpha", 1), extra_headers={"x-cachekit-breakpoints": "2h"})
    client.close()


@pytest.mark.parametrize("bad", ["2h", "forever", 0, -360, float("nan"), True, "inf"])
def test_a_bad_breakpoints_setting_is_a_config_error(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"breakpoints must be 'auto', 'off', a cache lifetime"):
        CacheConfig(breakpoints=bad)  # type: ignore[arg-type]


def test_a_pause_after_a_five_minute_end_still_reads_the_hour_long_anchor(provider: Provider) -> None:
    # Mostly quick turns with a pause now and then: the conversation's end is written for 5 minutes,
    # while a marker keeps its last 1-hour entry alive, so a pause loses only the turns after it.
    client = _client(provider)
    for name in ("alpha", "beta", "delta"):
        for turn in range(1, 9):
            provider.clock.advance(SIX_MINUTES if turn % 4 == 0 else 20.0)
            _send(client, _messages(name, turn))
    turns = [_send(client, _messages("omega", 1))]
    for turn in range(2, 7):
        provider.clock.advance(20.0)
        turns.append(_send(client, _messages("omega", turn)))
    anchored = next(s for s in turns if "=1h/anchor" in s.breakpoints)
    assert "=5m/conversation" in anchored.breakpoints
    provider.clock.advance(SIX_MINUTES)
    after_pause = _send(client, _messages("omega", 7))
    client.close()
    assert after_pause.read > 0  # the anchor's entry outlived the pause


def test_the_store_holds_numbers_under_a_hashed_model_for_a_week(provider: Provider) -> None:
    store = MemoryStore(clock=provider.clock)
    client = _client(provider, store)
    _conversations(client, provider, ["alpha"], turns=2, pause=SIX_MINUTES)
    client.close()
    (entry,) = [e for e in store.entries() if e.key.startswith("ckg1:")]
    assert MODEL not in entry.key
    assert entry.expires_at == provider.clock() + 7 * 24 * 3600  # saved by the last request
    raw = store.get(entry.key)
    assert raw is not None
    saved = json.loads(raw)
    assert set(saved) == {"v", "starts", "gaps", "stable"}
    assert all(isinstance(x, (int, float)) for x in [saved["starts"], *saved["gaps"], *saved["stable"]])
    assert b"Clause" not in raw
    assert b"Question" not in raw


class _Unreachable(MemoryStore):
    """A store whose gap statistics cannot be read or written (the store is down for them)."""

    def get(self, key: str) -> bytes | None:
        if key.startswith("ckg1:"):
            raise StoreUnavailableError("connection refused")
        return super().get(key)

    def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        if key.startswith("ckg1:"):
            raise StoreUnavailableError("connection refused")
        super().set(key, value, ttl=ttl)


def test_statistics_the_store_cannot_keep_never_fail_a_request(provider: Provider) -> None:
    client = _client(provider, _Unreachable(), on_cache_error="raise")
    sent = _conversations(client, provider, ["alpha", "beta"], turns=3, pause=SIX_MINUTES)
    client.close()
    assert len(sent) == 6
    assert "=1h/conversation" in sent[-1].breakpoints  # learned in this process all the same


def test_openai_lifetimes_follow_a_fixed_tier_but_not_the_5m_1h_statistics() -> None:
    """OpenAI's explicit breakpoints live 30 minutes or 12 hours (cache_rules.json, GPT-5.6 rows): the
    5m/1h timing statistics do not choose them; a caller's fixed "1h" is read as the long tier (12h)."""
    from cachekit.shape.lifetimes import Expect
    from cachekit.shape.planner import Planner

    body = {
        "model": "gpt-5.6-sol",
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "You are a careful agent. " * 400}]},
            {"role": "user", "content": [{"type": "text", "text": "First question, long enough. " * 200}]},
        ],
    }

    def ttls(expect: Expect | None) -> set[str]:
        planned = Planner().apply("openai", "openai_chat", body, now=0.0, expect=expect).body
        return {
            block["prompt_cache_breakpoint"].get("ttl", "30m")
            for message in planned["messages"]
            for block in message["content"]
            if isinstance(block, dict) and "prompt_cache_breakpoint" in block
        }

    assert ttls(None) == {"30m"}
    assert ttls(Expect(gap=360.0)) == {"30m"}  # six minutes is within OpenAI's 30-minute lifetime
    assert ttls(Expect(ttl="1h")) == {"12h"}

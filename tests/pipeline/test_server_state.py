"""Requests whose meaning depends on mutable server state (issue 15, item 1), with the real SDKs.

Such a request (a Responses ``conversation``, a ``previous_response_id``, a background response, an
Anthropic ``container``, a live web search, ...) is never answered from the cache, never coalesced
with an identical one and never stored: it goes upstream as a bypass, and the answer says why in
``x-cachekit-bypass-reason``. The other bypasses (the caller's, a cache that is off, a body that
cannot be keyed) say why through the same header.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import openai
import orjson
import pytest

import cachekit
from cachekit.errors import StoreUnavailableError
from cachekit.stores import MemoryStore
from cachekit.testing import FakeUpstream
from tests.conftest import SDK, Harness
from tests.requests import anthropic_messages, openai_chat, openai_responses

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

REASON = "x-cachekit-bypass-reason"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "exact.md"
CORRECTNESS = DOCS.with_name("correctness.md")


class StatefulUpstream(FakeUpstream):
    """The Responses API with server-held state: each conversation keeps the turns it received, and
    ``previous_response_id`` resolves (the fake backend alone answers it with a 404)."""

    def __init__(self) -> None:
        super().__init__()
        self.turns: dict[str, list[Any]] = {}
        self._turns_lock = threading.Lock()

    def _serve(self, request: Any, body: bytes) -> Any:
        payload = orjson.loads(body)
        if isinstance(payload, dict) and request.url.path.endswith("/responses"):
            thread = payload.pop("conversation", None) or payload.pop("previous_response_id", None)
            if thread is not None:
                name = thread if isinstance(thread, str) else thread["id"]
                with self._turns_lock:
                    self.turns.setdefault(name, []).append(payload.get("input"))
            body = orjson.dumps(payload)
        return super()._serve(request, body)


class Rendezvous(StatefulUpstream):
    """Holds every request until two are upstream at the same time. Two requests that were coalesced
    never meet: the first gives up after ``patience`` seconds and :attr:`met` turns ``False``."""

    patience = 10.0

    def __init__(self) -> None:
        super().__init__()
        self.met = True
        self._barrier = threading.Barrier(2)
        self._arrived = 0
        self._both: asyncio.Event | None = None

    def handle_request(self, request: Any) -> Any:
        try:
            self._barrier.wait(self.patience)
        except threading.BrokenBarrierError:
            self.met = False
        return super().handle_request(request)

    async def handle_async_request(self, request: Any) -> Any:
        if self._both is None:
            self._both = asyncio.Event()
        self._arrived += 1
        if self._arrived == 2:
            self._both.set()
        try:
            await asyncio.wait_for(self._both.wait(), self.patience)
        except asyncio.TimeoutError:
            self.met = False
        return await super().handle_async_request(request)


def _concurrently(sdk: SDK, *calls: Any) -> list[Any]:
    """Run the SDK calls at once: in threads (sync clients) or as tasks of one loop (async)."""
    if sdk.is_async:

        async def gather() -> list[Any]:
            return list(await asyncio.gather(*(call() for call in calls)))

        return sdk.run(gather())
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            results[index] = calls[index]()
        except BaseException as exc:  # re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return results


STATEFUL_TURNS = [
    pytest.param({"conversation": "conv_trip"}, "conv_trip", "server-state:conversation", id="conversation"),
    pytest.param(
        {"conversation": {"id": "conv_trip"}},
        "conv_trip",
        "server-state:conversation",
        id="conversation-object",
    ),
    pytest.param(
        {"previous_response_id": "resp_turn1"},
        "resp_turn1",
        "server-state:previous_response_id",
        id="previous_response_id",
    ),
]


@pytest.mark.parametrize(("state", "thread", "reason"), STATEFUL_TURNS)
def test_a_repeated_turn_reaches_the_server_each_time(
    harness: Harness, state: dict[str, Any], thread: str, reason: str
) -> None:
    """The same ``input`` twice in one conversation is two turns: the server-side conversation must
    receive both, and neither is answered from (or stored in) the cache."""
    harness.upstream = upstream = StatefulUpstream()
    sdk = harness.sdk("openai")
    turn = {"model": "gpt-4.1-mini", "input": "yes", **state}
    first = sdk.call("responses.with_raw_response.create", **turn)
    second = sdk.call("responses.with_raw_response.create", **turn)

    assert upstream.calls == 2
    assert upstream.turns == {thread: ["yes", "yes"]}
    for raw in (first, second):
        assert raw.headers["x-cachekit-cache"] == "bypass"
        assert raw.headers[REASON] == reason
    assert sdk.run(first.parse()).id != sdk.run(second.parse()).id  # two server responses
    assert harness.store.written == {}
    assert cachekit.cache_of(sdk.client).stats.bypasses == 2


@pytest.mark.parametrize(("state", "thread", "reason"), STATEFUL_TURNS)
def test_concurrent_stateful_turns_are_not_coalesced(
    harness: Harness, state: dict[str, Any], thread: str, reason: str
) -> None:
    harness.upstream = upstream = Rendezvous()
    sdk = harness.sdk("openai")
    turn = {"model": "gpt-4.1-mini", "input": "yes", **state}

    def ask() -> Any:
        return sdk.client.responses.with_raw_response.create(**turn)

    answers = _concurrently(sdk, ask, ask)

    assert upstream.met  # both were upstream at once: neither waited for the other's answer
    assert upstream.calls == 2
    assert upstream.turns == {thread: ["yes", "yes"]}
    assert [raw.headers[REASON] for raw in answers] == [reason, reason]
    assert cachekit.cache_of(sdk.client).stats.coalesced == 0


def test_a_stored_answer_is_not_served_to_a_conversation_turn(harness: Harness) -> None:
    """An answer cached for a stateless request is not served when the same input joins a
    conversation (and the stateless one still hits afterwards)."""
    harness.upstream = upstream = StatefulUpstream()
    sdk = harness.sdk("openai")
    body = openai_responses()
    sdk.call("responses.create", **body)
    joined = sdk.call("responses.with_raw_response.create", **body, conversation="conv_trip")
    again = sdk.call("responses.with_raw_response.create", **body)

    assert joined.headers["x-cachekit-cache"] == "bypass"
    assert again.headers["x-cachekit-cache"] == "hit"
    assert upstream.calls == 2
    assert len(upstream.turns["conv_trip"]) == 1


@pytest.mark.slow
def test_the_semantic_cache_never_answers_a_conversation_turn(harness: Harness) -> None:
    """A stored answer to a question that means the same is not served to a conversation turn (while
    the same paraphrase without the conversation is a semantic hit)."""
    harness.upstream = upstream = StatefulUpstream()
    sdk = harness.sdk("openai", cache=cachekit.CacheConfig(store=MemoryStore(), ledger=False, semantic=True))

    def ask(question: str, **state: Any) -> Any:
        body = {"model": "gpt-4.1-mini", "instructions": "You are a help desk.", "temperature": 0}
        return sdk.call("responses.with_raw_response.create", **body, input=question, **state)

    ask("How do I reset my account password?")
    turn = ask("How can I reset the password of my account?", conversation="conv_help")
    stateless = ask("How can I reset the password of my account?")

    assert turn.headers["x-cachekit-cache"] == "bypass"
    assert turn.headers[REASON] == "server-state:conversation"
    assert "x-cachekit-similarity" not in turn.headers
    assert stateless.headers["x-cachekit-cache"] == "semantic"
    assert upstream.turns == {"conv_help": ["How can I reset the password of my account?"]}
    assert upstream.calls == 2


def test_only_if_cached_never_sends_a_stateful_request(harness: Harness) -> None:
    harness.upstream = upstream = StatefulUpstream()
    sdk = harness.sdk("openai")
    with pytest.raises(openai.APIStatusError) as raised:
        sdk.call(
            "responses.create",
            model="gpt-4.1-mini",
            input="yes",
            conversation="conv_trip",
            extra_headers={"x-cachekit": "only-if-cached"},
        )
    assert raised.value.status_code == 504
    assert upstream.calls == 0


BYPASSED_BODIES = [
    pytest.param(
        "openai", "responses.create", {"background": True}, "server-state:background", id="background"
    ),
    pytest.param(
        "openai",
        "responses.create",
        {"prompt": {"id": "pmpt_travel", "variables": {"city": "Paris"}}},
        "server-state:prompt",
        id="unpinned-prompt",
    ),
    pytest.param(
        "openai",
        "responses.create",
        {"tools": [{"type": "web_search"}]},
        "live-data:web_search",
        id="responses-web-search",
    ),
    pytest.param(
        "openai",
        "responses.create",
        {"tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]},
        "server-state:file_search",
        id="file-search",
    ),
    pytest.param(
        "openai",
        "chat.completions.create",
        {"web_search_options": {"search_context_size": "low"}},
        "live-data:web_search",
        id="chat-web-search",
    ),
    pytest.param(
        "anthropic",
        "messages.create",
        {"container": "container_011"},
        "server-state:container",
        id="container",
    ),
    pytest.param(
        "anthropic",
        "messages.create",
        {"tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 2}]},
        "live-data:web_search",
        id="anthropic-web-search",
    ),
]

_BODIES: dict[str, Callable[[], dict[str, Any]]] = {
    "responses.create": lambda: {"model": "gpt-4.1-mini", "input": "What is new in Paris?"},
    "chat.completions.create": lambda: {
        "model": "gpt-4.1-mini",
        "messages": [{"role": "user", "content": "What is new in Paris?"}],
    },
    "messages.create": lambda: {
        "model": "claude-sonnet-4-5",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": "What is new in Paris?"}],
    },
}


@pytest.mark.parametrize(("provider", "method", "extra", "reason"), BYPASSED_BODIES)
def test_requests_on_server_state_or_live_data_go_upstream_each_time(
    harness: Harness, provider: str, method: str, extra: dict[str, Any], reason: str
) -> None:
    sdk = harness.sdk(provider)
    head, _, tail = method.rpartition(".")
    raw_method = f"{head}.with_raw_response.{tail}"
    body = {**_BODIES[method](), **extra}
    answers = [sdk.call(raw_method, **body) for _ in range(2)]

    assert harness.upstream.calls == 2
    assert [raw.headers["x-cachekit-cache"] for raw in answers] == ["bypass", "bypass"]
    assert [raw.headers[REASON] for raw in answers] == [reason, reason]
    assert harness.store.written == {}


def test_every_other_bypass_says_why_through_the_same_header(harness: Harness) -> None:
    sdk = harness.sdk("anthropic")
    body = anthropic_messages()
    caller = sdk.call("messages.with_raw_response.create", **body, extra_headers={"x-cachekit": "bypass"})
    big = harness.sdk("openai").call(
        "chat.completions.with_raw_response.create", **{**openai_chat(), "seed": 2**70}
    )
    off = harness.sdk("openai", cache=cachekit.CacheConfig(enabled=False, ledger=False))
    disabled = off.call("chat.completions.with_raw_response.create", **openai_chat())
    cached = sdk.call("messages.with_raw_response.create", **body)

    assert caller.headers[REASON] == "caller"
    assert big.headers[REASON] == "not-keyable"
    assert disabled.headers[REASON] == "cache-off"
    assert [r.headers["x-cachekit-cache"] for r in (caller, big, disabled)] == ["bypass"] * 3
    assert cached.headers["x-cachekit-cache"] == "miss"
    assert REASON not in cached.headers  # only a bypass carries a reason


class SecretlessStore(MemoryStore):
    """A store that cannot give its secret (a network store that is down when the client starts)."""

    @property
    def secret(self) -> bytes:
        raise StoreUnavailableError("the store is down")


def test_refusals_and_an_unavailable_store_say_why_too(harness: Harness) -> None:
    sdk = harness.sdk("anthropic")
    with pytest.raises(anthropic.BadRequestError) as bad:
        sdk.call("messages.create", **anthropic_messages(), extra_headers={"x-cachekit-ttl": "soon"})
    linting = harness.sdk(
        "anthropic", cache=cachekit.CacheConfig(store="memory://", ledger=False, lint="raise")
    )
    stamped = {
        **anthropic_messages(),
        "system": "Now: 2026-12-03 10:00:00 UTC. You are a careful travel assistant.",
    }
    with pytest.raises(anthropic.BadRequestError) as linted:
        linting.call("messages.create", **stamped)
    down = harness.sdk("openai", cache=cachekit.CacheConfig(store=SecretlessStore(), ledger=False))
    unkeyed = down.call("chat.completions.with_raw_response.create", **openai_chat())

    assert bad.value.response.headers[REASON] == "bad-control"
    assert linted.value.response.headers[REASON] == "lint"
    assert unkeyed.headers["x-cachekit-cache"] == "bypass"
    assert unkeyed.headers[REASON] == "store-unavailable"
    assert harness.upstream.calls == 1  # only the request the store could not key went upstream


# -- the per-dialect data ---------------------------------------------------------------------------

STATEFUL = [
    ("openai_responses", {"conversation": "conv_1"}, ["server-state:conversation"]),
    ("openai_responses", {"previous_response_id": "resp_1"}, ["server-state:previous_response_id"]),
    ("openai_responses", {"background": True}, ["server-state:background"]),
    ("openai_responses", {"prompt": {"id": "pmpt_1"}}, ["server-state:prompt"]),
    ("openai_responses", {"prompt": {"id": "pmpt_1", "version": None}}, ["server-state:prompt"]),
    (
        "openai_responses",
        {"input": [{"type": "item_reference", "id": "msg_1"}]},
        ["server-state:item_reference"],
    ),
    ("openai_responses", {"input": [{"id": "msg_1"}]}, ["server-state:item_reference"]),  # type is optional
    (
        "openai_responses",
        {"tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]},
        ["server-state:file_search"],
    ),
    (
        "openai_responses",
        {"tools": [{"type": "code_interpreter", "container": "cntr_1"}]},
        ["server-state:container", "live-data:code_execution"],
    ),
    # Code runs at call time even in a fresh container (issue 25): live, not cached.
    (
        "openai_responses",
        {"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]},
        ["live-data:code_execution"],
    ),
    (
        "anthropic_messages",
        {"tools": [{"type": "code_execution_20250825", "name": "code_execution"}]},
        ["live-data:code_execution"],
    ),
    # Counting tokens runs no tool, but fetches a URL source to count it.
    (
        "anthropic_count_tokens",
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image", "source": {"type": "url", "url": "https://x"}}],
                }
            ]
        },
        ["live-data:url"],
    ),
    (
        "openai_responses",
        {
            "tools": [
                {"type": "shell", "environment": {"type": "container_reference", "container_id": "cntr_1"}}
            ]
        },
        ["server-state:container"],
    ),
    ("openai_responses", {"tools": [{"type": "web_search_preview_2025_03_11"}]}, ["live-data:web_search"]),
    (
        "openai_responses",
        {"tools": [{"type": "mcp", "server_label": "x", "server_url": "https://x"}]},
        ["live-data:mcp"],
    ),
    (
        "openai_responses",
        {"conversation": "conv_1", "tools": [{"type": "web_search"}]},
        ["server-state:conversation", "live-data:web_search"],
    ),
    ("openai_chat", {"web_search_options": {}}, ["live-data:web_search"]),
    ("openai_chat", {"model": "gpt-4o-mini-search-preview"}, ["live-data:web_search"]),
    ("anthropic_messages", {"container": "container_1"}, ["server-state:container"]),
    ("anthropic_messages", {"container": {"id": "container_1"}}, ["server-state:container"]),
    (
        "anthropic_messages",
        {"container": {"skills": [{"type": "custom", "skill_id": "skill_1", "version": "latest"}]}},
        ["server-state:skills"],
    ),
    (
        "anthropic_messages",
        {"container": {"skills": [{"type": "anthropic", "skill_id": "pdf"}]}},
        ["server-state:skills"],
    ),
    (
        "anthropic_messages",
        {"thread": {"type": "continue", "previous_message_id": "msg_1"}},
        ["server-state:thread"],
    ),
    (
        "anthropic_messages",
        {"mcp_servers": [{"type": "url", "url": "https://x", "name": "x"}]},
        ["live-data:mcp"],
    ),
    (
        "anthropic_messages",
        {"tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}]},
        ["live-data:web_fetch"],
    ),
    (
        "anthropic_messages",
        {"tools": [{"type": "web_search_20260209", "name": "web_search"}]},
        ["live-data:web_search"],
    ),
]

STATELESS = [
    ("openai_responses", {"store": True, "metadata": {"a": "b"}, "input": "hi"}),
    ("openai_responses", {"prompt": {"id": "pmpt_1", "version": "3"}}),  # a pinned version never changes
    ("openai_responses", {"conversation": None, "previous_response_id": None, "background": False}),
    (
        "openai_responses",
        {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file_1"}]}]},
    ),
    ("openai_responses", {"input": [{"type": "reasoning", "id": "rs_1", "summary": []}]}),
    (
        "openai_responses",
        {"tools": [{"type": "function", "name": "f", "parameters": {}}, {"type": "image_generation"}]},
    ),
    ("openai_chat", {"store": True, "metadata": {"a": "b"}, "model": "gpt-4.1-mini"}),
    (
        "anthropic_messages",
        {"container": {"skills": [{"type": "custom", "skill_id": "s", "version": "1759178010641129"}]}},
    ),
    (
        "anthropic_count_tokens",
        {"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
    ),  # no answer
]


@pytest.mark.parametrize(("dialect", "body", "reasons"), STATEFUL)
def test_what_depends_on_server_state(dialect: Any, body: dict[str, Any], reasons: list[str]) -> None:
    from cachekit.providers import server_state

    assert list(server_state(dialect, body)) == reasons


@pytest.mark.parametrize(("dialect", "body"), STATELESS)
def test_what_does_not(dialect: Any, body: dict[str, Any]) -> None:
    from cachekit.providers import server_state

    assert server_state(dialect, body) == ()


GENERIC_REASONS = ("caller", "cache-off", "not-keyable", "store-unavailable", "bad-control", "lint")


def test_every_reason_is_documented() -> None:
    """Every bypass reason has a row in docs/correctness.md's list of reasons, and the exact cache's
    page names the header and each general reason."""
    from cachekit.providers.state import REASONS

    page = CORRECTNESS.read_text()
    listed = page[page.index("## Bypass reasons") : page.index("## The tables")]
    for reason in (*GENERIC_REASONS, *REASONS):
        assert f"| `{reason}` |" in listed, reason
    exact = DOCS.read_text()
    assert "`x-cachekit-bypass-reason`" in exact
    for reason in GENERIC_REASONS:
        assert f"`{reason}`" in exact, reason

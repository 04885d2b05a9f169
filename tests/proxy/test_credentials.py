"""Credentials through the proxy: forwarded as sent, never stored, logged or exported; partitions keyed
by an HMAC of the credential, shared only where the operator maps credentials to a tenant; proxy-side
keys that refuse a missing or wrong key with the provider's own 401 and swap a right one for the
upstream key."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import anthropic
import openai
import pytest

from cachekit.local import LocalServer
from cachekit.proxy import ProxyConfig, ProxyKey
from cachekit.stores.keys import credential_fingerprint
from tests.conftest import sdk_client
from tests.proxy.conftest import CHAT_MODEL, MODEL, AccessLog, Received, RecordingBackend, Stack, make_stack

#: The upstream fixture: the local server and the backend that records what reached it.
Upstream = tuple[LocalServer, RecordingBackend]


def _sent_key(received: Received) -> str:
    """The credential a request reached the upstream with (the SDKs send ``x-api-key`` or a bearer)."""
    value = received.headers.get("x-api-key") or received.headers["authorization"]
    return value.removeprefix("Bearer ")


SECRET_A = "sk-ant-secret-AAAA-0123456789"
SECRET_B = "sk-ant-secret-BBBB-9876543210"


def _ask(
    stack: Stack,
    key: str,
    prompt: str = "who shares?",
    *,
    stream: bool = False,
    headers: dict[str, str] | None = None,
) -> str:
    with sdk_client(
        "anthropic", plain=True, api_key=key, base_url=stack.anthropic_url, default_headers=headers or {}
    ) as client:
        params = {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": prompt}]}
        if stream:
            with client.messages.stream(**params) as events:
                events.get_final_message()
                return str(events.response.headers["x-cachekit-cache"])
        return str(client.messages.with_raw_response.create(**params).headers["x-cachekit-cache"])


def _chat(stack: Stack, key: str, prompt: str) -> str:
    with sdk_client("openai", plain=True, api_key=key, base_url=stack.openai_url) as client:
        raw = client.chat.completions.with_raw_response.create(
            model=CHAT_MODEL, messages=[{"role": "user", "content": prompt}]
        )
        return str(raw.headers["x-cachekit-cache"])


def test_a_key_never_reaches_the_store_the_ledger_the_logs_or_the_metrics(
    stack: Stack, caplog: pytest.LogCaptureFixture, access_log: AccessLog
) -> None:
    caplog.set_level(logging.DEBUG, logger="cachekit")
    caplog.set_level(logging.DEBUG, logger="uvicorn")
    for stream in (False, True):
        assert _ask(stack, SECRET_A, f"secret {stream}", stream=stream) == "miss"
        assert _ask(stack, SECRET_A, f"secret {stream}", stream=stream) == "hit"
    assert _chat(stack, SECRET_B, "secret chat") == "miss"
    access_log.wait(5)  # every request logged and counted
    # The key was forwarded as sent...
    assert _sent_key(stack.backend.calls("/v1/messages")[0]) == SECRET_A
    # ...and is nowhere cachekit writes.
    stored = b"".join(e.key.encode() + (stack.store.get(e.key) or b"") for e in stack.store.entries())
    ledger = repr([record.to_dict() for record in stack.ledger.read()])
    metrics = stack.metrics.render()[0].decode()
    ours = "\n".join(
        f"{r.getMessage()} {getattr(r, 'fields', '')}"
        for r in caplog.records
        if r.name.startswith(("cachekit", "uvicorn"))
    )
    for secret in (SECRET_A, SECRET_B, SECRET_A[-10:], SECRET_B[-10:]):
        assert secret.encode() not in stored
        assert secret not in ledger
        assert secret not in ours
        assert secret not in metrics
    assert len(stack.ledger.read()) == 5
    assert any(r.name == "cachekit.proxy.access" for r in caplog.records)


def test_two_keys_never_share_an_entry(stack: Stack) -> None:
    assert _ask(stack, SECRET_A) == "miss"
    assert _ask(stack, SECRET_B) == "miss"  # the same request, another key: its own partition
    assert _ask(stack, SECRET_A) == "hit"
    assert _ask(stack, SECRET_B) == "hit"
    assert len(stack.backend.calls("/v1/messages")) == 2


def test_credentials_the_operator_maps_to_a_tenant_share_its_partition(upstream: Upstream) -> None:
    team = {credential_fingerprint(SECRET_A): "team", credential_fingerprint(SECRET_B): "team"}
    built = make_stack(*upstream, ProxyConfig(tenants=team))
    with built.proxy:
        assert _ask(built, SECRET_A) == "miss"
        assert _ask(built, SECRET_B) == "hit"  # mapped to one tenant: shared
        assert _ask(built, "sk-ant-someone-else") == "miss"  # not mapped: its own
    partitions = sorted({entry.key.split(":")[2] for entry in built.store.entries()})
    assert partitions[0].startswith("cred%3A")
    assert partitions[1] == "tenant%3Ateam"


PROXY_KEY = "ck-proxy-key-one-0001"
OTHER_PROXY_KEY = "ck-proxy-key-two-0002"
UPSTREAM_KEY = "sk-upstream-held-by-the-proxy"


@pytest.fixture
def guarded(upstream: Upstream, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stack]:
    monkeypatch.setenv("CK_TEST_UPSTREAM_ANTHROPIC", UPSTREAM_KEY)
    monkeypatch.setenv("CK_TEST_UPSTREAM_OPENAI", UPSTREAM_KEY)
    config = ProxyConfig(
        keys=(ProxyKey(credential_fingerprint(PROXY_KEY)), ProxyKey(credential_fingerprint(OTHER_PROXY_KEY))),
        upstream_keys={"anthropic": "CK_TEST_UPSTREAM_ANTHROPIC", "openai": "CK_TEST_UPSTREAM_OPENAI"},
    )
    built = make_stack(*upstream, config)
    built.proxy.start()
    yield built
    built.proxy.stop()


def test_proxy_keys_refuse_a_wrong_key_with_the_providers_401(guarded: Stack) -> None:
    with pytest.raises(anthropic.AuthenticationError) as refused:
        _ask(guarded, "not-a-proxy-key")
    assert refused.value.status_code == 401
    assert refused.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    with pytest.raises(openai.AuthenticationError) as refused_openai:
        _chat(guarded, "not-a-proxy-key", "hi")
    assert refused_openai.value.status_code == 401
    assert refused_openai.value.body["type"] == "invalid_request_error"  # type: ignore[index]
    assert guarded.backend.received == []  # nothing reached the upstream
    assert 'cachekit_proxy_rejected_total{reason="auth"} 2.0' in guarded.metrics.render()[0].decode()


def test_a_right_proxy_key_is_swapped_for_the_upstream_key_and_partitions_alone(guarded: Stack) -> None:
    assert _ask(guarded, PROXY_KEY) == "miss"
    assert _ask(guarded, PROXY_KEY) == "hit"
    assert _ask(guarded, OTHER_PROXY_KEY) == "miss"  # one upstream key, two proxy keys: two partitions
    assert _chat(guarded, PROXY_KEY, "hi") == "miss"
    for received in guarded.backend.received:
        assert _sent_key(received) == UPSTREAM_KEY
        assert PROXY_KEY not in repr(received.headers)
        assert OTHER_PROXY_KEY not in repr(received.headers)


def test_a_proxy_key_in_its_own_header_leaves_the_clients_key_as_sent(guarded: Stack) -> None:
    assert _ask(guarded, SECRET_A, headers={"x-cachekit-proxy-key": PROXY_KEY}) == "miss"
    received = guarded.backend.received[-1]
    assert _sent_key(received) == SECRET_A
    assert "x-cachekit-proxy-key" not in received.headers


def test_recording_backend_is_the_upstream(upstream: Upstream) -> None:
    assert isinstance(upstream[1], RecordingBackend)

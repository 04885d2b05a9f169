"""A per-request tenant narrows the caller's own partition; it selects one only when the client trusts it.

Any code on the request path can set ``x-cachekit-tenant`` (a proxy forwarding its caller's headers, a
plugin, ``extra_headers`` built from user input), and ``cachekit.policy(tenant=...)`` /
``@cachekit.cached(tenant=...)`` are as easy to reach. By default such a tenant therefore only
narrows the partition the client's own settings give (the credential's HMAC, the configured tenant,
or ``shared``): two API keys with the same tenant header never share entries, and a key that is no
longer valid reads nothing another key wrote. ``CacheConfig(trust_tenant_header=True)`` makes the
per-request tenant select the partition by itself (sharing across keys, opted in).
``CacheConfig(tenant=...)`` is the application's own choice and keeps replacing the credential.

Checked with the real ``anthropic`` and ``openai`` SDKs, sync and async, over :class:`FakeUpstream`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import cachekit
from cachekit.ops import purge
from cachekit.stores.keys import partition_for, partition_names_tenant
from tests.conftest import Harness
from tests.fuzzing import fuzz
from tests.requests import anthropic_messages, openai_chat

CALLS: dict[str, tuple[str, Callable[[], dict[str, Any]]]] = {
    "anthropic": ("messages.with_raw_response.create", anthropic_messages),
    "openai": ("chat.completions.with_raw_response.create", openai_chat),
}
PROVIDERS = sorted(CALLS)


def client(harness: Harness, provider: str, api_key: str, **config: Any) -> Any:
    """A drop-in SDK client with its own cache config over the harness's shared store."""
    return harness.sdk(
        provider, api_key=api_key, cache=cachekit.CacheConfig(store=harness.store, ledger=False, **config)
    )


def ask(sdk: Any, provider: str, tenant: str | None = None) -> str:
    """Send the provider's usual request (with ``x-cachekit-tenant`` when given): the cache outcome."""
    method, body = CALLS[provider]
    kwargs = body()
    if tenant is not None:
        kwargs["extra_headers"] = {"x-cachekit-tenant": tenant}
    outcome: str = sdk.call(method, **kwargs).headers["x-cachekit-cache"]
    return outcome


# -- the default: the header narrows within the credential ----------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
def test_two_keys_with_the_same_tenant_header_do_not_share(harness: Harness, provider: str) -> None:
    one = client(harness, provider, "sk-key-one")
    two = client(harness, provider, "sk-key-two")  # another key: another customer, or a revoked one
    assert ask(one, provider, "acme") == "miss"
    assert ask(two, provider, "acme") == "miss"
    assert harness.upstream.calls == 2
    # Each key keeps reading its own entry under the tenant.
    assert ask(one, provider, "acme") == "hit"
    assert ask(two, provider, "acme") == "hit"
    assert harness.upstream.calls == 2


@pytest.mark.parametrize("provider", PROVIDERS)
def test_one_key_with_two_tenant_headers_does_not_share(harness: Harness, provider: str) -> None:
    sdk = client(harness, provider, "sk-key-one")
    assert ask(sdk, provider, "acme") == "miss"
    assert ask(sdk, provider, "globex") == "miss"
    assert ask(sdk, provider) == "miss"  # the key's own partition is none of its tenants'
    assert [ask(sdk, provider, t) for t in ("acme", "globex", None)] == ["hit", "hit", "hit"]
    assert harness.upstream.calls == 3


def test_a_call_site_tenant_narrows_like_the_header(harness: Harness) -> None:
    one = client(harness, "openai", "sk-key-one")
    two = client(harness, "openai", "sk-key-two")

    @cachekit.cached(tenant="acme")
    def decorated(sdk: Any) -> str:
        return ask(sdk, "openai")

    assert decorated(one) == "miss"
    assert decorated(two) == "miss"
    with cachekit.policy(tenant="acme"):  # the policy and the decorator name the same sub-partition
        assert ask(one, "openai") == "hit"
        assert ask(two, "openai") == "hit"
    assert ask(two, "openai", "acme") == "hit"  # and so does the header
    assert harness.upstream.calls == 2


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_header_cannot_leave_the_configured_tenant(harness: Harness, provider: str) -> None:
    acme = client(harness, provider, "sk-key-one", tenant="acme")
    globex = client(harness, provider, "sk-key-two", tenant="globex")
    assert ask(acme, provider) == "miss"
    assert ask(globex, provider, "acme") == "miss"  # globex's client naming acme stays inside globex
    assert ask(acme, provider, "sub") == "miss"  # a sub-tenant of acme is not acme itself
    # The configured tenant is the application's own choice: it still replaces the credential.
    also_acme = client(harness, provider, "sk-key-three", tenant="acme")
    assert ask(also_acme, provider) == "hit"
    assert ask(also_acme, provider, "sub") == "hit"
    assert harness.upstream.calls == 3


# -- the opt-in: a trusted header selects the partition ------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_trusted_tenant_header_is_shared_across_keys(harness: Harness, provider: str) -> None:
    one = client(harness, provider, "sk-key-one", trust_tenant_header=True)
    two = client(harness, provider, "sk-key-two", trust_tenant_header=True)
    assert ask(one, provider, "acme") == "miss"
    assert ask(two, provider, "acme") == "hit"
    assert ask(two, provider, "globex") == "miss"
    assert ask(two, provider) == "miss"  # without a header: the key's own partition
    # A trusted header names the same partition as a configured tenant.
    configured = client(harness, provider, "sk-key-three", tenant="acme")
    assert ask(configured, provider) == "hit"
    assert harness.upstream.calls == 3


def test_a_trusted_call_site_tenant_is_shared_across_keys(harness: Harness) -> None:
    one = client(harness, "openai", "sk-key-one", trust_tenant_header=True)
    two = client(harness, "openai", "sk-key-two", trust_tenant_header=True)
    with cachekit.policy(tenant="acme"):
        assert ask(one, "openai") == "miss"
        assert ask(two, "openai") == "hit"
    assert harness.upstream.calls == 1


def test_trust_tenant_header_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CACHEKIT_TRUST_TENANT_HEADER", raising=False)
    assert cachekit.CacheConfig().trust_tenant_header is False
    assert cachekit.CacheConfig.from_env().trust_tenant_header is False
    for value, expected in [("1", True), ("true", True), ("Yes", True), ("0", False), ("off", False)]:
        monkeypatch.setenv("CACHEKIT_TRUST_TENANT_HEADER", value)
        assert cachekit.CacheConfig.from_env().trust_tenant_header is expected, value
    monkeypatch.setenv("CACHEKIT_TRUST_TENANT_HEADER", "perhaps")
    with pytest.raises(cachekit.ConfigError, match="CACHEKIT_TRUST_TENANT_HEADER"):
        cachekit.CacheConfig.from_env()


def test_purge_by_tenant_finds_the_tenant_in_every_partition(harness: Harness) -> None:
    one = client(harness, "openai", "sk-key-one")
    two = client(harness, "openai", "sk-key-two")
    configured = client(harness, "openai", "sk-key-one", tenant="acme")
    for sdk, tenant in [(one, "acme"), (two, "acme"), (one, "globex"), (configured, "sub"), (one, None)]:
        assert ask(sdk, "openai", tenant) == "miss"
    assert purge(harness.store, tenant="acme", dry_run=True) == 3  # two keys' acme, and acme's sub
    assert purge(harness.store, tenant="acme") == 3
    assert [ask(one, "openai", "acme"), ask(configured, "openai", "sub")] == ["miss", "miss"]
    assert [ask(one, "openai", "globex"), ask(one, "openai")] == ["hit", "hit"]


# -- the partition function: one label never reaches another's partition -------------------------

CREDENTIALS = ["sk-alpha", "sk-beta"]
# Labels shaped like other partitions, separators and their escapes, and what a narrowed partition
# looks like: none may make two different callers meet.
LABELS = [
    "acme",
    "ACME",
    "shared",
    "anonymous",
    "cred:0123",
    "tenant:acme",
    "tenant=acme@shared",
    "acme@shared",
    "acme@tenant:acme",
    "a%40b",
    "a@b",
    "a/b",
    "ünï",
]


@st.composite
def callers(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "credential": draw(st.sampled_from([None, *CREDENTIALS])),
        "tenant": draw(st.one_of(st.none(), st.sampled_from(LABELS))),
        "request_tenant": draw(st.one_of(st.none(), st.sampled_from(LABELS))),
        "share": draw(st.booleans()),
        "trust": draw(st.booleans()),
    }


def model(caller: dict[str, Any]) -> tuple[Any, ...]:
    """Who a caller shares entries with, as the documentation states it."""
    request_tenant = caller["request_tenant"]
    if request_tenant is not None and caller["trust"]:
        return ("tenant", request_tenant)
    if caller["tenant"] is not None:
        base: tuple[Any, ...] = ("tenant", caller["tenant"])
    elif caller["share"]:
        base = ("shared",)
    elif caller["credential"] is not None:
        base = ("credential", caller["credential"])
    else:
        base = ("anonymous",)
    return base if request_tenant is None else ("within", base, request_tenant)


def partition(caller: dict[str, Any]) -> str:
    headers = {} if caller["credential"] is None else {"x-api-key": caller["credential"]}
    return partition_for(
        headers,
        secret=b"s" * 32,
        credential_headers=("x-api-key",),
        tenant=caller["tenant"],
        share_across_credentials=caller["share"],
        request_tenant=caller["request_tenant"],
        trust_request_tenant=caller["trust"],
    )


@fuzz(400)
@given(first=callers(), second=callers())
def test_two_callers_share_a_partition_exactly_when_the_rules_say_so(
    first: dict[str, Any], second: dict[str, Any]
) -> None:
    assert (partition(first) == partition(second)) is (model(first) == model(second))
    for caller in (first, second):
        named = partition(caller)
        # `cachekit purge --tenant` finds exactly the tenants the caller named (and no credential).
        assert {label for label in LABELS if partition_names_tenant(named, label)} == tenants(caller), named
        if caller["credential"] is not None:
            assert caller["credential"] not in named


def tenants(caller: dict[str, Any]) -> set[str]:
    """The tenant labels whose entries a caller's partition holds."""
    if caller["request_tenant"] is not None and caller["trust"]:
        return {caller["request_tenant"]}
    return {caller["tenant"], caller["request_tenant"]} - {None}

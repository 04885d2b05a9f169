"""Tenant and credential isolation of the response cache, as properties.

Two callers ("scopes") share one store. Each scope has an API key (or none), explicit tenants set three
ways (``CacheConfig(tenant=...)``, the ``x-cachekit-tenant`` header, ``cachekit.policy(tenant=...)``),
namespaces set the same three ways, ``share_across_credentials`` and ``trust_tenant_header``. An entry
written by one scope is served to the other exactly when both resolve to the same namespace and
partition:

* the client's base partition is its configured tenant; else ``shared`` when sharing across
  credentials is on; else the credential (``x-api-key`` for Anthropic, ``Authorization: Bearer`` for
  OpenAI), or ``anonymous`` without one;
* a per-request tenant (header, else policy) narrows that base to a sub-partition of its own, unless
  the client trusts it (``trust_tenant_header``): then it is the partition, as a configured tenant;
* the namespace is the header's, else the policy's, else the config's (``default``).

The raw credential never appears in a stored key or value, a response header, or a log record.

Requests go through plain ``httpx2`` clients (sync and async) and the real ``anthropic``/``openai``
SDKs (sync and async), over :class:`cachekit.testing.FakeUpstream`; outcomes are checked on the
``x-cachekit-cache`` header and the upstream's call count.

Each test takes a cache *layer*: today only the exact layer. A later layer (semantic) is added as one
more entry of :data:`LAYERS`, with the response header values that mean "served from this layer".
"""

from __future__ import annotations

import asyncio
import logging
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx2
import orjson
import pytest
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

import cachekit
from cachekit.stores import MemoryStore
from cachekit.testing import FakeUpstream
from tests.conftest import BASE_URLS, memory_transport, sdk_client
from tests.fuzzing import fuzz
from tests.requests import CHAT_URL, anthropic_messages, chat_question, openai_chat

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


# -- layers ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layer:
    """One cache layer under test: how to configure it, and what its hits say."""

    name: str
    config: Callable[..., cachekit.CacheConfig]  # (store, **CacheConfig fields) -> config
    hit: str  # the x-cachekit-cache value of a response served by this layer


def _exact_config(store: MemoryStore, **fields: Any) -> cachekit.CacheConfig:
    return cachekit.CacheConfig(store=store, ledger=False, **fields)


LAYERS = {"exact": Layer("exact", _exact_config, "hit")}


@pytest.fixture(params=sorted(LAYERS))
def layer(request: pytest.FixtureRequest) -> Layer:
    return LAYERS[request.param]


class RecordingStore(MemoryStore):
    """A memory store that keeps every key and value written."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[tuple[str, bytes]] = []

    def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        self.written.append((key, value))
        super().set(key, value, ttl=ttl)


# -- scopes ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scope:
    """Everything about one caller that may choose a partition or a namespace."""

    api_key: str | None
    share: bool = False
    config_tenant: str | None = None
    header_tenant: str | None = None
    policy_tenant: str | None = None
    config_namespace: str | None = None
    header_namespace: str | None = None
    policy_namespace: str | None = None
    trust: bool = False

    @property
    def request_tenant(self) -> str | None:
        return self.header_tenant or self.policy_tenant

    @property
    def namespace(self) -> str:
        return self.header_namespace or self.policy_namespace or self.config_namespace or "default"

    @property
    def partition(self) -> tuple[Any, ...]:
        if self.request_tenant is not None and self.trust:
            return ("tenant", self.request_tenant)
        base = self.base_partition
        return base if self.request_tenant is None else ("within", base, self.request_tenant)

    @property
    def base_partition(self) -> tuple[str, ...]:
        if self.config_tenant is not None:
            return ("tenant", self.config_tenant)
        if self.share:
            return ("shared",)
        if self.api_key is not None:
            return ("credential", self.api_key)
        return ("anonymous",)

    @property
    def identity(self) -> tuple[Any, ...]:
        """Two scopes share entries exactly when their identities are equal."""
        return (self.namespace, self.partition)

    def config(self, layer: Layer, store: MemoryStore) -> cachekit.CacheConfig:
        fields: dict[str, Any] = {
            "share_across_credentials": self.share,
            "tenant": self.config_tenant,
            "trust_tenant_header": self.trust,
        }
        if self.config_namespace is not None:
            fields["namespace"] = self.config_namespace
        return layer.config(store, **fields)

    def control_headers(self) -> dict[str, str]:
        headers = {}
        if self.header_tenant is not None:
            headers["x-cachekit-tenant"] = self.header_tenant
        if self.header_namespace is not None:
            headers["x-cachekit-namespace"] = self.header_namespace
        return headers


# Small pools, so that two scopes often agree on some fields and differ on others. Tenant labels that
# look like other partitions ("shared", "anonymous", a credential) must still be tenants of their own.
API_KEYS = ["sk-alpha-0001", "sk-beta-0002", "SK-ALPHA-0001"]
TENANTS = ["acme", "globex", "ACME", "shared", "anonymous", "sk-alpha-0001", "a:b"]
NAMESPACES = ["default", "eval", "prod", "a:b", "a%3Ab"]
UNICODE = ["ünïcødé", "租户", "a\u0301"]  # not for headers: only ASCII survives as a header value


def scopes(*, sdk: bool) -> st.SearchStrategy[Scope]:
    keys = st.sampled_from(API_KEYS) if sdk else st.sampled_from([*API_KEYS, None])

    def maybe(pool: list[str]) -> st.SearchStrategy[str | None]:
        return st.one_of(st.none(), st.sampled_from(pool))

    return st.builds(
        Scope,
        api_key=keys,
        share=st.booleans(),
        config_tenant=maybe(TENANTS + UNICODE),
        header_tenant=maybe(TENANTS),
        policy_tenant=maybe(TENANTS + UNICODE),
        config_namespace=maybe(NAMESPACES + UNICODE),
        header_namespace=maybe(NAMESPACES),
        policy_namespace=maybe(NAMESPACES + UNICODE),
        trust=st.booleans(),
    )


# -- requests and the four ways to send them -------------------------------------------------------

ENDPOINTS = ["anthropic", "chat", "responses"]
FLAVORS = ["httpx-sync", "httpx-async", "sdk-sync", "sdk-async"]
PROMPTS = ["What is the weather in Oslo?", "Say hi.", "Say hi!"]


def request_body(endpoint: str, prompt: str) -> dict[str, Any]:
    if endpoint == "anthropic":
        return {
            "model": "claude-sonnet-4-5",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": prompt}],
        }
    if endpoint == "chat":
        return {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": prompt}]}
    return {"model": "gpt-4.1-mini", "input": prompt}


_PATHS = {"anthropic": "/v1/messages", "chat": "/chat/completions", "responses": "/responses"}
_SDK_METHODS = {
    "anthropic": ("anthropic", "messages"),
    "chat": ("openai", "chat.completions"),
    "responses": ("openai", "responses"),
}


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass
class World:
    """One shared store and upstream, and the cache layer under test."""

    layer: Layer
    store: RecordingStore
    upstream: FakeUpstream

    @classmethod
    def new(cls, layer: Layer) -> World:
        return cls(layer, RecordingStore(), FakeUpstream())

    def send(self, flavor: str, endpoint: str, scope: Scope, body: dict[str, Any]) -> Reply:
        """Send ``body`` to ``endpoint`` as ``scope``, through a fresh client of ``flavor``."""
        config = scope.config(self.layer, self.store)
        if flavor.startswith("sdk"):
            return self._send_sdk(flavor == "sdk-async", endpoint, scope, config, body)
        return self._send_httpx(flavor == "httpx-async", endpoint, scope, config, body)

    def _send_httpx(
        self, is_async: bool, endpoint: str, scope: Scope, config: cachekit.CacheConfig, body: dict[str, Any]
    ) -> Reply:
        provider = "anthropic" if endpoint == "anthropic" else "openai"
        url = BASE_URLS[provider] + _PATHS[endpoint]
        headers = scope.control_headers()
        if scope.api_key is not None:
            if provider == "anthropic":
                headers["x-api-key"] = scope.api_key
            else:
                headers["authorization"] = f"Bearer {scope.api_key}"
        if provider == "anthropic":
            headers["anthropic-version"] = "2023-06-01"

        def reply(response: httpx2.Response) -> Reply:
            return Reply(response.status_code, dict(response.headers), response.content)

        policy = cachekit.policy(tenant=scope.policy_tenant, namespace=scope.policy_namespace)
        if not is_async:
            transport = cachekit.CachingTransport(self.upstream, cache=config)
            with httpx2.Client(transport=transport) as client, policy:
                return reply(client.post(url, json=body, headers=headers))

        async def main() -> Reply:
            transport = cachekit.AsyncCachingTransport(self.upstream, cache=config)
            async with httpx2.AsyncClient(transport=transport) as client:
                with policy:
                    return reply(await client.post(url, json=body, headers=headers))

        return asyncio.run(main())

    def _send_sdk(
        self, is_async: bool, endpoint: str, scope: Scope, config: cachekit.CacheConfig, body: dict[str, Any]
    ) -> Reply:
        provider, resource = _SDK_METHODS[endpoint]
        client = sdk_client(
            provider,
            "async" if is_async else "sync",
            transport=self.upstream,
            api_key=scope.api_key,
            cache=config,
        )
        target: Any = client
        for part in resource.split("."):
            target = getattr(target, part)
        create = target.with_raw_response.create
        extra = scope.control_headers()
        policy = cachekit.policy(tenant=scope.policy_tenant, namespace=scope.policy_namespace)

        def reply(raw: Any) -> Reply:
            return Reply(raw.status_code, dict(raw.headers), raw.http_response.content)

        if not is_async:
            try:
                with policy:
                    return reply(create(**body, extra_headers=extra))
            finally:
                client.close()

        async def main() -> Reply:
            try:
                with policy:
                    return reply(await create(**body, extra_headers=extra))
            finally:
                await client.close()

        return asyncio.run(main())


def outcome(world: World, reply: Reply) -> str:
    """``hit`` (served by the layer under test) or ``miss``; anything else fails the test."""
    assert reply.status == 200, reply.body[:300]
    value = reply.headers["x-cachekit-cache"]
    assert value in (world.layer.hit, "miss"), value
    return "hit" if value == world.layer.hit else "miss"


# -- the isolation property ------------------------------------------------------------------------


@dataclass(frozen=True)
class Trial:
    flavor: str
    endpoint: str
    first: Scope
    second: Scope
    same_request: bool


@st.composite
def trials(draw: st.DrawFn) -> Trial:
    flavor = draw(st.sampled_from(FLAVORS))
    sdk = flavor.startswith("sdk")
    first = draw(scopes(sdk=sdk))
    # Half the time the second scope is a copy of the first with one or two fields changed, so the
    # interesting "almost the same caller" pairs are common.
    if draw(st.booleans()):
        second = draw(scopes(sdk=sdk))
    else:
        changes = draw(
            st.dictionaries(st.sampled_from(list(Scope.__dataclass_fields__)), st.none(), max_size=2)
        )
        fresh = draw(scopes(sdk=sdk))
        second = Scope(
            **{f: getattr(fresh if f in changes else first, f) for f in Scope.__dataclass_fields__}
        )
    return Trial(flavor, draw(st.sampled_from(ENDPOINTS)), first, second, draw(st.booleans()))


@fuzz(150)
@given(trial=trials())
@pytest.mark.parametrize("layer_name", sorted(LAYERS))
def test_an_entry_is_served_only_within_its_partition(layer_name: str, trial: Trial) -> None:
    world = World.new(LAYERS[layer_name])
    body = request_body(trial.endpoint, PROMPTS[0])
    other = body if trial.same_request else request_body(trial.endpoint, PROMPTS[1])

    first = world.send(trial.flavor, trial.endpoint, trial.first, body)
    assert outcome(world, first) == "miss"
    assert world.upstream.calls == 1

    shared = trial.same_request and trial.first.identity == trial.second.identity
    second = world.send(trial.flavor, trial.endpoint, trial.second, other)
    assert outcome(world, second) == ("hit" if shared else "miss"), (
        trial.first.identity,
        trial.second.identity,
    )
    assert world.upstream.calls == (1 if shared else 2)
    if shared:
        assert second.body == first.body

    # Both callers' own entries stay theirs: each repeat is a hit, answered with its own first reply.
    calls = world.upstream.calls
    again = world.send(trial.flavor, trial.endpoint, trial.first, body)
    assert outcome(world, again) == "hit"
    assert again.body == first.body
    again = world.send(trial.flavor, trial.endpoint, trial.second, other)
    assert outcome(world, again) == "hit"
    assert again.body == second.body
    assert world.upstream.calls == calls


# -- the same rules, one readable case each ---------------------------------------------------------

A, B = "sk-alpha-0001", "sk-beta-0002"
CASES = {
    "same key": (Scope(A), Scope(A), True),
    "different keys": (Scope(A), Scope(B), False),
    "keys differing in case": (Scope(A), Scope(A.upper()), False),
    "same config tenant, different keys": (
        Scope(A, config_tenant="acme"),
        Scope(B, config_tenant="acme"),
        True,
    ),
    "different config tenants, same key": (
        Scope(A, config_tenant="acme"),
        Scope(A, config_tenant="globex"),
        False,
    ),
    "trusted on one side only": (
        Scope(A, header_tenant="acme", trust=True),
        Scope(B, header_tenant="acme"),
        False,
    ),
    "different header tenants": (Scope(A, header_tenant="acme"), Scope(A, header_tenant="globex"), False),
    "same header tenant, same key": (Scope(A, header_tenant="acme"), Scope(A, header_tenant="acme"), True),
    "different policy tenants": (Scope(A, policy_tenant="acme"), Scope(A, policy_tenant="globex"), False),
    "header and policy, one label": (
        Scope(A, policy_tenant="a"),
        Scope(A, header_tenant="a"),
        True,
    ),
    "tenant set three ways": (Scope(A, config_tenant="a"), Scope(B, header_tenant="a", trust=True), True),
    "header tenant within the config tenant": (
        Scope(A, config_tenant="acme", header_tenant="globex"),
        Scope(A, config_tenant="acme"),
        False,
    ),
    "policy tenant cannot leave the config tenant": (
        Scope(A, config_tenant="acme", policy_tenant="globex"),
        Scope(B, config_tenant="globex"),
        False,
    ),
    "trusted policy tenant wins over config": (
        Scope(A, config_tenant="acme", policy_tenant="globex", trust=True),
        Scope(B, config_tenant="globex"),
        True,
    ),
    "tenant named like the sharing partition": (
        Scope(A, share=True),
        Scope(A, config_tenant="shared"),
        False,
    ),
    "tenant vs no tenant": (Scope(A, config_tenant="acme"), Scope(A), False),
    "sharing across keys": (Scope(A, share=True), Scope(B, share=True), True),
    "sharing on one side only": (Scope(A, share=True), Scope(B), False),
    "sharing does not join tenants": (
        Scope(A, share=True, config_tenant="acme"),
        Scope(B, share=True, config_tenant="globex"),
        False,
    ),
    "different config namespaces": (Scope(A, config_namespace="eval"), Scope(A), False),
    "namespace 'default' is the default": (Scope(A, config_namespace="default"), Scope(A), True),
    "different header namespaces": (
        Scope(A, header_namespace="eval"),
        Scope(A, header_namespace="prod"),
        False,
    ),
    "different policy namespaces": (
        Scope(A, policy_namespace="eval"),
        Scope(A, policy_namespace="prod"),
        False,
    ),
    "namespace set two ways": (Scope(A, policy_namespace="eval"), Scope(A, header_namespace="eval"), True),
    "namespaces apart even when shared": (
        Scope(A, share=True, config_namespace="eval"),
        Scope(B, share=True, config_namespace="prod"),
        False,
    ),
}
# A per-request tenant narrows the key's partition, since any code can set it, unless the client trusts
# it (issue 15, item 11). With a configured tenant it narrows that tenant's partition, for every key.
for _way in ("header", "policy"):
    for _trust in (False, True):
        _tenant: dict[str, Any] = {f"{_way}_tenant": "acme", "trust": _trust}
        CASES[f"same {'trusted ' * _trust}{_way} tenant, different keys"] = (
            Scope(A, **_tenant),
            Scope(B, **_tenant),
            _trust,
        )
        CASES[f"{_way} tenant in one config tenant, {'trusted' if _trust else 'different keys'}"] = (
            Scope(A, config_tenant="x", **_tenant),
            Scope(B, config_tenant="x", **_tenant),
            True,
        )


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_partition_rules(layer: Layer, case: str, flavor: str) -> None:
    first, second, shared = CASES[case]
    assert (first.identity == second.identity) is shared  # the model agrees with the table
    world = World.new(layer)
    endpoint = ENDPOINTS[sorted(CASES).index(case) % len(ENDPOINTS)]
    body = request_body(endpoint, PROMPTS[0])
    assert outcome(world, world.send(flavor, endpoint, first, body)) == "miss"
    assert outcome(world, world.send(flavor, endpoint, second, body)) == ("hit" if shared else "miss")
    assert world.upstream.calls == (1 if shared else 2)


# -- credentials are never kept --------------------------------------------------------------------

_KEY_CHARS = string.ascii_letters + string.digits + "-_"
secret_keys = st.text(st.sampled_from(_KEY_CHARS), min_size=12, max_size=40).map(lambda s: "sk-SECRET-" + s)


def _leaks(
    world: World, secrets: list[str], replies: list[Reply], records: list[logging.LogRecord]
) -> list[str]:
    found = []
    for secret in secrets:
        raw = secret.encode()
        for key, value in world.store.written:
            if secret in key or raw in value:
                found.append(f"store entry {key!r}")
        for reply in replies:
            if any(secret in f"{k}: {v}" for k, v in reply.headers.items()):
                found.append("a response header")
        for record in records:
            if secret in record.getMessage() or (record.exc_text and secret in record.exc_text):
                found.append(f"log record {record.name}: {record.getMessage()!r}")
    return found


@fuzz(60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    flavor=st.sampled_from(FLAVORS),
    endpoint=st.sampled_from(ENDPOINTS),
    keys=st.lists(secret_keys, min_size=2, max_size=3, unique=True),
    how=st.sampled_from(["credential", "tenant", "shared"]),
    stream=st.booleans(),
)
@pytest.mark.parametrize("layer_name", sorted(LAYERS))
def test_credentials_are_never_stored_or_logged(
    layer_name: str,
    flavor: str,
    endpoint: str,
    keys: list[str],
    how: str,
    stream: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.clear()
    world = World.new(LAYERS[layer_name])
    body = request_body(endpoint, PROMPTS[0])
    if stream and not flavor.startswith("sdk"):
        body["stream"] = True  # streamed answers are recorded and stored too
    replies = []
    with caplog.at_level(logging.DEBUG):
        for key in keys:
            scope = Scope(key, share=how == "shared", config_tenant="acme" if how == "tenant" else None)
            for _ in range(2):
                replies.append(world.send(flavor, endpoint, scope, body))
    records = [r for r in caplog.records if r.name.split(".")[0] == "cachekit"]
    assert records, "cachekit logged nothing at DEBUG: the log scan would prove nothing"
    assert world.store.written, "nothing was stored: the store scan would prove nothing"
    assert _leaks(world, keys, replies, records) == []
    # And the outcomes: a miss per partition, then hits.
    outcomes = [outcome(world, r) for r in replies]
    if how == "credential":
        assert outcomes == ["miss", "hit"] * len(keys)
        assert world.upstream.calls == len(keys)
    else:
        assert outcomes == ["miss"] + ["hit"] * (2 * len(keys) - 1)
        assert world.upstream.calls == 1


def test_the_leak_scan_can_fail(layer: Layer) -> None:
    world = World.new(layer)
    world.store.set("k", b"... sk-SECRET-xyz ...")
    record = logging.LogRecord(
        "cachekit.pipeline", logging.DEBUG, __file__, 1, "key=%s", ("sk-SECRET-xyz",), None
    )
    found = _leaks(world, ["sk-SECRET-xyz"], [Reply(200, {"x": "sk-SECRET-xyz"}, b"")], [record])
    assert len(found) == 3


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_partitions_are_keyed_by_the_store_secret(layer: Layer, endpoint: str) -> None:
    """The same credential and request give different keys in two stores (each has its own secret), so
    a key cannot be derived from a credential without the store."""
    keys = []
    for _ in range(2):
        world = World.new(layer)
        world.send("httpx-sync", endpoint, Scope(A), request_body(endpoint, PROMPTS[0]))
        [(key, _)] = world.store.written
        keys.append(key)
    assert keys[0] != keys[1]


def test_keys_are_keyed_by_the_store_secret() -> None:
    """Someone who can guess a prompt cannot compute its key without the store's secret, even for an
    explicit tenant (whose partition label is in the clear)."""
    keys = []
    for _ in range(2):
        store = MemoryStore()
        config = cachekit.CacheConfig(store=store, ledger=False, tenant="acme")
        with httpx2.Client(transport=cachekit.CachingTransport(FakeUpstream(), cache=config)) as client:
            client.post(CHAT_URL, json=chat_question("same question"))
        [entry] = list(store.entries(""))
        keys.append(entry.key)
    assert keys[0].rsplit(":", 1)[0] == keys[1].rsplit(":", 1)[0]  # same namespace and partition
    assert keys[0] != keys[1]


def test_openai_credential_headers_partition(layer: Layer) -> None:
    """Every credential header counts: the same bearer token with different ``api-key`` headers (an
    Azure-style gateway key) are two partitions."""
    world = World.new(layer)
    url = BASE_URLS["openai"] + "/chat/completions"
    body = orjson.dumps(request_body("chat", PROMPTS[0]))
    answers = []
    for gateway_key in ("gw-1", "gw-2", "gw-1"):
        transport = cachekit.CachingTransport(world.upstream, cache=layer.config(world.store))
        with httpx2.Client(transport=transport) as client:
            response = client.post(
                url,
                content=body,
                headers={
                    "content-type": "application/json",
                    "authorization": f"Bearer {A}",
                    "api-key": gateway_key,
                },
            )
        answers.append(response.headers["x-cachekit-cache"])
    assert answers == ["miss", "miss", layer.hit]
    assert world.upstream.calls == 2


def test_every_credential_header_partitions() -> None:
    """A gateway's fixed x-api-key must not make two users' bearer tokens share entries."""
    upstream = FakeUpstream()
    with httpx2.Client(transport=memory_transport(upstream)) as client:
        base = {"anthropic-version": "2023-06-01", "x-api-key": "gateway-placeholder"}
        for user in ("alice", "bob"):
            r = client.post(
                "https://api.anthropic.com/v1/messages",
                json=anthropic_messages(),
                headers={**base, "authorization": f"Bearer {user}"},
            )
            assert r.headers["x-cachekit-cache"] == "miss"
    assert upstream.calls == 2


def test_configured_credential_headers_partition() -> None:
    """A credential header the configuration names (a gateway's own) partitions like the built-in ones
    (found in review: it failed before its fix)."""
    upstream = FakeUpstream()
    transport = memory_transport(upstream, credential_headers=("X-Portkey-Api-Key",))
    with httpx2.Client(transport=transport) as client:
        outcomes = [
            client.post(
                "https://api.openai.com/v1/chat/completions",
                json=openai_chat(),
                headers={"x-portkey-api-key": who},
            ).headers["x-cachekit-cache"]
            for who in ("alice", "bob", "alice")
        ]
    assert outcomes == ["miss", "miss", "hit"]


def test_empty_config_tenant_does_not_join_credentials(layer: Layer) -> None:
    try:
        layer.config(MemoryStore(), tenant="")
    except cachekit.ConfigError:
        return  # rejecting an empty tenant is a fix too
    world = World.new(layer)
    body = request_body("anthropic", PROMPTS[0])
    world.send("httpx-sync", "anthropic", Scope(A, config_tenant=""), body)
    second = world.send("httpx-sync", "anthropic", Scope(B, config_tenant=""), body)
    assert outcome(world, second) == "miss"
    assert world.upstream.calls == 2

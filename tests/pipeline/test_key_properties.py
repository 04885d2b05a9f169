"""What the key covers: every difference that can change the answer, and none the provider ignores.

The parameters come from the installed SDKs' ``create`` signatures at test time, so a parameter an SDK
adds later is covered without editing this file (a value table below gives realistic values where the
SDK needs them; anything else gets generic JSON values). Each request goes through cachekit with the
real SDK; its exact key is the ``x-cachekit-key`` cachekit answers with, and its semantic partition is
:func:`cachekit.semantic.partition.split_request` of the body the SDK sent.
"""

from __future__ import annotations

import copy
import inspect
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx2
import numpy as np
import openai
import orjson
import pytest
from anthropic.resources.beta.messages import Messages as BetaMessages
from anthropic.resources.messages import Messages
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.resources.chat.completions import Completions
from openai.resources.responses import Responses

import cachekit
from cachekit._types import Dialect
from cachekit.providers import server_state
from cachekit.semantic import SemanticConfig
from cachekit.semantic.partition import SemanticRequest, split_request
from cachekit.shape.canonical import CanonicalOptions
from cachekit.stores import MemoryStore
from cachekit.testing import FakeUpstream
from tests.conftest import Harness, sdk_client
from tests.requests import anthropic_messages, openai_chat, openai_responses

SETTINGS = settings(
    deadline=None, max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

# Parameters that choose the *form* of the answer (one document or a stream of events), not the
# answer: one entry serves both forms, by design (docs/exact.md).
FORM = frozenset({"stream", "stream_options"})
# Arguments of every SDK method that are not request parameters.
NOT_PARAMETERS = frozenset({"self", "extra_headers", "extra_query", "extra_body", "timeout"})

QUESTION = "Should I pack an umbrella for Paris?"
REWORDED = "Should I pack an umbrella for Paris, please?"  # the same question, as the guards see it
SCHEMA = {
    "type": "object",
    "properties": {"reasoning": {"type": "string"}, "answer": {"type": "boolean"}},
    "required": ["reasoning", "answer"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class Api:
    """One SDK method: where it lives, its dialect and a minimal request."""

    provider: str
    resource: str  # attribute path on the client, e.g. "chat.completions"
    method: Callable[..., Any]  # the SDK's unbound method, for its signature
    dialect: Dialect
    base: Callable[[], dict[str, Any]]

    def parameters(self) -> list[str]:
        return [p for p in inspect.signature(self.method).parameters if p not in NOT_PARAMETERS]


def anthropic_base() -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": QUESTION}],
    }


def chat_base() -> dict[str, Any]:
    return {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": QUESTION}]}


def responses_base() -> dict[str, Any]:
    return {"model": "gpt-4.1-mini", "input": [{"role": "user", "content": QUESTION}]}


APIS = {
    "anthropic messages": Api(
        "anthropic",
        "messages",
        Messages.create,
        "anthropic_messages",
        anthropic_base,
    ),
    "anthropic beta messages": Api(
        "anthropic",
        "beta.messages",
        BetaMessages.create,
        "anthropic_messages",
        anthropic_base,
    ),
    "openai chat": Api(
        "openai",
        "chat.completions",
        Completions.create,
        "openai_chat",
        chat_base,
    ),
    "openai responses": Api("openai", "responses", Responses.create, "openai_responses", responses_base),
}

# -- values ----------------------------------------------------------------------------------------

words = st.text("abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8)
generic = (
    words
    | st.integers(0, 10_000)
    | st.booleans()
    | st.lists(words, min_size=1, max_size=3)
    | st.dictionaries(words, words | st.integers(0, 9), min_size=1, max_size=3)
)


def earlier_turns(first_role: str) -> st.SearchStrategy[list[dict[str, Any]]]:
    """Conversations that differ before the question (the question itself is compared by meaning)."""
    return words.map(
        lambda said: [
            {"role": first_role, "content": f"Earlier: {said}"},
            {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": QUESTION},
        ]
    )


def tools(kind: str) -> st.SearchStrategy[list[dict[str, Any]]]:
    def build(name: str) -> dict[str, Any]:
        if kind == "anthropic":
            return {"name": name, "description": "Look it up.", "input_schema": SCHEMA}
        if kind == "chat":
            return {"type": "function", "function": {"name": name, "parameters": SCHEMA}}
        return {"type": "function", "name": name, "parameters": SCHEMA, "strict": True}

    return st.lists(words.map(build), min_size=1, max_size=2)


# Realistic values where the SDK (or the meaning) needs them; every other parameter gets `generic`.
VALUES: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "anthropic_messages": {
        "messages": earlier_turns("user"),
        "model": words.map(lambda w: f"claude-{w}"),
        "max_tokens": st.integers(1, 4096),
        "system": words | st.lists(words.map(lambda t: {"type": "text", "text": t}), min_size=1, max_size=2),
        "tools": tools("anthropic"),
        "tool_choice": words.map(lambda n: {"type": "tool", "name": n}),
        "thinking": st.integers(1024, 4096).map(lambda b: {"type": "enabled", "budget_tokens": b}),
        "betas": st.lists(words, min_size=1, max_size=2),
        "user_profile_id": words,
        "workspace_id": words,
        "stop_sequences": st.lists(words, min_size=1, max_size=2),
        "output_config": st.sampled_from(["low", "high"]).map(lambda e: {"effort": e}),
        "metadata": words.map(lambda u: {"user_id": u}),
    },
    "openai_chat": {
        "messages": earlier_turns("system"),
        "model": words.map(lambda w: f"gpt-{w}"),
        "tools": tools("chat"),
        "functions": words.map(lambda n: [{"name": n, "parameters": SCHEMA}]),
        "temperature": st.floats(0, 2).map(lambda t: round(t, 2) + 0.0),
        "top_p": st.floats(0, 1).map(lambda t: round(t, 2) + 0.0),
        "frequency_penalty": st.floats(-2, 2).map(lambda t: round(t, 2) + 0.0),
        "presence_penalty": st.floats(-2, 2).map(lambda t: round(t, 2) + 0.0),
        "stop": st.lists(words, min_size=1, max_size=2),
        "response_format": words.map(
            lambda n: {"type": "json_schema", "json_schema": {"name": n, "schema": SCHEMA}}
        ),
    },
    "openai_responses": {
        "input": earlier_turns("developer"),
        "model": words.map(lambda w: f"gpt-{w}"),
        "tools": tools("responses"),
        "temperature": st.floats(0, 2).map(lambda t: round(t, 2) + 0.0),
        "top_p": st.floats(0, 1).map(lambda t: round(t, 2) + 0.0),
        "text": words.map(lambda n: {"format": {"type": "json_schema", "name": n, "schema": SCHEMA}}),
        "include": st.lists(words, min_size=1, max_size=2),
    },
}


def values_for(dialect: str, parameter: str) -> st.SearchStrategy[Any]:
    return VALUES[dialect].get(parameter, generic)


def _same_json(a: Any, b: Any) -> bool:
    """Equal as JSON (key order aside; ``1 == 1.0 == True`` is not equal here)."""
    return _json(a) == _json(b)


# -- calls -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sent:
    """One call: what cachekit answered (outcome, key) and what the SDK sent (body, headers)."""

    outcome: str
    key: str | None
    body: dict[str, Any]
    headers: dict[str, str]
    status: int


class OneDirection:
    """An embedder that puts every question at the same point: any two are a perfect match, so a
    request is served semantically exactly when it shares a partition with a stored one (the
    embedding model plays no part in what is tested here)."""

    model_id = "test/one-direction"
    dimension = 4

    def embed(self, texts: Sequence[str]) -> Any:
        return np.tile(np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32), (len(texts), 1))


class World:
    """Real sync SDK clients through one cachekit cache (exact and semantic), recording what each
    SDK sent. Each example asks in its own namespace, so examples never see each other's entries."""

    def __init__(self) -> None:
        self.upstream = FakeUpstream()
        semantic = SemanticConfig(embedder=OneDirection(), allow_sampling=True)
        self.cache = cachekit.Cache(
            cachekit.CacheConfig(store=MemoryStore(), ledger=False, semantic=semantic)
        )
        self.seen: list[httpx2.Request] = []
        self.clients: list[Any] = []

    def client(self, provider: str, **options: Any) -> Any:
        client = sdk_client(
            provider,
            transport=self.upstream,
            http_options={"event_hooks": {"request": [self.seen.append]}},
            api_key="sk-test",
            cache=self.cache,
            **options,
        )
        self.clients.append(client)
        return client

    def call(self, client: Any, resource: str, namespace: str, **kwargs: Any) -> Sent:
        create = client
        for part in resource.split("."):
            create = getattr(create, part)
        headers = {**kwargs.pop("extra_headers", {}), "x-cachekit-namespace": namespace}
        try:
            response = create.with_raw_response.create(**kwargs, extra_headers=headers)
            answered, status = response.headers, response.status_code
        except (anthropic.APIStatusError, openai.APIStatusError) as exc:  # keyed all the same
            answered, status = exc.response.headers, exc.status_code
        request = self.seen[-1]
        sent = {k: v for k, v in request.headers.items() if not k.startswith("x-cachekit")}
        return Sent(
            answered["x-cachekit-cache"],
            answered.get("x-cachekit-key"),
            orjson.loads(request.content),
            sent,
            status,
        )

    def __enter__(self) -> World:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for client in self.clients:
            client.close()
        self.cache.close()


@pytest.fixture
def world() -> Iterator[World]:
    with World() as w:
        yield w


def partition(api: Api, body: dict[str, Any]) -> SemanticRequest | str:
    return split_request(
        api.dialect,
        body,
        scope=("namespace", "tenant"),
        options=CanonicalOptions(),
        allow_sampling=True,
    )


def assert_not_shared(api: Api, a: Sent, b: Sent, what: str) -> None:
    """``b``, asked after ``a``, was answered by neither cache layer, and their keys differ."""
    assert b.outcome in ("miss", "bypass"), f"{what}: served {b.outcome!r}"
    assert a.key is None or a.key != b.key, f"{what}: one exact key"
    if _json(a.body) != _json(b.body):  # a difference in the body: split_request itself tells it apart
        pa, pb = partition(api, a.body), partition(api, b.body)
        if isinstance(pa, SemanticRequest) and isinstance(pb, SemanticRequest):
            assert pa.partition != pb.partition, f"{what}: one semantic partition"


def _json(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


# -- every parameter of every create method ------------------------------------------------------

CASES = [
    (name, parameter) for name, api in APIS.items() for parameter in api.parameters() if parameter not in FORM
]


def test_the_sdks_have_the_parameters_this_file_expects() -> None:
    """The enumeration is live: it sees the parameters that matter most (and never lists none)."""
    found = {name: set(api.parameters()) for name, api in APIS.items()}
    assert {"model", "messages", "max_tokens", "system", "tools", "output_config"} <= found[
        "anthropic messages"
    ]
    assert {"betas", "mcp_servers"} <= found["anthropic beta messages"]
    assert {"temperature", "response_format", "seed", "logit_bias"} <= found["openai chat"]
    assert {"text", "instructions", "reasoning", "truncation"} <= found["openai responses"]


@SETTINGS
@pytest.mark.parametrize(("api_name", "parameter"), CASES, ids=[f"{a}:{p}" for a, p in CASES])
@given(data=st.data())
def test_a_parameter_that_differs_never_shares_a_key(
    world: World, api_name: str, parameter: str, data: st.DataObject
) -> None:
    api = APIS[api_name]
    client = world.client(api.provider)
    strategy = values_for(api.dialect, parameter)
    first = data.draw(strategy, label="first")
    second = data.draw(strategy.filter(lambda v: not _same_json(v, first)), label="second")
    namespace = uuid.uuid4().hex

    def ask(value: Any, question: str = QUESTION) -> Sent:
        body = reworded({**api.base(), parameter: value}, question)
        return world.call(client, api.resource, namespace, **body)

    a, b = ask(first), ask(second)
    # The SDK sent the difference (in the body or as a header): otherwise this case proves nothing.
    assert (_json(a.body), _behaviour_headers(a)) != (_json(b.body), _behaviour_headers(b))
    assert_not_shared(api, a, b, f"{api_name} {parameter}={first!r} vs {second!r}")
    if a.outcome == "bypass":
        # Never looked up nor stored: only a request on server state or live data goes so by default.
        assert server_state(api.dialect, a.body), a.body
        return
    if a.status == 200 and isinstance(partition(api, a.body), SemanticRequest):
        # ``a`` was indexed: its own partition serves another wording, so ``b`` was refused because
        # of its partition, not for want of a stored answer.
        assert ask(first, REWORDED).outcome == "semantic"


def reworded(body: dict[str, Any], question: str) -> dict[str, Any]:
    """``body`` with its last turn asking ``question`` (the same question reworded, or as it is)."""
    key = "input" if "input" in body else "messages"
    turns = body[key]
    if question == QUESTION or not isinstance(turns, list) or not isinstance(turns[-1], dict):
        return body
    return {**body, key: [*turns[:-1], {**turns[-1], "content": question}]}


def per_api(test: Callable[..., None]) -> Callable[..., None]:
    """A property over each API: ``test(world, api_name, data)``, with hypothesis drawing from ``data``."""
    return pytest.mark.parametrize("api_name", APIS)(SETTINGS(given(data=st.data())(test)))


def _behaviour_headers(sent: Sent) -> dict[str, str]:
    return {k: v for k, v in sent.headers.items() if k not in VOLATILE_HEADERS}


# -- headers that select behaviour ----------------------------------------------------------------

BEHAVIOUR_HEADERS = {
    "anthropic": (
        "anthropic-version",
        "anthropic-beta",
        "anthropic-workspace-id",
        "anthropic-user-profile-id",
    ),
    "openai": ("openai-organization", "openai-project", "openai-beta"),
}
# Headers the SDKs send that say nothing about the answer: how it was called, from where, how often.
VOLATILE_HEADERS = frozenset(
    {
        "user-agent",
        "idempotency-key",
        "x-stainless-arch",
        "x-stainless-async",
        "x-stainless-lang",
        "x-stainless-os",
        "x-stainless-package-version",
        "x-stainless-runtime",
        "x-stainless-runtime-version",
        "x-stainless-retry-count",
        "x-stainless-read-timeout",
        "x-stainless-timeout",
        "x-stainless-raw-response",
        "x-stainless-helper",
        "x-stainless-helper-method",
        "x-stainless-stream-helper",
        "content-length",
    }
)


@per_api
def test_a_behaviour_header_that_differs_never_shares_a_key(
    world: World, api_name: str, data: st.DataObject
) -> None:
    api = APIS[api_name]
    client = world.client(api.provider)
    header = data.draw(st.sampled_from(BEHAVIOUR_HEADERS[api.provider]), label="header")
    first, second = data.draw(st.lists(words, min_size=2, max_size=2, unique=True), label="values")
    namespace = uuid.uuid4().hex

    def ask(value: str, question: str = QUESTION) -> Sent:
        body = reworded(api.base(), question)
        return world.call(client, api.resource, namespace, **body, extra_headers={header: value})

    a, b = ask(first), ask(second)
    assert a.outcome == "miss"
    assert a.key is not None
    assert_not_shared(api, a, b, f"{header}: {first} vs {second}")
    # ``a`` was stored and indexed: the same header with another wording is served by the semantic
    # layer, so ``b`` was refused because of its partition, not for want of a stored answer.
    assert ask(first, REWORDED).outcome == "semantic"


# -- differences the provider ignores ------------------------------------------------------------


class Schema(dict[str, Any]):
    """A JSON Schema in a generated body: its key order is meaning, so it is never shuffled."""


# Where the rich bodies below hold their schemas ("*": every item of a list).
SCHEMA_PATHS = {
    "anthropic_messages": (("tools", "*", "input_schema"), ("output_config", "format", "schema")),
    "openai_chat": (("tools", "*", "function", "parameters"), ("response_format", "json_schema", "schema")),
    "openai_responses": (("tools", "*", "parameters"), ("text", "format", "schema")),
}
STRUCTURED_OUTPUT = {
    "anthropic_messages": (
        "output_config",
        {"effort": "low", "format": {"type": "json_schema", "schema": SCHEMA}},
    ),
    "openai_chat": (
        "response_format",
        {"type": "json_schema", "json_schema": {"name": "out", "strict": True, "schema": SCHEMA}},
    ),
    "openai_responses": (
        "text",
        {"format": {"type": "json_schema", "name": "out", "strict": True, "schema": SCHEMA}},
    ),
}
# Number parameters of each SDK method (Anthropic's SDK no longer lists its sampling parameters).
NUMBERS: dict[str, tuple[str, ...]] = {
    "anthropic_messages": (),
    "openai_chat": ("temperature", "top_p", "frequency_penalty", "presence_penalty"),
    "openai_responses": ("temperature", "top_p"),
}
RICH = {
    "anthropic_messages": anthropic_messages,
    "openai_chat": openai_chat,
    "openai_responses": openai_responses,
}
# The same call's arguments, written three ways (spacing and key order: one JSON value).
ARGUMENTS = ('{"city": "Paris", "days": 3}', '{"days":3,"city":"Paris"}', '{ "city" : "Paris" , "days" : 3 }')


def mark_schemas(value: Any, path: tuple[str, ...]) -> Any:
    """``value`` with the schema at ``path`` wrapped as :class:`Schema`."""
    if not path:
        return Schema(value)
    if path[0] == "*":
        return [mark_schemas(item, path[1:]) for item in value]
    return {**value, path[0]: mark_schemas(value[path[0]], path[1:])}


@st.composite
def rich_body(draw: st.DrawFn, api: Api) -> dict[str, Any]:
    """A realistic request (tests/requests.py) with structured output, nested objects everywhere the
    API has them, integral floats written either way and tool-call arguments spaced either way."""
    body = RICH[api.dialect]()
    name, value = STRUCTURED_OUTPUT[api.dialect]
    body[name] = copy.deepcopy(value)
    for number in NUMBERS[api.dialect]:
        body[number] = draw(st.sampled_from([1, 1.0]))
    if api.dialect == "openai_chat":
        body["messages"][2]["tool_calls"][0]["function"]["arguments"] = draw(st.sampled_from(ARGUMENTS))
    elif api.dialect == "openai_responses":
        body["input"][1]["arguments"] = draw(st.sampled_from(ARGUMENTS))
    for path in SCHEMA_PATHS[api.dialect]:
        body = mark_schemas(body, path)
    return body


def rebuilt(value: Any, on_schema: Callable[[Schema], Any], items: Callable[[dict[str, Any]], Any]) -> Any:
    """``value`` rebuilt with ``on_schema`` applied to its schemas and each object's members taken
    from ``items`` (in the order it gives)."""
    if isinstance(value, Schema):
        return on_schema(value)
    if isinstance(value, dict):
        return {k: rebuilt(v, on_schema, items) for k, v in items(value)}
    if isinstance(value, list):
        return [rebuilt(v, on_schema, items) for v in value]
    return value


def shuffled(data: st.DataObject, value: Any) -> Any:
    """``value`` with the keys of every object in a drawn order, except inside schemas."""
    return rebuilt(value, dict, lambda obj: data.draw(st.permutations(list(obj.items()))))


def reversed_properties(value: Any) -> Any:
    """``value`` with the properties of every schema in reverse order."""

    def reverse(schema: Schema) -> dict[str, Any]:
        return {**schema, "properties": dict(reversed(list(schema["properties"].items())))}

    return rebuilt(value, reverse, dict.items)


@per_api
def test_differences_the_provider_ignores_share_a_key(
    world: World, api_name: str, data: st.DataObject
) -> None:
    """Key order outside schemas, integral floats, argument spacing, SDK volatile headers, the
    answer's form (``stream``), client options that only shape the HTTP call."""
    api = APIS[api_name]
    first, second = shuffled(data, data.draw(rich_body(api))), shuffled(data, data.draw(rich_body(api)))
    namespace = uuid.uuid4().hex
    a = world.call(world.client(api.provider), api.resource, namespace, **first)
    options = data.draw(
        st.fixed_dictionaries(
            {},
            optional={
                "timeout": st.floats(5, 600),
                "max_retries": st.integers(0, 3),
                "default_headers": words.map(lambda w: {"user-agent": f"app/{w}", "x-stainless-lang": w}),
            },
        ),
        label="client options",
    )
    extra = data.draw(st.fixed_dictionaries({}, optional={"idempotency-key": words}), label="extra headers")
    b = world.call(
        world.client(api.provider, **options), api.resource, namespace, **second, extra_headers=extra
    )
    assert a.key is not None
    assert a.key == b.key
    assert b.outcome == "hit"
    pa, pb = partition(api, a.body), partition(api, b.body)
    assert isinstance(pa, SemanticRequest)
    assert isinstance(pb, SemanticRequest)
    assert pa.partition == pb.partition


@per_api
def test_schema_property_order_never_shares_a_key(world: World, api_name: str, data: st.DataObject) -> None:
    """Structured output is generated in property order: a reordered schema is another request."""
    api = APIS[api_name]
    body = data.draw(rich_body(api))
    namespace = uuid.uuid4().hex
    client = world.client(api.provider)
    a = world.call(client, api.resource, namespace, **shuffled(data, body))
    b = world.call(client, api.resource, namespace, **reversed_properties(body))
    assert_not_shared(api, a, b, "schema properties reversed")


def test_the_form_of_the_answer_shares_a_key(world: World) -> None:
    """``stream`` chooses one document or a stream of events: one entry serves both."""
    client = world.client("openai")
    a = world.call(client, "chat.completions", "form", **chat_base())
    b = world.call(client, "chat.completions", "form", **chat_base(), stream=True)
    assert a.key == b.key
    assert b.outcome == "hit"


# -- numbers that are equal (item 6), with sync and async SDKs -----------------------------------

EQUAL_NUMBERS = {
    "anthropic": ("messages", anthropic_base, ("temperature", "top_p")),
    "openai chat": (
        "chat.completions",
        chat_base,
        ("temperature", "top_p", "frequency_penalty", "presence_penalty"),
    ),
    "openai responses": ("responses", responses_base, ("temperature", "top_p")),
}


@pytest.mark.parametrize("api", EQUAL_NUMBERS)
def test_an_integral_float_and_its_integer_are_one_request(harness: Harness, api: str) -> None:
    resource, base, parameters = EQUAL_NUMBERS[api]
    sdk = harness.sdk("anthropic" if api == "anthropic" else "openai")
    for parameter in parameters:
        # Anthropic's SDK no longer lists the sampling parameters: they go as extra body fields.
        as_int = {"extra_body": {parameter: 1}} if api == "anthropic" else {parameter: 1}
        as_float = {"extra_body": {parameter: 1.0}} if api == "anthropic" else {parameter: 1.0}
        sdk.call(f"{resource}.create", **base(), **as_float)
        assert orjson.loads(harness.upstream.requests[-1].body)[parameter] == 1
        hit = sdk.call(f"{resource}.with_raw_response.create", **base(), **as_int)
        assert hit.headers["x-cachekit-cache"] == "hit", parameter
    assert harness.upstream.calls == len(parameters)


@pytest.mark.parametrize(
    ("provider", "resource", "base", "parameter"),
    [
        ("anthropic", "messages", anthropic_base, "max_tokens"),
        ("openai", "chat.completions", chat_base, "max_completion_tokens"),
        ("openai", "chat.completions", chat_base, "seed"),
        ("openai", "responses", responses_base, "max_output_tokens"),
    ],
)
def test_an_integer_parameter_is_sent_as_written(
    harness: Harness, provider: str, resource: str, base: Callable[[], dict[str, Any]], parameter: str
) -> None:
    """``max_tokens: 100.0`` may be refused by the API: cachekit does not make it ``100``."""
    sdk = harness.sdk(provider)
    body = {**base(), parameter: 100}
    sdk.call(f"{resource}.create", **body)
    written = copy.deepcopy(body)
    written[parameter] = 100.0
    try:
        answer = sdk.call(f"{resource}.with_raw_response.create", **written)
        outcome = answer.headers["x-cachekit-cache"]
    except (anthropic.APIStatusError, openai.APIStatusError) as exc:  # the fake refuses it like the API
        outcome = exc.response.headers["x-cachekit-cache"]
    assert outcome == "miss"
    sent = orjson.loads(harness.upstream.requests[-1].body)
    assert isinstance(sent[parameter], float)

"""Content the provider fetches by URL is live (issue 25, item 1), with the real SDKs.

A document or image given by URL is fetched by the provider on each call, like web_fetch: once the
page changes, a replayed answer would describe the old page for the whole TTL. So such a request
bypasses the cache (``live-data:url``), is never stored and never coalesced, unless the caller
vouches for its URLs for a time (``url_ttl``: ``x-cachekit-url-ttl`` or the call site's policy):
then it is cached, stored for at most that long and never served older than that.

The upstream here is the in-process fake provider, made to fetch: each URL names a page whose text
the test changes, and the provider reads the page at call time (it answers about the page's text).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import orjson
import pytest

import cachekit
from cachekit.context import CallPolicy
from cachekit.errors import ConfigError
from cachekit.pipeline.controls import Control, _BadControl, admit, read_control
from cachekit.stores import MemoryStore
from cachekit.testing import FakeUpstream
from tests.conftest import SDK, Harness
from tests.pipeline.test_server_state import Rendezvous, _concurrently

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

REASON = "x-cachekit-bypass-reason"
PAGE = "https://assets.example.com/report.pdf"
PICTURE = "https://assets.example.com/chart.png"


class FetchingUpstream(FakeUpstream):
    """The fake provider, fetching what a request gives by URL: each URL part is replaced by the text
    of the page it names *now* (:attr:`pages`), so the answer describes the page as it is at call time."""

    def __init__(self) -> None:
        super().__init__()
        self.pages: dict[str, str] = {}
        self.fetched: list[str] = []

    def _fetch(self, url: str) -> str:
        self.fetched.append(url)
        return f"[{url}] {self.pages[url]}"

    def _read(self, node: Any) -> Any:
        if isinstance(node, list):
            return [self._read(item) for item in node]
        if not isinstance(node, dict):
            return node
        kind, source = node.get("type"), node.get("source")
        if isinstance(source, dict) and source.get("type") == "url":  # Anthropic image or document
            return {"type": "text", "text": self._fetch(source["url"])}
        if kind == "image_url" and node["image_url"]["url"].startswith("https://"):  # Chat
            return {"type": "text", "text": self._fetch(node["image_url"]["url"])}
        if kind == "input_image" and str(node.get("image_url", "")).startswith("https://"):  # Responses
            return {"type": "input_text", "text": self._fetch(node["image_url"])}
        if kind == "input_file" and "file_url" in node:
            return {"type": "input_text", "text": self._fetch(node["file_url"])}
        return {key: self._read(value) for key, value in node.items()}

    def _serve(self, request: Any, body: bytes) -> Any:
        return super()._serve(request, orjson.dumps(self._read(orjson.loads(body))))


@dataclass(frozen=True)
class Case:
    """One way to give content by URL: the SDK method, a body and the URL the provider fetches."""

    provider: str
    method: str
    body: Callable[[], dict[str, Any]]
    url: str


def _anthropic(*blocks: dict[str, Any]) -> dict[str, Any]:
    content = [*blocks, {"type": "text", "text": "What does it say about revenue?"}]
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": content}],
    }


def _anthropic_in_tool_result() -> dict[str, Any]:
    image = {"type": "image", "source": {"type": "url", "url": PICTURE}}
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 256,
        "tools": [{"name": "chart", "description": "Draws the chart.", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": "Draw the revenue chart."},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "chart", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [image]}],
            },
        ],
    }


def _chat() -> dict[str, Any]:
    parts = [{"type": "image_url", "image_url": {"url": PICTURE}}, {"type": "text", "text": "What is in it?"}]
    return {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": parts}]}


def _responses(part: dict[str, Any]) -> dict[str, Any]:
    content = [part, {"type": "input_text", "text": "What does it say about revenue?"}]
    return {"model": "gpt-4.1-mini", "input": [{"role": "user", "content": content}]}


CASES = [
    pytest.param(
        Case(
            "anthropic",
            "messages.create",
            lambda: _anthropic({"type": "image", "source": {"type": "url", "url": PICTURE}}),
            PICTURE,
        ),
        id="anthropic-image",
    ),
    pytest.param(
        Case(
            "anthropic",
            "messages.create",
            lambda: _anthropic({"type": "document", "source": {"type": "url", "url": PAGE}}),
            PAGE,
        ),
        id="anthropic-document",
    ),
    pytest.param(
        Case("anthropic", "messages.create", _anthropic_in_tool_result, PICTURE), id="anthropic-tool-result"
    ),
    pytest.param(Case("openai", "chat.completions.create", _chat, PICTURE), id="chat-image-url"),
    pytest.param(
        Case(
            "openai",
            "responses.create",
            lambda: _responses({"type": "input_image", "image_url": PICTURE, "detail": "auto"}),
            PICTURE,
        ),
        id="responses-input-image",
    ),
    pytest.param(
        Case(
            "openai", "responses.create", lambda: _responses({"type": "input_file", "file_url": PAGE}), PAGE
        ),
        id="responses-input-file",
    ),
]


def _raw(method: str) -> str:
    head, _, tail = method.rpartition(".")
    return f"{head}.with_raw_response.{tail}"


def _text(sdk: SDK, raw: Any) -> str:
    """The answer's text (whatever the dialect), to tell which page it describes."""
    parsed = sdk.run(raw.parse())
    if hasattr(parsed, "output_text"):
        return str(parsed.output_text)
    if hasattr(parsed, "choices"):
        return str(parsed.choices[0].message.content)
    return "".join(block.text for block in parsed.content if block.type == "text")


def _fetching(harness: Harness) -> FetchingUpstream:
    harness.upstream = upstream = FetchingUpstream()
    upstream.pages = {PAGE: "Revenue grew 4%.", PICTURE: "A bar chart: revenue up 4%."}
    return upstream


class Clock:
    """A manual clock, shared by the store (entry lifetimes) and the pipeline (entry ages)."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class TTLStore(MemoryStore):
    """A memory store that remembers the TTL of each write."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock=clock)
        self.ttls: list[float | None] = []

    def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
        self.ttls.append(ttl)
        super().set(key, value, ttl=ttl)


def _clocked(ttl: float | None = 3600.0) -> tuple[cachekit.Cache, TTLStore, Clock]:
    clock = Clock()
    store = TTLStore(clock)
    cache = cachekit.Cache(cachekit.CacheConfig(store=store, ledger=False, ttl=ttl), clock=clock)
    return cache, store, clock


# -- by default: live ------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_content_given_by_url_is_fetched_on_every_call(harness: Harness, case: Case) -> None:
    """The second identical call reaches the provider, which reads the page as it is now."""
    upstream = _fetching(harness)
    sdk = harness.sdk(case.provider)
    first = sdk.call(_raw(case.method), **case.body())
    upstream.pages[case.url] = "Revenue fell 9%."
    second = sdk.call(_raw(case.method), **case.body())

    assert upstream.calls == 2
    assert upstream.fetched == [case.url, case.url]
    assert [raw.headers["x-cachekit-cache"] for raw in (first, second)] == ["bypass", "bypass"]
    assert [raw.headers[REASON] for raw in (first, second)] == ["live-data:url", "live-data:url"]
    assert _text(sdk, first) != _text(sdk, second)  # the new page's answer, not the old one replayed
    assert harness.store.written == {}


def test_concurrent_calls_on_a_url_are_not_coalesced(harness: Harness) -> None:
    harness.upstream = upstream = Rendezvous()
    sdk = harness.sdk("anthropic")
    body = _anthropic({"type": "image", "source": {"type": "url", "url": PICTURE}})

    def ask() -> Any:
        return sdk.client.messages.with_raw_response.create(**body)

    answers = _concurrently(sdk, ask, ask)

    assert upstream.met  # both were upstream at once: neither waited for the other's answer
    assert upstream.calls == 2
    assert [raw.headers[REASON] for raw in answers] == ["live-data:url", "live-data:url"]
    assert cachekit.cache_of(sdk.client).stats.coalesced == 0


@pytest.mark.parametrize(
    ("method", "body"),
    [
        pytest.param(
            "chat.completions.create",
            {
                "model": "gpt-4.1-mini",
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
                        ],
                    }
                ],
            },
            id="chat",
        ),
        pytest.param(
            "responses.create",
            _responses(
                {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "auto"}
            ),
            id="responses",
        ),
    ],
)
def test_a_data_url_is_the_content_itself_and_is_cached(
    harness: Harness, method: str, body: dict[str, Any]
) -> None:
    sdk = harness.sdk("openai")
    sdk.call(method, **body)
    again = sdk.call(_raw(method), **body)
    assert again.headers["x-cachekit-cache"] == "hit"
    assert harness.upstream.calls == 1


# -- the opt-in: URLs taken as unchanged for a time ------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_the_url_header_caches_for_the_time_it_gives(harness: Harness, case: Case) -> None:
    """``x-cachekit-url-ttl: 60``: hits for a minute (the caller said the page does not change),
    then the provider is asked again and reads the page as it is now. The entry is stored for
    min(ttl, 60) seconds."""
    upstream = _fetching(harness)
    cache, store, clock = _clocked(ttl=3600.0)
    sdk = harness.sdk(case.provider, cache=cache)
    opt_in = {"x-cachekit-url-ttl": "60"}
    first = sdk.call(_raw(case.method), **case.body(), extra_headers=opt_in)
    upstream.pages[case.url] = "Revenue fell 9%."
    clock.now += 59
    hit = sdk.call(_raw(case.method), **case.body(), extra_headers=opt_in)
    clock.now += 2
    fresh = sdk.call(_raw(case.method), **case.body(), extra_headers=opt_in)

    assert [r.headers["x-cachekit-cache"] for r in (first, hit, fresh)] == ["miss", "hit", "miss"]
    assert _text(sdk, hit) == _text(sdk, first)
    assert _text(sdk, fresh) != _text(sdk, first)
    assert upstream.calls == 2
    assert store.ttls == [60.0, 60.0]


def test_the_configured_ttl_still_bounds_a_url_answer(harness: Harness) -> None:
    """ttl = min(configured, url_ttl): a 30-second cache keeps a URL answer 30 seconds, not 60."""
    _fetching(harness)
    cache, store, clock = _clocked(ttl=30.0)
    sdk = harness.sdk("openai", cache=cache)
    sdk.call("chat.completions.create", **_chat(), extra_headers={"x-cachekit-url-ttl": "60"})
    clock.now += 31
    again = sdk.call(_raw("chat.completions.create"), **_chat(), extra_headers={"x-cachekit-url-ttl": "60"})

    assert store.ttls[0] == 30.0
    assert again.headers["x-cachekit-cache"] == "miss"


def test_no_answer_older_than_the_request_vouches_for_is_served(harness: Harness) -> None:
    """An answer stored under a one-hour opt-in is not served two minutes later to a request that
    vouches for its URL for one minute, though the entry is still alive; the fresh answer replaces it."""
    upstream = _fetching(harness)
    cache, _, clock = _clocked(ttl=None)
    sdk = harness.sdk("anthropic", cache=cache)
    body = _anthropic({"type": "document", "source": {"type": "url", "url": PAGE}})
    sdk.call("messages.create", **body, extra_headers={"x-cachekit-url-ttl": "3600"})
    upstream.pages[PAGE] = "Revenue fell 9%."
    clock.now += 120
    strict = sdk.call(_raw("messages.create"), **body, extra_headers={"x-cachekit-url-ttl": "60"})
    lenient = sdk.call(_raw("messages.create"), **body, extra_headers={"x-cachekit-url-ttl": "3600"})

    assert strict.headers["x-cachekit-cache"] == "miss"
    assert "fell" in _text(sdk, strict)
    assert lenient.headers["x-cachekit-cache"] == "hit"
    assert _text(sdk, lenient) == _text(sdk, strict)
    assert upstream.calls == 2


@pytest.mark.slow
def test_no_semantic_answer_older_than_the_request_vouches_for_is_served(harness: Harness) -> None:
    """The semantic layer holds a vouched-for URL request to the same age: a reworded question is
    served the stored answer while it is young enough for the caller's ``url_ttl``, not after."""
    _fetching(harness)
    clock = Clock()
    store = TTLStore(clock)
    config = cachekit.CacheConfig(store=store, ledger=False, ttl=None, semantic=True)
    sdk = harness.sdk("anthropic", cache=cachekit.Cache(config, clock=clock))
    report = {"type": "document", "source": {"type": "url", "url": PAGE}}

    def ask(question: str, url_ttl: str) -> Any:
        body = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 256,
            "messages": [
                {"role": "user", "content": [report, {"type": "text", "text": "Read this report."}]},
                {"role": "assistant", "content": "I have read it."},
                {"role": "user", "content": question},
            ],
        }
        return sdk.call(
            "messages.with_raw_response.create", **body, extra_headers={"x-cachekit-url-ttl": url_ttl}
        )

    ask("How do I reset my account password?", "3600")
    clock.now += 120
    lenient = ask("How can I reset the password of my account?", "3600")
    strict = ask("How can I reset the password of my account?", "60")

    assert lenient.headers["x-cachekit-cache"] == "semantic"
    assert strict.headers["x-cachekit-cache"] == "miss"
    assert harness.upstream.calls == 2


def test_the_call_site_policy_opts_in_too(harness: Harness) -> None:
    """``@cachekit.cached(url_ttl=...)`` and ``cachekit.policy(url_ttl=...)`` vouch for the URLs of
    every call inside (sync and async)."""
    upstream = _fetching(harness)
    sdk = harness.sdk("openai")

    if sdk.is_async:

        @cachekit.cached(url_ttl=600)
        async def describe() -> Any:
            return await sdk.client.chat.completions.with_raw_response.create(**_chat())

    else:

        @cachekit.cached(url_ttl=600)
        def describe() -> Any:
            return sdk.client.chat.completions.with_raw_response.create(**_chat())

    answers = [sdk.run(describe()) for _ in range(2)]
    with cachekit.policy(url_ttl=600):
        block = sdk.call(_raw("chat.completions.create"), **_chat())
    outside = sdk.call(_raw("chat.completions.create"), **_chat())

    assert [raw.headers["x-cachekit-cache"] for raw in (*answers, block)] == ["miss", "hit", "hit"]
    assert outside.headers["x-cachekit-cache"] == "bypass"  # the opt-in is the call site's alone
    assert outside.headers[REASON] == "live-data:url"
    assert upstream.calls == 2


def test_bytes_first_seen_with_the_opt_in_still_bypass_without_it(harness: Harness) -> None:
    """The pipeline remembers request bytes it has keyed (so a hit skips parsing); what they depend on
    is remembered with them, so the same bytes without the opt-in still bypass."""
    upstream = _fetching(harness)
    sdk = harness.sdk("anthropic")
    body = _anthropic({"type": "image", "source": {"type": "url", "url": PICTURE}})
    sdk.call("messages.create", **body, extra_headers={"x-cachekit-url-ttl": "600"})
    without = sdk.call(_raw("messages.create"), **body)

    assert without.headers["x-cachekit-cache"] == "bypass"
    assert without.headers[REASON] == "live-data:url"
    assert upstream.calls == 2


@pytest.mark.parametrize(
    ("provider", "method", "body", "reason"),
    [
        pytest.param(
            "anthropic",
            "messages.create",
            {
                **_anthropic({"type": "image", "source": {"type": "url", "url": PICTURE}}),
                "tools": [{"type": "web_search_20250305", "name": "web_search"}],
            },
            "live-data:web_search",
            id="anthropic-web-search",
        ),
        pytest.param(
            "openai",
            "responses.create",
            {
                **_responses({"type": "input_file", "file_url": PAGE}),
                "tools": [{"type": "code_interpreter", "container": {"type": "auto"}}],
            },
            "live-data:code_execution",
            id="responses-code-interpreter",
        ),
    ],
)
def test_live_server_tools_stay_bypassed_with_the_url_opt_in(
    harness: Harness, provider: str, method: str, body: dict[str, Any], reason: str
) -> None:
    """The opt-in vouches for the caller's own URLs, not for what a server tool reads at answer time."""
    _fetching(harness)
    sdk = harness.sdk(provider)
    answers = [sdk.call(_raw(method), **body, extra_headers={"x-cachekit-url-ttl": "600"}) for _ in range(2)]

    assert [raw.headers[REASON] for raw in answers] == [reason, reason]
    assert harness.upstream.calls == 2
    assert harness.store.written == {}


@pytest.mark.parametrize("value", ["soon", "0", "-5", "inf", "nan", ""])
def test_a_bad_url_ttl_is_refused_before_anything_goes_upstream(harness: Harness, value: str) -> None:
    sdk = harness.sdk("anthropic")
    body = _anthropic({"type": "image", "source": {"type": "url", "url": PICTURE}})
    with pytest.raises(anthropic.BadRequestError, match="x-cachekit-url-ttl") as refused:
        sdk.call("messages.create", **body, extra_headers={"x-cachekit-url-ttl": value})
    assert refused.value.response.headers[REASON] == "bad-control"
    assert harness.upstream.calls == 0


@pytest.mark.parametrize("value", [0, -1.0, math.inf, math.nan, True, "60"])
def test_a_bad_call_site_url_ttl_is_a_config_error(value: Any) -> None:
    with pytest.raises(ConfigError, match="url_ttl"):
        cachekit.cached(url_ttl=value)
    with pytest.raises(ConfigError, match="url_ttl"), cachekit.policy(url_ttl=value):
        pass


# -- stage 1 on its own ----------------------------------------------------------------------------


URL_BODY = _anthropic({"type": "image", "source": {"type": "url", "url": PICTURE}})


def _control(headers: dict[str, str], policy: CallPolicy | None = None, ttl: float | None = 300.0) -> Control:
    config = cachekit.CacheConfig(store="memory://", ledger=False, ttl=ttl)
    return read_control(headers, config, policy or CallPolicy())


def test_admission_bounds_the_ttl_and_the_age_of_a_vouched_url() -> None:
    config = cachekit.CacheConfig(store="memory://", ledger=False, ttl=300.0)
    live = admit(config, "anthropic_messages", _control({}), None, URL_BODY)
    vouched = admit(config, "anthropic_messages", _control({"x-cachekit-url-ttl": "60"}), None, URL_BODY)
    site = admit(config, "anthropic_messages", _control({}, CallPolicy(url_ttl=900.0)), None, URL_BODY)
    plain = admit(config, "anthropic_messages", _control({"x-cachekit-url-ttl": "60"}), None, _anthropic())

    assert live.reason == "live-data:url"
    assert (vouched.reason, vouched.control.ttl, vouched.control.max_age) == (None, 60.0, 60.0)
    assert (site.reason, site.control.ttl, site.control.max_age) == (None, 300.0, 900.0)
    assert (plain.reason, plain.control.ttl, plain.control.max_age) == (
        None,
        300.0,
        None,
    )  # nothing to vouch for


def test_the_header_wins_over_the_call_site() -> None:
    control = _control({"x-cachekit-url-ttl": "30"}, CallPolicy(url_ttl=900.0))
    assert control.url_ttl == 30.0
    with pytest.raises(_BadControl):
        _control({"x-cachekit-url-ttl": "1e999"})


def test_a_url_answer_lives_url_ttl_when_the_cache_keeps_entries_forever() -> None:
    config = cachekit.CacheConfig(store="memory://", ledger=False, ttl=None)
    admitted = admit(
        config, "anthropic_messages", _control({"x-cachekit-url-ttl": "60"}, ttl=None), None, URL_BODY
    )
    assert admitted.control.ttl == 60.0


def test_openai_sdk_refuses_are_typed_too(harness: Harness) -> None:
    """The 400 for a bad header comes in each provider's own error shape."""
    sdk = harness.sdk("openai")
    with pytest.raises(openai.BadRequestError, match="x-cachekit-url-ttl"):
        sdk.call("chat.completions.create", **_chat(), extra_headers={"x-cachekit-url-ttl": "-1"})

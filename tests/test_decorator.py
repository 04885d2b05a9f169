"""``@cachekit.cached`` and ``cachekit.policy``: per-call-site policy and memoization."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import cachekit
from cachekit.stores import MemoryStore
from tests.conftest import Harness
from tests.requests import anthropic_messages, openai_chat


def test_tenant_from_the_decorator_partitions_calls(harness: Harness) -> None:
    trusted = cachekit.CacheConfig(store=harness.store, trust_tenant_header=True)
    one = harness.sdk("anthropic", api_key="sk-one", cache=trusted)
    two = harness.sdk("anthropic", api_key="sk-two", cache=trusted)

    @cachekit.cached(tenant="acme")
    def ask(sdk: Any) -> Any:
        return sdk.call("messages.with_raw_response.create", **anthropic_messages())

    assert ask(one).headers["x-cachekit-cache"] == "miss"
    # Same tenant, other key: shared, because this client trusts per-call tenants (by default a
    # per-call tenant only narrows the key's partition: tests/pipeline/test_tenant_header.py).
    assert ask(two).headers["x-cachekit-cache"] == "hit"
    outside = two.call("messages.with_raw_response.create", **anthropic_messages())
    assert outside.headers["x-cachekit-cache"] == "miss"  # outside the decorator: the key's own partition


def test_bypass_namespace_and_header_precedence(harness: Harness) -> None:
    sdk = harness.sdk("openai")

    @cachekit.cached(bypass=True)
    def uncached() -> Any:
        return sdk.call("chat.completions.with_raw_response.create", **openai_chat())

    assert uncached().headers["x-cachekit-cache"] == "bypass"
    assert len(harness.store) == 0

    @cachekit.cached(namespace="eval-run-7")
    def in_namespace(**headers: str) -> Any:
        return sdk.call("chat.completions.with_raw_response.create", **openai_chat(), extra_headers=headers)

    assert in_namespace().headers["x-cachekit-cache"] == "miss"
    assert in_namespace().headers["x-cachekit-cache"] == "hit"
    # outside the namespace the entry is not visible
    assert (
        sdk.call("chat.completions.with_raw_response.create", **openai_chat()).headers["x-cachekit-cache"]
        == "miss"
    )
    # a request header wins over the decorator
    assert in_namespace(**{"x-cachekit": "bypass"}).headers["x-cachekit-cache"] == "bypass"


def test_nested_policies_combine_and_reset() -> None:
    assert cachekit.current_policy().tenant is None
    with cachekit.policy(tenant="a", ttl=60):
        with cachekit.policy(namespace="n"):
            inner = cachekit.current_policy()
            assert (inner.tenant, inner.namespace, inner.ttl) == ("a", "n", 60)
        assert cachekit.current_policy().namespace is None
    assert cachekit.current_policy().tenant is None


def test_policy_follows_threads_and_tasks() -> None:
    seen: dict[str, str | None] = {}

    @cachekit.cached(tenant="outer")
    def run_thread() -> None:
        import contextvars

        ctx = contextvars.copy_context()
        t = threading.Thread(
            target=ctx.run, args=(lambda: seen.update(thread=cachekit.current_policy().tenant),)
        )
        t.start()
        t.join()

    @cachekit.cached(tenant="task")
    async def run_tasks() -> None:
        async def child() -> None:
            seen["task"] = cachekit.current_policy().tenant

        await asyncio.gather(child())

    run_thread()
    asyncio.run(run_tasks())
    assert seen == {"thread": "outer", "task": "task"}


def test_bad_decorator_arguments_are_refused() -> None:
    with pytest.raises(cachekit.ConfigError, match="mode"):
        cachekit.cached(mode="sometimes")
    with pytest.raises(cachekit.ConfigError, match="ttl"):
        cachekit.cached(ttl=-5)
    with pytest.raises(cachekit.ConfigError, match="conflicts"):
        cachekit.cached(bypass=True, mode="refresh")


def test_memoize_sync_function() -> None:
    store = MemoryStore()
    calls: list[tuple[Any, ...]] = []

    @cachekit.cached(memoize=True, cache=store, name="summarize")
    def summarize(text: str, *, words: int = 10) -> dict[str, Any]:
        calls.append((text, words))
        return {"summary": text[:words], "words": words}

    assert summarize("hello world", words=5) == {"summary": "hello", "words": 5}
    assert summarize("hello world", words=5) == {"summary": "hello", "words": 5}
    assert summarize("hello world", words=3) == {"summary": "hel", "words": 3}
    assert calls == [("hello world", 5), ("hello world", 3)]
    assert summarize.__name__ == "summarize"


def test_memoize_async_function_and_refresh() -> None:
    store = MemoryStore()
    calls = 0

    @cachekit.cached(memoize=True, cache=store, name="answer")
    async def answer(question: str) -> str:
        nonlocal calls
        calls += 1
        return f"answer {calls} to {question}"

    async def main() -> list[str]:
        first = await answer("q")
        second = await answer("q")
        with cachekit.policy(mode="refresh"):
            third = await answer("q")
        fourth = await answer("q")
        return [first, second, third, fourth]

    assert asyncio.run(main()) == ["answer 1 to q", "answer 1 to q", "answer 2 to q", "answer 2 to q"]


def test_memoize_keys_include_the_tenant() -> None:
    store = MemoryStore()

    @cachekit.cached(memoize=True, cache=store, name="whoami")
    def whoami() -> str | None:
        return cachekit.current_policy().tenant

    with cachekit.policy(tenant="a"):
        assert whoami() == "a"
    with cachekit.policy(tenant="b"):
        assert whoami() == "b"


def test_memoize_refuses_non_json_with_a_clear_error() -> None:
    @cachekit.cached(memoize=True, cache=MemoryStore(), name="f")
    def f(x: Any) -> Any:
        return x

    with pytest.raises(cachekit.MemoizeError, match="arguments are not JSON"):
        f(object())

    @cachekit.cached(memoize=True, cache=MemoryStore(), name="g")
    def g() -> Any:
        return {1, 2}

    # The work is done by then: the result is returned, with a warning (tests/test_memoize_keeps_results.py).
    with pytest.warns(cachekit.MemoizeWarning, match="result is not JSON"):
        assert g() == {1, 2}


def test_memoize_survives_a_failing_store(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(MemoryStore):
        def get(self, key: str) -> bytes | None:
            raise cachekit.StoreError("down")

        def set(self, key: str, value: bytes, *, ttl: float | None = None) -> None:
            raise cachekit.StoreError("down")

    @cachekit.cached(memoize=True, cache=Broken(), name="f")
    def f(x: int) -> int:
        return x * 2

    assert f(4) == 8
    assert any("memo" in r.getMessage() for r in caplog.records)


def test_memoize_tells_closures_and_key_types_apart() -> None:
    def make(scale: int) -> Any:
        def scaled(x: int) -> int:
            return x * scale

        return scaled

    with pytest.raises(cachekit.MemoizeError, match="explicit name="):
        cachekit.cached(memoize=True, cache=MemoryStore())(make(1))
    store = MemoryStore()
    times1 = cachekit.cached(memoize=True, cache=store, name="times1")(make(1))
    times10 = cachekit.cached(memoize=True, cache=store, name="times10")(make(10))
    assert (times1(11), times10(11)) == (11, 110)

    @cachekit.cached(memoize=True, cache=MemoryStore(), name="echo")
    def echo(mapping: dict[Any, str]) -> dict[Any, str]:
        return mapping

    assert echo({"1": "a"}) == {"1": "a"}
    with pytest.raises(cachekit.MemoizeError, match="arguments are not JSON"):
        echo({1: "a"})  # would otherwise share the entry of {"1": "a"}

"""Shadow mode end to end: the real SDKs (sync and async), the real MiniLM embedder, a real store and
ledger. Every request goes upstream; what the semantic layer would have served is judged against the
fresh answer and recorded beside the calls, without a prompt or an answer in the ledger.
"""

from __future__ import annotations

import hashlib
import io
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx2
import pytest

import cachekit
from cachekit.cli import main
from cachekit.cost import JSONLSink, Ledger, MemorySink, SQLiteSink
from cachekit.cost.shadow import ShadowRecord
from cachekit.errors import ConfigError
from cachekit.local.engine import Prompt, Text
from cachekit.providers.answers import answer_content
from cachekit.semantic import SemanticConfig
from cachekit.semantic.embedders import default_embedder
from cachekit.stores import MemoryStore
from cachekit.testing import FakeUpstream
from tests.conftest import Harness

pytestmark = pytest.mark.slow

QUESTION = "How do I reset my account password?"
PARAPHRASE = "How can I reset the password of my account?"
#: A paraphrase whose fresh answer differs from the stored one: a wrong would-be hit.
OTHER_WORDING = "How could I reset my account's password?"
RATE = "Is the API rate limited?"
NOT_RATE = "Is the API not rate limited?"
ANSWERS = {
    QUESTION: "Open Settings, then Security, and choose Reset password.",
    PARAPHRASE: "Open Settings, then Security, and choose Reset password.",
    OTHER_WORDING: "Ask your administrator to reset it.",
    RATE: "Yes, 60 requests per minute.",
    NOT_RATE: "No, it is rate limited.",
}


def script(prompt: Prompt) -> list[Any]:
    """The upstream's answer to each question (the same for the paraphrase, another for the rest)."""
    return [Text(ANSWERS[prompt.turns[-1].text])]


class Shadowed:
    """One real SDK client in shadow mode over the harness's upstream and store, with its ledger."""

    made: ClassVar[list[cachekit.Cache]] = []

    def __init__(
        self, harness: Harness, provider: str, sinks: list[Any] | None = None, **semantic: Any
    ) -> None:
        harness.upstream = FakeUpstream(script=script)
        self.harness, self.provider = harness, provider
        self.sink = MemorySink()
        self.ledger = Ledger([self.sink, *(sinks or [])])
        self.cache = cachekit.Cache(
            cachekit.CacheConfig(
                store=harness.store,
                ledger=self.ledger,
                semantic=SemanticConfig(mode="shadow", **semantic),
            )
        )
        self.sdk = harness.sdk(provider, cache=self.cache)
        Shadowed.made.append(self.cache)

    def ask(self, question: str, **extra: Any) -> Any:
        """Ask, returning the raw response (headers and the parsed answer)."""
        if self.provider == "anthropic":
            return self.sdk.call(
                "messages.with_raw_response.create",
                model="claude-sonnet-4-5",
                max_tokens=64,
                messages=[{"role": "user", "content": question}],
                **extra,
            )
        return self.sdk.call(
            "chat.completions.with_raw_response.create",
            model="gpt-4.1-mini",
            messages=[{"role": "user", "content": question}],
            **extra,
        )

    def records(self) -> list[ShadowRecord]:
        """The shadow records, once every judgment has landed."""
        layer = self.cache.pipeline.semantic
        assert layer is not None
        assert layer.wait()
        return self.ledger.shadow_records()

    def key_of(self, response: Any) -> str:
        """The full store key of an answer (the response names its last 16 characters)."""
        suffix = response.headers["x-cachekit-key"]
        [key] = [k for k in self.harness.store.written if k.endswith(suffix)]
        return key


@pytest.fixture(autouse=True)
def _close_caches() -> Iterator[None]:
    yield
    while Shadowed.made:
        Shadowed.made.pop().close()


@pytest.fixture(params=["anthropic", "openai"])
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_shadow_mode_never_serves_and_records_what_it_would_have_served(
    harness: Harness, provider: str
) -> None:
    shadow = Shadowed(harness, provider)
    first = shadow.ask(QUESTION)
    again = shadow.ask(PARAPHRASE)
    wrong = shadow.ask(OTHER_WORDING)
    # Every request went upstream, and its caller got the fresh answer.
    assert [r.headers["x-cachekit-cache"] for r in (first, again, wrong)] == ["miss"] * 3
    assert harness.upstream.calls == 3
    assert shadow.cache.stats.semantic_hits == 0
    assert ANSWERS[OTHER_WORDING] in wrong.http_response.text

    empty, right, wrong_hit = shadow.records()
    # The first question met an empty partition: nothing to judge.
    assert (empty.candidate, empty.verdict, empty.would_serve) == (None, None, False)
    # The paraphrase would have been served the first answer, and that answer is the fresh one.
    vectors = default_embedder().embed([QUESTION, PARAPHRASE])
    assert right.similarity == pytest.approx(float(vectors[0] @ vectors[1]), abs=1e-4)
    assert right.candidate == hashlib.sha256(shadow.key_of(first).encode()).hexdigest()[:16]
    assert (right.passed, right.would_serve, right.refused, right.judge) == (True, True, (), "exact")
    assert right.verdict is True
    assert right.threshold == pytest.approx(0.8)
    assert right.model == ("claude-sonnet-4-5" if provider == "anthropic" else "gpt-4.1-mini")
    assert right.partition == empty.partition
    # The third wording would have been served a stored answer that differs from its fresh one.
    assert wrong_hit.would_serve is True
    assert wrong_hit.verdict is False
    layer = shadow.cache.pipeline.semantic
    assert layer is not None
    assert (layer.stats.hits, layer.stats.would_hit) == (0, 2)


def test_the_same_traffic_is_served_when_not_in_shadow_mode(harness: Harness) -> None:
    """The control for the test above: these questions are a semantic hit in the default mode."""
    harness.upstream = FakeUpstream(script=script)
    sdk = harness.sdk("openai", cache=cachekit.CacheConfig(store=harness.store, ledger=False, semantic=True))
    asked = [
        sdk.call(
            "chat.completions.with_raw_response.create",
            model="gpt-4.1-mini",
            messages=[{"role": "user", "content": question}],
        ).headers["x-cachekit-cache"]
        for question in (QUESTION, PARAPHRASE)
    ]
    assert asked == ["miss", "semantic"]


def test_each_guard_verdict_is_recorded(harness: Harness) -> None:
    shadow = Shadowed(harness, "openai")
    shadow.ask(RATE)
    shadow.ask(NOT_RATE)
    _, refused = shadow.records()
    assert refused.candidate is not None
    assert refused.passed is False
    assert refused.would_serve is False
    assert "negation" in refused.refused
    assert refused.verdict is False  # rightly not served: the answers differ
    assert refused.similarity is not None
    assert refused.similarity >= 0.8  # only a guard stood in the way


def test_a_streamed_answer_is_judged_when_its_stream_ends(harness: Harness) -> None:
    shadow = Shadowed(harness, "openai")
    shadow.ask(QUESTION)
    stream = shadow.ask(PARAPHRASE, stream=True)
    parsed = shadow.sdk.run(stream.parse())
    if shadow.sdk.is_async:

        async def read() -> list[Any]:
            return [chunk async for chunk in parsed]

        chunks = shadow.sdk.run(read())
    else:
        chunks = list(parsed)
    assert chunks
    _, judged = shadow.records()
    assert (judged.would_serve, judged.verdict) == (True, True)


def test_a_judge_of_the_users_own_decides_and_a_failing_one_fails_nothing(harness: Harness) -> None:
    seen: list[tuple[str, str, str]] = []

    def judge(question: str, stored: str, fresh: str) -> bool:
        seen.append((question, stored, fresh))
        if question == OTHER_WORDING:
            raise RuntimeError("the judge's own model is down")
        return True  # this judge accepts any answer about resetting passwords

    shadow = Shadowed(harness, "anthropic", shadow_judge=judge)
    shadow.ask(QUESTION)
    shadow.ask(PARAPHRASE)
    failed = shadow.ask(OTHER_WORDING)
    assert failed.headers["x-cachekit-cache"] == "miss"  # the caller never sees the judge's failure
    _, accepted, unknown = shadow.records()
    assert (accepted.judge, accepted.verdict) == ("custom", True)
    assert (unknown.judge, unknown.verdict) == ("custom", None)
    assert seen[0] == (PARAPHRASE, ANSWERS[QUESTION], ANSWERS[PARAPHRASE])
    assert seen[1][0] == OTHER_WORDING
    layer = shadow.cache.pipeline.semantic
    assert layer is not None
    assert layer.stats.errors == 1


def test_the_ledger_keeps_no_prompt_and_no_answer(harness: Harness, tmp_path: Path) -> None:
    sqlite_path, jsonl_path = tmp_path / "ledger.sqlite3", tmp_path / "ledger.jsonl"
    shadow = Shadowed(harness, "openai", sinks=[SQLiteSink(sqlite_path), JSONLSink(jsonl_path)])
    for question in (QUESTION, PARAPHRASE, RATE, NOT_RATE):
        shadow.ask(question)
    assert len(shadow.records()) == 4
    shadow.ledger.close()
    with sqlite3.connect(sqlite_path) as conn:
        assert conn.execute("SELECT count(*) FROM shadow").fetchone() == (4,)
    stored = (sqlite_path.read_bytes() + jsonl_path.read_bytes()).lower()
    for text in (*ANSWERS, *ANSWERS.values()):
        for word in text.lower().replace("?", "").replace(",", "").replace(".", "").split():
            if len(word) > 5:  # words long enough not to turn up in a digest or a model name
                assert word.encode() not in stored, word


def test_cachekit_report_shows_what_shadow_mode_measured(harness: Harness, tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    shadow = Shadowed(harness, "openai", sinks=[JSONLSink(path)])
    for question in (QUESTION, PARAPHRASE, OTHER_WORDING, RATE, NOT_RATE):
        shadow.ask(question)
    assert len(shadow.records()) == 5
    shadow.ledger.close()
    out = _Out()
    assert main(["report", "--ledger", str(path), "--json", "--target-precision", "0.2"], out=out) == 0
    report = json.loads(out.text)
    [partition] = report["shadow"]["partitions"]
    # Two would-be hits (one right, one wrong); the negation was refused and rightly so.
    assert (partition["requests"], partition["judged"], partition["served"], partition["right"]) == (
        5,
        3,
        2,
        1,
    )
    assert partition["precision"] == 0.5
    assert partition["recall"] == 1.0
    assert report["shadow"]["total"]["served"] == 2
    assert report["total"]["calls"] == 5
    text_out = _Out()
    assert main(["report", "--ledger", str(path)], out=text_out) == 0
    assert "semantic cache, shadow mode" in text_out.text
    assert "1/2" in text_out.text


class _Out(io.StringIO):
    """What a command printed on its standard output."""

    @property
    def text(self) -> str:
        return self.getvalue()


def test_bad_shadow_settings_are_refused() -> None:
    with pytest.raises(ConfigError, match="'serve' or 'shadow'"):
        SemanticConfig(mode="watch")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="only judges in mode='shadow'"):
        SemanticConfig(shadow_judge=lambda q, a, b: True)
    with pytest.raises(ConfigError, match="is a function"):
        SemanticConfig(mode="shadow", shadow_judge="exact")  # type: ignore[arg-type]


def test_a_request_in_shadow_mode_with_no_ledger_still_succeeds() -> None:
    upstream = FakeUpstream(script=script)
    cache = cachekit.Cache(
        cachekit.CacheConfig(store=MemoryStore(), ledger=False, semantic=SemanticConfig(mode="shadow"))
    )
    with httpx2.Client(transport=cachekit.CachingTransport(upstream, cache=cache)) as client:
        for question in (QUESTION, PARAPHRASE):
            body = {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": question}]}
            response = client.post(
                "https://api.openai.com/v1/chat/completions", json=body, headers={"authorization": "Bearer k"}
            )
            assert response.headers["x-cachekit-cache"] == "miss"
    cache.close()
    assert upstream.calls == 2


# -- what the exact judge compares ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dialect", "one", "other", "same"),
    [
        (
            "openai_chat",
            {"choices": [{"message": {"content": "Use  the\nreset link."}}]},
            {"choices": [{"message": {"content": " Use the reset link. "}}]},
            True,
        ),
        (
            "openai_chat",
            {"choices": [{"message": {"content": "Use the reset link."}}]},
            {"choices": [{"message": {"content": "use the reset link."}}]},
            False,
        ),
        (
            "openai_chat",
            {
                "choices": [
                    {
                        "message": {
                            "tool_calls": [
                                {"id": "a", "function": {"name": "f", "arguments": '{"x":1,"y":2}'}}
                            ]
                        }
                    }
                ]
            },
            {
                "choices": [
                    {
                        "message": {
                            "tool_calls": [
                                {"id": "b", "function": {"name": "f", "arguments": '{"y": 2, "x": 1}'}}
                            ]
                        }
                    }
                ]
            },
            True,
        ),
        (
            "anthropic_messages",
            {
                "content": [{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "Yes."}],
                "id": "1",
            },
            {"content": [{"type": "text", "text": "Yes."}], "id": "2"},
            True,
        ),
        (
            "anthropic_messages",
            {"content": [{"type": "tool_use", "id": "t1", "name": "lookup", "input": {"q": "a"}}]},
            {"content": [{"type": "tool_use", "id": "t2", "name": "lookup", "input": {"q": "b"}}]},
            False,
        ),
        (
            "openai_responses",
            {
                "output": [
                    {"type": "reasoning"},
                    {"type": "message", "content": [{"type": "output_text", "text": "42"}]},
                ]
            },
            {"output": [{"type": "message", "content": [{"type": "output_text", "text": "42"}]}]},
            True,
        ),
        (
            "openai_responses",
            {"output": [{"type": "function_call", "name": "f", "arguments": '{"a":1}', "call_id": "x"}]},
            {"output": [{"type": "function_call", "name": "g", "arguments": '{"a":1}', "call_id": "x"}]},
            False,
        ),
    ],
)
def test_answer_contents_compare_what_the_answer_says(
    dialect: Any, one: dict[str, Any], other: dict[str, Any], same: bool
) -> None:
    assert (answer_content(dialect, one) == answer_content(dialect, other)) is same
    assert answer_content(dialect, one)  # never empty for an answer that says something


def test_a_tool_call_reads_as_its_name_and_canonical_arguments() -> None:
    body = {"content": [{"type": "tool_use", "id": "x", "name": "lookup", "input": {"b": 1, "a": [1, 2]}}]}
    assert answer_content("anthropic_messages", body) == 'tool:lookup({"a":[1,2],"b":1})'

"""The miss path's memories (issue 16, speed): each returns what the unmemoized path returns, stays
within its bounds, and never lets two texts share a result."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest

from cachekit.shape.blocks import BlockMemo, prompt_blocks
from cachekit.shape.lint import (
    _TEXT_KINDS,
    PrefixLinter,
    _digest,
    _name_digest,
    _scan,
    _Scanner,
    lint_blocks,
)
from cachekit.shape.texts import TextMemo
from cachekit.shape.tokens import TokenEstimator, encoding

TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces-sample.jsonl"


def _agent_body(messages: int = 60) -> dict[str, Any]:
    """The longest recorded conversation of the sample, as benchmarks/overhead.py sends it."""
    conversations = [orjson.loads(line) for line in TRACES.read_bytes().splitlines() if line.strip()]
    longest = max(conversations, key=lambda c: len(c["messages"]))
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": longest["system"],
        "tools": longest["tools"],
        "messages": longest["messages"][:messages],
    }


class CountingCounter:
    """o200k_base, counting how often it is asked."""

    def __init__(self) -> None:
        self.calls = 0
        self._real = encoding("o200k_base")

    def count(self, text: str) -> int:
        self.calls += 1
        return self._real.count(text)


# -- TextMemo ----------------------------------------------------------------------------------------


def test_text_memo_returns_what_was_put_by_text() -> None:
    memo: TextMemo[int] = TextMemo()
    memo.put("alpha", 1)
    memo.put("beta", 2)
    assert memo.get("alpha") == 1
    assert memo.get("".join(["al", "pha"])) == 1  # an equal text, another object
    assert memo.get("alphb") is None
    assert memo.get_many(["beta", "gamma", "alpha"]) == [2, None, 1]
    memo.put("alpha", 3)  # the first value stays: the memory holds pure functions' results
    assert memo.get("alpha") == 1


def test_text_memo_is_bounded_by_entries_and_characters() -> None:
    by_entries: TextMemo[int] = TextMemo(max_entries=16, max_chars=1 << 20)
    for i in range(100):
        by_entries.put(f"text {i}", i)
        assert len(by_entries) <= 16
    assert by_entries.get("text 99") == 99  # the newest stay, the oldest go
    assert by_entries.get("text 0") is None

    by_chars: TextMemo[int] = TextMemo(max_entries=1000, max_chars=800)
    for i in range(100):
        by_chars.put(f"{i:03d}" + "x" * 97, i)  # 100 characters each
        assert by_chars.chars <= 800
        kept = [k for k in range(100) if by_chars.get(f"{k:03d}" + "x" * 97) is not None]
        assert by_chars.chars == 100 * len(kept)
    by_chars.put("y" * 101, -1)  # over an eighth of the bound: never kept
    assert by_chars.get("y" * 101) is None


def test_text_memo_refuses_empty_bounds() -> None:
    with pytest.raises(ValueError, match="bounds"):
        TextMemo(max_entries=0)


def test_text_memo_stays_bounded_under_concurrent_writers() -> None:
    memo: TextMemo[int] = TextMemo(max_entries=64, max_chars=4096)
    start = threading.Barrier(4)

    def write(worker: int) -> None:
        start.wait()
        for i in range(2000):
            memo.put(f"{worker}-{i}-" + "z" * (i % 50), i)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(memo) <= 64
    assert memo.chars <= 4096


# -- token counts ------------------------------------------------------------------------------------


def test_token_counts_of_a_conversation_equal_the_counter_and_repeat_without_counting() -> None:
    body = _agent_body()
    memo = BlockMemo()
    first = prompt_blocks("anthropic_messages", body, memo=memo)
    texts = [block.text for block in first]
    real = encoding("o200k_base")
    expected = [real.count(text) if text else 0 for text in texts]

    counter = CountingCounter()
    estimator = TokenEstimator(counter=counter)
    assert estimator.counts(texts) == expected
    asked = counter.calls
    assert asked > 0
    # The next call of the conversation, parsed afresh: the memo hands back the same blocks.
    again = prompt_blocks("anthropic_messages", orjson.loads(orjson.dumps(body)), memo=memo)
    assert estimator.counts(block.text for block in again) == expected
    # Equal texts that are other objects (no block memo) are found too.
    fresh = prompt_blocks("anthropic_messages", orjson.loads(orjson.dumps(body)))
    assert estimator.counts(block.text for block in fresh) == expected
    assert counter.calls == asked  # nothing counted twice


def test_token_count_memory_stays_bounded_and_recounts_what_it_let_go() -> None:
    counter = CountingCounter()
    estimator = TokenEstimator(counter=counter, cache_size=4)
    texts = [f"text number {i} " * 4 for i in range(10)]
    counts = [estimator.count(text) for text in texts]
    assert counts == [encoding("o200k_base").count(text) for text in texts]
    assert counter.calls == 10
    assert estimator.count(texts[-1]) == counts[-1]
    assert counter.calls == 10  # the newest is remembered
    assert estimator.count(texts[0]) == counts[0]
    assert counter.calls == 11  # the oldest was let go: counted again


def test_short_texts_are_remembered_too() -> None:
    counter = CountingCounter()
    estimator = TokenEstimator(counter=counter)
    assert estimator.count("ok") == estimator.count("".join(["o", "k"])) == encoding("o200k_base").count("ok")
    assert estimator.count("") == 0
    assert counter.calls == 1


# -- lint's volatile spans ---------------------------------------------------------------------------


def test_lint_spans_from_the_memo_equal_a_fresh_scan() -> None:
    body = _agent_body()
    body["system"] = [
        {"type": "text", "text": body["system"] if isinstance(body["system"], str) else "policy"},
        {"type": "text", "text": "Today is 2026-12-03T18:07:25Z; request id req_0123456789abcdef"},
    ]
    blocks = prompt_blocks("anthropic_messages", body)
    scanner = _Scanner()
    static = [b for b in blocks if b.section != "messages" and b.text]
    expected = [_scan(b.text, b.kind not in _TEXT_KINDS, ()) for b in static]
    assert any(expected)  # the dated block has findings
    first = [scanner.hits(b) for b in static]
    again = [scanner.hits(b) for b in prompt_blocks("anthropic_messages", orjson.loads(orjson.dumps(body)))]
    assert first == expected
    assert again[: len(static)] == expected
    # And through the public path: the same findings every time.
    assert lint_blocks(blocks) == lint_blocks(prompt_blocks("anthropic_messages", body))


def test_lint_span_memory_keeps_text_kinds_apart() -> None:
    # The same characters scan differently as prose and as JSON (escapes are blanked in JSON).
    text = "ts 2026-12-03\\t10:00 and x \\n2026-12-04 y"
    prose, as_json = _scan(text, False, ()), _scan(text, True, ())
    assert prose != as_json
    scanner = _Scanner()
    as_text = prompt_blocks("anthropic_messages", {"system": text, "messages": []})[0]
    as_tool = replace(as_text, kind="tool")
    assert scanner.hits(as_text) == prose
    assert scanner.hits(as_tool) == as_json
    assert scanner.hits(as_text) == prose


def test_lint_span_memory_stays_bounded() -> None:
    scanner = _Scanner(cache_size=8)
    body = {
        "model": "claude-sonnet-4-5",
        "system": [{"type": "text", "text": f"block {i} at 2026-12-{i % 28 + 1:02d}"} for i in range(40)],
        "messages": [{"role": "user", "content": "hi"}],
    }
    blocks = prompt_blocks("anthropic_messages", body)
    found = scanner.findings(blocks)
    assert [f.where for f in found] == [f"system.{i}" for i in range(40)]
    assert all(len(memo) <= 8 for memo in scanner._texts.values())


def test_a_linter_finds_the_same_on_every_call_of_a_conversation() -> None:
    body = _agent_body()
    body["system"] = "Current time: 2026-12-03T18:07:25Z. " + (
        body["system"] if isinstance(body["system"], str) else ""
    )
    linter = PrefixLinter()
    memo = BlockMemo()
    first = linter.check(
        "anthropic_messages", body, blocks=prompt_blocks("anthropic_messages", body, memo=memo)
    )
    again_body = orjson.loads(orjson.dumps(body))
    again = linter.check(
        "anthropic_messages", again_body, blocks=prompt_blocks("anthropic_messages", again_body, memo=memo)
    )
    assert first
    assert {f.code for f in first} == {"timestamp"}
    assert any(f.offset == 14 for f in first)  # the one put in front
    assert again == first


def test_tool_name_digests_from_the_memo_equal_the_digest() -> None:
    names = ["read_file", "write_file", "ß-tool", "read_file"]
    direct = [_digest(name.encode("utf-8", "surrogatepass")) for name in names]
    assert [_name_digest(name) for name in names] == direct
    assert [_name_digest("".join(name)) for name in names] == direct  # equal names, other objects
    assert direct[0] != direct[1]

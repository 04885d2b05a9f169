"""``cachekit replay``: the rules users run as baselines, the TTL oracle, and drawn think times (issue 19).

Real parts: the sample of the development traces, the real ``anthropic`` SDK through cachekit and
the local backend's Anthropic billing, the CLI entry point.
"""

from __future__ import annotations

import contextlib
import io
import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from cachekit.cli import main
from cachekit.replay import Conversation, Gaps, PolicyResult, TraceError, apply_policy, read_traces, replay

TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces-sample.jsonl"  # see fixtures/README.md
MODEL = "claude-sonnet-4-5"
SYSTEM = " ".join(f"Clause {i}: refunds need a booking id and the traveller's name." for i in range(120))
#: The policy names as ``--json`` prints them, in order: scripts compare runs by these names.
RULES = ("none", "system", "last", "auto", "system+last", "system+last-1h", "auto-1h")
NAMES = [*RULES, "cachekit", "oracle-ttl"]


def _conversations(limit: int | None = None) -> list[Conversation]:
    return [c for c in read_traces(TRACES, limit=limit) if isinstance(c, Conversation)]


def _by_policy(results: list[PolicyResult]) -> dict[str, PolicyResult]:
    return {r.policy: r for r in results}


def _efficiency(result: PolicyResult) -> float:
    value = result.savings_efficiency
    assert value is not None
    return value


def test_every_policy_name_is_printed_as_documented() -> None:
    out = io.StringIO()
    assert main(["replay", str(TRACES), "--limit", "1", "--json", "--gaps", "lognormal:60:4"], out=out) == 0
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [row["policy"] for row in rows] == NAMES


def test_the_rules_users_run_mark_the_system_prompt_and_the_last_message() -> None:
    body: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 8,
        "system": SYSTEM,
        "messages": [
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi"},
            {"role": "user", "content": [{"type": "text", "text": "Move my flight"}]},
        ],
    }
    five = apply_policy("system+last", body)
    assert five["system"] == [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    assert five["messages"][2]["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert five["messages"][0] == body["messages"][0]
    hour = apply_policy("system+last-1h", body)
    assert hour["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert hour["messages"][2]["content"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert apply_policy("auto-1h", body)["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert apply_policy("oracle-ttl", body) is body  # cachekit's planner places its markers


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("5", Gaps("fixed", 5.0)),
        ("fixed:360", Gaps("fixed", 360.0)),
        ("uniform:5:600", Gaps("uniform", 5.0, 600.0)),
        ("lognormal:60:4", Gaps("lognormal", 60.0, 4.0)),
        ("trace", Gaps("trace", 5.0)),
        ("trace:30", Gaps("trace", 30.0)),
    ],
)
def test_gap_specs(spec: str, expected: Gaps) -> None:
    assert Gaps.parse(spec) == expected
    assert Gaps.parse(expected.label()) == expected


@pytest.mark.parametrize(
    "spec", ["", "fixed", "fixed:-1", "uniform:9:3", "lognormal:0:4", "lognormal:60:0.5", "poisson:3", "5:6"]
)
def test_bad_gap_specs_are_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="--gaps"):
        Gaps.parse(spec)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = main(["replay", str(TRACES), "--gaps", spec], out=io.StringIO())
    assert status == 2
    assert "lognormal:MEDIAN:SPREAD" in err.getvalue()


def test_drawn_gaps_follow_their_distribution_and_seed() -> None:
    conversations = _conversations()
    lognormal = Gaps.parse("lognormal:60:4")
    drawn = [g for c in lognormal.schedule(conversations, MODEL, seed=7) for g in c]
    assert len(drawn) == 95  # one per request of the six conversations
    assert lognormal.schedule(conversations, MODEL, seed=7) == lognormal.schedule(
        conversations, MODEL, seed=7
    )
    assert lognormal.schedule(conversations, MODEL, seed=8) != lognormal.schedule(
        conversations, MODEL, seed=7
    )
    assert 30 < statistics.median(drawn) < 120
    assert min(drawn) < 15  # fast tool loops ...
    assert max(drawn) > 300  # ... and pauses that outlive a 5-minute entry, in one run
    uniform = [g for c in Gaps.parse("uniform:5:600").schedule(conversations, MODEL, seed=1) for g in c]
    assert all(5 <= g <= 600 for g in uniform)
    assert len(set(uniform)) == len(uniform)


def test_per_conversation_gaps_come_from_the_trace(tmp_path: Path) -> None:
    messages = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": "d"},
        {"role": "user", "content": "e"},
        {"role": "assistant", "content": "f"},
    ]
    lines = [
        {"id": "human", "system": SYSTEM, "messages": messages, "gap_seconds": 400},
        {"id": "agent", "system": SYSTEM, "messages": messages, "gap_seconds": [1, 2]},
        {"id": "unsaid", "system": SYSTEM, "messages": messages},
        {"id": "bad", "system": SYSTEM, "messages": messages, "gap_seconds": "soon"},
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    items = list(read_traces(path))
    assert isinstance(items[3], TraceError)
    assert "gap_seconds" in str(items[3])
    conversations = [c for c in items if isinstance(c, Conversation)]
    assert Gaps.parse("trace:9").schedule(conversations, MODEL) == [[400.0] * 3, [1.0, 2.0, 2.0], [9.0] * 3]


def test_at_short_gaps_cachekit_pays_no_more_than_any_rule() -> None:
    for spec in ("5", "120"):
        results = _by_policy(replay(_conversations(), model=MODEL, gaps=Gaps.parse(spec)))
        assert all(results["cachekit"].cost_usd <= results[rule].cost_usd + 1e-12 for rule in RULES)
        assert results["oracle-ttl"].cost_usd <= results["cachekit"].cost_usd + 1e-12


def test_at_six_minute_gaps_cachekit_writes_for_an_hour_and_never_loses_money() -> None:
    results = _by_policy(replay(_conversations(), model=MODEL, gaps=Gaps.parse("360")))
    assert _efficiency(results["system+last"]) < 0  # 5-minute entries are gone before each turn
    assert _efficiency(results["cachekit"]) > 0.88
    # Only the tenant's very first turns are written for 5 minutes, before any gap was seen.
    assert _efficiency(results["cachekit"]) > _efficiency(results["system+last-1h"]) - 0.01
    assert results["oracle-ttl"].cost_usd <= min(results[rule].cost_usd for rule in RULES)


def test_mixed_pauses_cachekit_beats_every_rule() -> None:
    results = _by_policy(replay(_conversations(), model=MODEL, gaps=Gaps.parse("lognormal:60:4"), seed=0))
    best_rule = max(_efficiency(results[rule]) for rule in RULES)
    assert _efficiency(results["cachekit"]) > best_rule
    assert _efficiency(results["oracle-ttl"]) >= _efficiency(results["cachekit"])

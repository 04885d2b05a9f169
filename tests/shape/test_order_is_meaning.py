"""JSON Schema property order is meaning: never reordered upstream, and part of the key.

Providers generate structured output (strict tools, response formats) in the schema's property order,
and every model reads a tool's schema in the order it was written, so a reason-before-answer schema
sent answer-first gets other answers. Each case below is one place of one dialect where a schema
steers generation; everywhere else key order means nothing to the provider and still shares a key.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from cachekit.shape import canonical
from tests.conftest import SDK, Harness

# A schema whose property order is the point: the model should reason before it answers.
REASON_FIRST: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reasoning": {"type": "string", "description": "Think it through first."},
        "answer": {
            "type": "object",
            "properties": {"verdict": {"type": "boolean"}, "confidence": {"type": "number"}},
            "required": ["verdict", "confidence"],
            "additionalProperties": False,
        },
    },
    "required": ["reasoning", "answer"],
    "additionalProperties": False,
}


def reversed_dict(d: dict[str, Any]) -> dict[str, Any]:
    return dict(reversed(list(d.items())))


def answer_first() -> dict[str, Any]:
    schema = copy.deepcopy(REASON_FIRST)
    schema["properties"] = reversed_dict(schema["properties"])
    return schema


EXAMPLE = {
    "reasoning": "7919 has no divisor up to its square root.",
    "answer": {"verdict": True, "confidence": 1},
}
QUESTION = [{"role": "user", "content": "Is 7919 prime?"}]
ANTHROPIC = {"model": "claude-sonnet-4-5", "max_tokens": 256, "messages": QUESTION}
CHAT = {"model": "gpt-4.1-mini", "messages": QUESTION}
RESPONSES = {"model": "gpt-4.1-mini", "input": "Is 7919 prime?"}


@dataclass(frozen=True)
class Case:
    """One place where a schema drives generation: how to send it and where it is in the sent body."""

    method: str
    build: Callable[[dict[str, Any]], dict[str, Any]]
    path: tuple[str | int, ...]
    #: Where the SDK call's keyword arguments hold it (``extra_body`` for fields the SDK lacks).
    sdk_path: tuple[str | int, ...] = ()

    @property
    def provider(self) -> str:
        return "anthropic" if self.method.startswith("messages") else "openai"

    def sent_by_caller(self, kwargs: dict[str, Any]) -> Any:
        return at(kwargs, self.sdk_path or self.path)


def anthropic_tool(schema: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {**ANTHROPIC, "tools": [{"name": "verdict", "input_schema": schema, **extra}]}


def chat_tool(schema: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        **CHAT,
        "tools": [{"type": "function", "function": {"name": "verdict", "parameters": schema, **extra}}],
    }


def json_format(schema: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "json_schema", **extra, "schema": schema}


def example(schema: dict[str, Any]) -> dict[str, Any]:
    """An input example whose keys follow the schema's order (an example shows the model an order too)."""
    return {name: EXAMPLE[name] for name in schema["properties"]}


TOOL = ("tools", 0, "input_schema")
FUNCTION = ("tools", 0, "function", "parameters")
CASES = {
    "anthropic strict tool": Case(
        "messages.create",
        lambda s: {**anthropic_tool(s, strict=True), "tool_choice": {"type": "tool", "name": "verdict"}},
        TOOL,
    ),
    "anthropic tool": Case("messages.create", anthropic_tool, TOOL),
    "anthropic tool input_examples": Case(
        "messages.create",
        lambda s: anthropic_tool({"type": "object"}, input_examples=[example(s)]),
        ("tools", 0, "input_examples"),
    ),
    "anthropic count_tokens tool": Case(
        "messages.count_tokens",
        lambda s: {k: v for k, v in anthropic_tool(s).items() if k != "max_tokens"},
        TOOL,
    ),
    "anthropic output_config": Case(
        "messages.create",
        lambda s: {**ANTHROPIC, "output_config": {"format": json_format(s)}},
        ("output_config", "format", "schema"),
    ),
    "anthropic output_format (beta)": Case(
        "messages.create",
        lambda s: {**ANTHROPIC, "extra_body": {"output_format": json_format(s)}},
        ("output_format", "schema"),
        ("extra_body", "output_format", "schema"),
    ),
    "chat strict tool": Case("chat.completions.create", lambda s: chat_tool(s, strict=True), FUNCTION),
    "chat tool": Case("chat.completions.create", chat_tool, FUNCTION),
    "chat functions (legacy)": Case(
        "chat.completions.create",
        lambda s: {**CHAT, "functions": [{"name": "verdict", "parameters": s}]},
        ("functions", 0, "parameters"),
    ),
    "chat response_format": Case(
        "chat.completions.create",
        lambda s: {
            **CHAT,
            "response_format": {"type": "json_schema", "json_schema": {"name": "v", "schema": s}},
        },
        ("response_format", "json_schema", "schema"),
    ),
    "responses strict tool": Case(
        "responses.create",
        lambda s: {
            **RESPONSES,
            "tools": [{"type": "function", "name": "v", "strict": True, "parameters": s}],
        },
        ("tools", 0, "parameters"),
    ),
    "responses text.format": Case(
        "responses.create",
        lambda s: {**RESPONSES, "text": {"format": json_format(s, name="verdict", strict=True)}},
        ("text", "format", "schema"),
    ),
}


def at(body: Any, path: tuple[str | int, ...]) -> Any:
    for part in path:
        body = body[part]
    return body


def raw(method: str) -> str:
    head, _, tail = method.rpartition(".")
    return f"{head}.with_raw_response.{tail}"


def case_and_sdk(harness: Harness, name: str) -> tuple[Case, SDK]:
    case = CASES[name]
    return case, harness.sdk(case.provider)


def sent_schema(harness: Harness, case: Case) -> Any:
    return at(orjson.loads(harness.upstream.requests[-1].body), case.path)


@pytest.mark.parametrize("name", CASES)
def test_the_schema_goes_upstream_in_the_callers_order(harness: Harness, name: str) -> None:
    case, sdk = case_and_sdk(harness, name)
    kwargs = case.build(copy.deepcopy(REASON_FIRST))
    sdk.call(case.method, **kwargs)
    # orjson keeps the order it reads, so these bytes are the order the provider received.
    assert orjson.dumps(sent_schema(harness, case)) == orjson.dumps(case.sent_by_caller(kwargs))


@pytest.mark.parametrize("name", CASES)
def test_schemas_that_differ_only_in_order_do_not_share_a_key(harness: Harness, name: str) -> None:
    case, sdk = case_and_sdk(harness, name)
    first = sdk.call(raw(case.method), **case.build(copy.deepcopy(REASON_FIRST)))
    kwargs = case.build(answer_first())
    second = sdk.call(raw(case.method), **kwargs)
    assert first.headers["x-cachekit-cache"] == "miss"
    assert second.headers["x-cachekit-cache"] == "miss"
    assert harness.upstream.calls == 2
    assert orjson.dumps(sent_schema(harness, case)) == orjson.dumps(case.sent_by_caller(kwargs))
    # Each order is its own entry: both are answered from the cache now.
    again = sdk.call(raw(case.method), **case.build(copy.deepcopy(REASON_FIRST)))
    assert again.headers["x-cachekit-cache"] == "hit"
    assert harness.upstream.calls == 2


def reorder_everything_but_schemas(
    value: Any, path: tuple[str | int, ...], schema_at: tuple[str | int, ...]
) -> Any:
    """``value`` with the key order of every object reversed, except the schema at ``schema_at``."""
    if path == schema_at:
        return value
    if isinstance(value, dict):
        return {
            k: reorder_everything_but_schemas(v, (*path, k), schema_at) for k, v in reversed(value.items())
        }
    if isinstance(value, list):
        return [reorder_everything_but_schemas(v, (*path, i), schema_at) for i, v in enumerate(value)]
    return value


@pytest.mark.parametrize("name", CASES)
def test_key_order_outside_schemas_still_shares_a_key(harness: Harness, name: str) -> None:
    """Messages, tool definitions around their schema, format wrappers: order the provider ignores."""
    case, sdk = case_and_sdk(harness, name)
    body = case.build(copy.deepcopy(REASON_FIRST))
    sdk.call(case.method, **body)
    reordered = reorder_everything_but_schemas(body, (), case.sdk_path or case.path)
    assert orjson.dumps(reordered) != orjson.dumps(body)
    hit = sdk.call(raw(case.method), **reordered)
    assert hit.headers["x-cachekit-cache"] == "hit"
    assert harness.upstream.calls == 1


def test_a_tool_input_in_history_is_not_a_schema(harness: Harness) -> None:
    """A ``tool_use`` input the model wrote earlier is data: its key order shares a key."""
    sdk = harness.sdk("anthropic")

    def body(tool_input: dict[str, Any]) -> dict[str, Any]:
        return {
            **ANTHROPIC,
            "messages": [
                *QUESTION,
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t1", "name": "v", "input": tool_input}],
                },
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
            ],
        }

    sdk.call("messages.create", **body({"b": 1, "a": {"d": 2, "c": 3}}))
    hit = sdk.call("messages.with_raw_response.create", **body({"a": {"c": 3, "d": 2}, "b": 1}))
    assert hit.headers["x-cachekit-cache"] == "hit"


def test_an_unknown_top_level_field_keeps_its_order(harness: Harness) -> None:
    """A compatible server's extension (vLLM's ``guided_json``) may be a schema too: kept as written."""
    sdk = harness.sdk("openai")
    sdk.call("chat.completions.create", **CHAT, extra_body={"guided_json": copy.deepcopy(REASON_FIRST)})
    assert orjson.dumps(orjson.loads(harness.upstream.requests[-1].body)["guided_json"]) == orjson.dumps(
        REASON_FIRST
    )
    other = sdk.call(
        "chat.completions.with_raw_response.create", **CHAT, extra_body={"guided_json": answer_first()}
    )
    assert other.headers["x-cachekit-cache"] == "miss"


# -- the documented table ------------------------------------------------------------------------

SHAPING = Path(__file__).resolve().parents[2] / "docs" / "shaping.md"


def documented_kept_paths() -> dict[str, set[str]]:
    """The rows of the table of order-kept places in docs/shaping.md: dialect -> paths."""
    text = SHAPING.read_text()
    section = text.split("### Where order is kept", 1)[1].split("\n#", 1)[0]
    rows: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[1].startswith("`"):
            for dialect in re.findall(r"`([a-z_]+)`", cells[0]):
                rows.setdefault(dialect, set()).add(cells[1].strip("`"))
    return rows


def test_the_documented_table_is_the_code() -> None:
    assert documented_kept_paths() == {dialect: set(paths) for dialect, paths in canonical.ORDER_KEPT.items()}


def test_the_cases_above_cover_every_row() -> None:
    family = {"messages.create": "anthropic_messages", "messages.count_tokens": "anthropic_messages"}
    family |= {"chat.completions.create": "openai_chat", "responses.create": "openai_responses"}
    covered: dict[str, set[str]] = {}
    for case in CASES.values():
        path = "/".join("*" if isinstance(part, int) else part for part in case.path)
        covered.setdefault(family[case.method], set()).add(path)
    assert canonical.ORDER_KEPT["anthropic_count_tokens"] == canonical.ORDER_KEPT["anthropic_messages"]
    kept = {d: set(paths) for d, paths in canonical.ORDER_KEPT.items() if d != "anthropic_count_tokens"}
    assert covered == kept

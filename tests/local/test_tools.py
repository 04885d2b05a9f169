"""Tools wherever a request declares them, calls that real tools accept (issue 29 items 1, 6, 7).

Each answer is read by the official SDKs with strict response validation, streams through their own
stream helpers, and every value checked to be their typed data; tool arguments are validated with
``jsonschema`` against the tool's own schema.
"""

from __future__ import annotations

from typing import Any

import anthropic
import jsonschema  # type: ignore[import-untyped]
import openai
import orjson
import pytest

from cachekit.local import ByteTokenizer, Prompt, ScriptedEngine, ToolSpec
from cachekit.local.parse import parse
from cachekit.local.scripted import call_of, example
from tests.local.conftest import CLAUDE, GPT, typed

LOOKUP: Any = {
    "type": "object",
    "properties": {"id": {"type": "integer", "minimum": 3}, "verbose": {"type": "boolean"}},
    "required": ["id"],
    "additionalProperties": False,
}
SEARCH: Any = {"type": "object", "properties": {"q": {"type": "string", "minLength": 2}}, "required": ["q"]}
CRM: Any = {
    "type": "namespace",
    "name": "crm",
    "description": "Customer records.",
    "tools": [
        {"type": "function", "name": "lookup", "description": "Find a customer.", "parameters": LOOKUP}
    ],
}
PATCH: Any = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Apply a patch.",
    "format": {"type": "text"},
}


def _valid(arguments: Any, schema: dict[str, Any]) -> None:
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    validator.validate(arguments)


# -- OpenAI Responses ----------------------------------------------------------------------------


def test_namespace_tools_are_flattened_and_the_call_carries_the_namespace(gpt: openai.OpenAI) -> None:
    response = gpt.responses.create(model=GPT, input="Call lookup please", tools=[CRM])
    typed(response)
    [call] = [item for item in response.output if item.type == "function_call"]
    assert (call.name, call.namespace) == ("lookup", "crm")
    _valid(orjson.loads(call.arguments), LOOKUP)


def test_custom_tools_are_called_with_text_and_streamed_as_the_api_streams_them(gpt: openai.OpenAI) -> None:
    with gpt.responses.stream(model=GPT, input="Use apply_patch", tools=[PATCH]) as stream:
        events = list(stream)
        final = stream.get_final_response()
    typed(*events, final)
    kinds = [event.type for event in events]
    assert "response.custom_tool_call_input.delta" in kinds
    assert "response.custom_tool_call_input.done" in kinds
    [call] = [item for item in final.output if item.type == "custom_tool_call"]
    done = next(event for event in events if event.type == "response.custom_tool_call_input.done")
    assert call.name == "apply_patch"
    assert call.input == done.input == "example input for apply_patch"


def test_a_forced_tool_choice_of_any_tool_type_is_obeyed(gpt: openai.OpenAI) -> None:
    """A forced custom tool is called, never answered as if the choice were ``auto``."""
    tools: Any = [CRM, PATCH, {"type": "function", "name": "search", "parameters": SEARCH}]
    custom = gpt.responses.create(
        model=GPT, input="Hi", tools=tools, tool_choice={"type": "custom", "name": "apply_patch"}
    )
    function = gpt.responses.create(
        model=GPT, input="Hi", tools=tools, tool_choice={"type": "function", "name": "search"}
    )
    allowed = gpt.responses.create(
        model=GPT,
        input="Hi",
        tools=tools,
        tool_choice={
            "type": "allowed_tools",
            "mode": "required",
            "tools": [{"type": "function", "name": "search"}],
        },
    )
    typed(custom, function, allowed)
    assert [item.type for item in custom.output] == ["custom_tool_call"]
    assert [(item.type, getattr(item, "name", None)) for item in function.output] == [
        ("function_call", "search")
    ]
    assert [(item.type, getattr(item, "name", None)) for item in allowed.output] == [
        ("function_call", "search")
    ]
    with pytest.raises(openai.BadRequestError, match="does not run the hosted tool 'code_interpreter'"):
        gpt.responses.create(model=GPT, input="Hi", tools=tools, tool_choice={"type": "code_interpreter"})


def test_tools_declared_in_input_items_are_offered_from_there_on(gpt: openai.OpenAI) -> None:
    deferred: Any = {"type": "function", "name": "search", "parameters": SEARCH, "defer_loading": True}
    tools: Any = [{"type": "tool_search"}, deferred]
    unloaded = gpt.responses.create(model=GPT, input="Call search", tools=tools)
    assert all(item.type == "message" for item in unloaded.output)  # a deferred tool is not offered
    loaded = gpt.responses.create(
        model=GPT,
        tools=tools,
        input=[
            {"role": "user", "content": "Find it"},
            {
                "type": "tool_search_call",
                "call_id": "ts_1",
                "arguments": {"q": "search"},
                "execution": "client",
            },
            {"type": "tool_search_output", "call_id": "ts_1", "execution": "client", "tools": [deferred]},
            {"role": "user", "content": "Call search"},
        ],
    )
    added = gpt.responses.create(
        model=GPT,
        input=[
            {"type": "additional_tools", "role": "developer", "tools": [CRM]},
            {"role": "user", "content": "Call lookup"},
        ],
    )
    typed(unloaded, loaded, added)
    assert [item.name for item in loaded.output if item.type == "function_call"] == ["search"]
    [call] = [item for item in added.output if item.type == "function_call"]
    assert (call.name, call.namespace) == ("lookup", "crm")


def test_parallel_calls_and_custom_call_turns(gpt: openai.OpenAI) -> None:
    """Several calls in one answer; a custom call and its output sent back make the next turn."""
    tools = [CRM, PATCH]
    first = gpt.responses.create(model=GPT, input="Call lookup and apply_patch", tools=tools)
    calls = [item for item in first.output if item.type in ("function_call", "custom_tool_call")]
    assert [item.type for item in calls] == ["function_call", "custom_tool_call"]
    single = gpt.responses.create(
        model=GPT, input="Call lookup and apply_patch", tools=tools, parallel_tool_calls=False
    )
    assert len([item for item in single.output if item.type != "message"]) == 1
    outputs: list[Any] = [
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "found"},
        {"type": "custom_tool_call_output", "call_id": calls[1].call_id, "output": "applied"},
    ]
    history: list[Any] = [{"role": "user", "content": "Call lookup and apply_patch"}]
    history += [item.model_dump(exclude_none=True) for item in first.output]
    second = gpt.responses.create(model=GPT, input=history + outputs, tools=tools)
    typed(first, single, second)
    assert [item.type for item in second.output] == ["message"]  # the results answered, no more calls


# -- OpenAI Chat Completions ---------------------------------------------------------------------


def test_chat_custom_tools(gpt: openai.OpenAI) -> None:
    custom: Any = {"type": "custom", "custom": {"name": "apply_patch", "format": {"type": "text"}}}
    completion = gpt.chat.completions.create(
        model=GPT,
        messages=[{"role": "user", "content": "Hi"}],
        tools=[custom],
        tool_choice={"type": "custom", "custom": {"name": "apply_patch"}},
    )
    typed(completion)
    [call] = completion.choices[0].message.tool_calls or []
    assert call.type == "custom"
    assert (call.custom.name, call.custom.input) == ("apply_patch", "example input for apply_patch")
    replied = gpt.chat.completions.create(
        model=GPT,
        tools=[custom],
        messages=[
            {"role": "user", "content": "Hi"},
            completion.choices[0].message.model_dump(exclude_none=True),  # type: ignore[list-item]
            {"role": "tool", "tool_call_id": call.id, "content": "applied"},
        ],
    )
    assert replied.choices[0].finish_reason == "stop"


# -- Anthropic Messages --------------------------------------------------------------------------


def test_client_tools_anthropic_defines_are_called_with_their_input_shape(
    claude: anthropic.Anthropic,
) -> None:
    tools: Any = [
        {"type": "bash_20250124", "name": "bash"},
        {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
        {"type": "memory_20250818", "name": "memory"},
    ]
    message = claude.messages.create(
        model=CLAUDE,
        max_tokens=64,
        tools=tools,
        messages=[{"role": "user", "content": "Use bash, str_replace_based_edit_tool and memory"}],
    )
    typed(message)
    calls = {block.name: block.input for block in message.content if block.type == "tool_use"}
    assert set(calls) == {"bash", "str_replace_based_edit_tool", "memory"}
    assert isinstance(calls["bash"]["command"], str)
    assert calls["str_replace_based_edit_tool"]["command"] == "view"
    assert calls["memory"] == {"command": "view", "path": "/memories"}


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, ["text", "tool_use", "tool_use"]),
        ({"type": "auto", "disable_parallel_tool_use": True}, ["text", "tool_use"]),
        ({"type": "any"}, ["tool_use"]),
        ({"type": "tool", "name": "search"}, ["tool_use"]),
        ({"type": "none"}, ["text"]),
        ({"type": "tool", "name": "web_search"}, ["server_tool_use", "web_search_tool_result"]),
    ],
)
def test_every_anthropic_tool_choice(claude: anthropic.Anthropic, choice: Any, expected: list[str]) -> None:
    tools: Any = [
        {"name": "lookup", "input_schema": LOOKUP},
        {"name": "search", "input_schema": SEARCH},
        {"type": "web_search_20250305", "name": "web_search"},
    ]
    message = claude.messages.create(
        model=CLAUDE,
        max_tokens=64,
        tools=tools,
        tool_choice=choice,
        messages=[{"role": "user", "content": "Call lookup and search"}],
    )
    typed(message)
    assert [block.type for block in message.content][: len(expected)] == expected
    for block in message.content:
        if block.type == "tool_use":
            _valid(block.input, LOOKUP if block.name == "lookup" else SEARCH)


def test_a_forced_tool_that_is_not_offered_is_a_400(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError, match="Tool 'missing' not found"):
        claude.messages.create(
            model=CLAUDE,
            max_tokens=8,
            tools=[{"name": "lookup", "input_schema": LOOKUP}],
            tool_choice={"type": "tool", "name": "missing"},
            messages=[{"role": "user", "content": "hi"}],
        )


# -- arguments real tools accept -----------------------------------------------------------------

SCHEMAS: list[dict[str, Any]] = [
    LOOKUP,
    {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date-time"},
            "day": {"type": "string", "format": "date"},
            "mail": {"type": "string", "format": "email"},
            "site": {"type": "string", "format": "uri"},
            "id": {"type": "string", "format": "uuid"},
            "ip": {"type": "string", "format": "ipv4"},
            "host": {"type": "string", "format": "hostname"},
        },
        "required": ["when", "day", "mail", "site", "id", "ip", "host"],
    },
    {
        "type": "object",
        "properties": {
            "count": {"type": "integer", "exclusiveMinimum": 10, "maximum": 20, "multipleOf": 4},
            "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 0.5},
            "level": {"type": "integer", "minimum": -5, "maximum": -2},
            "unit": {"type": "string", "enum": ["c", "f"]},
            "code": {"type": "string", "pattern": "^[A-Z]{3}$", "minLength": 3, "maxLength": 3},
            "short": {"type": "string", "maxLength": 4},
            "long": {"type": "string", "minLength": 40},
        },
        "required": ["count", "ratio", "level", "unit", "code", "short", "long"],
    },
    {
        "type": "object",
        "$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
        "properties": {
            "points": {"type": "array", "items": {"$ref": "#/$defs/point"}, "minItems": 2, "maxItems": 3},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 3, "uniqueItems": True},
            "note": {"anyOf": [{"type": "null"}, {"type": "string", "minLength": 1}]},
            "both": {
                "allOf": [
                    {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                    {"properties": {"b": {"type": "string"}}, "required": ["b"]},
                ]
            },
            "options": {
                "type": "object",
                "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                "minProperties": 1,
            },
            "map": {"type": "object", "additionalProperties": {"type": "integer"}, "required": ["k"]},
            "either": {"type": ["null", "integer"], "minimum": 7},
        },
        "required": ["points", "tags", "note", "both", "options", "map", "either"],
    },
]


@pytest.mark.parametrize("schema", SCHEMAS, ids=["lookup", "formats", "bounds", "structure"])
def test_scripted_arguments_satisfy_the_tools_schema(schema: dict[str, Any]) -> None:
    arguments = call_of(ToolSpec("tool", parameters=schema)).arguments
    _valid(dict(arguments), schema)
    assert isinstance(arguments.get("count", 12), int)


def test_optional_properties_only_when_a_script_asks() -> None:
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer", "minimum": 1},
            "unit": {"enum": ["c"]},
        },
        "required": ["city"],
    }
    tool = ToolSpec("weather", parameters=schema)
    assert set(call_of(tool).arguments) == {"city"}
    assert set(call_of(tool, ["days"]).arguments) == {"city", "days"}
    assert set(call_of(tool, True).arguments) == {"city", "days", "unit"}
    # A structured-output document fills every property (strict schemas require them all).
    assert set(example(schema, "reply", schema)) == {"city", "days", "unit"}


def test_the_engine_calls_with_valid_arguments_end_to_end(gpt: openai.OpenAI) -> None:
    tools = [
        {"type": "function", "name": "tool", "parameters": schema, "strict": False} for schema in SCHEMAS[1:2]
    ]
    response = gpt.responses.create(model=GPT, input="Call tool", tools=tools)  # type: ignore[arg-type]
    [call] = [item for item in response.output if item.type == "function_call"]
    _valid(orjson.loads(call.arguments), SCHEMAS[1])
    engine = ScriptedEngine()
    prompt = Prompt(model=GPT, turns=(), tools=(ToolSpec("tool", parameters=SCHEMAS[2]),))
    assert engine.prompt_tokens(prompt) > 0


def test_one_answers_items_make_one_turn_and_their_outputs_tool_turns() -> None:
    """Responses items of one answer (reasoning, message, calls) are one assistant turn; each call's
    output, a custom tool's included, is a tool turn naming its call."""
    items = [
        {"role": "user", "content": "Go"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "On it."}]},
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "lookup",
            "arguments": '{"id": 4}',
            "namespace": "crm",
        },
        {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "diff"},
        {"type": "function_call_output", "call_id": "c1", "output": "found"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "applied"},
    ]
    prompt = parse("openai_responses", {"model": GPT, "input": items}, ByteTokenizer()).prompt
    assert [turn.role for turn in prompt.turns] == ["user", "assistant", "tool", "tool"]
    answer = prompt.turns[1]
    assert answer.text == "On it."
    assert [(c.name, c.namespace, c.input) for c in answer.tool_calls] == [
        ("lookup", "crm", None),
        ("apply_patch", None, "diff"),
    ]
    assert [(t.tool_call_id, t.text) for t in prompt.turns[2:]] == [("c1", "found"), ("c2", "applied")]
    assert prompt.answer_index == 1


def test_a_forced_server_tool_reaches_the_engine_as_a_search() -> None:
    """What an engine (or a script function) is told of ``tool_choice`` naming a server tool: search,
    not a call of a client tool by that name."""
    payload = {
        "model": CLAUDE,
        "max_tokens": 64,
        "tools": [
            {"name": "lookup", "input_schema": LOOKUP},
            {"type": "web_search_20250305", "name": "web_search"},
        ],
        "tool_choice": {"type": "tool", "name": "web_search"},
        "messages": [{"role": "user", "content": "Call lookup"}],
    }
    choice = parse("anthropic_messages", payload, ByteTokenizer()).prompt.tool_choice
    assert (choice.mode, choice.name) == ("web_search", None)
    payload["tool_choice"] = {"type": "tool", "name": "lookup"}
    choice = parse("anthropic_messages", payload, ByteTokenizer()).prompt.tool_choice
    assert (choice.mode, choice.name) == ("tool", "lookup")

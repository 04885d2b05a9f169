"""Tests for cachekit.shape.canonical: properties over generated request bodies, plus worked examples."""

from __future__ import annotations

import copy
import json
import logging
from decimal import Decimal
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cachekit._types import Dialect
from cachekit.shape.canonical import CanonicalOptions, CanonicalResult, Change, canonicalize, dumps

DIALECTS: tuple[Dialect, ...] = (
    "anthropic_messages",
    "anthropic_count_tokens",
    "openai_chat",
    "openai_responses",
)
ANTHROPIC = ("anthropic_messages", "anthropic_count_tokens")

# The machine running the suite may be busy; the properties are about results, not speed.
SETTINGS = settings(deadline=None, max_examples=100)


# -- strategies ----------------------------------------------------------------------------------


def shuffled(d: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """``d`` with its keys in a random order."""
    return st.permutations(list(d.items())).map(dict)


def shuffle_dict(data: st.DataObject, d: dict[str, Any]) -> dict[str, Any]:
    return data.draw(shuffled(d))


words = st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
# JSON values orjson can round-trip (the shape of a parsed request body).
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(words, children, max_size=5),
    max_leaves=20,
)
json_objects = st.dictionaries(words, json_values, max_size=6)
# Prose with the whitespace normalize_whitespace cares about.
prose = st.text(st.sampled_from(list("ab .\t\r\n")) | st.characters(codec="utf-8"), max_size=40)


@st.composite
def schemas(draw: st.DrawFn, depth: int = 1) -> dict[str, Any]:
    """A JSON schema for an object, its keywords and properties in random order."""
    props: dict[str, Any] = {}
    for name in draw(st.lists(words, max_size=4, unique=True)):
        if depth > 0 and draw(st.booleans()):
            props[name] = draw(schemas(depth=depth - 1))
        else:
            leaf: dict[str, Any] = {"type": draw(st.sampled_from(["string", "integer", "number", "boolean"]))}
            if draw(st.booleans()):
                leaf["description"] = draw(prose)
            if draw(st.booleans()):
                leaf["enum"] = draw(st.lists(words, min_size=1, max_size=3))
            props[name] = draw(shuffled(leaf))
    schema: dict[str, Any] = {"type": "object", "properties": draw(shuffled(props))}
    if draw(st.booleans()) and props:
        schema["required"] = draw(st.permutations(list(props)))
    if draw(st.booleans()):
        schema["additionalProperties"] = draw(st.booleans())
    return draw(shuffled(schema))


def tool_inputs() -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(words, json_values, max_size=5)


# Strings that must stay byte for byte: not JSON, or JSON orjson cannot round-trip exactly.
invalid_arguments = st.sampled_from(
    ["", "{", "not json", '{"a": 1,}', "{'a': 1}", "NaN", '{"a": NaN}', '{"n": 123456789012345678901234}']
) | st.text(max_size=10).filter(lambda s: not _parses(s))


def _parses(text: str) -> bool:
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return True


@st.composite
def arguments(draw: st.DrawFn) -> str:
    """A tool call's ``arguments``: usually JSON in any spacing and key order, sometimes not JSON."""
    if draw(st.integers(0, 4)) == 0:
        return draw(invalid_arguments)
    value = draw(tool_inputs())
    style = draw(st.sampled_from(["compact", "spaced", "indented", "orjson"]))
    if style == "orjson":
        return orjson.dumps(value).decode()
    if style == "indented":
        return json.dumps(value, indent=2, ensure_ascii=draw(st.booleans()))
    separators = (",", ":") if style == "compact" else (", ", ": ")
    return json.dumps(value, separators=separators, ensure_ascii=draw(st.booleans()))


def text_or_blocks(block_type: str) -> st.SearchStrategy[Any]:
    return prose | st.lists(st.builds(lambda t: {"type": block_type, "text": t}, prose), max_size=3)


@st.composite
def anthropic_bodies(
    draw: st.DrawFn, tool_names: st.SearchStrategy[list[str]] | None = None
) -> dict[str, Any]:
    names = draw(tool_names if tool_names is not None else st.lists(words, max_size=4, unique=True))
    tools = [
        draw(shuffled({"name": n, "description": draw(prose), "input_schema": draw(schemas())}))
        for n in names
    ]
    messages = []
    for turn in range(draw(st.integers(0, 4))):
        role = "user" if turn % 2 == 0 else "assistant"
        if draw(st.booleans()):
            content: Any = draw(prose)
        else:
            content = []
            for _ in range(draw(st.integers(0, 3))):
                kind = draw(
                    st.sampled_from(["text", "tool_use", "server_tool_use", "tool_result", "thinking"])
                )
                if kind == "text":
                    content.append({"type": "text", "text": draw(prose)})
                elif kind in ("tool_use", "server_tool_use"):
                    block = {
                        "type": kind,
                        "id": f"toolu_{turn}",
                        "name": draw(words),
                        "input": draw(tool_inputs()),
                    }
                    content.append(draw(shuffled(block)))
                elif kind == "tool_result":
                    content.append(
                        {"type": "tool_result", "tool_use_id": "t", "content": draw(text_or_blocks("text"))}
                    )
                else:
                    content.append({"type": "thinking", "thinking": draw(prose), "signature": "sig"})
        messages.append({"role": role, "content": content})
    body: dict[str, Any] = {"model": "claude-x", "max_tokens": 64, "messages": messages}
    if draw(st.booleans()) or tools:
        body["tools"] = tools
    if draw(st.booleans()):
        body["system"] = draw(text_or_blocks("text"))
    return draw(shuffled(body))


@st.composite
def chat_bodies(draw: st.DrawFn, tool_names: st.SearchStrategy[list[str]] | None = None) -> dict[str, Any]:
    names = draw(tool_names if tool_names is not None else st.lists(words, max_size=4, unique=True))
    tools = [
        {"type": "function", "function": draw(shuffled({"name": n, "parameters": draw(schemas())}))}
        for n in names
    ]
    messages: list[Any] = [{"role": "system", "content": draw(text_or_blocks("text"))}]
    for turn in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["user", "assistant", "tool_calls", "tool"]))
        if kind == "tool_calls":
            calls = [
                {
                    "id": f"call_{turn}_{k}",
                    "type": "function",
                    "function": draw(shuffled({"name": draw(words), "arguments": draw(arguments())})),
                }
                for k in range(draw(st.integers(1, 3)))
            ]
            messages.append({"role": "assistant", "content": draw(st.none() | prose), "tool_calls": calls})
        elif kind == "tool":
            messages.append({"role": "tool", "tool_call_id": "c", "content": draw(prose)})
        else:
            messages.append({"role": kind, "content": draw(text_or_blocks("text"))})
    body: dict[str, Any] = {"model": "gpt-x", "messages": messages}
    if tools:
        body["tools"] = tools
    if draw(st.booleans()):
        # Structured output: property order is meaningful, never sorted.
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "out", "schema": draw(schemas())},
        }
    return draw(shuffled(body))


@st.composite
def responses_bodies(
    draw: st.DrawFn, tool_names: st.SearchStrategy[list[str]] | None = None
) -> dict[str, Any]:
    names = draw(tool_names if tool_names is not None else st.lists(words, max_size=4, unique=True))
    tools: list[Any] = [
        draw(shuffled({"type": "function", "name": n, "parameters": draw(schemas()), "strict": False}))
        for n in names
    ]
    if tool_names is None and draw(st.booleans()):
        tools.append({"type": "web_search"})
    items: Any
    if draw(st.booleans()):
        items = draw(prose)
    else:
        items = []
        for turn in range(draw(st.integers(0, 4))):
            kind = draw(st.sampled_from(["message", "easy_message", "function_call", "function_call_output"]))
            if kind == "function_call":
                item = {
                    "type": kind,
                    "call_id": f"c{turn}",
                    "name": draw(words),
                    "arguments": draw(arguments()),
                }
                items.append(draw(shuffled(item)))
            elif kind == "function_call_output":
                items.append({"type": kind, "call_id": f"c{turn}", "output": draw(prose)})
            else:
                role = draw(st.sampled_from(["user", "assistant", "developer"]))
                part = "output_text" if role == "assistant" else "input_text"
                message = {"role": role, "content": draw(text_or_blocks(part))}
                if kind == "message":
                    message["type"] = "message"
                items.append(message)
    body: dict[str, Any] = {"model": "gpt-x", "input": items}
    if tools:
        body["tools"] = tools
    if draw(st.booleans()):
        body["instructions"] = draw(prose)
    if draw(st.booleans()):
        body["text"] = {"format": {"type": "json_schema", "name": "out", "schema": draw(schemas())}}
    return draw(shuffled(body))


BODY_STRATEGIES = {
    "anthropic_messages": anthropic_bodies,
    "anthropic_count_tokens": anthropic_bodies,
    "openai_chat": chat_bodies,
    "openai_responses": responses_bodies,
}


@st.composite
def dialect_bodies(draw: st.DrawFn) -> tuple[Dialect, dict[str, Any]]:
    dialect = draw(st.sampled_from(DIALECTS))
    return dialect, draw(BODY_STRATEGIES[dialect]())


options = st.builds(
    CanonicalOptions, tool_order=st.sampled_from(["keep", "sort"]), normalize_whitespace=st.booleans()
)


# -- the places canonicalize may rewrite, and the schemas dumps keeps ------------------------------

PLACEHOLDER = "<canonical>"


def _get_list(obj: Any, key: str) -> list[Any]:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, list) else []


def named_places(body: dict[str, Any], dialect: str) -> list[tuple[Any, Any]]:
    """``(container, key)`` of every arguments string canonicalize may rewrite (the generated bodies
    hold no sampling parameters, and whitespace and tool order are opt-in)."""
    places: list[tuple[Any, Any]] = []
    if dialect == "openai_chat":
        for message in _get_list(body, "messages"):
            for call in _get_list(message, "tool_calls"):
                places.append((call["function"], "arguments"))
    elif dialect == "openai_responses":
        for item in _get_list(body, "input"):
            if item.get("type") == "function_call":
                places.append((item, "arguments"))
    return places


# Where the generated bodies hold JSON Schemas ("*": each item of a list), as these strategies build them.
SCHEMA_PATHS = {
    "anthropic_messages": (("tools", "*", "input_schema"),),
    "anthropic_count_tokens": (("tools", "*", "input_schema"),),
    "openai_chat": (("tools", "*", "function", "parameters"), ("response_format", "json_schema", "schema")),
    "openai_responses": (("tools", "*", "parameters"), ("text", "format", "schema")),
}


def schemas_in(body: Any, dialect: str) -> list[Any]:
    found: list[Any] = []

    def walk(value: Any, path: tuple[str, ...]) -> None:
        if not path:
            found.append(value)
        elif path[0] == "*" and isinstance(value, list):
            for item in value:
                walk(item, path[1:])
        elif isinstance(value, dict) and path[0] in value:
            walk(value[path[0]], path[1:])

    for path in SCHEMA_PATHS[dialect]:
        walk(body, path)
    return found


def masked(body: dict[str, Any], dialect: str) -> bytes:
    """Key-order-sensitive bytes of ``body`` with the rewritable places blanked out."""
    clone = copy.deepcopy(body)
    for container, key in named_places(clone, dialect):
        container[key] = PLACEHOLDER
    return orjson.dumps(clone)


def parse_arguments(body: dict[str, Any], dialect: str) -> dict[str, Any]:
    """A copy of ``body`` whose arguments strings that parse are replaced by their values."""
    clone = copy.deepcopy(body)
    for container, key in named_places(clone, dialect):
        if _parses(container[key]):
            container[key] = orjson.loads(container[key])
    return clone


def json_equal(a: Any, b: Any) -> bool:
    return orjson.dumps(a, option=orjson.OPT_SORT_KEYS) == orjson.dumps(b, option=orjson.OPT_SORT_KEYS)


def reshuffled_outside_schemas(data: st.DataObject, body: dict[str, Any], dialect: str) -> dict[str, Any]:
    """A copy of ``body`` with the key order of every object changed, except inside its schemas, and
    its (valid, exactly parsed) arguments re-spaced and reordered."""
    kept = {id(schema) for schema in schemas_in(body, dialect)}

    def reshuffle(value: Any) -> Any:
        if id(value) in kept:
            return copy.deepcopy(value)
        if isinstance(value, dict):
            return {k: reshuffle(v) for k, v in data.draw(st.permutations(list(value.items())))}
        if isinstance(value, list):
            return [reshuffle(v) for v in value]
        return value

    clone = reshuffle(body)
    for container, key in named_places(clone, dialect):
        if _parses(container[key]) and _round_trips(container[key]):
            spaced = data.draw(st.booleans())
            container[key] = json.dumps(
                reshuffle(orjson.loads(container[key])), separators=(", ", ": ") if spaced else (",", ":")
            )
    return clone


def _round_trips(text: str) -> bool:
    """Whether orjson writes every value back as Python's json module does (same digits, exact
    integers): then these generated strings, written by ``json.dumps``, are rewritten losslessly."""
    python = json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return orjson.dumps(orjson.loads(text), option=orjson.OPT_SORT_KEYS) == python.encode()


def _exact(text: str) -> Any:
    return json.loads(
        text, parse_float=Decimal, object_pairs_hook=lambda pairs: sorted(pairs, key=lambda kv: kv[0])
    )


@SETTINGS
@given(dialect_bodies(), options)
def test_idempotent(case: tuple[Dialect, dict[str, Any]], opts: CanonicalOptions) -> None:
    dialect, body = case
    first = canonicalize(body, dialect, opts)
    second = canonicalize(first.body, dialect, opts)
    assert second.changes == ()
    assert dumps(second.body, dialect) == dumps(first.body, dialect)
    assert orjson.dumps(second.body) == orjson.dumps(first.body)


@SETTINGS
@given(dialect_bodies(), options)
def test_json_equal_to_input(case: tuple[Dialect, dict[str, Any]], opts: CanonicalOptions) -> None:
    dialect, body = case
    out = canonicalize(body, dialect, CanonicalOptions(tool_order="keep")).body
    assert json_equal(parse_arguments(out, dialect), parse_arguments(body, dialect))
    if opts.tool_order == "sort" and not opts.normalize_whitespace:
        sorted_out = canonicalize(body, dialect, opts).body
        key = _tool_sort_key(dialect)
        expected = dict(body)
        if isinstance(body.get("tools"), list):
            expected["tools"] = sorted(body["tools"], key=key)
        assert json_equal(parse_arguments(sorted_out, dialect), parse_arguments(expected, dialect))


def _tool_sort_key(dialect: str) -> Any:
    def key(tool: dict[str, Any]) -> tuple[int, str]:
        name = tool["function"].get("name") if dialect == "openai_chat" else tool.get("name")
        return (0, name) if isinstance(name, str) else (1, "")

    return key


@SETTINGS
@given(dialect_bodies())
def test_only_named_places_change(case: tuple[Dialect, dict[str, Any]]) -> None:
    """Key order, prose, messages, blocks and schemas are untouched (defaults: keep, no ws); an
    arguments string is left as it is, or rewritten to a value it holds exactly."""
    dialect, body = case
    result = canonicalize(body, dialect)
    out = result.body
    assert masked(out, dialect) == masked(body, dialect)
    assert list(out) == list(body)
    places_in = named_places(body, dialect)
    places_out = named_places(out, dialect)
    assert len(places_in) == len(places_out)
    for (c_in, key), (c_out, _) in zip(places_in, places_out, strict=True):
        before, after = c_in[key], c_out[key]
        if after is not before:
            assert after == orjson.dumps(orjson.loads(before), option=orjson.OPT_SORT_KEYS).decode()
            assert _exact(after) == _exact(before)
        if not _parses(before):
            assert after is before  # byte for byte, not even re-encoded
    for change in result.changes:
        assert change.kind == "compacted_arguments"


@SETTINGS
@given(dialect_bodies(), st.data())
def test_key_order_outside_schemas_does_not_matter(
    case: tuple[Dialect, dict[str, Any]], data: st.DataObject
) -> None:
    dialect, body = case
    other = reshuffled_outside_schemas(data, body, dialect)
    assert dumps(canonicalize(other, dialect).body, dialect) == dumps(
        canonicalize(body, dialect).body, dialect
    )


@SETTINGS
@given(dialect_bodies())
def test_key_order_inside_a_schema_is_kept(case: tuple[Dialect, dict[str, Any]]) -> None:
    dialect, body = case
    raw = dumps(canonicalize(body, dialect).body, dialect)
    for schema in schemas_in(body, dialect):
        assert orjson.dumps(schema) in raw  # as the caller ordered it, keywords and properties
    for schema in schemas_in(body, dialect):
        if isinstance(schema, dict) and len(schema) > 1:
            reordered = copy.deepcopy(body)
            target = schemas_in(reordered, dialect)[schemas_in(body, dialect).index(schema)]
            items = list(target.items())
            target.clear()
            target.update(reversed(items))
            assert dumps(canonicalize(reordered, dialect).body, dialect) != raw
            break


@SETTINGS
@given(st.data(), st.sampled_from(DIALECTS), st.booleans())
def test_sorted_tools_ignore_permutation(data: st.DataObject, dialect: Dialect, ws: bool) -> None:
    names = st.lists(words, min_size=1, max_size=5, unique=True)
    body = data.draw(BODY_STRATEGIES[dialect](tool_names=names))
    permuted = dict(body)
    permuted["tools"] = data.draw(st.permutations(body["tools"]))
    opts = CanonicalOptions(tool_order="sort", normalize_whitespace=ws)
    result = canonicalize(body, dialect, opts)
    assert dumps(canonicalize(permuted, dialect, opts).body, dialect) == dumps(result.body, dialect)
    got = [_tool_sort_key(dialect)(t)[1] for t in result.body["tools"]]
    assert got == sorted(got)
    was_sorted = body["tools"] == sorted(body["tools"], key=_tool_sort_key(dialect))
    assert (Change("/tools", "reordered_tools") in result.changes) is not was_sorted


@SETTINGS
@given(dialect_bodies(), options)
def test_input_not_mutated(case: tuple[Dialect, dict[str, Any]], opts: CanonicalOptions) -> None:
    dialect, body = case
    before = orjson.dumps(body)
    snapshot = copy.deepcopy(body)
    canonicalize(body, dialect, opts)
    assert orjson.dumps(body) == before
    assert body == snapshot


@SETTINGS
@given(dialect_bodies(), options)
def test_dumps_round_trips(case: tuple[Dialect, dict[str, Any]], opts: CanonicalOptions) -> None:
    dialect, body = case
    out = canonicalize(body, dialect, opts).body
    raw = dumps(out, dialect)
    assert orjson.loads(raw) == out
    assert list(orjson.loads(raw)) == sorted(out)
    # Messages (and everything in them) are written with sorted keys; their lists keep their order.
    for key in ("messages", "input"):
        if isinstance(out.get(key), list):
            assert orjson.dumps(out[key], option=orjson.OPT_SORT_KEYS) in raw


@SETTINGS
@given(dialect_bodies())
def test_whitespace_normalization(case: tuple[Dialect, dict[str, Any]]) -> None:
    dialect, body = case
    result = canonicalize(body, dialect, CanonicalOptions(normalize_whitespace=True))
    for change in result.changes:
        if change.kind == "normalized_whitespace":
            text = _at(result.body, change.path)
            assert "\r" not in text
            assert all(line == line.rstrip(" \t") for line in text.split("\n"))
    # Only whitespace differs from the un-normalized canonical body.
    plain = canonicalize(body, dialect).body
    assert _strip_ws(orjson.dumps(result.body)) == _strip_ws(orjson.dumps(plain))


def _at(body: Any, path: str) -> Any:
    for part in path.split("/")[1:]:
        body = body[int(part)] if isinstance(body, list) else body[part]
    return body


def _strip_ws(raw: bytes) -> bytes:
    return raw.replace(b"\\r", b"").replace(b"\\n", b"").replace(b"\\t", b"").replace(b" ", b"")


# Arbitrary JSON objects, some shaped like request bodies, to show canonicalize never raises.
_any_ints = st.integers()  # including integers beyond 64 bits, which orjson cannot dump
wild_values = st.recursive(
    st.none() | st.booleans() | _any_ints | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=6), children, max_size=4)
        | st.fixed_dictionaries(
            {},
            optional={
                "type": st.sampled_from(
                    [
                        "text",
                        "tool_use",
                        "server_tool_use",
                        "function",
                        "function_call",
                        "message",
                        "input_text",
                    ]
                )
                | children,
                "role": st.sampled_from(["user", "assistant", "tool", "system"]) | children,
                "name": words | children,
                "input": children,
                "input_schema": children,
                "parameters": children,
                "function": children,
                "arguments": st.text(max_size=10) | children,
                "tool_calls": children,
                "content": children,
                "text": children,
            },
        )
    ),
    max_leaves=25,
)
wild_bodies = st.fixed_dictionaries(
    {},
    optional={
        "tools": st.lists(wild_values, max_size=4) | wild_values,
        "messages": st.lists(wild_values, max_size=4) | wild_values,
        "input": st.lists(wild_values, max_size=4) | wild_values,
        "system": wild_values,
        "instructions": wild_values,
    },
) | st.dictionaries(st.text(max_size=6), wild_values, max_size=4)


@SETTINGS
@given(wild_bodies, st.sampled_from(DIALECTS), options)
def test_never_raises_on_arbitrary_json(
    body: dict[str, Any], dialect: Dialect, opts: CanonicalOptions
) -> None:
    snapshot = copy.deepcopy(body)
    result = canonicalize(body, dialect, opts)
    assert isinstance(result, CanonicalResult)
    assert repr(body) == repr(snapshot)  # not mutated (repr also sees key order and NaN)
    again = canonicalize(result.body, dialect, opts)
    assert again.changes == ()
    try:
        raw = dumps(result.body, dialect)
    except (
        TypeError
    ):  # orjson.JSONEncodeError: an integer beyond 64 bits (the pipeline sends such a body as is)
        return
    assert isinstance(raw, bytes)


def test_deeply_nested_input_does_not_raise() -> None:
    def nest(depth: int) -> Any:
        deep: Any = {"b": 1, "a": 1}
        for _ in range(depth):
            deep = {"z": deep, "a": 0}
        return deep

    # Deeper than orjson writes and than Python's recursion limit: canonicalize does not walk into
    # schemas, so it leaves them alone; dumps refuses (a TypeError), and the pipeline then sends the
    # body as the caller wrote it.
    for depth in (300, 5000):
        deep = nest(depth)
        result = canonicalize({"tools": [{"name": "t", "input_schema": deep}]}, "anthropic_messages")
        assert result.body["tools"][0]["input_schema"] is deep
        assert result.changes == ()
        with pytest.raises(TypeError):
            dumps(result.body, "anthropic_messages")


# -- examples ------------------------------------------------------------------------------------


def test_anthropic_example() -> None:
    schema = {
        "type": "object",
        "properties": {"q": {"type": "string", "description": "query"}},
        "required": ["q"],
    }
    body: dict[str, Any] = {
        "model": "claude-x",
        "max_tokens": 10,
        "system": "Be brief.  \r\n",
        "tools": [
            {"name": "search", "description": "Search.  ", "input_schema": schema},
            {"input_schema": {"properties": {}, "type": "object"}, "name": "calc"},
        ],
        "messages": [
            {"role": "user", "content": "hi  \r\nthere"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me look.  "},
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "search",
                        "input": {"z": 1, "a": {"y": 2, "b": 3}},
                    },
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x  \r\n"}]},
        ],
    }
    result = canonicalize(body, "anthropic_messages")
    assert result.body["tools"] is body["tools"]  # nothing to rewrite: shared, not copied
    assert result.body["messages"] is body["messages"]
    assert result.body["system"] == "Be brief.  \r\n"  # prose untouched by default
    assert result.changes == ()
    raw = dumps(result.body, "anthropic_messages")
    # The schema keeps its order (keywords and properties); the tool around it and the tool input
    # in the history are sorted; the top level too.
    assert (
        b'"input_schema":{"type":"object","properties":{"q":{"type":"string","description":"query"}}' in raw
    )
    assert b'{"description":"Search.  ","input_schema":' in raw
    assert b'{"input_schema":{"properties":{},"type":"object"},"name":"calc"}' in raw
    assert b'"input":{"a":{"b":3,"y":2},"z":1}' in raw
    assert raw.startswith(b'{"max_tokens":10,"messages":[{"content":"hi  \\r\\nthere","role":"user"}')

    sorted_ws = canonicalize(
        body, "anthropic_count_tokens", CanonicalOptions("sort", normalize_whitespace=True)
    )
    assert [t["name"] for t in sorted_ws.body["tools"]] == ["calc", "search"]
    assert sorted_ws.body["tools"][1]["description"] == "Search.  "  # descriptions are not prose we touch
    assert sorted_ws.body["system"] == "Be brief.\n"
    assert sorted_ws.body["messages"][0]["content"] == "hi\nthere"
    assert sorted_ws.body["messages"][1]["content"][0]["text"] == "Let me look."
    assert sorted_ws.body["messages"][2] is body["messages"][2]  # tool results are data
    assert sorted_ws.changes == (
        Change("/tools", "reordered_tools"),
        Change("/system", "normalized_whitespace"),
        Change("/messages/0/content", "normalized_whitespace"),
        Change("/messages/1/content/0/text", "normalized_whitespace"),
    )


def test_openai_chat_example() -> None:
    response_schema = {"type": "object", "properties": {"z": {"type": "string"}, "a": {"type": "string"}}}
    body: dict[str, Any] = {
        "model": "gpt-x",
        "messages": [
            {"role": "system", "content": "sys "},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "1",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"b": 1, "a": [1, 2]}'},
                    },
                    {"id": "2", "type": "function", "function": {"name": "f", "arguments": '{"b": 1'}},
                    {"id": "3", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}},
                ],
            },
            {"role": "tool", "tool_call_id": "1", "content": "out  "},
        ],
        "tools": [
            {
                "type": "function",
                "function": {"name": "f", "parameters": {"type": "object", "properties": {}}},
            },
            {"custom": {"name": "g"}, "type": "custom"},
        ],
        "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": response_schema}},
    }
    result = canonicalize(body, "openai_chat", CanonicalOptions(normalize_whitespace=True))
    calls = result.body["messages"][1]["tool_calls"]
    assert calls[0]["function"]["arguments"] == '{"a":[1,2],"b":1}'
    assert calls[1] is body["messages"][1]["tool_calls"][1]  # invalid JSON: left alone
    assert calls[2] is body["messages"][1]["tool_calls"][2]  # already canonical
    assert result.body["tools"] is body["tools"]
    assert result.body["response_format"] is body["response_format"]  # structured output order is meaningful
    assert result.body["messages"][0]["content"] == "sys"
    assert result.body["messages"][2]["content"] == "out  "  # tool output is data
    raw = dumps(result.body, "openai_chat")
    assert b'"parameters":{"type":"object","properties":{}}' in raw
    assert b'"schema":{"type":"object","properties":{"z":{"type":"string"},"a":{"type":"string"}}}' in raw
    assert result.changes == (
        Change("/messages/0/content", "normalized_whitespace"),
        Change("/messages/1/tool_calls/0/function/arguments", "compacted_arguments"),
    )
    # Named tools first, then unnamed ones (here a custom tool) in the order they were sent.
    reordered = dict(body, tools=[body["tools"][1], body["tools"][0]])
    out = canonicalize(reordered, "openai_chat", CanonicalOptions(tool_order="sort")).body
    assert [t["type"] for t in out["tools"]] == ["function", "custom"]


def test_openai_responses_example() -> None:
    body: dict[str, Any] = {
        "model": "gpt-x",
        "instructions": "Be brief.\t\r",
        "input": [
            {"role": "user", "content": "hi "},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a \nb"}]},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": '{ "y" : 2 , "x" : 1 }'},
            {"type": "function_call_output", "call_id": "c", "output": "out "},
        ],
        "tools": [
            {"type": "web_search"},
            {"type": "function", "name": "zeta", "parameters": {"type": "object", "properties": {}}},
            {"type": "function", "name": "alpha", "parameters": {"properties": {}, "type": "object"}},
        ],
        "text": {
            "format": {"type": "json_schema", "name": "o", "schema": {"type": "object", "properties": {}}}
        },
    }
    result = canonicalize(body, "openai_responses", CanonicalOptions("sort", normalize_whitespace=True))
    assert [t.get("name") for t in result.body["tools"]] == ["alpha", "zeta", None]
    assert result.body["input"][0]["content"] == "hi"
    assert result.body["input"][1]["content"][0]["text"] == "a\nb"
    assert result.body["input"][2]["arguments"] == '{"x":1,"y":2}'
    assert result.body["input"][3] is body["input"][3]
    assert result.body["instructions"] == "Be brief.\n"
    assert result.body["text"] is body["text"]
    assert result.changes == (
        Change("/tools", "reordered_tools"),
        Change("/instructions", "normalized_whitespace"),
        Change("/input/0/content", "normalized_whitespace"),
        Change("/input/1/content/0/text", "normalized_whitespace"),
        Change("/input/2/arguments", "compacted_arguments"),
    )
    assert canonicalize(
        {"input": "hi \r\n"}, "openai_responses", CanonicalOptions(normalize_whitespace=True)
    ).body == {"input": "hi\n"}


def test_big_integers_in_arguments_are_left_alone() -> None:
    # orjson parses integers beyond 64 bits as floats: re-dumping would change the number.
    args = '{"id": 123456789012345678901234567890}'
    body: dict[str, Any] = {
        "messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": args}}]}]
    }
    result = canonicalize(body, "openai_chat")
    assert result.body["messages"][0]["tool_calls"][0]["function"]["arguments"] is args
    assert result.changes == ()


def test_big_integers_in_schemas_are_kept_exactly() -> None:
    # A body from a non-orjson parser may hold integers orjson cannot write: canonicalize keeps them,
    # and dumps refuses (the pipeline then sends the body as the caller wrote it).
    big = 2**70
    body = {"tools": [{"name": "t", "input_schema": {"type": "integer", "maximum": big}}]}
    result = canonicalize(body, "anthropic_messages")
    assert result.body["tools"] is body["tools"]
    with pytest.raises(TypeError):
        dumps(result.body, "anthropic_messages")


def test_unexpected_types_are_left_alone() -> None:
    body = {"tools": "nope", "messages": ["a string", {"role": "user", "content": 5}, None]}
    for dialect in DIALECTS:
        result = canonicalize(body, dialect, CanonicalOptions("sort", normalize_whitespace=True))
        assert result.body == body
        assert result.body is not body
        assert result.changes == ()
    assert canonicalize([], "openai_chat").body == []  # type: ignore[arg-type,comparison-overlap]
    assert canonicalize({"a": 1}, "unknown").changes == ()  # type: ignore[arg-type]


def test_whitespace_rules() -> None:
    opts = CanonicalOptions(normalize_whitespace=True)
    cases = {
        "a \t\r\nb\rc  ": "a\nb\nc",
        "  indented\n\tkept": "  indented\n\tkept",
        "x \u00a0\n": "x \u00a0\n",  # only spaces and tabs: a no-break space is content
        " " * 10000 + "x": " " * 10000 + "x",
    }
    for before, after in cases.items():
        got = canonicalize({"system": before}, "anthropic_messages", opts).body["system"]
        assert got == after


def test_debug_log_lists_paths_not_text(caplog: pytest.LogCaptureFixture) -> None:
    secret = "my secret prompt  "
    body: dict[str, Any] = {
        "system": secret,
        "temperature": 1.0,
        "messages": [{"role": "user", "content": secret}],
    }
    with caplog.at_level(logging.DEBUG, logger="cachekit.canonical"):
        canonicalize(body, "anthropic_messages", CanonicalOptions(normalize_whitespace=True))
    records = [r for r in caplog.records if r.name == "cachekit.canonical"]
    assert len(records) == 1
    message = records[0].getMessage()
    assert "normalized_number /temperature" in message
    assert "normalized_whitespace /messages/0/content" in message
    assert "secret" not in message
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="cachekit.canonical"):
        canonicalize({"model": "m"}, "anthropic_messages")
    assert not [r for r in caplog.records if r.name == "cachekit.canonical"]


def test_dumps_sorts_known_fields_and_keeps_unknown_ones() -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "x"}],
        "metadata": {"z": 1, "b": 2},
        "guided_json": {"z": 1, "b": 2},  # not a Chat field: a compatible server's, kept as written
    }
    assert dumps(body, "openai_chat") == (
        b'{"guided_json":{"z":1,"b":2},"messages":[{"content":"x","role":"user"}],'
        b'"metadata":{"b":2,"z":1},"model":"m"}'
    )
    # An unknown dialect: nothing is known, so only the top level is sorted.
    assert dumps(body, "unknown") == (  # type: ignore[arg-type]
        b'{"guided_json":{"z":1,"b":2},"messages":[{"role":"user","content":"x"}],'
        b'"metadata":{"z":1,"b":2},"model":"m"}'
    )


def test_integral_floats_in_number_parameters_become_integers() -> None:
    body = {
        "temperature": 1.0,
        "top_p": 1,
        "frequency_penalty": -2.0,
        "presence_penalty": 0.5,
        "max_tokens": 100.0,
    }
    result = canonicalize(body, "openai_chat")
    assert result.body == {
        "temperature": 1,
        "top_p": 1,
        "frequency_penalty": -2,
        "presence_penalty": 0.5,
        "max_tokens": 100.0,
    }
    assert type(result.body["temperature"]) is int
    assert type(result.body["max_tokens"]) is float  # an integer parameter: as written
    assert result.changes == (
        Change("/temperature", "normalized_number"),
        Change("/frequency_penalty", "normalized_number"),
    )
    # Not a number, a boolean, or a float too large to be an exact integer: as written.
    for value in ("1.0", True, 1e300, float("inf")):
        assert canonicalize({"temperature": value}, "openai_responses").body["temperature"] is value


def test_sort_keeps_tools_that_carry_a_cache_marker_in_place() -> None:
    # Sorting would move the caller's breakpoint within the prefix; cachekit never moves a marker.
    tools = [
        {"input_schema": {"type": "object"}, "name": "b"},
        {"cache_control": {"type": "ephemeral"}, "input_schema": {"type": "object"}, "name": "a"},
    ]
    result = canonicalize({"tools": tools}, "anthropic_messages", CanonicalOptions(tool_order="sort"))
    assert result.body["tools"] is tools
    assert result.changes == ()

"""Tool-call ``arguments`` strings are rewritten only when the rewrite is provably lossless.

A JSON parser that reads numbers as doubles changes integers beyond 64 bits and decimals with more
digits than a double holds, and keeps one of two duplicate keys: re-dumping such a string would send
the provider a different call than the model made, and two different calls would share a key. Those
strings go upstream byte for byte, as the caller wrote them.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cachekit.shape.canonical import canonicalize
from tests.conftest import Harness

# Pairs of arguments that a double-based rewrite would merge (or change), with what differs.
UNTOUCHED = {
    "below the 64-bit minimum": ('{"id": -9223372036854775809}', '{"id": -9223372036854775810}'),
    "beyond the 64-bit maximum": ('{"id": 18446744073709551616}', '{"id": 18446744073709551617}'),
    "more digits than a double": ('{"x": 0.1000000000000000055}', '{"x": 0.1000000000000000056}'),
    "pi to 18 places": ('{"pi": 3.141592653589793238}', '{"pi": 3.141592653589793239}'),
    "twenty digits after the point": ('{"x": 0.30000000000000000001}', '{"x": 0.30000000000000000002}'),
    "a trailing zero": ('{"x": 1.50}', '{"x": 1.5}'),
    "an exponent": ('{"x": 1E2}', '{"x": 100.0}'),
    "a negative zero integer": ('{"x": -0}', '{"x": 0}'),
    "duplicate keys": ('{"a": 1, "a": 2}', '{"a": 2}'),
    "nested duplicate keys": ('{"o": {"k": "first", "k": "second"}}', '{"o": {"k": "second"}}'),
}


def chat_body(arguments: str) -> dict[str, Any]:
    call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": arguments}}
    return {
        "model": "gpt-4.1-mini",
        "messages": [
            {"role": "user", "content": "Look it up."},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "found"},
        ],
    }


def responses_body(arguments: str) -> dict[str, Any]:
    return {
        "model": "gpt-4.1-mini",
        "input": [
            {"role": "user", "content": "Look it up."},
            {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": arguments},
            {"type": "function_call_output", "call_id": "call_1", "output": "found"},
        ],
    }


API = {
    "chat": ("chat.completions", chat_body, lambda sent: sent["messages"][1]["tool_calls"][0]["function"]),
    "responses": ("responses", responses_body, lambda sent: sent["input"][1]),
}


def sent_arguments(harness: Harness, api: str) -> str:
    arguments: str = API[api][2](orjson.loads(harness.upstream.requests[-1].body))["arguments"]
    return arguments


@pytest.mark.parametrize("api", API)
@pytest.mark.parametrize("case", UNTOUCHED)
def test_lossy_arguments_go_upstream_as_written_and_keep_their_own_key(
    harness: Harness, api: str, case: str
) -> None:
    resource, build, _ = API[api]
    sdk = harness.sdk("openai")
    for arguments in UNTOUCHED[case]:
        answer = sdk.call(f"{resource}.with_raw_response.create", **build(arguments))
        assert answer.headers["x-cachekit-cache"] == "miss"
        if arguments == UNTOUCHED[case][0]:
            assert sent_arguments(harness, api) == arguments  # the caller's bytes, exactly
    assert harness.upstream.calls == 2


@pytest.mark.parametrize("api", API)
def test_spacing_and_key_order_still_share_a_key(harness: Harness, api: str) -> None:
    """The rewrite stays where it is lossless: this is what it is for."""
    resource, build, _ = API[api]
    sdk = harness.sdk("openai")
    sdk.call(f"{resource}.create", **build('{ "b": [1, 2.5, -3], "a": {"y": "\\u00e9", "x": null} }'))
    assert sent_arguments(harness, api) == '{"a":{"x":null,"y":"é"},"b":[1,2.5,-3]}'
    hit = sdk.call(f"{resource}.with_raw_response.create", **build('{"a":{"x":null,"y":"é"},"b":[1,2.5,-3]}'))
    assert hit.headers["x-cachekit-cache"] == "hit"


# -- the property, on generated JSON texts ---------------------------------------------------------

numbers = st.from_regex(r"-?(0|[1-9][0-9]{0,24})(\.[0-9]{1,24})?([eE][+-]?[0-9]{1,3})?", fullmatch=True)
spaces = st.sampled_from(["", " ", "\n  "])


def json_texts() -> st.SearchStrategy[str]:
    """JSON texts with numbers of any length and form, duplicate keys and any spacing."""
    leaves = numbers | st.sampled_from(['"s"', '"\\u00e9"', "true", "null"])

    def containers(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        arrays = st.lists(children, max_size=3).map(lambda items: "[" + ",".join(items) + "]")
        members = st.tuples(st.sampled_from(["a", "b", "c"]), spaces, children).map(
            lambda m: f'"{m[0]}"{m[1]}:{m[1]}{m[2]}'
        )
        objects = st.lists(members, max_size=4).map(lambda items: "{" + ", ".join(items) + "}")
        return arrays | objects

    return st.recursive(leaves, containers, max_leaves=8)


def exact(text: str) -> Any:
    """``text`` parsed without losing anything: exact numbers, and every member in key order."""
    return json.loads(
        text,
        parse_float=Decimal,
        parse_int=int,
        object_pairs_hook=lambda pairs: ("object", sorted(pairs, key=lambda kv: kv[0])),
    )


def has_duplicate_keys(text: str) -> bool:
    found = False

    def check(pairs: list[tuple[str, Any]]) -> None:
        nonlocal found
        found = found or len({k for k, _ in pairs}) < len(pairs)

    json.loads(text, object_pairs_hook=check)
    return found


@settings(deadline=None, max_examples=300)
@given(json_texts())
def test_a_rewrite_never_changes_a_value(text: str) -> None:
    body = chat_body(text)
    out = canonicalize(body, "openai_chat").body
    new = out["messages"][1]["tool_calls"][0]["function"]["arguments"]
    if new is text:
        return
    assert not has_duplicate_keys(text)
    assert exact(new) == exact(text)
    assert repr(exact(new)) == repr(exact(text))  # the same digits too, not only equal numbers

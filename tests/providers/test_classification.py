"""The one rule of what may be answered from cache (docs/correctness.md, issue 25), held to the SDKs.

``cachekit/providers/state.py`` puts every input a request can carry in a class (answer-determining,
live, server state, answer-neutral). These tests walk the request types of both installed SDKs
(their TypedDicts, recursively: :mod:`tests.sdk_paths`) and fail when

* a field path exists that no row classifies (so a new SDK field is decided on purpose);
* a row names nothing the SDKs define (a typo, or a field the SDK dropped), unless it is a compatible
  provider's extension, which says where it is documented;
* a live or state row misses a position its input can take in the SDKs' types;
* :func:`classify` does not find a live or state input at one of the positions its row names;
* the docs' tables are not the table.
"""

from __future__ import annotations

import functools
import typing
from pathlib import Path
from typing import Any

import pytest
import typing_extensions
from anthropic.types import message_count_tokens_params as anthropic_count
from anthropic.types import message_create_params as anthropic_create
from anthropic.types.beta import message_count_tokens_params as beta_count
from anthropic.types.beta import message_create_params as beta_create
from openai.types.chat import completion_create_params as chat_create
from openai.types.responses import response_create_params as responses_create

from cachekit._types import Dialect
from cachekit.providers import state
from cachekit.providers.state import FIELDS, Field, alternatives, classify, compile_pattern
from cachekit.semantic.partition import split_request
from cachekit.shape import canonical
from tests.meta.test_docs import generated
from tests.sdk_paths import SDKPath, walk

DOCS = Path(__file__).resolve().parents[2] / "docs"

#: The request types of each dialect: stable and beta, streaming and not.
SDK_ROOTS: dict[Dialect, tuple[type, ...]] = {
    "anthropic_messages": (
        anthropic_create.MessageCreateParamsNonStreaming,
        anthropic_create.MessageCreateParamsStreaming,
        beta_create.MessageCreateParamsNonStreaming,
        beta_create.MessageCreateParamsStreaming,
    ),
    "anthropic_count_tokens": (anthropic_count.MessageCountTokensParams, beta_count.MessageCountTokensParams),
    "openai_chat": (
        chat_create.CompletionCreateParamsNonStreaming,
        chat_create.CompletionCreateParamsStreaming,
    ),
    "openai_responses": (
        responses_create.ResponseCreateParamsNonStreaming,
        responses_create.ResponseCreateParamsStreaming,
    ),
}
DIALECTS = list(SDK_ROOTS)


@functools.cache
def sdk_paths(dialect: Dialect) -> dict[str, SDKPath]:
    """Every path of the dialect's request types (nodes and values), by path."""
    found: dict[str, SDKPath] = {}
    for root in SDK_ROOTS[dialect]:
        for path in walk(root):
            found.setdefault(path.path, path)
    return found


def rows_of(dialect: Dialect) -> list[Field]:
    return [row for row in FIELDS if dialect in row.dialects]


def unclassified(dialect: Dialect, paths: list[SDKPath], rows: list[Field]) -> list[str]:
    """The field paths no row classifies, each with where to decide it."""
    patterns = [compile_pattern(row.pattern) for row in rows]
    return [
        f"{p.path} ({p.declared_by}): add a row for it to FIELDS in cachekit/providers/state.py, then run "
        "`python docs/hooks/generated.py` to refresh docs/correctness.md"
        for p in paths
        if p.kind != "node" and not any(pattern.fullmatch(p.path) for pattern in patterns)
    ]


def test_the_walk_reaches_nested_fields() -> None:
    """The walk unwraps unions, literals, iterables and Required down to the nested fields the rules
    are about (a test that sees only top-level fields would pass with half a table)."""
    anthropic = sdk_paths("anthropic_messages")
    chat, responses = sdk_paths("openai_chat"), sdk_paths("openai_responses")
    assert {
        "messages.content<image>.source<url>.url",
        "messages.content<tool_result>.content<document>.source<url>.url",
        "messages.content<document>.source<content>.content<image>.source<url>.url",
        "tools<web_search_20250305>.max_uses",
        "tools<code_execution_20250825>.type",
        "mcp_servers<url>.url",
        "container.skills<custom>.version",
        "thinking<enabled>.budget_tokens",
        "tool_choice<tool>.name",
        "metadata.user_id",
        "stream",
    } <= set(anthropic)
    assert {
        "messages.content<image_url>.image_url.url",
        "messages.content<file>.file.file_data",
        "messages.tool_calls<function>.function.arguments",
        "web_search_options.user_location<approximate>.approximate.city",
        "stream_options.include_usage",
    } <= set(chat)
    assert {
        "input<message>.content<input_image>.image_url",
        "input.content<input_image>.image_url",  # the item's type is optional: both spellings
        "input<function_call_output>.output<input_file>.file_url",
        "prompt.variables.*<input_image>.image_url",  # a map's values
        "input<tool_search_output>.tools<mcp>.server_url",
        "tools<code_interpreter>.container<auto>.memory_limit",
        "conversation.id",
        "previous_response_id",
    } <= set(responses)
    assert sdk_paths("anthropic_messages")["tools<web_search_20250305>.max_uses"].kind == "leaf"
    assert sdk_paths("openai_chat")["tools<function>.function.parameters"].kind == "payload"
    assert min(len(sdk_paths(d)) for d in DIALECTS) > 150


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_field_of_the_sdks_is_classified(dialect: Dialect) -> None:
    missing = unclassified(dialect, list(sdk_paths(dialect).values()), rows_of(dialect))
    assert not missing, "fields no row of the table classifies:\n" + "\n".join(missing)


class Lens(typing.TypedDict, total=False):
    """A type a future SDK might add, nested in a new kind of block."""

    zoom_url: str


class ShinyBlock(typing.TypedDict, total=False):
    type: typing_extensions.Required[typing.Literal["shiny"]]  # typing.Required is Python 3.11's
    lens: Lens


class Params(typing.TypedDict, total=False):
    model: str
    messages: list[ShinyBlock]


def test_a_new_sdk_field_is_reported_with_where_to_decide_it() -> None:
    """A field the table does not know (as a new SDK release would add) fails the check above, and the
    message names its path and the place to decide it."""
    paths = list(walk(Params))
    missing = unclassified("anthropic_messages", paths, rows_of("anthropic_messages"))
    assert missing == [
        "messages<shiny>.lens.zoom_url (Lens): add a row for it to FIELDS in cachekit/providers/state.py, "
        "then run `python docs/hooks/generated.py` to refresh docs/correctness.md"
    ]


def test_every_row_names_something_the_sdks_define_or_a_provider_documents() -> None:
    dead = []
    for row in FIELDS:
        if row.provider is not None:
            continue
        for part in alternatives(row.pattern):
            pattern = compile_pattern(part)
            if not any(pattern.fullmatch(path) for d in row.dialects for path in sdk_paths(d)):
                dead.append(f"{part!r} of {row.pattern!r}")
    assert not dead, "rows that name no field of the SDKs' types:\n" + "\n".join(dead)


BYPASS_ROWS = [pytest.param(row, id=f"{row.reason}:{row.pattern[:40]}") for row in FIELDS if row.reason]


@pytest.mark.parametrize("row", [p for p in BYPASS_ROWS if p.values[0].anywhere])  # type: ignore[union-attr]
def test_a_live_or_state_row_names_every_position_its_input_takes(row: Field) -> None:
    """A live or state row names each position (the walk follows the rows' paths); ``anywhere`` says
    what it must cover, and every SDK position of that shape must be one of them."""
    anywhere, named = compile_pattern(row.anywhere), compile_pattern(row.pattern)
    missing = [
        f"{dialect}: {path}"
        for dialect in row.dialects
        for path in sdk_paths(dialect)
        if anywhere.fullmatch(path) and not named.fullmatch(path)
    ]
    assert not missing, f"{row.reason} misses positions; add them to its pattern:\n" + "\n".join(missing)


def _body_at(path: str, value: Any) -> dict[str, Any]:
    """The smallest body with ``value`` at ``path`` (an object for each segment, its ``type`` set)."""
    keys = path.split(".")
    node: Any = value
    for key in reversed(keys):
        name, _, kind = key.partition("<")
        if isinstance(node, dict) and kind and "type" not in node:
            node = {**node, "type": kind.removesuffix(">")}
        node = {name: node}
    return node


#: For rows with a condition: a value at the path that meets it (the others are met by any value).
EXAMPLES: dict[str, Any] = {
    "a `scheme://` URL (a `data:` URL is the content)": "https://example.com/a.png",
    "`true`": True,
    "no `version`": {"id": "pmpt_1"},
    "a search model (`*-search-preview`, `*-search-api`)": "gpt-4o-search-preview",
    "an id (a string)": "container_011",
    "a container id (a string)": "cntr_1",
}


@pytest.mark.parametrize("row", BYPASS_ROWS)
def test_classify_finds_each_input_at_every_position_its_row_names(row: Field) -> None:
    """Property: for every SDK position a live or state row names, a body with such an input there
    (and nothing else) is classified with the row's reason; the walk and the table cannot drift."""
    checked = 0
    for dialect in row.dialects:
        for part in alternatives(row.pattern):
            node = compile_pattern(part.removesuffix(".**"))
            for path in sdk_paths(dialect):
                if not node.fullmatch(path):
                    continue
                typed = path.rsplit(".", 1)[-1].partition("<")[2].removesuffix(">")
                value = EXAMPLES.get(row.condition, {"type": typed} if typed else "x")
                assert row.reason in classify(dialect, _body_at(path, value)).reasons, (dialect, path)
                checked += 1
    assert checked or row.provider is not None


@pytest.mark.parametrize(
    ("dialect", "body"),
    [
        # The caller's JSON is never read as request structure: a tool call's input, a schema.
        (
            "anthropic_messages",
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": [
                            {
                                "type": "tool_use",
                                "id": "t",
                                "name": "fetch",
                                "input": {"source": {"type": "url", "url": "https://x"}},
                            }
                        ],
                    }
                ],
                "tools": [{"name": "fetch", "input_schema": {"type": "object", "properties": {"tools": {}}}}],
            },
        ),
        # A URL cited in an earlier answer is provenance, not fetched.
        (
            "anthropic_messages",
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": [
                            {
                                "type": "text",
                                "text": "See the report.",
                                "citations": [
                                    {
                                        "type": "web_search_result_location",
                                        "url": "https://x",
                                        "title": "x",
                                        "cited_text": "y",
                                        "encrypted_index": "z",
                                    }
                                ],
                            }
                        ],
                    }
                ],
            },
        ),
        (
            "openai_chat",
            {
                "messages": [
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,x"}}]}
                ]
            },
        ),
        ("openai_chat", {"messages": [{"role": "user", "content": "Summarize https://example.com/a"}]}),
        (
            "openai_responses",
            {
                "input": [
                    {
                        "role": "user",
                        "content": [{"type": "input_image", "image_url": "data:image/png;base64,AA"}],
                    }
                ]
            },
        ),
        (
            "openai_responses",
            {
                "input": [{"type": "input_file", "file_id": "file_1"}],
                "tools": [{"type": "shell", "environment": {"type": "local"}}],
            },
        ),
    ],
)
def test_what_is_not_live(dialect: Dialect, body: dict[str, Any]) -> None:
    assert classify(dialect, body).reasons == ()


#: The decisions docs/correctness.md names, one body each, with the reasons the table gives.
DECISIONS = [
    pytest.param(
        "anthropic_messages",
        {"tools": [{"type": "code_execution_20250825", "name": "code_execution"}]},
        ("live-data:code_execution",),
        id="code-execution",
    ),
    pytest.param(
        "openai_responses",
        {"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]},
        ("live-data:code_execution",),
        id="code-interpreter-fresh",
    ),
    pytest.param(
        "openai_responses",
        {"tools": [{"type": "programmatic_tool_calling"}]},
        ("live-data:code_execution",),
        id="programmatic-tool-calling",
    ),
    pytest.param(
        "openai_responses",
        {"tools": [{"type": "shell", "environment": {"type": "container_auto"}}]},
        ("live-data:code_execution",),
        id="hosted-shell",
    ),
    pytest.param("openai_responses", {"tools": [{"type": "image_generation"}]}, (), id="image-generation"),
    pytest.param(
        "openai_responses",
        {"tools": [{"type": "image_generation", "input_image_mask": {"image_url": "https://x/m.png"}}]},
        ("live-data:url",),
        id="image-mask-url",
    ),
    pytest.param(
        "anthropic_messages",
        {"tools": [{"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"}]},
        (),
        id="anthropic-tool-search",
    ),
    pytest.param(
        "openai_responses",
        {"tools": [{"type": "tool_search", "execution": "server"}]},
        (),
        id="responses-tool-search",
    ),
    pytest.param(
        "anthropic_messages",
        {
            "tools": [
                {
                    "type": "computer_20250124",
                    "name": "computer",
                    "display_width_px": 1,
                    "display_height_px": 1,
                },
                {"type": "memory_20250818", "name": "memory"},
                {"type": "advisor_20260301", "name": "advisor", "model": "m"},
            ]
        },
        (),
        id="client-tools-and-advisor",
    ),
    pytest.param(
        "openai_responses",
        {
            "tools": [
                {
                    "type": "computer_use_preview",
                    "display_width": 1,
                    "display_height": 1,
                    "environment": "linux",
                },
                {"type": "local_shell"},
                {"type": "apply_patch"},
            ]
        },
        (),
        id="responses-client-tools",
    ),
    pytest.param(
        "anthropic_messages",
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "web_search_tool_result", "tool_use_id": "s", "content": []}],
                }
            ]
        },
        (),
        id="result-sent-back",
    ),
    pytest.param(
        "anthropic_messages",
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_addition",
                            "tool": {
                                "type": "tool_definition",
                                "definition": {"type": "web_fetch_20250910", "name": "web_fetch"},
                            },
                        }
                    ],
                }
            ]
        },
        ("live-data:web_fetch",),
        id="server-tool-added-mid-conversation",
    ),
    pytest.param(
        "openai_responses",
        {
            "input": [
                {
                    "type": "additional_tools",
                    "role": "developer",
                    "tools": [{"type": "mcp", "server_label": "x"}],
                }
            ]
        },
        ("live-data:mcp",),
        id="additional-tools",
    ),
    pytest.param(
        "anthropic_count_tokens",
        {"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
        (),
        id="count-tokens-runs-no-tool",
    ),
    pytest.param(
        "anthropic_count_tokens",
        {"mcp_servers": [{"type": "url", "url": "https://x", "name": "x"}]},
        ("live-data:mcp",),
        id="count-tokens-lists-mcp-tools",
    ),
    pytest.param(
        "anthropic_messages",
        {"diagnostics": {"previous_message_id": "msg_1"}},
        ("server-state:diagnostics",),
        id="anthropic-diagnostics",
    ),
    pytest.param(
        "openai_responses",
        {"prompt_cache_options": {"comparison_response_id": "resp_1"}},
        ("server-state:diagnostics",),
        id="responses-diagnostics",
    ),
    pytest.param(
        "openai_responses",
        {"prompt_cache_options": {"prewarm": True}},
        ("server-state:prewarm",),
        id="prewarm",
    ),
    pytest.param(
        "openai_responses", {"prompt_cache_options": {"prewarm": False, "ttl": "30m"}}, (), id="no-prewarm"
    ),
    pytest.param("openai_chat", {"metadata": {"user": "u"}, "user": "u", "store": True}, (), id="neutral"),
    pytest.param("openai_chat", {"enable_search": True}, ("live-data:web_search",), id="bailian-search"),
    pytest.param(
        "openai_chat",
        {"tools": [{"type": "builtin_function", "function": {"name": "$web_search"}}]},
        ("live-data:web_search",),
        id="kimi-search",
    ),
    pytest.param(
        "openai_chat",
        {"tools": [{"type": "web_search", "web_search": {"enable": True}}]},
        ("live-data:web_search",),
        id="glm-search",
    ),
    pytest.param(
        "openai_chat",
        {"tools": [{"type": "retrieval", "retrieval": {"knowledge_id": "k"}}]},
        ("server-state:retrieval",),
        id="glm-retrieval",
    ),
    pytest.param(
        "openai_chat",
        {"search_parameters": {"mode": "auto"}},
        ("live-data:web_search",),
        id="xai-live-search",
    ),
    pytest.param(
        "openai_responses",
        {"tools": [{"type": "x_search"}, {"type": "web_extractor"}]},
        ("live-data:web_search", "live-data:web_fetch"),
        id="xai-bailian-tools",
    ),
    pytest.param(
        "openai_chat",
        {
            "messages": [
                {"role": "user", "content": [{"type": "video_url", "video_url": {"url": "https://x/v.mp4"}}]}
            ]
        },
        ("live-data:url",),
        id="kimi-video",
    ),
]


@pytest.mark.parametrize(("dialect", "body", "reasons"), DECISIONS)
def test_the_documented_decisions(dialect: Dialect, body: dict[str, Any], reasons: tuple[str, ...]) -> None:
    assert classify(dialect, body).reasons == reasons


def test_a_url_is_anything_the_provider_fetches() -> None:
    def chat(url: str) -> tuple[str, ...]:
        part = {"type": "image_url", "image_url": {"url": url}}
        return classify("openai_chat", {"messages": [{"role": "user", "content": [part]}]}).reasons

    assert chat("https://example.com/a.png") == ("live-data:url",)
    assert chat("http://example.com/a.png") == ("live-data:url",)
    assert chat("gs://bucket/a.png") == ("live-data:url",)
    assert chat("data:image/png;base64,iVBORw0KGgo=") == ()
    assert chat("iVBORw0KGgo=") == ()


def test_only_the_url_reasons_are_lifted_by_the_opt_in() -> None:
    verdict = state.Verdict(("live-data:url", "live-data:web_search"))
    assert verdict.remaining(urls_vouched=True) == ("live-data:web_search",)
    assert verdict.remaining(urls_vouched=False) == ("live-data:url", "live-data:web_search")
    assert {"live-data:url"} == state.URL_REASONS


def test_the_semantic_layer_asks_the_same_table() -> None:
    """A request the table calls live is never served semantically either, unless the caller vouched
    for its URLs (then the URL is part of the exact partition like any other input)."""
    url = {"type": "document", "source": {"type": "url", "url": "https://x/report.pdf"}}
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 64,
        "messages": [
            {"role": "user", "content": [url, {"type": "text", "text": "Summarize it."}]},
            {"role": "assistant", "content": "Revenue grew."},
            {"role": "user", "content": "By how much?"},
        ],
    }
    options = canonical.CanonicalOptions()
    live = split_request("anthropic_messages", body, scope=("t",), options=options)
    vouched = split_request("anthropic_messages", body, scope=("t",), options=options, urls_vouched=True)
    searching = {**body, "tools": [{"type": "web_search_20250305", "name": "web_search"}]}
    search = split_request("anthropic_messages", searching, scope=("t",), options=options, urls_vouched=True)
    assert live == "live_data"
    assert not isinstance(vouched, str)
    assert vouched.question == "By how much?"
    assert search == "live_data"
    assert split_request(
        "anthropic_messages", {**body, "container": "c_1"}, scope=("t",), options=options
    ) == ("server_state")


def test_the_keys_leave_out_only_the_unkeyed_rows() -> None:
    from cachekit.pipeline.view import FORM_FIELDS

    assert FORM_FIELDS == state.UNKEYED_FIELDS == {"stream", "stream_options"}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_docs_tables_are_the_table(dialect: Dialect) -> None:
    """docs/correctness.md commits each dialect's table as generated (the site build regenerates it)."""
    page = (DOCS / "correctness.md").read_text()
    assert f"<!-- cachekit:correctness {dialect} -->" in page
    assert generated.refresh(page, "docs/correctness.md") == page, (
        "docs/correctness.md is stale: run `python docs/hooks/generated.py` and commit it"
    )
    for row in FIELDS:
        if dialect in row.dialects and (row.reason is not None or dialect != "anthropic_count_tokens"):
            assert row.why.split(" (")[0] in page, row.pattern


def test_the_classification_is_quick_on_a_long_conversation() -> None:
    """The walk follows the table's paths, not every key: in a 400-block conversation it enters each
    message once and never a text block (objects entered are counted here, not time)."""
    blocks = [{"type": "text", "text": "x" * 50, "cache_control": {"type": "ephemeral"}}] * 2
    body = {"messages": [{"role": "user", "content": blocks}] * 200}
    entered: list[object] = []
    original = state._Matcher._visit

    def counting(self: Any, holder: Any, node: Any, found: Any) -> None:
        entered.append(holder)
        original(self, holder, node, found)

    state._Matcher._visit = counting  # type: ignore[method-assign]
    try:
        assert classify("anthropic_messages", body).reasons == ()
    finally:
        state._Matcher._visit = original  # type: ignore[method-assign]
    assert len(entered) == 1 + 200  # the body, and each message

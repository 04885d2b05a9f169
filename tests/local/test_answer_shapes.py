"""Answers shaped like today's APIs: the local backend gives them, the SDKs type them, the cache replays them.

Real answers mix text and tool calls, make several tool calls at once, carry thinking with its
signature (or redacted), citations and refusals. The scripted engine gives each shape in every
dialect, streaming and not: by its request-keyed rules (tools named in the question, reasoning turned
on, documents with citations enabled, Anthropic's documented test strings) or, for url citations
(which only a live web search gives, and the cache never stores), by a test's script.

Every answer is read by the official SDKs with strict response validation, through their stream
helpers, and checked fully typed (``tests/sdk_events.py``). Through cachekit's exact cache, sync and
async: a stream recorded from the backend is replayed as a stream and as a body, and a recorded body
as a stream, each equal to the original as the SDK parses it (every block, tool call and argument,
thinking and signature, citation, refusal, usage).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import orjson
import pytest

from cachekit._types import Dialect
from cachekit.local import (
    REDACTED_THINKING_TRIGGER,
    REFUSAL_TRIGGER,
    Block,
    ByteTokenizer,
    Citation,
    Generation,
    LocalBackend,
    LocalTransport,
    Prompt,
    ScriptedEngine,
    Text,
    Thinking,
    ToolCall,
)
from cachekit.local.engine import GenerationState
from cachekit.local.parse import parse
from cachekit.providers import sse
from cachekit.testing import FakeUpstream
from tests.conftest import SDK, Harness, sdk_client
from tests.dropin.test_streaming import STREAM_HELPERS
from tests.sdk_events import read_typed, untyped

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TIME = {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}
CITE = "Cite the forecast for"
KINDS: dict[Dialect, str] = {
    "anthropic_messages": "anthropic",
    "openai_chat": "chat",
    "openai_responses": "responses",
}
PATHS = {
    "anthropic_messages": "/v1/messages",
    "openai_chat": "/v1/chat/completions",
    "openai_responses": "/v1/responses",
}


def cite_the_web(prompt: Prompt) -> list[Block] | None:
    """The test's script: a question that asks to cite the forecast gets text citing a web page (the
    shape a web search gives) and a PDF's page (which OpenAI's APIs cannot annotate); the engine's
    own rules give the rest."""
    question = prompt.turns[-1].text if prompt.turns else ""
    if CITE not in question:
        return None
    city = question.rsplit(" ", 1)[-1].rstrip(".")
    claim = f"{city} is sunny."
    page = Citation(claim, "web", title=f"{city} forecast", url=f"https://example.com/forecast/{city}")
    almanac = Citation("Sunny spells.", "page", index=0, start=3, end=4, title="Almanac")
    return [Text("The forecast says "), Text(claim, (page,)), Text(" So does the almanac.", (almanac,))]


# -- requests -----------------------------------------------------------------------------------


def _tools(dialect: Dialect) -> list[dict[str, Any]]:
    specs = [("get_weather", WEATHER), ("get_time", TIME)]
    if dialect == "anthropic_messages":
        return [{"name": name, "description": name, "input_schema": schema} for name, schema in specs]
    if dialect == "openai_chat":
        return [
            {"type": "function", "function": {"name": name, "parameters": schema}} for name, schema in specs
        ]
    return [
        {"type": "function", "name": name, "parameters": schema, "strict": False} for name, schema in specs
    ]


LOOKUP = {"type": "object", "properties": {"id": {"type": "integer", "minimum": 3}}, "required": ["id"]}


def _freeform_tools() -> list[dict[str, Any]]:
    """A freeform (custom) tool beside a function in a namespace (the Responses API's)."""
    lookup = {"type": "function", "name": "lookup", "parameters": LOOKUP, "strict": False}
    return [
        {"type": "namespace", "name": "crm", "description": "Records.", "tools": [lookup]},
        {"type": "custom", "name": "apply_patch", "format": {"type": "text"}},
    ]


def _reasoning(dialect: Dialect) -> dict[str, Any]:
    if dialect == "anthropic_messages":
        return {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    if dialect == "openai_chat":
        return {"reasoning_effort": "low"}
    return {"reasoning": {"effort": "low", "summary": "auto"}, "include": ["reasoning.encrypted_content"]}


def _documents(question: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "document",
            "title": "Climate",
            "source": {"type": "text", "media_type": "text/plain", "data": "Paris is mild. Rome is warm."},
            "citations": {"enabled": True},
        },
        {
            "type": "document",
            "source": {"type": "content", "content": [{"type": "text", "text": "Oslo is cold."}]},
            "citations": {"enabled": True},
        },
        {
            "type": "search_result",
            "source": "https://example.com/lima",
            "title": "Lima",
            "content": [{"type": "text", "text": "Lima is foggy."}],
            "citations": {"enabled": True},
        },
        {"type": "text", "text": question},
    ]


def request(dialect: Dialect, shape: str, city: str) -> dict[str, Any]:
    """The SDK keyword arguments of a request that the scripted engine answers in ``shape``."""
    extra: dict[str, Any] = {}
    if shape in ("tools", "thinking"):
        question: Any = f"Call get_weather and get_time for {city}."
        extra["tools"] = _tools(dialect)
    elif shape == "redacted":
        question = f"{REDACTED_THINKING_TRIGGER} {city}"
    elif shape == "refusal":
        question = f"{REFUSAL_TRIGGER} {city}"
    elif shape == "documents":
        question = _documents(f"What is the weather like in {city}?")
    elif shape == "freeform":
        question = f"Call lookup and apply_patch for {city}."
        extra["tools"] = _freeform_tools()
    else:
        assert shape == "web_citations"
        question = f"{CITE} {city}."
    if shape in ("thinking", "redacted"):
        extra.update(_reasoning(dialect))
    if dialect == "anthropic_messages":
        return {
            "model": "claude-sonnet-4-5",
            "max_tokens": 2048,
            "messages": [{"role": "user", "content": question}],
            **extra,
        }
    if dialect == "openai_chat":
        return {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": question}], **extra}
    return {"model": "gpt-4.1-mini", "input": question, **extra}


# Documents with citations are the Messages API's; the OpenAI APIs cite web pages only. Freeform
# (custom) tools in a namespace are the Responses API's here: a Chat stream carries a custom call in a
# delta the openai SDK does not type (openai/openai-openapi#576), so strict reading refuses it
# (tests/local/test_tools.py reads Chat's custom calls in bodies).
CASES = [
    (dialect, shape)
    for dialect in KINDS
    for shape in ("tools", "thinking", "redacted", "documents", "web_citations", "refusal", "freeform")
    if (shape != "documents" or dialect == "anthropic_messages")
    and (shape != "freeform" or dialect == "openai_responses")
]


# -- what each shape must hold, as the SDK parsed it ---------------------------------------------


def _check_anthropic(shape: str, message: Any) -> None:
    kinds = [block.type for block in message.content]
    if shape in ("tools", "thinking"):
        tail = ["text", "tool_use", "tool_use"]
        assert kinds == (["thinking", *tail] if shape == "thinking" else tail)
        calls = [block for block in message.content if block.type == "tool_use"]
        assert [(c.name, sorted(c.input)) for c in calls] == [
            ("get_weather", ["city"]),
            ("get_time", ["timezone"]),
        ]
        assert calls[0].id != calls[1].id
        assert message.stop_reason == "tool_use"
    if shape == "thinking":
        assert message.content[0].thinking
        assert message.content[0].signature
        assert message.usage.output_tokens_details.thinking_tokens > 0
    elif shape == "redacted":
        assert kinds == ["redacted_thinking", "text"]
        assert message.content[0].data
    elif shape == "documents":
        cited = [c for block in message.content if block.type == "text" for c in block.citations or []]
        assert [c.type for c in cited] == [
            "char_location",
            "content_block_location",
            "search_result_location",
        ]
        assert cited[0].cited_text == "Paris is mild."
        assert (
            cited[0].start_char_index,
            cited[0].end_char_index,
        ) == (0, 14)
        assert (cited[1].document_index, cited[2].search_result_index) == (1, 0)
    elif shape == "web_citations":
        web, page = [c for block in message.content if block.type == "text" for c in block.citations or []]
        assert web.type == "web_search_result_location"
        assert web.url.startswith("https://example.com/forecast/")
        assert web.encrypted_index
        assert (page.type, page.start_page_number, page.end_page_number) == ("page_location", 3, 4)
    elif shape == "refusal":
        assert (message.stop_reason, message.stop_details.type) == ("refusal", "refusal")


def _check_chat(shape: str, completion: Any) -> None:
    (choice,) = completion.choices
    message = choice.message
    if shape in ("tools", "thinking"):
        assert message.content == "I'll call get_weather and get_time."
        calls = message.tool_calls
        assert [c.function.name for c in calls] == ["get_weather", "get_time"]
        assert [sorted(orjson.loads(c.function.arguments)) for c in calls] == [["city"], ["timezone"]]
        assert calls[0].id != calls[1].id
        assert choice.finish_reason == "tool_calls"
    if shape in ("thinking", "redacted"):
        assert completion.usage.completion_tokens_details.reasoning_tokens > 0
    elif shape == "web_citations":
        (annotation,) = message.annotations
        span = annotation.url_citation
        assert annotation.type == "url_citation"
        assert message.content[span.start_index : span.end_index].endswith("is sunny.")
    elif shape == "refusal":
        assert (message.content, choice.finish_reason) == (None, "stop")
        assert message.refusal


def _check_responses(shape: str, response: Any) -> None:
    kinds = [item.type for item in response.output]
    if shape in ("tools", "thinking"):
        tail = ["message", "function_call", "function_call"]
        assert kinds == (["reasoning", *tail] if shape == "thinking" else tail)
        assert [item.name for item in response.output if item.type == "function_call"] == [
            "get_weather",
            "get_time",
        ]
    if shape == "thinking":
        reasoning = response.output[0]
        assert reasoning.summary[0].text
        assert reasoning.encrypted_content
        assert response.usage.output_tokens_details.reasoning_tokens > 0
    elif shape == "redacted":
        assert kinds == ["reasoning", "message"]
        assert response.output[0].summary == []
        assert response.output[0].encrypted_content
    elif shape == "web_citations":
        (part,) = response.output[0].content
        (annotation,) = part.annotations
        assert annotation.type == "url_citation"
        assert part.text[annotation.start_index : annotation.end_index].endswith("is sunny.")
    elif shape == "refusal":
        assert response.output[0].content[0].type == "refusal"
    elif shape == "freeform":
        assert kinds == ["message", "function_call", "custom_tool_call"]
        function, custom = response.output[1:]
        assert (function.name, function.namespace, function.arguments) == ("lookup", "crm", '{"id":3}')
        assert (custom.name, custom.input) == ("apply_patch", "example input for apply_patch")


CHECKS = {
    "anthropic_messages": _check_anthropic,
    "openai_chat": _check_chat,
    "openai_responses": _check_responses,
}


# -- the SDK's view of an answer ------------------------------------------------------------------

# What the SDKs add on top of the answer: parsed structured output and arguments, and the Chat stream
# helper's tool-call index. Left out of comparisons, so they compare what the provider sent.
_SDK_ADDITIONS = frozenset({"parsed", "parsed_arguments", "parsed_output"})


def _plain(value: Any, inside_calls: bool = False) -> Any:
    if isinstance(value, dict):
        return {
            key: _plain(item, key == "tool_calls")
            for key, item in value.items()
            if key not in _SDK_ADDITIONS and not (inside_calls and key == "index")
        }
    if isinstance(value, list):
        return [_plain(item, inside_calls) for item in value]
    return value


def plain(answer: Any) -> Any:
    """An SDK-parsed answer as JSON, without what the SDK itself adds."""
    return _plain(answer.model_dump(mode="json"))


def read(kind: str, sdk: SDK, body: dict[str, Any], stream: bool) -> Any:
    """The SDK's final answer to ``body``, plain or through its stream helper; every event and the
    answer are checked fully typed."""
    create, open_stream, getter = STREAM_HELPERS[kind]
    if not stream:
        result = sdk.call(create, **body)
        assert not untyped(result, "answer"), untyped(result, "answer")
        return result
    manager = open_stream(sdk.client, body)
    if sdk.is_async:

        async def run() -> tuple[list[Any], Any]:
            async with manager as s:
                events = [event async for event in s]
                return events, await getattr(s, getter)()

        events, result = sdk.run(run())
    else:
        with manager as s:
            events = list(s)
            result = getattr(s, getter)()
    problems = [problem for event in events for problem in untyped(event)] + untyped(result, "final")
    assert not problems, problems
    return result


# -- the local backend gives every shape, typed by the SDKs ----------------------------------------


@pytest.fixture(scope="module")
def backend() -> Iterator[LocalBackend]:
    with LocalBackend(ScriptedEngine(script=cite_the_web)) as local:
        yield local


def _client(dialect: Dialect, backend: LocalBackend) -> Any:
    provider = "anthropic" if dialect == "anthropic_messages" else "openai"
    return sdk_client(
        provider,
        transport=LocalTransport(backend),
        plain=True,
        api_key="k",
        base_url="http://local.test" + ("" if provider == "anthropic" else "/v1"),
        _strict_response_validation=True,
    )


CREATE = {
    "anthropic_messages": lambda client: client.messages.create,
    "openai_chat": lambda client: client.chat.completions.create,
    "openai_responses": lambda client: client.responses.create,
}


def _without_ids(value: Any) -> Any:
    """An answer with its fresh ids (and the time it was made) left out: two calls of the
    deterministic engine differ in nothing else."""
    if isinstance(value, dict):
        return {
            key: _without_ids(item)
            for key, item in value.items()
            if key not in ("id", "tool_use_id", "call_id", "created", "created_at", "completed_at")
        }
    if isinstance(value, list):
        return [_without_ids(item) for item in value]
    return value


@pytest.mark.parametrize(("dialect", "shape"), CASES)
def test_the_local_backend_answers_in_every_shape(
    backend: LocalBackend, dialect: Dialect, shape: str
) -> None:
    body = request(dialect, shape, "Paris")
    payload = {**body, "stream": True}
    if dialect == "openai_chat":
        payload["stream_options"] = {"include_usage": True}
    reply = backend.handle("POST", PATHS[dialect], {"authorization": "Bearer k"}, orjson.dumps(payload))
    raw = b"".join(reply.events or ())
    streamed = read_typed(dialect, raw).final
    recorder = sse.StreamRecorder(dialect)
    recorder.feed(raw)
    assert recorder.complete() == raw  # a complete answer: the exact cache stores it
    with _client(dialect, backend) as client:
        plain_answer = CREATE[dialect](client)(**body)
    assert not untyped(plain_answer, "answer"), untyped(plain_answer, "answer")
    CHECKS[dialect](shape, streamed)
    CHECKS[dialect](shape, plain_answer)
    expected = _without_ids(plain(plain_answer))
    if dialect == "openai_chat" and not expected["choices"][0]["message"]["annotations"]:
        # A Chat stream sends annotations only when there are some: none reads as null, not [].
        expected["choices"][0]["message"]["annotations"] = None
    assert _without_ids(plain(streamed)) == expected


# -- the exact cache replays every shape as the SDK read it ----------------------------------------


@pytest.mark.parametrize(("dialect", "shape"), CASES)
def test_the_exact_cache_replays_every_shape(harness: Harness, dialect: Dialect, shape: str) -> None:
    harness.upstream = FakeUpstream(script=cite_the_web)
    kind = KINDS[dialect]
    sdk = harness.sdk("anthropic" if dialect == "anthropic_messages" else "openai")

    # A stream from the backend, recorded; replayed as a body and as a stream.
    body = request(dialect, shape, "Paris")
    recorded = read(kind, sdk, body, stream=True)
    CHECKS[dialect](shape, recorded)
    as_body = read(kind, sdk, body, stream=False)
    as_stream = read(kind, sdk, body, stream=True)
    assert harness.upstream.calls == 1
    assert plain(as_body) == plain(recorded)
    assert plain(as_stream) == plain(recorded)

    # A body from the backend, recorded; replayed as a stream.
    other = request(dialect, shape, "Rome")
    stored = read(kind, sdk, other, stream=False)
    CHECKS[dialect](shape, stored)
    streamed = read(kind, sdk, other, stream=True)
    assert harness.upstream.calls == 2
    assert plain(streamed) == plain(stored)


# -- the rules that pick a shape ------------------------------------------------------------------


def _answer(backend: LocalBackend, dialect: Dialect, body: dict[str, Any]) -> Any:
    with _client(dialect, backend) as client:
        return CREATE[dialect](client)(**body)


@pytest.mark.parametrize("dialect", list(KINDS))
def test_parallel_calls_follow_the_request(backend: LocalBackend, dialect: Dialect) -> None:
    body = request(dialect, "tools", "Paris")
    if dialect == "anthropic_messages":
        single = {**body, "tool_choice": {"type": "auto", "disable_parallel_tool_use": True}}
        forced = {**body, "tool_choice": {"type": "tool", "name": "get_time"}}
    else:
        single = {**body, "parallel_tool_calls": False}
        forced = {
            **body,
            "tool_choice": {"type": "function", "function": {"name": "get_time"}}
            if dialect == "openai_chat"
            else {"type": "function", "name": "get_time"},
        }

    def calls(answer: Any) -> list[str]:
        if dialect == "anthropic_messages":
            return [b.name for b in answer.content if b.type == "tool_use"]
        if dialect == "openai_chat":
            return [c.function.name for c in answer.choices[0].message.tool_calls or []]
        return [item.name for item in answer.output if item.type == "function_call"]

    assert calls(_answer(backend, dialect, body)) == ["get_weather", "get_time"]
    assert calls(_answer(backend, dialect, single)) == ["get_weather"]
    # Any tool, forced: the named tools are called with no text before them.
    anyhow = {**body, "tool_choice": {"type": "any"} if dialect == "anthropic_messages" else "required"}
    answer = _answer(backend, dialect, anyhow)
    assert calls(answer) == ["get_weather", "get_time"]
    if dialect == "anthropic_messages":
        assert answer.content[0].type == "tool_use"
    elif dialect == "openai_chat":
        assert answer.choices[0].message.content is None
    else:
        assert answer.output[0].type == "function_call"
    # A forced tool is called alone, with no text before it (the API prefills the call).
    answer = _answer(backend, dialect, forced)
    assert calls(answer) == ["get_time"]
    if dialect == "anthropic_messages":
        assert [b.type for b in answer.content] == ["tool_use"]
    elif dialect == "openai_chat":
        assert answer.choices[0].message.content is None
    else:
        assert [item.type for item in answer.output] == ["function_call"]


def test_what_the_request_asks_of_reasoning_is_rendered(backend: LocalBackend) -> None:
    # Anthropic: display "omitted" keeps the signature and leaves the thinking text out.
    body = request("anthropic_messages", "thinking", "Paris")
    omitted = {**body, "thinking": {"type": "enabled", "budget_tokens": 1024, "display": "omitted"}}
    (block, *_) = _answer(backend, "anthropic_messages", omitted).content
    assert (block.type, block.thinking) == ("thinking", "")
    assert block.signature
    # Responses: a summary only when asked for, the encrypted reasoning only when included.
    bare = {**request("openai_responses", "tools", "Paris"), "reasoning": {"effort": "low"}}
    (reasoning, *_) = _answer(backend, "openai_responses", bare).output
    assert (reasoning.type, reasoning.summary, reasoning.encrypted_content) == ("reasoning", [], None)
    # Adaptive thinking is thinking too.
    adaptive = {**body, "thinking": {"type": "adaptive"}}
    assert _answer(backend, "anthropic_messages", adaptive).content[0].type == "thinking"
    # An effort of "none" turns reasoning off.
    off = {**request("openai_responses", "tools", "Paris"), "reasoning": {"effort": "none"}}
    assert "reasoning" not in [item.type for item in _answer(backend, "openai_responses", off).output]


@pytest.mark.parametrize("dialect", list(KINDS))
def test_web_search_is_a_search_then_cited_pages(backend: LocalBackend, dialect: Dialect) -> None:
    question = "What is new in Lisbon?"
    if dialect == "anthropic_messages":
        body: dict[str, Any] = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 512,
            "messages": [{"role": "user", "content": question}],
            "tools": [{"type": "web_search_20250305", "name": "web_search"}],
        }
    elif dialect == "openai_chat":
        body = {
            "model": "gpt-4.1-mini",
            "messages": [{"role": "user", "content": question}],
            "web_search_options": {},
        }
    else:
        body = {
            "model": "gpt-4.1-mini",
            "input": question,
            "tools": [{"type": "web_search"}],
            "include": ["web_search_call.action.sources"],
        }
    payload = {**body, "stream": True}
    reply = backend.handle("POST", PATHS[dialect], {"authorization": "Bearer k"}, orjson.dumps(payload))
    raw = b"".join(reply.events or ())
    streamed = read_typed(dialect, raw).final
    answer = _answer(backend, dialect, body)
    assert not untyped(answer, "answer")
    for result in (streamed, answer):
        if dialect == "anthropic_messages":
            kinds = [b.type for b in result.content]
            assert kinds[:2] == ["server_tool_use", "web_search_tool_result"]
            assert result.content[0].input == {"query": question}
            urls = [page.url for page in result.content[1].content]
            cited = [c.url for b in result.content if b.type == "text" for c in b.citations or []]
            assert cited == urls
            assert result.usage.server_tool_use.web_search_requests == 1
        elif dialect == "openai_chat":
            message = result.choices[0].message
            spans = [a.url_citation for a in message.annotations]
            assert [span.url.rsplit("/", 1)[-1] for span in spans] == ["1", "2"]
            assert all(message.content[s.start_index : s.end_index].startswith("page ") for s in spans)
        else:
            search, message = result.output
            assert (search.type, search.action.type, search.action.query) == (
                "web_search_call",
                "search",
                question,
            )
            urls = [source.url for source in search.action.sources]
            assert [a.url for a in message.content[0].annotations] == urls
    if dialect == "openai_responses":
        names = [event.type for event in read_typed(dialect, raw).events]
        at = names.index("response.web_search_call.in_progress")
        assert names[at : at + 3] == [
            "response.web_search_call.in_progress",
            "response.web_search_call.searching",
            "response.web_search_call.completed",
        ]


def test_documents_are_numbered_as_the_api_numbers_them() -> None:
    content = [
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQK"},
            "citations": {"enabled": True},
        },
        {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": "First. Second."},
            "citations": {"enabled": True},
        },
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "content": [
                {
                    "type": "search_result",
                    "source": "https://example.com/a",
                    "title": "A",
                    "content": [{"type": "text", "text": "Found."}],
                    "citations": {"enabled": True},
                }
            ],
        },
        {"type": "text", "text": "Summarize."},
    ]
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": content}],
    }
    documents = parse("anthropic_messages", body, ByteTokenizer()).prompt.documents
    assert [(d.kind, d.index, d.parts) for d in documents] == [
        ("text", 1, ("First. Second.",)),  # the PDF (which the engine does not read) still counts
        ("search_result", 0, ("Found.",)),
    ]
    answer = ScriptedEngine(ByteTokenizer()).generate(
        parse("anthropic_messages", body, ByteTokenizer()).prompt
    )
    cited = [c for block in answer.blocks if isinstance(block, Text) for c in block.citations]
    assert [(c.kind, c.index, c.cited_text, c.start, c.end) for c in cited] == [
        ("char", 1, "First.", 0, 6),
        ("search_result", 0, "Found.", 0, 1),
    ]


def _prompt(**fields: Any) -> Prompt:
    return Prompt(model="m", turns=(), digest="d", **fields)


def test_a_script_answers_and_the_limits_still_apply() -> None:
    thinking = Thinking("one two three four five six seven eight", "sig")
    call = ToolCall("get_weather", {"city": "a very long city name indeed"})
    script: list[Block] = [thinking, Text("alpha beta gamma delta"), call]
    engine = ScriptedEngine(ByteTokenizer(), script=lambda prompt: script)
    whole = engine.generate(_prompt())
    assert list(whole.blocks) == script
    assert whole.finish_reason == "tool_use"
    tokens = ByteTokenizer()
    assert whole.reasoning_tokens == len(tokens.encode(thinking.thinking))
    assert whole.output_tokens == whole.reasoning_tokens + len(tokens.encode("alpha beta gamma delta")) + len(
        tokens.encode(orjson.dumps(dict(call.arguments)).decode())
    )
    # max_tokens cuts the reasoning and the text; what follows the cut is not said.
    cut = engine.generate(_prompt(max_tokens=4))
    assert [type(b) for b in cut.blocks] == [Thinking]
    assert cut.finish_reason == "length"
    assert cut.blocks[0].thinking == "one two three fo"  # type: ignore[union-attr]
    assert cut.blocks[0].signature == "sig"  # type: ignore[union-attr]
    # A stop sequence in the text ends the answer there.
    stopped = engine.generate(_prompt(stop=("gamma",)))
    assert list(stopped.blocks) == [thinking, Text("alpha beta ")]
    assert (stopped.finish_reason, stopped.stop_sequence) == ("stop_sequence", "gamma")
    # A tool call is never cut: past max_tokens, it is said whole.
    long_call = ScriptedEngine(ByteTokenizer(), script=lambda prompt: [call]).generate(_prompt(max_tokens=1))
    assert (list(long_call.blocks), long_call.finish_reason) == ([call], "tool_use")
    # A script that declines leaves the answer to the engine's rules.
    declined = ScriptedEngine(ByteTokenizer(), script=lambda prompt: None).generate(_prompt())
    assert [type(b) for b in declined.blocks] == [Text]


def test_the_scripted_engine_is_deterministic() -> None:
    engine = ScriptedEngine(ByteTokenizer())
    for dialect, shape in CASES:
        prompt = parse(dialect, request(dialect, shape, "Paris"), ByteTokenizer(), salt=b"tenant").prompt
        first, again = engine.generate(prompt), engine.generate(prompt)
        assert list(first.blocks) == list(again.blocks), (dialect, shape)
        assert first.output_tokens == again.output_tokens


def _events(backend: LocalBackend, dialect: Dialect, body: dict[str, Any]) -> list[tuple[str | None, Any]]:
    payload = {**body, "stream": True}
    reply = backend.handle("POST", PATHS[dialect], {"authorization": "Bearer k"}, orjson.dumps(payload))
    decoder = sse.SSEDecoder()
    events = decoder.feed(b"".join(reply.events or ()))
    return [(e.event, e.data if e.data == "[DONE]" else orjson.loads(e.data)) for e in events]


def test_streams_send_blocks_in_the_providers_event_order(backend: LocalBackend) -> None:
    # Messages: a ping after the first block opens; thinking deltas, then the signature; a tool's
    # input opens with an empty piece; a cited block's citations, then its text.
    events = _events(backend, "anthropic_messages", request("anthropic_messages", "thinking", "Paris"))
    names = [name for name, _ in events]
    assert names[1:3] == ["content_block_start", "ping"]
    deltas = [(data["index"], data["delta"]) for name, data in events if name == "content_block_delta"]
    thinking = [delta["type"] for index, delta in deltas if index == 0]
    assert thinking[-1] == "signature_delta"
    assert set(thinking[:-1]) == {"thinking_delta"}
    first_call = next(delta for index, delta in deltas if index == 2)
    assert first_call == {"type": "input_json_delta", "partial_json": ""}
    events = _events(backend, "anthropic_messages", request("anthropic_messages", "documents", "Paris"))
    (cited,) = [
        data["index"]
        for name, data in events
        if name == "content_block_start" and "citations" in data["content_block"]
    ][:1]
    kinds = [
        data["delta"]["type"]
        for name, data in events
        if name == "content_block_delta" and data["index"] == cited
    ]
    assert kinds[0] == "citations_delta"
    assert set(kinds[1:]) == {"text_delta"}

    # Chat: a forced call is named in the first chunk; text comes before calls; annotations come in a
    # delta of their own.
    forced = {**request("openai_chat", "tools", "Paris"), "tool_choice": "required"}
    chunks = [data for _, data in _events(backend, "openai_chat", forced)][:-1]
    assert chunks[0]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "get_weather"
    chunks = [data for _, data in _events(backend, "openai_chat", request("openai_chat", "tools", "Paris"))][
        :-1
    ]
    chat_deltas = [chunk["choices"][0]["delta"] for chunk in chunks]
    assert (chat_deltas[0]["content"], "tool_calls" in chat_deltas[0]) == ("", False)
    first_chat_call = next(i for i, delta in enumerate(chat_deltas) if "tool_calls" in delta)
    assert all("content" in delta for delta in chat_deltas[1:first_chat_call])
    chunks = [
        data for _, data in _events(backend, "openai_chat", request("openai_chat", "web_citations", "Paris"))
    ][:-1]
    (annotated,) = [
        chunk["choices"][0]["delta"] for chunk in chunks if "annotations" in chunk["choices"][0]["delta"]
    ]
    assert list(annotated) == ["annotations"]

    # Responses: a reasoning summary part streams between its added and done events; annotations are
    # added after the text they annotate.
    names = [
        name
        for name, _ in _events(backend, "openai_responses", request("openai_responses", "thinking", "Paris"))
    ]
    at = names.index("response.reasoning_summary_part.added")
    assert names[at - 1] == "response.output_item.added"
    assert names[at + 1] == "response.reasoning_summary_text.delta"
    assert (
        names[names.index("response.reasoning_summary_text.done") + 1]
        == "response.reasoning_summary_part.done"
    )
    names = [
        name
        for name, _ in _events(
            backend, "openai_responses", request("openai_responses", "web_citations", "Paris")
        )
    ]
    assert names.index("response.output_text.annotation.added") > names.index("response.output_text.delta")
    assert names.index("response.output_text.annotation.added") < names.index("response.output_text.done")


def test_untyped_finds_whatever_the_sdk_did_not_type() -> None:
    # The checker the tests above rely on: it sees each way an answer can escape the SDK's types.
    text = anthropic.types.TextBlock(type="text", text="hi")
    message = anthropic.types.Message(
        id="m",
        type="message",
        role="assistant",
        model="claude-sonnet-4-5",
        content=[text],
        stop_reason="end_turn",
        usage=anthropic.types.Usage(input_tokens=1, output_tokens=1),
    )
    assert untyped(message) == []
    as_dict = message.model_copy(update={"content": [{"type": "text", "text": "hi"}]})  # not validated
    assert untyped(as_dict) == ["event.content[0]: a dict where the SDK has a model"]
    wrong = anthropic.types.TextBlock.construct(type="thinking", text="hi")
    assert untyped(wrong) == ["event: TextBlock with type 'thinking'"]
    extra = anthropic.types.TextBlock.model_validate({"type": "text", "text": "hi", "novel": 1})
    assert untyped(extra) == ["event.novel: not a field of TextBlock"]
    missing = anthropic.types.TextBlock.construct(type="text")
    assert untyped(missing) == ["event.text: missing"]


class _Generated(GenerationState):
    """Text an engine generates as it is read (the transformers engine's kind): it runs once."""

    def __init__(self) -> None:
        self._finish = "end"
        self._output_tokens = 2
        self.runs = 0

    def __iter__(self) -> Iterator[str]:
        self.runs += 1
        yield "Hello "
        yield "world"


@pytest.mark.parametrize("dialect", list(KINDS))
@pytest.mark.parametrize("stream", [False, True])
def test_a_generated_text_is_read_once(dialect: Dialect, stream: bool) -> None:
    made: list[_Generated] = []

    class Engine(ScriptedEngine):
        def generate(self, prompt: Prompt) -> Generation:
            made.append(_Generated())
            return made[-1]

    backend = LocalBackend(Engine(ByteTokenizer()))
    body = {**request(dialect, "refusal", "Paris"), "stream": stream}
    reply = backend.handle("POST", PATHS[dialect], {"authorization": "Bearer k"}, orjson.dumps(body))
    raw = b"".join(reply.events) if reply.events is not None else reply.content
    answer = read_typed(dialect, raw).final if stream else orjson.loads(raw)
    text = {
        "anthropic_messages": lambda: answer.content[0].text if stream else answer["content"][0]["text"],
        "openai_chat": lambda: (
            answer.choices[0].message.content if stream else answer["choices"][0]["message"]["content"]
        ),
        "openai_responses": lambda: (
            answer.output_text if stream else answer["output"][0]["content"][0]["text"]
        ),
    }[dialect]()
    assert text == "Hello world"
    assert [generation.runs for generation in made] == [1]

"""What a complete answer of each API dialect carries, as data, and one check over it.

Only a complete answer is stored. A ``2xx`` is not always one: OpenAI-compatible gateways answer
``200`` with ``{"error": ...}``, a Responses answer cut by ``max_output_tokens`` (or still running
in the background) has a status other than ``completed``, and a proxy that loses the model may
still close a stream with its terminator. :func:`incomplete_answer` is asked of every JSON document
before it is stored, and of every stream once assembled (:mod:`cachekit.providers.sse`), so both forms of an
answer meet the same definition.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from cachekit._types import Dialect

__all__ = [
    "SHAPES",
    "USAGE_FORMS",
    "AnswerShape",
    "answer_content",
    "carries_usage",
    "has_usage",
    "incomplete_answer",
]


@dataclass(frozen=True, slots=True)
class AnswerShape:
    """The top-level fields a complete answer has.

    ``equal``: fields with a required value. ``absent``: fields that must be absent or null (an
    error). ``present``: fields present and not null. ``lists``: fields that must be lists of at
    least so many items. ``each``: for a list field, the fields every item sets (not null).
    """

    equal: tuple[tuple[str, object], ...] = ()
    absent: tuple[str, ...] = ("error",)
    present: tuple[str, ...] = ()
    lists: tuple[tuple[str, int], ...] = ()
    each: tuple[tuple[str, tuple[str, ...]], ...] = ()


#: Checked against the providers' documented response objects (Messages: ``type``, ``content``,
#: ``stop_reason``; Chat Completions: ``choices[].message``, ``choices[].finish_reason``; Responses:
#: ``status``, ``output``, ``error``; count_tokens: ``input_tokens``).
SHAPES: Mapping[Dialect, AnswerShape] = MappingProxyType(
    {
        "anthropic_messages": AnswerShape(
            equal=(("type", "message"),), lists=(("content", 0),), present=("stop_reason",)
        ),
        "anthropic_count_tokens": AnswerShape(present=("input_tokens",)),
        "openai_chat": AnswerShape(
            lists=(("choices", 1),), each=(("choices", ("message", "finish_reason")),)
        ),
        "openai_responses": AnswerShape(equal=(("status", "completed"),), lists=(("output", 0),)),
    }
)


def incomplete_answer(dialect: Dialect, body: Any) -> str | None:
    """Why ``body`` is not a complete answer of ``dialect`` (a short reason for the logs, naming a
    field, never its content), or ``None`` when it is one."""
    if not isinstance(body, dict):
        return "not a JSON object"
    shape = SHAPES[dialect]
    for name, value in shape.equal:
        if body.get(name) != value:
            return f"{name} is not {value!r}"
    for name in shape.absent:
        if body.get(name) is not None:
            return f"{name} is set"
    for name in shape.present:
        if body.get(name) is None:
            return f"no {name}"
    for name, minimum in shape.lists:
        items = body.get(name)
        if not isinstance(items, list) or len(items) < minimum:
            return f"{name} is not a list of at least {minimum}"
    for name, fields in shape.each:
        items = body.get(name)
        for item in items if isinstance(items, list) else [None]:
            if not isinstance(item, dict) or any(item.get(field) is None for field in fields):
                return f"an item of {name} lacks one of {', '.join(fields)}"
    return None


#: Which forms of an answer always carry the call's ``usage``, as each API sends them: (a document,
#: a stream). Messages streams carry it in ``message_start``/``message_delta``, Responses streams in
#: ``response.completed``; a Chat stream only when the request set ``stream_options.include_usage``
#: (then in a last chunk whose ``choices`` is empty). Counting tokens answers ``input_tokens``.
USAGE_FORMS: Mapping[Dialect, tuple[bool, bool]] = MappingProxyType(
    {
        "anthropic_messages": (True, True),
        "anthropic_count_tokens": (False, False),
        "openai_chat": (True, False),
        "openai_responses": (True, True),
    }
)


def carries_usage(dialect: Dialect, *, streaming: bool, include_usage: bool) -> bool:
    """Whether the provider's answer in this form always carries ``usage`` (``include_usage``: a Chat
    stream that asked for it). A stored answer without usage must not be served in such a form: the
    caller would miss a field the provider always sends (code that reads
    ``completion.usage.total_tokens`` raises), and the hit could not be priced."""
    document, stream = USAGE_FORMS[dialect]
    return (stream or include_usage) if streaming else document


def has_usage(body: Any) -> bool:
    """Whether a response document (or an assembled stream) carries its call's usage."""
    return isinstance(body, dict) and isinstance(body.get("usage"), dict)


# -- what an answer says ---------------------------------------------------------------------------

_SPACE = re.compile(r"\s+")


def answer_content(dialect: Dialect, body: Any) -> str:
    """What a complete answer says, as one normalized text: the text the model wrote (and any refusal)
    and each tool call as ``tool:<name>(<arguments as canonical JSON>)``, one per line, in order.

    Ids, usage, timestamps, stop reasons and reasoning (thinking) are left out: two answers that say
    the same have equal contents (the shadow mode's exact-match judge compares these). Text is
    NFC-normalized with runs of whitespace made one space; case is kept (it can carry meaning).
    Reads Messages ``content`` blocks (``text``, ``tool_use``), Chat ``choices[].message``
    (``content``, ``refusal``, ``tool_calls``) and Responses ``output`` items (``message`` parts
    ``output_text`` and ``refusal``, ``function_call``).
    """
    if not isinstance(body, Mapping):
        return ""
    if dialect == "anthropic_messages":
        parts = list(_anthropic_parts(body))
    elif dialect == "openai_chat":
        parts = list(_chat_parts(body))
    elif dialect == "openai_responses":
        parts = list(_responses_parts(body))
    else:
        parts = []
    return "\n".join(part for part in parts if part)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        return ""
    return _SPACE.sub(" ", unicodedata.normalize("NFC", value)).strip()


def _tool(name: Any, arguments: Any) -> str:
    """A tool call, its arguments as canonical JSON (keys sorted) when they are JSON."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return f"tool:{name}({_text(arguments)})"
    return f"tool:{name}({json.dumps(arguments, sort_keys=True, ensure_ascii=False, separators=(',', ':'))})"


def _items(value: Any) -> Iterator[Mapping[str, Any]]:
    for item in value if isinstance(value, list) else ():
        if isinstance(item, Mapping):
            yield item


def _anthropic_parts(body: Mapping[str, Any]) -> Iterator[str]:
    for block in _items(body.get("content")):
        kind = block.get("type")
        if kind == "text":
            yield _text(block.get("text"))
        elif kind == "tool_use":
            yield _tool(block.get("name"), block.get("input"))


def _chat_parts(body: Mapping[str, Any]) -> Iterator[str]:
    for choice in _items(body.get("choices")):
        message = choice.get("message")
        if not isinstance(message, Mapping):
            continue
        content = message.get("content")
        if isinstance(content, list):  # content parts, as some compatible servers answer
            for part in _items(content):
                yield _text(part.get("text"))
        else:
            yield _text(content)
        yield _text(message.get("refusal"))
        for call in _items(message.get("tool_calls")):
            function = call.get("function") or call.get("custom")
            if isinstance(function, Mapping):
                yield _tool(function.get("name"), function.get("arguments", function.get("input")))


def _responses_parts(body: Mapping[str, Any]) -> Iterator[str]:
    for item in _items(body.get("output")):
        kind = item.get("type")
        if kind == "message":
            for part in _items(item.get("content")):
                yield _text(part.get("text") if part.get("type") == "output_text" else part.get("refusal"))
        elif kind == "function_call":
            yield _tool(item.get("name"), item.get("arguments"))

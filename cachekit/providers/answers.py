"""What a complete answer of each API dialect carries, as data, and one check over it.

Only a complete answer is stored. A ``2xx`` is not always one: OpenAI-compatible gateways answer
``200`` with ``{"error": ...}``, a Responses answer cut by ``max_output_tokens`` (or still running
in the background) has a status other than ``completed``, and a proxy that loses the model may
still close a stream with its terminator. :func:`incomplete_answer` is asked of every JSON document
before it is stored, and of every stream once assembled (:mod:`cachekit.exact.sse`), so both forms of an
answer meet the same definition.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from cachekit._types import Dialect

__all__ = ["SHAPES", "AnswerShape", "incomplete_answer"]


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

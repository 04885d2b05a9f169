"""Streams read by the official SDKs' own typed parsing, with nothing left untyped.

:func:`read_stream` serves a stream's bytes to a real SDK client with strict response validation on
(each event is validated against the SDK's event union, so an event the SDK does not know, or one
missing a required field, raises) and reads it with the SDK's stream helper (anthropic's
``messages.stream``, openai's ``chat.completions.stream`` and ``responses.stream``), which
accumulates the final answer. :func:`untyped` then walks every event and the final answer and lists
what is not the SDK's typed data:

* a field the SDK's class does not declare (kept by the SDK as an untyped extra);
* a dict where the SDK's type is a model (a constructed value that fell back to raw JSON);
* a model whose ``type`` is not one its class declares (the wrong variant of a union);
* a required field that is missing (a constructed model holds ``None`` there).

The running ``snapshot`` that the stream helpers attach to their own events is the SDK's state, not
the stream's data, and is not walked (the final answer is). Allowed as extras: the ``index`` that the
Chat stream helper leaves on each tool call of its final completion (its own accumulation keeps the
deltas' index), and two fields the API sends:

* a Chat chunk's ``delta.annotations`` (url citations): ``ChoiceDelta`` does not declare it, and
  the stream helper accumulates it into ``ChatCompletionMessage.annotations``, which does;
* a Responses ``response.store``: the API's response object has it (its reference and every
  documented example), the installed openai SDK's ``Response`` does not declare it.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from anthropic.types import Message
from pydantic import BaseModel

from cachekit._types import Dialect
from cachekit.testing import FakeUpstream
from tests.conftest import sdk_client

# (class name, field): extras the API sends that the SDK's stream helper types later.
ALLOWED_EXTRAS = frozenset(
    {
        ("ChoiceDelta", "annotations"),
        ("ParsedFunctionToolCall", "index"),
        ("Response", "store"),
        ("ParsedResponse", "store"),
    }
)

_QUESTION: Any = [{"role": "user", "content": "Hi"}]


@dataclass(frozen=True)
class Read:
    """A stream as an SDK read it: every event its stream helper yielded, and the final answer."""

    events: list[Any]
    final: Any


def first_text(message: Message) -> str:
    """The text of an Anthropic answer whose first block must be text."""
    block = message.content[0]
    assert block.type == "text", block.type
    return block.text


def _client(provider: str, raw: bytes) -> Any:
    upstream = FakeUpstream()
    upstream.respond_next(200, raw, "text/event-stream")
    return sdk_client(provider, transport=upstream, plain=True, api_key="k", _strict_response_validation=True)


def read_stream(dialect: Dialect, raw: bytes) -> Read:
    """``raw`` read by the SDK of ``dialect`` (strict validation on) through its stream helper."""
    if dialect == "anthropic_messages":
        client = _client("anthropic", raw)
        with client.messages.stream(model="claude-sonnet-4-5", max_tokens=64, messages=_QUESTION) as stream:
            events = list(stream)
            return Read(events, stream.get_final_message())
    client = _client("openai", raw)
    if dialect == "openai_chat":
        with client.chat.completions.stream(model="gpt-4o", messages=_QUESTION) as chat:
            events = list(chat)
            return Read(events, chat.get_final_completion())
    with client.responses.stream(model="gpt-4o", input="Hi") as responses:
        events = list(responses)
        return Read(events, responses.get_final_response())


def read_typed(dialect: Dialect, raw: bytes) -> Read:
    """:func:`read_stream`, asserting that every event and the final answer are fully typed."""
    read = read_stream(dialect, raw)
    problems = [problem for event in read.events for problem in untyped(event)]
    problems += untyped(read.final, "final")
    assert not problems, problems
    return read


def _members(hint: Any) -> Iterator[Any]:
    """The types a value of ``hint`` may have (unions, Optional and Annotated unwrapped)."""
    origin = typing.get_origin(hint)
    if origin is typing.Annotated:
        yield from _members(typing.get_args(hint)[0])
    elif origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(hint):
            yield from _members(arg)
    else:
        yield hint


def _admits_none(hint: Any) -> bool:
    return any(member in (type(None), object, Any) for member in _members(hint))


def _admits_model(hint: Any) -> bool:
    """Whether a dict is the wrong value for ``hint``: some member of it is a model."""
    return any(isinstance(member, type) and issubclass(member, BaseModel) for member in _members(hint))


def _element(hint: Any) -> Any:
    """The element type of a list type among ``hint``'s members (``Any`` when there is none)."""
    for member in _members(hint):
        if typing.get_origin(member) in (list, typing.List):  # noqa: UP006 (the SDKs write List)
            return typing.get_args(member)[0]
    return Any


def untyped(value: Any, path: str = "event") -> list[str]:
    """Where ``value`` (an SDK model, at any depth) holds data that is not the SDK's typed data."""
    found: list[str] = []
    if isinstance(value, list):
        for i, item in enumerate(value):
            found += untyped(item, f"{path}[{i}]")
        return found
    if not isinstance(value, BaseModel):
        return found
    cls = type(value)
    if not cls.__module__.startswith(("anthropic.", "openai.")):
        found.append(f"{path}: {cls.__qualname__} is not an SDK class")
    helper = ".lib.streaming." in cls.__module__
    for name, info in cls.model_fields.items():
        if helper and name == "snapshot":
            continue
        field = value.__dict__.get(name)
        hint = info.annotation
        if field is None and info.is_required() and not _admits_none(hint):
            # A constructed model without a required field (the SDKs construct it as None).
            found.append(f"{path}.{name}: missing")
            continue
        if (
            name == "type"
            and typing.get_origin(hint) is typing.Literal
            and field not in typing.get_args(hint)
        ):
            found.append(f"{path}: {cls.__qualname__} with type {field!r}")
        if isinstance(field, dict) and _admits_model(hint):
            found.append(f"{path}.{name}: a dict where the SDK has a model")
        if isinstance(field, list):
            element = _element(hint)
            found += [
                f"{path}.{name}[{i}]: a dict where the SDK has a model"
                for i, item in enumerate(field)
                if isinstance(item, dict) and _admits_model(element)
            ]
        found += untyped(field, f"{path}.{name}")
    for name in value.model_extra or {}:
        if (cls.__name__, name) not in ALLOWED_EXTRAS:
            found.append(f"{path}.{name}: not a field of {cls.__qualname__}")
    return found

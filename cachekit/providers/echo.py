"""Keep echoed prompts out of stored responses, and put them back on replay.

cachekit never stores request bodies, but some APIs copy parts of the request into their
response. OpenAI's Responses API does: its Response object repeats ``instructions`` (the system
prompt, a string or a list of input items) and ``tools`` (the tool definitions, descriptions
included), in a non-streaming body at the top level and in a stream inside the ``response`` object
of the lifecycle events (``response.created``, ``response.in_progress``, ``response.completed``,
``response.incomplete``, ``response.failed``, ``response.queued``). To honour "store responses,
not prompts", :func:`strip_echo` blanks those fields before an entry is written and
:func:`restore_echo` fills them in again from the current request when it is replayed. That is
exact because the cache key covers the whole canonical request body: the replaying request has the
same ``instructions`` and ``tools`` as the one that produced the entry.

Anthropic Messages and OpenAI Chat Completions echo no prompt fields (checked against the
official SDKs' response types, anthropic ``types/message.py`` and openai
``types/chat/chat_completion.py``): a Message carries id, type, role, content, model, stop_reason,
stop_sequence, stop_details, usage, container; a chat completion carries id, object, created,
model, choices, usage, system_fingerprint, service_tier (and the request's ``metadata``, which is
no prompt); count_tokens answers ``{"input_tokens": n}``. None repeats ``system``, ``messages`` or
``tools``, so both functions return their bodies unchanged for those dialects.

What comes back (what the tests check):

* Byte-for-byte ``restore_echo(d, f, strip_echo(d, f, x), request) == x`` for the bodies and
  streams :class:`cachekit.testing.FakeUpstream` produces (compact orjson, one ``data:`` line per
  event): :func:`strip_echo` keeps every key in place and re-serializes only the JSON it changed,
  with orjson, so re-serializing again with the value restored gives back the same bytes.
* For other serializations (spacing, escaped non-ASCII, a multi-line ``data:`` value) the
  changed events compare equal after JSON parsing; every other byte of the stream (other events,
  ``event:``/``id:`` lines, comments, line endings) is kept as it was.

What the provider echoes, and so what is restored (openai-python ``types/responses/response.py``):
``instructions`` is optional and ``null`` when the request had none; ``tools`` is a required
list, ``[]`` when the request had none. The API echoes a function tool in its own shape rather
than as sent: ``{"type", "name", "description", "parameters", "strict"}`` with ``description``
``null`` and ``strict`` ``true`` when the request omitted them (what FakeUpstream models; the
SDK's ``FunctionTool`` has exactly those fields, the default of ``strict`` is the Responses API's
strict-by-default for functions); :func:`restore_echo` rebuilds that shape, in that key order, and
keeps any further keys of the request's tool after them. Other tools (hosted tools, custom tools)
and list-form ``instructions`` are restored as the request sent them.

Bodies that are not what these functions expect (not JSON, not an object, no such field) are
returned unchanged. Both functions are idempotent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

import orjson

from cachekit._types import Dialect

__all__ = ["ECHOED_FIELDS", "BodyForm", "echoed_tools", "restore_echo", "strip_echo"]

#: How a stored body is framed: one JSON document, or the raw SSE bytes of a stream.
BodyForm = Literal["json", "sse"]

#: The request fields each dialect copies into its response object. Only the Responses API echoes
#: any: Anthropic Messages / count_tokens and Chat Completions responses carry no prompt fields
#: (checked against the official SDKs' response types; see the module docstring).
ECHOED_FIELDS: Mapping[Dialect, tuple[str, ...]] = {
    "anthropic_messages": (),
    "anthropic_count_tokens": (),
    "openai_chat": (),
    # ``prompt``: a stored prompt template's id, version and the caller's ``variables`` (user data).
    "openai_responses": ("instructions", "tools", "prompt"),
}

# Stream events carrying a whole Response object under "response" have types with this prefix
# (response.created, response.in_progress, response.completed, response.incomplete,
# response.failed, response.queued); other response.* events carry no "response" key. Any event
# whose data is {"type": "response.…", "response": {...}} is edited, so a lifecycle event added
# later is covered too; the event: line is not consulted (the data's type says the same).
_EVENT_PREFIX = "response."

# A JSON object edited in place; returns whether it changed anything.
_Edit = Callable[[dict[str, Any]], bool]


def strip_echo(dialect: Dialect, form: BodyForm, body: bytes) -> bytes:
    """``body`` with the echoed prompt fields set to ``null``, ready to be stored.

    Empty values (``[]``, ``""``) are kept, so a request without tools or instructions leaves the
    body byte-identical (the very object is returned).

    ``form="json"``: the fields of the top-level Response object. ``form="sse"``: the fields of the
    ``response`` object of every lifecycle event; only the ``data:`` lines of events that changed
    are rewritten, everything else keeps its bytes. Unexpected bodies come back unchanged.
    """
    fields = ECHOED_FIELDS.get(dialect, ())
    if not fields:
        return body

    def edit(response: dict[str, Any]) -> bool:
        changed = False
        for name in fields:
            if response.get(name):  # null, [] and "" hide nothing: kept, so the body stays as it was
                response[name] = None
                changed = True
        return changed

    return _apply(form, body, edit)


def restore_echo(dialect: Dialect, form: BodyForm, body: bytes, request: Mapping[str, Any]) -> bytes:
    """The inverse of :func:`strip_echo`: the echoed fields filled in from ``request``.

    ``request`` is the parsed body of the request being answered. Only fields that are present and
    ``null`` are filled, so a body stored before stripping was enabled is left as it is. The value
    is the provider's echo of the request's field (see the module docstring): ``instructions`` as
    sent (``null`` when absent), ``tools`` with function tools in the echoed shape (``[]`` when
    absent).
    """
    fields = ECHOED_FIELDS.get(dialect, ())
    if not fields:
        return body
    values = {name: _echoed_value(name, request) for name in fields}

    def edit(response: dict[str, Any]) -> bool:
        changed = False
        for name, value in values.items():
            if name in response and response[name] is None and value is not None:
                response[name] = value
                changed = True
        return changed

    return _apply(form, body, edit)


def _echoed_value(name: str, request: Mapping[str, Any]) -> Any:
    """What the provider puts in the response's ``name`` field for this request."""
    return echoed_tools(request) if name == "tools" else request.get(name)


def echoed_tools(request: Mapping[str, Any]) -> list[Any]:
    """The ``tools`` a Responses answer carries for ``request``: each function tool in the API's own
    shape, the others as sent (what :func:`restore_echo` puts back, and what the local backend
    answers with, so a replay and a fresh answer agree)."""
    tools = request.get("tools")
    if not isinstance(tools, list):
        return []
    return [_echoed_tool(tool) for tool in tools]


def _echoed_tool(tool: Any) -> Any:
    if not isinstance(tool, dict) or tool.get("type") != "function":
        return tool
    shaped: dict[str, Any] = {
        "type": "function",
        "name": tool.get("name"),
        "description": tool.get("description"),
        "parameters": tool.get("parameters"),
        "strict": tool.get("strict", True),
    }
    for key, value in tool.items():
        if key not in shaped:
            shaped[key] = value
    return shaped


def _apply(form: BodyForm, body: bytes, edit: _Edit) -> bytes:
    if form == "sse":
        return _apply_sse(body, edit)
    document = _loads(body)
    if isinstance(document, dict) and edit(document):
        return orjson.dumps(document)
    return body


def _loads(text: bytes | str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None


# ---------------------------------------------------------------------------------------------
# SSE: edit the data of lifecycle events, keep every other byte


def _apply_sse(body: bytes, edit: _Edit) -> bytes:
    out: list[bytes] = []
    event: list[bytes] = []
    changed = False
    for line in body.splitlines(keepends=True):  # bytes.splitlines: CR, LF and CRLF only, as SSE
        event.append(line)
        if not line.rstrip(b"\r\n"):  # a blank line ends the event
            edited = _edit_event(event, edit, first=not out)
            changed = changed or edited is not None
            out.extend(event if edited is None else edited)
            event = []
    if event:  # an unterminated last event: edited too, so that no echo survives in it
        edited = _edit_event(event, edit, first=not out)
        changed = changed or edited is not None
        out.extend(event if edited is None else edited)
    return b"".join(out) if changed else body


def _edit_event(lines: list[bytes], edit: _Edit, *, first: bool) -> list[bytes] | None:
    """The event's lines with its data lines replaced by one edited line; ``None`` if unchanged."""
    data_at: list[int] = []
    data: list[bytes] = []
    for index, line in enumerate(lines):
        content = line.rstrip(b"\r\n")
        if first and index == 0 and content.startswith(b"\xef\xbb\xbf"):
            content = content[3:]  # a byte-order mark at the very start of the stream
        field, _, value = content.partition(b":")
        if not field:
            continue  # a blank line or a comment (":...")
        if value[:1] == b" ":
            value = value[1:]
        if field == b"data":
            data_at.append(index)
            data.append(value)
    joined = b"\n".join(data)
    if b'"response"' not in joined:
        return None  # the cheap exit for the many delta events (escaped text cannot match)
    payload = _loads(joined)
    if not isinstance(payload, dict):
        return None
    kind = payload.get("type")
    response = payload.get("response")
    if not (isinstance(kind, str) and kind.startswith(_EVENT_PREFIX) and isinstance(response, dict)):
        return None
    if not edit(response):
        return None
    first_data = lines[data_at[0]]
    content = first_data.rstrip(b"\r\n")
    ending = first_data[len(content) :]
    head, _, rest = content.partition(b":")
    prefix = head + (b": " if rest[:1] == b" " else b":")
    replaced = prefix + orjson.dumps(payload) + ending
    dropped = set(data_at[1:])
    return [
        replaced if index == data_at[0] else line for index, line in enumerate(lines) if index not in dropped
    ]

"""Server-sent-event streams of the LLM APIs: frame, parse, tee-record, assemble, synthesize, replay.

Pure functions and small state machines, no I/O. The transport uses them to

* **record** a streamed response while it passes to the caller (:class:`StreamRecorder`) and keep
  it only when it is *complete*: it reached its dialect's terminator, carried no error event,
  nothing but blank lines or comments follows the terminator, and the message it assembles is a
  complete answer (:func:`cachekit.providers.answers.incomplete_answer`: a stop reason, ...);
* **cross-serve** one cache entry to both request forms: a stored stream becomes the provider's
  non-streaming body (:func:`assemble`), a stored body becomes the stream the provider would have
  sent (:func:`synthesize`), a stored stream is replayed to a streaming request (:func:`restream`).

Dialects and their framing:

==================== ================================ ===================================================
dialect              terminator                       error events
==================== ================================ ===================================================
anthropic_messages   ``event: message_stop``          ``event: error``
openai_chat          ``data: [DONE]``                 a data object with a top-level ``"error"`` key
openai_responses     ``event: response.completed``    ``error``, ``response.failed`` (and
                                                      ``response.incomplete`` never completes a stream)
==================== ================================ ===================================================

Round trips: ``assemble(d, synthesize(d, body, include_usage=True)) == body`` for the bodies the
providers send, with these exceptions (fields a stream cannot carry):

* ``openai_chat``: ``message.content`` is ``None`` unless a delta carried content (a body with
  ``"content": ""`` and tool calls comes back with ``""`` only because :func:`synthesize` sends it);
  ``usage`` exists only when the stream had a usage chunk (``include_usage``); chunk-only fields
  (``obfuscation``) are dropped.
* ``openai_responses``: only ``response.completed`` is assembled. A body whose status is
  ``incomplete`` or ``failed`` is synthesized as the provider would stream it (ending in
  ``response.incomplete`` / ``response.failed``), which :func:`assemble` rejects like any
  stream that did not complete.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from cachekit._types import Dialect
from cachekit.errors import StreamError
from cachekit.providers.answers import incomplete_answer

__all__ = [
    "ANTHROPIC_DELTA_USAGE",
    "CHAT_DONE",
    "SSEDecoder",
    "SSEEvent",
    "StreamError",
    "StreamRecorder",
    "UsageStripper",
    "assemble",
    "encode_event",
    "responses_event",
    "restream",
    "synthesize",
]

logger = logging.getLogger("cachekit.sse")

# Characters per synthesized text / argument delta. Replays are instant, so smaller pieces would only
# repeat the per-chunk envelope (ids, model, ...) more often; this keeps each SSE line modest.
_PIECE = 512

_STREAMING_DIALECTS = ("anthropic_messages", "openai_chat", "openai_responses")


# ---------------------------------------------------------------------------------------------
# Framing: how every event cachekit writes is put on the wire (replays here, the local backend's
# answers, error events), one way for all of them


def encode_event(data: Any, event: str | None = None) -> bytes:
    """One event as the providers frame it: an ``event:`` line when the event is named, one ``data:``
    line of compact JSON, and the blank line that dispatches it."""
    head = b"event: " + event.encode() + b"\n" if event is not None else b""
    return head + b"data: " + orjson.dumps(data) + b"\n\n"


def responses_event(kind: str, sequence: int, **fields: Any) -> bytes:
    """A Responses stream event: named by its ``type``, numbered by ``sequence_number`` (from 0)."""
    return encode_event({"type": kind, "sequence_number": sequence, **fields}, kind)


#: The last event of a Chat Completions stream.
CHAT_DONE = b"data: [DONE]\n\n"


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched server-sent event."""

    event: str | None
    """The ``event:`` field; ``None`` when absent (or empty, which WHATWG treats the same)."""
    data: str
    """The ``data:`` lines joined with ``"\\n"``."""


class SSEDecoder:
    """An incremental server-sent-event parser following the WHATWG ``text/event-stream`` rules.

    Lines end in CRLF, CR or LF; lines starting with ``:`` are comments; several ``data:`` lines
    make one multi-line value; a blank line dispatches the event (none when it has no data).
    Chunk boundaries may fall anywhere, even inside a CRLF pair or a UTF-8 sequence: lines are split
    on bytes (CR and LF never occur inside a UTF-8 sequence) and decoded once whole. ``id:`` and
    ``retry:`` are parsed and ignored: the LLM APIs do not use them.
    """

    __slots__ = ("_data", "_event", "_fields", "_first", "_parts", "_skip_lf")

    def __init__(self) -> None:
        self._parts: list[bytes] = []  # the unterminated line so far
        self._skip_lf = False  # the last chunk ended in CR: a leading LF of the next one ends nothing
        self._first = True  # a byte-order mark is stripped from the very start of the stream
        self._data: list[str] = []
        self._event: str | None = None
        self._fields = 0  # field lines since the last dispatch (the recorder's junk check)

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Parse the next chunk; return the events it completed, in order."""
        if self._skip_lf and chunk:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if not chunk:
            return []
        if b"\n" not in chunk and b"\r" not in chunk:
            # The common mid-line case: just remember it (joining on every chunk would be quadratic).
            self._parts.append(chunk)
            return []
        if self._parts:
            self._parts.append(chunk)
            chunk = b"".join(self._parts)
            self._parts = []
        lines = chunk.splitlines(keepends=True)  # bytes.splitlines splits on CR, LF and CRLF only
        last = lines[-1]
        if last[-1:] not in (b"\n", b"\r"):
            self._parts.append(lines.pop())
        elif last[-1:] == b"\r":
            self._skip_lf = True
        events: list[SSEEvent] = []
        for line in lines:
            event = self._line(line.rstrip(b"\r\n"))
            if event is not None:
                events.append(event)
        return events

    def flush(self) -> list[SSEEvent]:
        """End of stream: an event without its terminating blank line is discarded, never dispatched."""
        if self._parts:
            tail = b"".join(self._parts)
            self._parts = []
            if not tail.startswith(b":"):
                self._fields += 1  # an unterminated field line is not a blank line or a comment
        self._data = []
        self._event = None
        return []

    def _line(self, line: bytes) -> SSEEvent | None:
        if self._first:
            self._first = False
            if line.startswith(b"\xef\xbb\xbf"):
                line = line[3:]
        if not line:
            if not self._data:
                self._event = None
                return None
            event = SSEEvent(self._event, "\n".join(self._data))
            self._data = []
            self._event = None
            self._fields = 0
            return event
        if line[0] == 0x3A:  # ":" starts a comment (providers use them as keep-alives)
            return None
        self._fields += 1
        name, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value.decode("utf-8", "replace"))
        elif name == b"event":
            self._event = value.decode("utf-8", "replace") or None
        return None


class StreamRecorder:
    """Keeps a copy of a streamed response as it passes to the caller; says at the end if it is storable.

    :meth:`feed` only keeps the bytes (it is on the path of every streamed byte); all parsing
    happens once, in :meth:`complete`.

    Args:
        dialect: the API dialect of the stream.
        max_bytes: stop keeping bytes beyond this size (the stream is then not storable);
            ``None`` keeps everything.
    """

    __slots__ = ("_chunks", "_dialect", "_max_bytes", "_overflow", "_result", "_size", "message")

    def __init__(self, dialect: Dialect, *, max_bytes: int | None = None) -> None:
        self._dialect: Dialect = dialect
        self._max_bytes = max_bytes
        self._chunks: list[bytes] = []
        self._size = 0
        self._overflow = False
        self._result: tuple[bytes | None] | None = None
        #: Once :meth:`complete` found the stream complete: the message it assembles (what the store
        #: and the ledger read, so the stream is not assembled again).
        self.message: dict[str, Any] | None = None

    def feed(self, chunk: bytes) -> None:
        """Keep one chunk of the response body, as received."""
        if self._overflow:
            return
        self._size += len(chunk)
        if self._max_bytes is not None and self._size > self._max_bytes:
            self._overflow = True
            self._chunks = []
            return
        self._chunks.append(chunk)

    def complete(self) -> bytes | None:
        """At end of stream: the raw bytes as received if the stream is complete, else ``None``.

        Complete means: it reached the dialect's terminator, carried no error event, has nothing but
        blank lines and comments after the terminator, :func:`assemble` accepts it, and what it
        assembles is a complete answer of the dialect (the check stored documents pass too).
        """
        if self._result is None:
            self._result = (self._check(),)
        return self._result[0]

    def _check(self) -> bytes | None:
        if self._overflow:
            logger.debug("stream not storable: larger than max_bytes=%s", self._max_bytes)
            return None
        raw = b"".join(self._chunks)
        self._chunks = [raw]
        try:
            # The same definition of a complete answer as a stored document's (a proxy may close the
            # stream with its terminator after the model stopped mid-answer).
            message = assemble(self._dialect, raw)
            why = incomplete_answer(self._dialect, message)
            if why is not None:
                raise StreamError(f"not a complete answer: {why}")
        except StreamError as exc:
            # The reason only: the stream's content is the user's data and never logged.
            logger.debug("stream not storable (%s): %s", self._dialect, exc)
            return None
        except Exception as exc:  # a bug here must cost a cache entry, never the caller's response
            logger.warning("stream check failed (%s): %s", self._dialect, type(exc).__name__)
            return None
        self.message = message
        return raw


# ---------------------------------------------------------------------------------------------
# Parsing complete streams


def _decode_all(raw: bytes) -> list[SSEEvent]:
    """Every event of a whole stream; raises when anything but blank lines/comments trails the last."""
    decoder = SSEDecoder()
    events = decoder.feed(raw)
    decoder.flush()
    if decoder._fields:  # the decoder's own bookkeeping, shared within this module
        raise StreamError("data after the last complete event")
    return events


def _json_object(data: str | bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise StreamError(f"event data is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise StreamError("event data is not a JSON object")
    return value


def _named(events: list[SSEEvent]) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data object) pairs; the name is the ``event:`` field, else the data's ``type``."""
    named = []
    for event in events:
        data = _json_object(event.data)
        name = event.event if event.event is not None else data.get("type")
        named.append((name if isinstance(name, str) else "", data))
    return named


def _until_terminator(
    named: list[tuple[str, dict[str, Any]]], terminator: str, errors: Iterable[str]
) -> list[tuple[str, dict[str, Any]]]:
    """The events up to and including the terminator, which must be the last event."""
    failures = frozenset(errors)
    for position, (name, _) in enumerate(named):
        if name in failures:
            raise StreamError(f"the stream carries an error event ({name})")
        if name == terminator:
            if position != len(named) - 1:
                raise StreamError(f"events after {terminator}")
            return named
    raise StreamError(f"the stream ended before {terminator}")


def _dialect_check(dialect: str) -> None:
    if dialect not in _STREAMING_DIALECTS:
        raise StreamError(f"the {dialect} dialect does not stream")


# ---------------------------------------------------------------------------------------------
# assemble


def assemble(dialect: Dialect, raw: bytes) -> dict[str, Any]:
    """The non-streaming response body equivalent to a complete stream.

    Raises:
        StreamError: the stream is incomplete (no terminator), carries an error event, has data
            after its terminator, or its events are malformed.
    """
    _dialect_check(dialect)
    events = _decode_all(raw)
    try:
        if dialect == "openai_chat":
            return _assemble_chat(events)
        if dialect == "anthropic_messages":
            return _assemble_anthropic(events)
        return _assemble_responses(events)
    except StreamError:
        raise
    except (LookupError, TypeError, AttributeError, ValueError) as exc:
        # Well-formed JSON of the wrong shape (a string where a list belongs, ...). The type only:
        # an exception's message may quote the content.
        raise StreamError(f"malformed {dialect} events ({type(exc).__name__})") from None


def _assemble_anthropic(events: list[SSEEvent]) -> dict[str, Any]:
    named = _until_terminator(_named(events), "message_stop", ("error",))
    message: dict[str, Any] | None = None
    blocks: dict[int, dict[str, Any]] = {}
    texts: dict[tuple[int, str], list[str]] = {}  # (block index, field) -> pieces, joined at the end
    for name, data in named:
        if name == "message_start":
            start = data.get("message")
            if message is not None or not isinstance(start, dict):
                raise StreamError("message_start missing, repeated or malformed")
            message = start
            blocks = dict(enumerate(start.get("content") or []))
            continue
        if name in ("ping", "message_stop") or not name.startswith(("content_block_", "message_")):
            continue  # the API may add event types; unknown ones carry nothing of the message
        if message is None:
            raise StreamError(f"{name} before message_start")
        if name == "message_delta":
            _merge_message_delta(message, data)
            continue
        index = data.get("index")
        if not isinstance(index, int):
            raise StreamError(f"{name} without an index")
        if name == "content_block_start":
            block = data.get("content_block")
            if not isinstance(block, dict) or index in blocks:
                raise StreamError("content_block_start malformed or repeated")
            blocks[index] = block
        elif name == "content_block_delta":
            if index not in blocks:
                raise StreamError("content_block_delta for a block that never started")
            _apply_block_delta(blocks[index], index, data.get("delta"), texts)
    if message is None:
        raise StreamError("no message_start")
    for (index, field), pieces in texts.items():
        block = blocks[index]
        if field == "input":
            joined = "".join(pieces)
            try:
                block["input"] = orjson.loads(joined) if joined.strip() else {}
            except orjson.JSONDecodeError:
                raise StreamError("tool input JSON is malformed") from None
        else:
            block[field] = (block.get(field) or "") + "".join(pieces)
    message["content"] = [blocks[i] for i in sorted(blocks)]
    return message


# Delta type -> the block field its pieces are appended to.
_ANTHROPIC_TEXT_DELTAS = {
    "text_delta": ("text", "text"),
    "thinking_delta": ("thinking", "thinking"),
    "input_json_delta": ("partial_json", "input"),
}


def _apply_block_delta(
    block: dict[str, Any], index: int, delta: Any, texts: dict[tuple[int, str], list[str]]
) -> None:
    if not isinstance(delta, dict):
        raise StreamError("content_block_delta without a delta")
    kind = delta.get("type")
    if kind in _ANTHROPIC_TEXT_DELTAS:
        source, field = _ANTHROPIC_TEXT_DELTAS[kind]
        piece = delta.get(source)
        if not isinstance(piece, str):
            raise StreamError(f"{kind} without {source}")
        texts.setdefault((index, field), []).append(piece)
    elif kind == "signature_delta":
        block["signature"] = delta.get("signature")  # the whole signature, sent once (as the SDK)
    elif kind == "citations_delta":
        citations = block.get("citations")
        block["citations"] = [*(citations or []), delta.get("citation")]
    else:
        # Unknown content would be lost: better not to store it than to serve half of it.
        raise StreamError(f"unknown content_block_delta type {kind!r}")


def _merge_message_delta(message: dict[str, Any], data: dict[str, Any]) -> None:
    delta = data.get("delta")
    for key, value in (delta if isinstance(delta, dict) else {}).items():
        # stop_reason, stop_sequence, stop_details, container: None never erases a known value
        if value is not None or message.get(key) is None:
            message[key] = value
    usage = data.get("usage")
    if isinstance(usage, dict):
        # Counts on message_delta are cumulative totals that overwrite message_start's; optional ones
        # are null or absent when unknown, and then message_start's value stands.
        merged = dict(message.get("usage") or {})
        for key, value in usage.items():
            if value is not None or key not in merged:
                merged[key] = value
        message["usage"] = merged


def _assemble_chat(events: list[SSEEvent]) -> dict[str, Any]:
    chunks: list[dict[str, Any]] = []
    done = False
    for event in events:
        if done:
            raise StreamError("events after [DONE]")
        if event.data == "[DONE]":
            done = True
            continue
        chunk = _json_object(event.data)
        if "error" in chunk:
            raise StreamError("the stream carries an error chunk")
        chunks.append(chunk)
    if not done:
        raise StreamError("the stream ended before [DONE]")
    if not chunks:
        raise StreamError("no chunks before [DONE]")

    top: dict[str, Any] = {}
    choices: dict[int, dict[str, Any]] = {}
    usage: Any = None
    for chunk in chunks:
        for key, value in chunk.items():
            if key in ("choices", "usage", "object", "obfuscation"):
                continue
            if value is not None or key not in top:
                top[key] = value
        if chunk.get("usage") is not None:
            usage = chunk["usage"]
        parts = chunk.get("choices")
        if not isinstance(parts, list):
            raise StreamError("a chunk without choices")
        for part in parts:
            if not isinstance(part, dict) or not isinstance(part.get("index"), int):
                raise StreamError("a choice without an index")
            state = choices.setdefault(
                part["index"],
                {"index": part["index"], "message": {}, "logprobs": None, "finish_reason": None},
            )
            delta = part.get("delta")
            if isinstance(delta, dict):
                _merge_delta(state["message"], delta)
            for key, value in part.items():
                if key in ("index", "delta") or value is None:
                    continue
                if key == "logprobs" and isinstance(state["logprobs"], dict) and isinstance(value, dict):
                    _merge_delta(state["logprobs"], value)
                else:
                    state[key] = value

    body: dict[str, Any] = {"id": top.pop("id", None), "object": "chat.completion"}
    body.update(top)
    body["choices"] = [_chat_choice(choices[i]) for i in sorted(choices)]
    if usage is not None:
        body["usage"] = usage
    return body


def _chat_choice(state: dict[str, Any]) -> dict[str, Any]:
    delta = state["message"]
    message: dict[str, Any] = {"role": delta.pop("role", "assistant"), "content": delta.pop("content", None)}
    message.update(delta)
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        message["tool_calls"] = [
            {k: v for k, v in call.items() if k != "index"} if isinstance(call, dict) else call
            for call in calls
        ]
    return {**state, "message": message}


# Keys that name or identify a thing: a repeat overwrites rather than appends (some compatible
# providers resend "role" or a tool call's "id" in every chunk).
_IDENTITY_KEYS = frozenset({"index", "type", "id", "role"})


def _merge_delta(acc: dict[str, Any], delta: dict[str, Any]) -> None:
    """Accumulate a Chat delta into ``acc`` (strings append, objects merge, indexed lists merge by index)."""
    for key, value in delta.items():
        old = acc.get(key)
        if value is None:
            # OpenAI repeats absent fields as null ("id": null on every later tool-call chunk).
            acc.setdefault(key, None)
            continue
        if old is None or key in _IDENTITY_KEYS:
            if _indexed(value):
                acc[key] = []
                _merge_indexed(acc[key], value)
            elif isinstance(value, dict):
                acc[key] = {}
                _merge_delta(acc[key], value)
            else:
                acc[key] = value
        elif isinstance(old, str) and isinstance(value, str):
            # A tool call's name arrives once; a provider resending it whole must not double it.
            acc[key] = value if key == "name" and value == old else old + value
        elif isinstance(old, dict) and isinstance(value, dict):
            _merge_delta(old, value)
        elif isinstance(old, list) and isinstance(value, list):
            if _indexed(value):
                _merge_indexed(old, value)
            else:
                old.extend(value)
        else:
            acc[key] = value


def _indexed(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(item, dict) and isinstance(item.get("index"), int) for item in value)
    )


def _merge_indexed(acc: list[Any], entries: list[dict[str, Any]]) -> None:
    for entry in entries:
        target = next(
            (item for item in acc if isinstance(item, dict) and item.get("index") == entry["index"]), None
        )
        if target is None:
            target = {}
            acc.append(target)
        _merge_delta(target, entry)
    acc.sort(key=lambda item: item.get("index", 0) if isinstance(item, dict) else 0)


def _assemble_responses(events: list[SSEEvent]) -> dict[str, Any]:
    named = _until_terminator(
        _named(events), "response.completed", ("error", "response.failed", "response.incomplete")
    )
    response = named[-1][1].get("response")
    if not isinstance(response, dict):
        raise StreamError("response.completed without a response")
    if response.get("output") is None:
        # The final event may leave the output out; the finished items were each sent on their own.
        done = {
            data["output_index"]: data["item"]
            for name, data in named
            if name == "response.output_item.done" and isinstance(data.get("output_index"), int)
        }
        response = {**response, "output": [done[i] for i in sorted(done)]}
    return response


# ---------------------------------------------------------------------------------------------
# synthesize


def synthesize(dialect: Dialect, body: bytes | dict[str, Any], *, include_usage: bool = False) -> bytes:
    """The SSE bytes the provider would have streamed for this non-streaming response body.

    ``include_usage`` (Chat only) mirrors ``stream_options.include_usage``: every chunk carries
    ``"usage": null`` and a last chunk with no choices carries the usage.

    Raises:
        StreamError: the body is not a response of this dialect.
    """
    _dialect_check(dialect)
    if isinstance(body, bytes | bytearray | memoryview):
        body = _json_object(bytes(body))
    try:
        if dialect == "anthropic_messages":
            return _synthesize_anthropic(body)
        if dialect == "openai_chat":
            return _synthesize_chat(body, include_usage)
        return _synthesize_responses(body)
    except StreamError:
        raise
    except (LookupError, TypeError, AttributeError, ValueError) as exc:
        raise StreamError(f"not a {dialect} response body ({type(exc).__name__})") from None


def _pieces(text: str) -> list[str]:
    return [text[i : i + _PIECE] for i in range(0, len(text), _PIECE)] or [""]


# The message fields message_delta sets at the end (message_start has them null).
_ANTHROPIC_LATE = ("stop_reason", "stop_sequence", "stop_details", "container")
#: The usage counters an Anthropic stream's message_delta repeats as cumulative totals (what the API
#: sends there).
ANTHROPIC_DELTA_USAGE = (
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "output_tokens",
    "server_tool_use",
    "output_tokens_details",
)
# Usage known only once the answer is done: message_start leaves it out, message_delta carries it.
_ANTHROPIC_LATE_USAGE = ("output_tokens_details",)
# Block types whose "input" the API streams as input_json_delta (the SDK tracks the same two).
_ANTHROPIC_TOOL_BLOCKS = ("tool_use", "server_tool_use")


def _synthesize_anthropic(message: dict[str, Any]) -> bytes:
    content = message.get("content")
    if not isinstance(content, list):
        raise StreamError("not an Anthropic message: no content list")
    usage: dict[str, Any] = message["usage"] if isinstance(message.get("usage"), dict) else {}
    start_usage = {key: value for key, value in usage.items() if key not in _ANTHROPIC_LATE_USAGE}
    if isinstance(usage.get("output_tokens"), int):
        # At stream start the API reports the output counted so far: the first token or so.
        start_usage["output_tokens"] = min(1, usage["output_tokens"])
    start = {**message, "content": []}
    if "usage" in message:
        start["usage"] = start_usage
    late: dict[str, Any] = {}
    for key in _ANTHROPIC_LATE:
        if key in message:
            start[key] = None
            late[key] = message[key]
    late.setdefault("stop_reason", None)
    late.setdefault("stop_sequence", None)
    out = [encode_event({"type": "message_start", "message": start}, "message_start")]
    for index, block in enumerate(content):
        out.extend(_anthropic_block(index, block))
    delta_usage = {key: usage[key] for key in ANTHROPIC_DELTA_USAGE if key in usage}
    out.append(encode_event({"type": "message_delta", "delta": late, "usage": delta_usage}, "message_delta"))
    out.append(encode_event({"type": "message_stop"}, "message_stop"))
    return b"".join(out)


def _anthropic_block(index: int, block: Any) -> list[bytes]:
    if not isinstance(block, dict):
        raise StreamError("a content block is not an object")
    kind = block.get("type")
    deltas: list[dict[str, Any]] = []
    opening = dict(block)
    if kind == "text" and isinstance(block.get("text"), str):
        opening["text"] = ""
        deltas = [{"type": "text_delta", "text": piece} for piece in _pieces(block["text"])]
        citations = block.get("citations")
        if isinstance(citations, list) and citations:
            opening["citations"] = []
            deltas.extend({"type": "citations_delta", "citation": citation} for citation in citations)
    elif kind in _ANTHROPIC_TOOL_BLOCKS and isinstance(block.get("input"), dict):
        opening["input"] = {}
        arguments = orjson.dumps(block["input"]).decode() if block["input"] else ""
        deltas = [{"type": "input_json_delta", "partial_json": piece} for piece in _pieces(arguments)]
    elif kind == "thinking":
        opening["thinking"] = ""
        opening["signature"] = ""
        deltas = [
            {"type": "thinking_delta", "thinking": piece} for piece in _pieces(block.get("thinking") or "")
        ]
        if "signature" in block:
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
    # Any other block (redacted_thinking, server tool results, ...) arrives whole in its start event.
    out = [
        encode_event(
            {"type": "content_block_start", "index": index, "content_block": opening}, "content_block_start"
        )
    ]
    out.extend(
        encode_event({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta")
        for delta in deltas
    )
    out.append(encode_event({"type": "content_block_stop", "index": index}, "content_block_stop"))
    return out


def _synthesize_chat(body: dict[str, Any], include_usage: bool) -> bytes:
    choices = body.get("choices")
    if not isinstance(choices, list):
        raise StreamError("not a chat completion: no choices list")
    head = {key: value for key, value in body.items() if key not in ("choices", "usage")}
    head["object"] = "chat.completion.chunk"

    def chunk(index: int, delta: dict[str, Any], *, logprobs: Any = None, finish: Any = None) -> bytes:
        choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
        data = {**head, "choices": [choice]}
        if include_usage:
            data["usage"] = None
        return encode_event(data)

    out: list[bytes] = []
    for position, choice in enumerate(choices):
        if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
            raise StreamError("a choice without a message")
        index = choice.get("index", position)
        out.extend(_chat_deltas(choice["message"], functools.partial(chunk, index)))
        out.append(chunk(index, {}, logprobs=choice.get("logprobs"), finish=choice.get("finish_reason")))
    if include_usage and isinstance(body.get("usage"), dict):
        out.append(encode_event({**head, "choices": [], "usage": body["usage"]}))
    out.append(CHAT_DONE)
    return b"".join(out)


def _chat_deltas(message: dict[str, Any], chunk: Callable[[dict[str, Any]], bytes]) -> list[bytes]:
    content = message.get("content")
    first: dict[str, Any] = {"role": message.get("role", "assistant")}
    first["content"] = "" if isinstance(content, str) else None
    if "refusal" in message:
        first["refusal"] = None
    streamed: list[tuple[str, str]] = []  # other text fields (DeepSeek's reasoning_content), streamed
    calls = message.get("tool_calls")
    for key, value in message.items():
        if key in ("role", "content", "refusal", "tool_calls"):
            continue
        if isinstance(value, str):
            streamed.append((key, value))
        else:
            first[key] = value  # annotations, audio, function_call: sent whole, as they cannot grow
    if not (isinstance(calls, list) and calls) and "tool_calls" in message:
        first["tool_calls"] = calls
    out = [chunk(first)]
    for key, value in streamed:
        out.extend(chunk({key: piece}) for piece in _pieces(value))
    if isinstance(content, str) and content:
        out.extend(chunk({"content": piece}) for piece in _pieces(content))
    if isinstance(message.get("refusal"), str):
        out.extend(chunk({"refusal": piece}) for piece in _pieces(message["refusal"]))
    if isinstance(calls, list):
        for index, call in enumerate(calls):
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
                out.append(
                    chunk({"tool_calls": [{"index": index, **(call if isinstance(call, dict) else {})}]})
                )
                continue
            opening = {"index": index, **call, "function": {**function, "arguments": ""}}
            out.append(chunk({"tool_calls": [opening]}))
            out.extend(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                for piece in _pieces(function["arguments"])
                if piece
            )
    return out


_RESPONSES_FINAL = {
    "completed": "response.completed",
    "incomplete": "response.incomplete",
    "failed": "response.failed",
}


def _synthesize_responses(response: dict[str, Any]) -> bytes:
    output = response.get("output")
    final = _RESPONSES_FINAL.get(str(response.get("status")))
    if not isinstance(output, list) or final is None:
        raise StreamError("not a finished response: no output list or an unfinished status")
    out: list[bytes] = []

    def emit(kind: str, **fields: Any) -> None:
        out.append(responses_event(kind, len(out), **fields))

    pending = {**response, "status": "in_progress", "output": [], "usage": None}
    for key in ("completed_at", "error", "incomplete_details"):
        if key in pending:
            pending[key] = None
    emit("response.created", response=pending)
    emit("response.in_progress", response=pending)
    for index, item in enumerate(output):
        if not isinstance(item, dict):
            raise StreamError("an output item is not an object")
        _responses_item(emit, index, item)
    emit(final, response=response)
    return b"".join(out)


def _in_progress(item: dict[str, Any], **emptied: Any) -> dict[str, Any]:
    started = {**item, **emptied}
    if "status" in item:
        started["status"] = "in_progress"
    return started


def _responses_item(emit: Callable[..., None], index: int, item: dict[str, Any]) -> None:
    kind = item.get("type")
    item_id = item.get("id")
    at = {"item_id": item_id, "output_index": index}
    if kind == "message":
        emit("response.output_item.added", output_index=index, item=_in_progress(item, content=[]))
        for content_index, part in enumerate(item.get("content") or []):
            _responses_part(emit, {**at, "content_index": content_index}, part)
    elif kind == "function_call" and isinstance(item.get("arguments"), str):
        emit("response.output_item.added", output_index=index, item=_in_progress(item, arguments=""))
        for piece in _pieces(item["arguments"]):
            if piece:
                emit("response.function_call_arguments.delta", **at, delta=piece)
        # The done event carries the arguments only (the openai SDK's event type has no name).
        emit("response.function_call_arguments.done", **at, arguments=item["arguments"])
    elif kind == "reasoning" and isinstance(item.get("summary"), list):
        emit("response.output_item.added", output_index=index, item=_in_progress(item, summary=[]))
        for summary_index, part in enumerate(item["summary"]):
            where = {**at, "summary_index": summary_index}
            text = part.get("text") if isinstance(part, dict) else None
            if not isinstance(text, str):
                continue
            emit("response.reasoning_summary_part.added", **where, part={**part, "text": ""})
            for piece in _pieces(text):
                emit("response.reasoning_summary_text.delta", **where, delta=piece)
            emit("response.reasoning_summary_text.done", **where, text=text)
            emit("response.reasoning_summary_part.done", **where, part=part)
    elif kind == "web_search_call":
        emit("response.output_item.added", output_index=index, item=_in_progress(item))
        for stage in _WEB_SEARCH_STAGES:
            emit(f"response.web_search_call.{stage}", **at)
    else:
        # Tool calls of other hosted tools and anything newer: announced and finished whole.
        emit("response.output_item.added", output_index=index, item=_in_progress(item))
    emit("response.output_item.done", output_index=index, item=item)


# The events a web search call goes through between its item's added and done events.
_WEB_SEARCH_STAGES = ("in_progress", "searching", "completed")


def _responses_part(emit: Callable[..., None], where: dict[str, Any], part: Any) -> None:
    if not isinstance(part, dict):
        raise StreamError("a content part is not an object")
    kind = part.get("type")
    if kind == "output_text" and isinstance(part.get("text"), str):
        emit("response.content_part.added", **where, part={**part, "text": "", "annotations": []})
        for piece in _pieces(part["text"]):
            emit("response.output_text.delta", **where, delta=piece, logprobs=[])
        for annotation_index, annotation in enumerate(part.get("annotations") or []):
            emit(
                "response.output_text.annotation.added",
                **where,
                annotation_index=annotation_index,
                annotation=annotation,
            )
        emit("response.output_text.done", **where, text=part["text"], logprobs=part.get("logprobs") or [])
    elif kind == "refusal" and isinstance(part.get("refusal"), str):
        emit("response.content_part.added", **where, part={**part, "refusal": ""})
        for piece in _pieces(part["refusal"]):
            emit("response.refusal.delta", **where, delta=piece)
        emit("response.refusal.done", **where, refusal=part["refusal"])
    else:
        emit("response.content_part.added", **where, part=part)
    emit("response.content_part.done", **where, part=part)


# ---------------------------------------------------------------------------------------------
# restream


def restream(dialect: Dialect, raw: bytes, *, include_usage: bool) -> bytes:
    """A stored complete stream, as it should be replayed to a streaming request.

    The bytes are replayed unchanged, except for Chat, where usage is a request option
    (``stream_options.include_usage``): without it, the stream is given as the provider sends it
    without the option (:class:`UsageStripper`: no usage-only chunk, no ``"usage": null`` fields;
    every other byte as stored); with it, a stream recorded without usage is re-synthesized so that
    every chunk says ``"usage": null`` (the usage itself is unknown then and stays absent; the exact
    stage does not serve such a record to such a request).

    Raises:
        StreamError: (Chat only, when the stream must be rewritten) the stored stream is malformed.
    """
    if dialect != "openai_chat":
        return raw
    if not include_usage:
        if b'"usage"' not in raw:  # recorded without usage: nothing to take out
            return raw
        stripper = UsageStripper()
        # Fed an event at a time (LF framing, as the providers send it), each takes the fast path.
        parts = raw.split(b"\n\n") if b"\r" not in raw else [raw]
        pieces = [stripper.feed(part + b"\n\n") for part in parts[:-1]]
        stripped = b"".join(pieces) + stripper.feed(parts[-1]) + stripper.flush()
        return raw if stripped == raw else stripped
    for event in _decode_all(raw):
        if event.data == "[DONE]" or '"usage"' not in event.data:
            continue  # cheap pre-check: most chunks of a stream without usage never mention it
        if _json_object(event.data).get("usage") is not None:
            return raw
    return synthesize(dialect, assemble(dialect, raw), include_usage=True)


# ---------------------------------------------------------------------------------------------
# a Chat stream asked for usage, given to a caller that did not ask


#: ``"usage": null`` as a JSON member, whatever the spacing.
_USAGE_NULL = re.compile(rb'"usage"\s*:\s*null')


class UsageStripper:
    """Turns a Chat stream that was asked for usage (``stream_options.include_usage``) into the stream
    the provider sends without the option: the usage-only chunk (``"choices": []`` and a ``usage``)
    is dropped, and the ``"usage": null`` member every other chunk then carries is taken out. Every
    other byte passes as it came: comments, line ends, field order, a chunk whose usage rides along
    with its choices (a provider that always sends it).

    Incremental, for a stream passing to its caller: :meth:`feed` returns at once every event the
    chunk completed; only an event not yet ended by its blank line is held (the caller could not
    use it before that line either). :meth:`flush` at the end returns what is left as it came (a cut
    stream is passed on as cut). Not thread-safe: one per stream.
    """

    __slots__ = ("_event", "_line")

    def __init__(self) -> None:
        self._line = b""  # the unterminated line so far (or a line ending in CR, which LF may follow)
        self._event: list[bytes] = []  # the current event's lines, with their line ends

    def feed(self, chunk: bytes) -> bytes:
        """The bytes of ``chunk`` the caller gets now (the events it completed, rewritten)."""
        if not chunk:
            return b""
        if (
            not self._line
            and not self._event
            and chunk[:6] == b"data: "
            and chunk[-2:] == b"\n\n"
            and chunk.count(b"\n") == 2
            and b"\r" not in chunk
        ):
            # The common case: one whole event of one data line (as OpenAI sends each chunk).
            data = chunk[6:-2]
            kept = _without_usage(data)
            if kept is None:
                return b""
            return chunk if kept is data else b"data: " + kept + b"\n\n"
        if self._line:
            chunk = self._line + chunk
        lines = chunk.splitlines(keepends=True)  # on CR, LF and CRLF only (bytes.splitlines)
        last = lines[-1]
        if last[-1:] == b"\n":
            self._line = b""
        else:  # no line end yet, or a CR whose LF may come in the next chunk
            self._line = lines.pop()
        return self._take(lines)

    def flush(self) -> bytes:
        """At the end of the stream: what was held, as it came (an event never ended)."""
        line, self._line = self._line, b""
        # A line held for the LF that might follow its CR is whole now.
        out = self._take([line]) if line[-1:] == b"\r" else b""
        rest = b"".join(self._event) + (b"" if line[-1:] == b"\r" else line)
        self._event = []
        return out + rest

    def _take(self, lines: list[bytes]) -> bytes:
        out: list[bytes] = []
        for line in lines:
            content = line.rstrip(b"\r\n")
            if not content:  # a blank line ends the event
                out.append(self._dispatch(line))
            elif not self._event and content[:1] == b":":
                out.append(line)  # a comment between events (a keep-alive) passes at once
            else:
                self._event.append(line)
        return b"".join(out)

    def _dispatch(self, blank: bytes) -> bytes:
        lines, self._event = self._event, []
        fields = [_field(line) for line in lines]
        data_at = [i for i, (name, _, _) in enumerate(fields) if name == b"data"]
        if not data_at:
            return b"".join(lines) + blank
        data = b"\n".join(fields[i][2] for i in data_at)
        kept = _without_usage(data)
        if kept is None:
            return b""  # the usage-only chunk: the whole event goes, with its blank line
        if kept is data:
            return b"".join(lines) + blank
        # The data lines are written again in place of the first one, with its prefix and line end.
        first = data_at[0]
        prefix, ending = fields[first][1], lines[first][len(lines[first].rstrip(b"\r\n")) :]
        written = b"".join(prefix + piece + ending for piece in kept.split(b"\n"))
        dropped = set(data_at[1:])
        rebuilt = [written if i == first else line for i, line in enumerate(lines) if i not in dropped]
        return b"".join(rebuilt) + blank


def _field(line: bytes) -> tuple[bytes, bytes, bytes]:
    """(field name, everything before the value, value) of an SSE line (line end removed)."""
    content = line.rstrip(b"\r\n")
    name, colon, value = content.partition(b":")
    if colon and value[:1] == b" ":
        value = value[1:]
    return name, content[: len(content) - len(value)], value


def _without_usage(data: bytes) -> bytes | None:
    """A Chat chunk's data as the provider sends it without ``include_usage``: ``None`` to drop it
    (the usage-only chunk), ``data`` itself when it has nothing to take out, else the data without
    its ``"usage": null`` member (cut from the bytes when the cut provably leaves the same object,
    else written again)."""
    if b'"usage"' not in data:
        return data  # the cheap check: a chunk that never mentions usage
    try:
        chunk = orjson.loads(data)
    except orjson.JSONDecodeError:
        return data  # not ours to fix: the recorder decides whether such a stream is stored
    if not isinstance(chunk, dict) or "usage" not in chunk:
        return data
    if chunk["usage"] is not None:
        return None if chunk.get("choices") == [] else data
    del chunk["usage"]
    written = orjson.dumps(chunk)
    # The common case, cheaply: compact JSON written as orjson writes it (OpenAI's own chunks). The
    # data less one member equal to the object written again is exactly the cut wanted.
    for member in (b',"usage":null', b'"usage":null,'):
        if data.replace(member, b"", 1) == written:
            return written
    # Other spacing or escapes: cut the one match, when the cut reads back as the same object.
    found = list(_USAGE_NULL.finditer(data))
    if len(found) == 1:
        start, end = found[0].span()
        before, after = data[:start].rstrip(), data[end:].lstrip()
        if before.endswith(b","):
            cut = before[:-1] + data[end:]
        elif after.startswith(b","):
            cut = data[:start] + after[1:].lstrip()
        else:
            cut = data[:start] + data[end:]
        with contextlib.suppress(orjson.JSONDecodeError):
            if orjson.loads(cut) == chunk:  # the member cut was the top-level one, nothing else
                return cut
    return written

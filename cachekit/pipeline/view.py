"""The request view: one request as every stage reads it, parsed once and serialized once.

:class:`RequestView` holds the request's route, a snapshot of its headers, its JSON body bytes, the
parsed body, the canonical body and its bytes, the prompt blocks (built once, then shared by lint,
the planner, ``prompt_cache_key`` and the cache context) and the body shaping produced. Each is
computed on first use, so a hit on bytes seen before never parses its body. The body that goes
upstream is serialized once, by :meth:`RequestView.outgoing`, after the last stage that changes it.

:class:`SeenBodies` remembers, by the digest of a body's raw bytes, what the key needs from it (the
hit path's main saving); a bounded, locked memory per pipeline.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import orjson

from cachekit import _fork
from cachekit._http import Request, rebuild_request
from cachekit._types import Dialect
from cachekit.providers import Route
from cachekit.providers.state import UNKEYED_FIELDS, Verdict
from cachekit.shape import canonical as canon
from cachekit.shape.blocks import Block, BlockMemo, prompt_blocks

__all__ = [
    "JSON_TYPE",
    "SSE_TYPE",
    "Form",
    "RequestView",
    "Seen",
    "SeenBodies",
    "is_event_stream",
    "is_json",
    "json_content",
    "parse_object",
]

JSON_TYPE = "application/json"
SSE_TYPE = "text/event-stream; charset=utf-8"
# Fields that choose the *form* of the answer (a stream or one document, usage in the stream or not),
# not the answer: they stay out of the key, so one entry serves both forms (the table's unkeyed rows).
FORM_FIELDS = UNKEYED_FIELDS
#: How many request digests a pipeline remembers (a few hundred bytes each).
_SEEN_SIZE = 4096


def media_type(content_type: str | None) -> str:
    """The media type of a ``content-type`` value, lower-cased, without parameters."""
    return "" if content_type is None else content_type.split(";", 1)[0].strip().lower()


def is_json(content_type: str | None) -> bool:
    """Whether a ``content-type`` says JSON."""
    return media_type(content_type) == "application/json"


def is_event_stream(content_type: str | None) -> bool:
    """Whether a ``content-type`` says server-sent events."""
    return media_type(content_type) == "text/event-stream"


def json_content(request: Request, headers: dict[str, str]) -> bytes | None:
    """The request's JSON body bytes, or ``None`` (not JSON, or a streaming upload we must not read)."""
    if not is_json(headers.get("content-type")):
        return None
    try:
        content: bytes = request.content
    except Exception:  # a streaming request body (upload) cannot be read without consuming it
        return None
    return content


def parse_object(content: bytes) -> dict[str, Any] | None:
    """The body as a JSON object, or ``None`` when it is not one cachekit can key faithfully.

    Bodies holding an integer beyond 64 bits are refused: orjson reads those as floats, so two
    different requests (``seed`` 2**70 and 2**70+1) would share a key and a re-dumped body would
    change the number sent upstream. Such a request goes upstream byte for byte, uncached.
    """
    try:
        body = orjson.loads(content)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(body, dict):
        return None
    if _has_digit_run(content) and _has_big_int(content):
        return None
    return body


# Nineteen digits in a row may be an integer beyond 64 bits (-2**63 - 1 has 19; or they are just
# digits inside a string: the exact check below tells them apart, and only runs after this cheap scan).
# Digits map to b"1", everything else to b"0", then a substring search: about 12x faster than the
# regex [0-9]{19} on a 40 KB agent request (0.05 ms against 0.63 ms), and every new body pays it.
_DIGITS_AS_ONES = bytes(0x31 if 0x30 <= i <= 0x39 else 0x30 for i in range(256))
_NINETEEN_DIGITS = b"1" * 19


def _has_digit_run(content: bytes) -> bool:
    return _NINETEEN_DIGITS in content.translate(_DIGITS_AS_ONES)


_INT64_MIN, _UINT64_MAX = -(2**63), 2**64 - 1


def _has_big_int(content: bytes) -> bool:
    big = False

    def parse_int(text: str) -> int:
        nonlocal big
        value = int(text)
        big = big or not _INT64_MIN <= value <= _UINT64_MAX
        return value

    try:
        json.loads(content, parse_int=parse_int)
    except (ValueError, RecursionError):
        return True  # orjson read it but the standard parser cannot: do not trust either
    return big


class _NotCanonical(Exception):
    """A parsed body that cannot be written back (nesting deeper than orjson writes)."""


@dataclass(frozen=True, slots=True)
class Form:
    """The form the caller wants the answer in."""

    streaming: bool
    include_usage: bool

    @classmethod
    def of(cls, dialect: Dialect, body: dict[str, Any]) -> Form:
        """The form ``body`` asks for."""
        streaming = body.get("stream") is True
        options = body.get("stream_options")
        include_usage = (
            streaming
            and dialect == "openai_chat"
            and isinstance(options, dict)
            and options.get("include_usage") is True
        )
        return cls(streaming, include_usage)


@dataclass(frozen=True, slots=True)
class Seen:
    """What the key needs from a request body, remembered by the digest of its raw bytes."""

    digest: bytes  # SHA-256 of the canonical body without form and opted-out fields
    form: Form
    model: str
    #: What the body depends on outside itself (only what an opt-in lifts: a body with any other
    #: reason is never keyed, so never remembered), asked again of each request with these bytes.
    verdict: Verdict = field(default_factory=Verdict)


class SeenBodies:
    """Bodies seen before, by the digest of their raw bytes: bounded (oldest first) and locked."""

    def __init__(self) -> None:
        self._seen: dict[bytes, Seen] = {}
        self._lock = _fork.lock(self)

    def get(self, digest: bytes) -> Seen | None:
        """What was remembered of the body with this digest (a dict read: atomic, no lock)."""
        return self._seen.get(digest)

    def put(self, digest: bytes, seen: Seen) -> None:
        """Remember ``seen``; the oldest eighth goes when the memory is full."""
        with self._lock:
            if len(self._seen) >= _SEEN_SIZE:  # oldest first: dicts keep insertion order
                for old in list(itertools.islice(self._seen, _SEEN_SIZE // 8)):
                    self._seen.pop(old, None)
            self._seen[digest] = seen


@dataclass(slots=True)
class RequestView:
    """One routed request as the stages see it; each part is computed once, on first use.

    Stages read ``route``, ``headers`` (lower-cased names, control headers included), ``content`` and
    the parts below; shaping writes :attr:`shaped`. :meth:`outgoing` is the request as it goes upstream.
    """

    request: Request
    headers: dict[str, str]
    route: Route
    #: The JSON body bytes as the caller sent them (``None``: not JSON, or unreadable).
    content: bytes | None
    #: Identifies ``content`` (with the dialect) in :class:`SeenBodies`.
    digest: bytes = b""
    #: What an earlier identical body gave the key (then the body need not be parsed for a hit).
    seen: Seen | None = None
    _parsed: dict[str, Any] | None = None
    _parse_done: bool = False
    #: The canonical body (read-only) and its bytes, once :meth:`canonicalize` ran.
    canonical: dict[str, Any] | None = None
    canonical_bytes: bytes | None = None
    #: The body shaping produced (stable-first, breakpoints), when it changed the canonical one.
    shaped: dict[str, Any] | None = None
    #: Headers shaping adds to the upstream request (xAI's ``x-grok-conv-id``); a caller's own value wins.
    added_headers: tuple[tuple[str, str], ...] = ()
    shaped_bytes: bytes | None = None
    #: Form fields the upstream stage sets on the body that goes upstream, over the shaped or canonical
    #: one (Chat's ``stream_options`` asking for usage); out of the key, of shaping and of :meth:`body`.
    sent_fields: tuple[tuple[str, Any], ...] = ()
    _blocks: tuple[Block, ...] | None = None
    _blocks_of: dict[str, Any] | None = field(default=None, repr=False)

    @classmethod
    def of(cls, request: Request, headers: dict[str, str], route: Route) -> RequestView:
        """The view of a routed request (``headers``: its lower-cased snapshot)."""
        content = json_content(request, headers)
        digest = b""
        if content is not None:
            hasher = hashlib.sha256(route.dialect.encode() + b"\0")
            hasher.update(content)  # not concatenated first: no copy of the body
            digest = hasher.digest()
        return cls(request, headers, route, content, digest)

    def parsed(self) -> dict[str, Any] | None:
        """The caller's body as a JSON object cachekit can key (parsed once), else ``None``."""
        if not self._parse_done:
            self._parse_done = True
            self._parsed = parse_object(self.content) if self.content is not None else None
        return self._parsed

    def canonicalize(self, options: canon.CanonicalOptions) -> dict[str, Any] | None:
        """The canonical body (built once; ``None`` when the body is not a JSON object).

        Raises :class:`_NotCanonical` for a body that cannot be written back.
        """
        if self.canonical is not None:
            return self.canonical
        body = self.parsed()
        if body is None:
            return None
        dialect = self.route.dialect
        try:
            result = canon.canonicalize(body, dialect, options)
            self.canonical_bytes = canon.dumps(result.body, dialect)
        except (TypeError, ValueError, RecursionError) as exc:  # orjson.JSONEncodeError is a TypeError
            raise _NotCanonical(str(exc)) from exc
        self.canonical = result.body
        return self.canonical

    def body(self) -> dict[str, Any] | None:
        """The body as it goes upstream so far: shaped, else canonical, else as parsed."""
        if self.shaped is not None:
            return self.shaped
        return self.canonical if self.canonical is not None else self.parsed()

    def blocks(self, memo: BlockMemo | None = None, scope: bytes = b"") -> tuple[Block, ...]:
        """The prompt blocks of :meth:`body`, built once per body (``memo`` reuses the blocks of
        messages seen before under ``scope``). Raises what :func:`prompt_blocks` raises."""
        body = self.body()
        if body is None:
            return ()
        if self._blocks is None or self._blocks_of is not body:
            self._blocks = prompt_blocks(self.route.dialect, body, memo=memo, scope=scope)
            self._blocks_of = body
        return self._blocks

    def ask_usage(self) -> bool:
        """Ask upstream for the usage of a Chat stream the caller asked for without it
        (``stream_options.include_usage``, the caller's other stream options kept); call it before
        shaping, which serializes the body. ``False`` (nothing asked) before the canonical body is
        built, or when the caller's ``stream_options`` is not an object (the provider is left to
        answer that as it does)."""
        body = self.canonical
        options = None if body is None else body.get("stream_options")
        if body is None or not isinstance(options, dict | None):
            return False
        self.sent_fields = (("stream_options", {**(options or {}), "include_usage": True}),)
        return True

    def _sent(self, body: dict[str, Any]) -> dict[str, Any]:
        return {**body, **dict(self.sent_fields)} if self.sent_fields else body

    def serialize(self) -> None:
        """Serialize the shaped body, once, after the last stage that changes it (shaping); raises
        what the serializer raises (then the stage drops its change)."""
        if self.shaped is not None:
            self.shaped_bytes = canon.dumps(self._sent(self.shaped), self.route.dialect)

    def unshape(self) -> None:
        """Drop shaping's change: the request goes with its canonical body (and :attr:`sent_fields`)."""
        self.shaped = self.shaped_bytes = None
        self.added_headers = ()
        self._blocks = self._blocks_of = None

    def outgoing(self) -> Request:
        """The request as it goes upstream, with the body shaping serialized, else the canonical one."""
        if self.shaped_bytes is not None:
            return rebuild_request(self.request, self.shaped_bytes, self.added_headers)
        if self.sent_fields and self.canonical is not None:
            # Shaping left the body as it was: the canonical one goes, with the form fields.
            return rebuild_request(self.request, canon.dumps(self._sent(self.canonical), self.route.dialect))
        if self.canonical_bytes is None or self.canonical_bytes == self.content:
            return self.request
        # The canonical body is what goes upstream, so the provider's own prefix cache sees stable bytes.
        return rebuild_request(self.request, self.canonical_bytes)

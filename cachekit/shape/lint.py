"""Prefix lint: name the content that keeps a prompt's cached prefix from being reused, before the call.

A provider's prompt cache reads a request's prefix (tools → system → messages) only when it is
byte-identical to an earlier one. Two kinds of content break that:

* **volatile text** in the part meant to be shared across calls (tool definitions and the system
  section): timestamps, dates, UUIDs, request ids, hex digests, temporary paths, and whatever the
  user's own ``patterns`` match. :func:`lint_request` finds them in one request, with the block and
  the character offset;
* **a changed setting between calls of one conversation**: the tool order or tool set, the system
  prompt, ``tool_choice``, thinking, reasoning effort, the model, or earlier messages that were
  edited instead of appended to. :class:`PrefixLinter` remembers a digest of each conversation's
  previous call and reports what changed, in the providers' diagnostic vocabulary where it applies.

Each :class:`Finding` says where (the block path and its index in prefix order) and how to fix it.
Findings are logged (``cachekit.lint``, WARNING, once per conversation, code and place), handed to a
callback, or raised. A finding's ``match`` is prompt text: it goes to the callback only, never to a
log line or an exception message.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import orjson

from cachekit import _fork
from cachekit.errors import ConfigError, Finding, PrefixLintError
from cachekit.shape.blocks import Block, content_digest, prompt_blocks
from cachekit.shape.texts import TextMemo

__all__ = [
    "CHANGE_CODES",
    "Finding",
    "PrefixLintError",
    "PrefixLinter",
    "first_change",
    "lint_blocks",
    "lint_request",
]

logger = logging.getLogger("cachekit.lint")

Pattern = str | re.Pattern[str]

# ---------------------------------------------------------------------------------------------------
# The volatile-text patterns.
#
# One alternation, scanned once per line that could hold a match: at each position the first
# alternative that matches wins and the scan resumes after it, so a span is reported once (a timestamp
# is not also a date) and the more specific alternatives come first. Every alternative starts where no
# letter or digit precedes it (checked once, in front of them all: most positions are inside words) and
# ends where none follows, so nothing matches inside a longer word or number (a model snapshot such as
# ``gpt-4o-2024-08-06`` is not a date, a 9-digit number is not an epoch).

_MONTH = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
)
_WEEKDAY = (
    r"(?:mon(?:day)?|tue(?:s(?:day)?)?|wed(?:nesday)?|thu(?:r(?:s(?:day)?)?)?|fri(?:day)?"
    r"|sat(?:urday)?|sun(?:day)?)"
)
_DAY = r"(?:0?[1-9]|[12]\d|3[01])"
_YEAR = r"(?:19|20)\d\d"
_ORDINAL = r"(?:st|nd|rd|th)?"
# A blank that is not a newline: no pattern crosses a line (see _CANDIDATE).
_SP = r"[^\S\n]"
_ZONE = (
    rf"(?:{_SP}?(?:UTC|GMT|[ECMP][SD]T)(?![A-Za-z])|Z(?![A-Za-z])|{_SP}?[+-](?:[01]\d|2[0-3]):?[0-5]\d(?!\d))"
)
_MERIDIEM = rf"(?:{_SP}?[AaPp](?:\.[Mm]\.|[Mm](?![A-Za-z])))"  # AM, pm, a.m.
_CLOCK = rf"(?:[01]?\d|2[0-3]):[0-5]\d(?::[0-5]\d(?:[.,]\d{{1,9}})?)?{_MERIDIEM}?"
# What joins a date and a time of day: ``T`` (ISO 8601), blanks, a comma, or "at".
_JOIN = rf"(?:T|,?{_SP}+(?:at{_SP}+)?|,)"
_RIGHT = r"(?![0-9A-Za-z])"
_HEX = "[0-9A-Fa-f]"


def _dated(name: str, date: str) -> str:
    """A date alternative whose optional time of day (group ``<name>_t``) makes it a timestamp."""
    return rf"(?P<{name}>{date}(?P<{name}_t>{_JOIN}(?<!\d){_CLOCK}{_ZONE}?)?(?!\d))"


_ALTERNATIVES = [
    # Temporary directories: POSIX /tmp, /var/tmp, macOS /var/folders, /dev/shm, Windows Temp.
    r"(?P<temp>(?<![\w.~/-])(?:/private)?/(?:tmp|var/tmp|var/folders|dev/shm)/"
    r"[^\s\"'`<>|)\]},;]*[^\s\"'`<>|)\]},;.:]"
    r"|[A-Za-z]:[\\/]+(?:Users[\\/]+[^\\/\s\"']+[\\/]+AppData[\\/]+Local[\\/]+Temp"
    r"|Windows[\\/]+Temp)(?:[\\/]+[^\s\"'`<>|]*[^\s\"'`<>|.,:;])?)",
    # Not after "-" or ".": a model snapshot (gpt-4o-2024-08-06) or a version is not a date.
    _dated("iso", rf"(?<![-.]){_YEAR}(?P<iso_sep>[-/])(?:0[1-9]|1[0-2])(?P=iso_sep)(?:0[1-9]|[12]\d|3[01])"),
    _dated("mdy", rf"(?i:(?:{_WEEKDAY}\.?,?{_SP}+)?{_MONTH}\.?{_SP}+{_DAY}{_ORDINAL},?{_SP}+{_YEAR})"),
    _dated(
        "dmy",
        rf"(?i:(?:{_WEEKDAY}\.?,?{_SP}+)?{_DAY}{_ORDINAL}{_SP}+(?:of{_SP}+)?{_MONTH}\.?,?{_SP}+{_YEAR})",
    ),
    _dated("num", rf"(?<![-.]){_DAY}(?P<num_sep>[/.-]){_DAY}(?P=num_sep){_YEAR}(?![.-]\d)"),
    # A clock time alone is a timestamp only with seconds and a zone ("10:32:15 UTC"): without them it
    # is as likely a duration or opening hours.
    rf"(?P<clock>(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d{_ZONE})",
    # "request id: X" and its kin; X (group rid_v) must hold a digit, so "session id: none" is not one.
    rf"(?P<rid>(?i:(?:request|req|trace|correlation|session|conversation|message|msg)[ _-]?id)"
    rf"{_SP}*[:=#]?{_SP}*[\"'`]?(?P<rid_v>(?=[\w.:-]*\d)[A-Za-z0-9][\w.:-]{{4,}}[A-Za-z0-9]))",
    # Provider ids: Anthropic msg_/req_/toolu_, OpenAI chatcmpl-/resp_/call_; the id holds a digit.
    r"(?P<pid>(?:req|msg|resp|chatcmpl|cmpl|toolu|srvtoolu|call)[_-](?=[A-Za-z]*\d)[A-Za-z0-9]{10,}"
    rf"{_RIGHT})",
    rf"(?P<uuid>{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}{_RIGHT})",
    # 32+ hex characters with both digits and letters: an MD5/SHA digest, a token; a colour or a git
    # short sha is shorter, an all-letter word like "deadbeef..." has no digit.
    rf"(?P<hexd>(?:0x)?(?={_HEX}*[A-Fa-f])(?={_HEX}*\d){_HEX}{{32,}}{_RIGHT})",
    # Unix time in seconds (10 digits) or milliseconds (13), from 2017 (1.5e9) on.
    r"(?P<epoch>(?<!\.)(?:1[5-9]\d{8}|2\d{9})(?:\d{3})?(?:\.\d+)?(?!\w|\.\d))",
]
_VOLATILE = re.compile(r"(?<![0-9A-Za-z])(?:" + "|".join(_ALTERNATIVES) + ")")
# Every match holds a digit, or is a temporary path: a line (or JSON string) with neither is not
# scanned. (A date broken over two lines is therefore not found; prompts do not do that.)
_CANDIDATE = re.compile(r"\d|/(?:tmp|var|dev|private)/|[A-Za-z]:[\\/]")

# A value introduced as an example ("such as '2024-05-01'", "e.g. /tmp/x") is a constant of the prompt.
_EXAMPLE = re.compile(r"(?i:\b(?:e\.g\.|such as|for example|for instance|example:?|like))[\s:,'\"`(]*$")
_EXAMPLE_LOOKBACK = 24

_CODES = {
    "temp": "temp_path",
    "clock": "timestamp",
    "rid": "request_id",
    "pid": "request_id",
    "uuid": "uuid",
    "hexd": "hex_digest",
    "epoch": "timestamp",
}
_DATED = ("iso", "mdy", "dmy", "num")
# Numbers shaped like an epoch that are limits, not times: INT32_MAX and round figures.
_NOT_EPOCH = re.compile(r"2147483647|\d{4}0{6}|\d{7}0{6}")

# JSON escapes in a tool's canonical JSON, blanked to the same length so that a ``\n`` does not glue
# the next word to a pattern and offsets stay those of the block's text. ``\\`` and ``\/`` are kept:
# they are part of Windows paths.
_JSON_ESCAPE = re.compile(r"\\(?:u[0-9A-Fa-f]{4}|.)")
_TEXT_KINDS = frozenset({"text", "input_text", "output_text", "instructions"})
# Blocks whose text is encoded data (base64 images, files): nothing volatile to name in them.
_DATA_KINDS = frozenset({"image", "document", "input_image", "input_file", "input_audio", "image_url"})

_LABELS = {
    "timestamp": "a timestamp",
    "date": "a date",
    "uuid": "a UUID",
    "request_id": "a request id",
    "hex_digest": "a hex digest",
    "temp_path": "a temporary path",
    "custom": "a match of a custom pattern",
}

_FIXES = {
    "timestamp": "move the current time out of the system prompt and tools into the last user message, "
    "or round it to the day",
    "date": "a date changes the prefix once a day at most; if it is today's date, move it into the last "
    "user message",
    "uuid": "move per-request ids (UUIDs) out of the system prompt and tools into the last user message",
    "request_id": "drop request and message ids from the cached prefix; send them as metadata or in the "
    "last user message",
    "hex_digest": "a hash or token changes whenever its input does; move it after the cached prefix "
    "(the last user message) or drop it",
    "temp_path": "temporary paths differ per run; use a fixed (relative) path, or move it into the last "
    "user message",
    "custom": "move the matched content out of the tools and system prompt into the last user message",
    "tools_reordered": "build the tool list in a fixed order (sort it by name) so it is the same on "
    "every call",
    "tools_changed": "keep the tool set and definitions fixed for a conversation; steer tool use with "
    "tool_choice or instructions instead",
    "tool_choice_changed": "keep tool_choice fixed within a conversation: a change invalidates the "
    "cached messages",
    "thinking_changed": "keep the thinking settings fixed within a conversation: a change invalidates "
    "the cached messages",
    "effort_changed": "keep the reasoning effort fixed within a conversation",
    "model_changed": "each model has its own cache: keep one model per conversation",
    "system_changed": "keep the system prompt fixed; put what changes per call into the last user message",
    "messages_changed": "append to the conversation instead of editing earlier messages: an edit "
    "invalidates the cache from that message on",
}


# ---------------------------------------------------------------------------------------------------
# Static findings: one request's tools and system section.

_Hit = tuple[str, int, int]  # (code, start, end) in a block's text


def _digest(*parts: bytes) -> bytes:
    """An 8-byte digest of length-prefixed parts (so no two part lists collide by concatenation)."""
    hasher = hashlib.blake2b(digest_size=8)
    for part in parts:
        hasher.update(len(part).to_bytes(8, "big") + part)
    return hasher.digest()


# Tool names' digests: a pure function of the name, asked for every tool on every call.
_NAME_DIGESTS: TextMemo[bytes] = TextMemo(max_entries=4096, max_chars=256 << 10)


def _name_digest(name: str) -> bytes:
    found = _NAME_DIGESTS.get(name)
    if found is None:
        found = _digest(name.encode("utf-8", "surrogatepass"))
        _NAME_DIGESTS.put(name, found)
    return found


def _block_digest(block: Block) -> bytes:
    """``_digest(block.content)``: computed with the block by :func:`~cachekit.shape.blocks.prompt_blocks`
    (reused across calls for a conversation's unchanged prefix), else here."""
    return block.digest or content_digest(block.content)


def _blank_escape(match: re.Match[str]) -> str:
    escape = match.group()
    return escape if escape in ("\\\\", "\\/") else " " * len(escape)


def _builtin_hit(match: re.Match[str]) -> _Hit | None:
    name = match.lastgroup or ""
    if _EXAMPLE.search(match.string, max(0, match.start() - _EXAMPLE_LOOKBACK), match.start()):
        return None
    if name in _DATED:
        code = "timestamp" if match.group(f"{name}_t") is not None else "date"
        return (code, match.start(), match.end())
    if name == "rid":
        return ("request_id", match.start("rid_v"), match.end("rid_v"))
    if name == "epoch" and _NOT_EPOCH.fullmatch(match.group().split(".")[0]):
        return None
    return (_CODES[name], match.start(), match.end())


def _overlaps(spans: Sequence[_Hit], start: int, end: int) -> bool:
    return any(start < other_end and other_start < end for _, other_start, other_end in spans)


def _builtin_hits(subject: str, breaks: str) -> list[_Hit]:
    """The built-in patterns' spans, scanning only the segments that could hold one.

    A segment runs between two ``breaks`` characters: newlines, and in JSON text the quotes around
    strings. No pattern crosses one, and each reads as a non-word character, so a lookbehind (which
    sees before the segment) and a lookahead (which stops at its end) see what they would in the
    whole text.
    """
    hits: list[_Hit] = []
    pos = 0
    while (candidate := _CANDIDATE.search(subject, pos)) is not None:
        start = max(subject.rfind(char, 0, candidate.start()) for char in breaks) + 1
        ends = [found for found in (subject.find(char, candidate.end()) for char in breaks) if found >= 0]
        end = min(ends, default=len(subject))
        for match in _VOLATILE.finditer(subject, start, end):
            hit = _builtin_hit(match)
            if hit is not None:
                hits.append(hit)
        pos = end + 1
    return hits


def _scan(text: str, json_like: bool, custom: Sequence[re.Pattern[str]]) -> tuple[_Hit, ...]:
    """The volatile spans of one block's text, in order, none overlapping another."""
    subject = _JSON_ESCAPE.sub(_blank_escape, text) if json_like else text
    hits = _builtin_hits(subject, '\n"' if json_like else "\n")
    for pattern in custom:
        for match in pattern.finditer(subject):
            start, end = match.span()
            if end > start and not _overlaps(hits, start, end):
                hits.append(("custom", start, end))
    return tuple(sorted(hits, key=lambda hit: hit[1]))


def _compile(patterns: Iterable[Pattern]) -> tuple[re.Pattern[str], ...]:
    compiled = []
    for pattern in patterns:
        if isinstance(pattern, re.Pattern):
            compiled.append(pattern)
            continue
        try:
            compiled.append(re.compile(pattern))
        except re.error as error:
            raise ConfigError(
                f"lint pattern {pattern!r} is not a valid regular expression: {error}"
            ) from error
    return tuple(compiled)


class _Scanner:
    """Static findings for blocks, with the spans remembered per block text (a long system prompt is
    scanned once, not on every turn) in a :class:`~cachekit.shape.texts.TextMemo` keyed by the text
    itself: the texts of blocks reused from a conversation's previous call are found without
    hashing them again. Thread-safe."""

    def __init__(self, patterns: Iterable[Pattern] = (), *, cache_size: int = 1024) -> None:
        self._custom = _compile(patterns)
        # Prose and JSON text scan differently (JSON escapes are blanked): one memory for each. A
        # text over an eighth of max_chars (1 MiB of characters) is scanned on every call.
        self._texts: dict[bool, TextMemo[tuple[_Hit, ...]]] = {
            json_like: TextMemo(max_entries=cache_size, max_chars=8 << 20) for json_like in (False, True)
        }

    def hits(self, block: Block) -> tuple[_Hit, ...]:
        json_like = block.kind not in _TEXT_KINDS
        texts = self._texts[json_like]
        known = texts.get(block.text)
        if known is None:
            known = _scan(block.text, json_like, self._custom)
            texts.put(block.text, known)
        return known

    def findings(self, blocks: Sequence[Block]) -> list[Finding]:
        found: list[Finding] = []
        for index, block in enumerate(blocks):
            if block.section == "messages":
                break  # prefix order: tools and system come first
            if block.kind in _DATA_KINDS or not block.text:
                continue
            for code, start, end in self.hits(block):
                found.append(
                    Finding(
                        code,
                        f"{_LABELS[code]} in {block.where} at char {start}",
                        block.where,
                        index,
                        start,
                        block.text[start:end],
                        _FIXES[code],
                    )
                )
        return found


@lru_cache(maxsize=32)
def _scanner_for(patterns: tuple[Pattern, ...]) -> _Scanner:
    return _Scanner(patterns)


def _blocks_or_none(dialect: str, body: dict[str, Any]) -> tuple[Block, ...] | None:
    try:
        return prompt_blocks(dialect, body)
    except TypeError:
        # Not serializable as JSON (orjson: an integer beyond 64 bits): the provider will reject the
        # body anyway, and lint must never be the reason a request fails.
        logger.debug("prefix lint skipped: the body is not serializable as JSON")
        return None


def lint_request(dialect: str, body: dict[str, Any], *, patterns: Iterable[Pattern] = ()) -> list[Finding]:
    """Volatile content in the part of ``body``'s prefix meant to be shared: tools and system.

    Finds timestamps, dates, UUIDs, request ids, hex digests (32+ hex characters with digits and
    letters), temporary paths, and matches of ``patterns`` (extra regular expressions, code
    ``custom``), each with its block, path and character offset, in prefix order. A span is reported
    once, under its most specific code. Messages are not scanned: they are expected to differ.

    Raises :class:`ValueError` for an unknown ``dialect`` and :class:`~cachekit.errors.ConfigError`
    for a pattern that does not compile; a malformed body gives what can be read of it, never an error.
    """
    blocks = _blocks_or_none(dialect, body)
    if blocks is None:
        return []
    return lint_blocks(blocks, patterns=patterns)


def lint_blocks(blocks: Sequence[Block], *, patterns: Iterable[Pattern] = ()) -> list[Finding]:
    """:func:`lint_request`'s findings, for a request whose :func:`~cachekit.shape.blocks.prompt_blocks` the
    caller has already (the pipeline builds them once per request)."""
    return _scanner_for(tuple(patterns)).findings(blocks)


# ---------------------------------------------------------------------------------------------------
# Cross-call findings: what changed since the previous call of the same conversation.

# Settings that change between calls of a conversation, per dialect: (path in the body, code).
_SETTINGS: dict[str, tuple[tuple[tuple[str, ...], str], ...]] = {
    "anthropic": (
        (("tool_choice",), "tool_choice_changed"),
        (("thinking",), "thinking_changed"),
        (("output_config", "effort"), "effort_changed"),
    ),
    "openai_chat": ((("tool_choice",), "tool_choice_changed"), (("reasoning_effort",), "effort_changed")),
    "openai_responses": (
        (("tool_choice",), "tool_choice_changed"),
        (("reasoning", "effort"), "effort_changed"),
    ),
}
_DIALECT_FAMILY = {
    "anthropic_messages": "anthropic",
    "anthropic_count_tokens": "anthropic",
    "anthropic": "anthropic",
    "openai_chat": "openai_chat",
    "chat": "openai_chat",
    "openai_responses": "openai_responses",
    "responses": "openai_responses",
}
_LOGGED_PER_CONVERSATION = 256


def _field(body: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = body
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _value_digest(value: Any) -> bytes | None:
    if value is None:
        return None
    try:
        return _digest(orjson.dumps(value, option=orjson.OPT_SORT_KEYS))
    except TypeError:
        return _digest(repr(value).encode("utf-8", "surrogatepass"))


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """What the next call is compared with: digests only, never prompt text."""

    model: bytes | None
    tools: tuple[tuple[bytes, bytes], ...]  # (name, definition) per tool
    system: tuple[bytes, ...]
    settings: tuple[bytes | None, ...]
    messages: bytes  # 8-byte digests, one per messages block, concatenated


@dataclass(slots=True)
class _Conversation:
    snapshot: _Snapshot
    logged: set[tuple[str, str]]


@dataclass(slots=True)
class _Call:
    """One request as the comparison needs it: its blocks by section, with their prefix indexes."""

    body: dict[str, Any]
    family: str
    tools: list[tuple[int, Block]]
    system: list[tuple[int, Block]]
    messages: list[tuple[int, Block]]
    tool_names: list[str]

    @classmethod
    def of(cls, dialect: str, body: dict[str, Any], blocks: Sequence[Block]) -> _Call:
        sections: dict[str, list[tuple[int, Block]]] = {"tools": [], "system": [], "messages": []}
        for index, block in enumerate(blocks):
            sections[block.section].append((index, block))
        names = [block.name for _, block in sections["tools"]]
        family = _DIALECT_FAMILY.get(dialect, "anthropic")
        return cls(body, family, sections["tools"], sections["system"], sections["messages"], names)

    def snapshot(self) -> _Snapshot:
        def contents(blocks: list[tuple[int, Block]]) -> tuple[bytes, ...]:
            # _block_digest inlined: this runs over every block of the conversation on every call.
            return tuple(block.digest or content_digest(block.content) for _, block in blocks)

        names = (_name_digest(name) for name in self.tool_names)
        return _Snapshot(
            model=_value_digest(self.body.get("model")),
            tools=tuple(zip(names, contents(self.tools), strict=True)),
            system=contents(self.system),
            settings=tuple(_value_digest(_field(self.body, path)) for path, _ in _SETTINGS[self.family]),
            # One bytes object of 8-byte digests (not one object per block: long conversations are
            # kept by the thousand). A trailing assistant prefill is left out: the next call replaces
            # it with the whole answer, which is not a rewrite of history.
            messages=b"".join(contents(self.messages[: self._kept()])),
        )

    def _kept(self) -> int:
        """How many messages blocks count as history: all but a trailing assistant prefill's."""
        messages = self.body.get("messages")
        if not (isinstance(messages, list) and len(messages) > 1 and isinstance(messages[-1], dict)):
            return len(self.messages)
        if messages[-1].get("role") != "assistant":
            return len(self.messages)
        last = len(messages) - 1
        kept = len(self.messages)
        while kept and self.messages[kept - 1][1].message == last:
            kept -= 1
        return kept


def _first_difference(old: Sequence[object], new: Sequence[object]) -> int | None:
    """The first index where ``old`` and ``new`` differ (the shorter length if one extends the
    other), ``None`` when they are equal."""
    for index, (a, b) in enumerate(zip(old, new, strict=False)):
        if a != b:
            return index
    return None if len(old) == len(new) else min(len(old), len(new))


def _at(blocks: list[tuple[int, Block]], index: int, section: str) -> tuple[str, int | None]:
    """The path and prefix index of a section's ``index``-th block (the section name when it has no
    such block: something was removed at its end)."""
    if index < len(blocks):
        prefix_index, block = blocks[index]
        return block.where, prefix_index
    return section, None


def _changed(code: str, message: str, where: str, block: int | None, match: str | None = None) -> Finding:
    return Finding(code, message, where, block, None, match, _FIXES[code])


def _tool_findings(old: _Snapshot, new: _Snapshot, call: _Call) -> list[Finding]:
    if old.tools == new.tools:
        return []
    found: list[Finding] = []
    old_names = [name for name, _ in old.tools]
    new_names = [name for name, _ in new.tools]
    # Not None below: the lists differ.
    i = _first_difference(old.tools, new.tools) or 0
    if old_names != new_names and sorted(old_names) == sorted(new_names):
        i = _first_difference(old_names, new_names) or 0
        where, block = _at(call.tools, i, "tools")
        message = f"tools reordered since the previous call, from {where}"
        found.append(_changed("tools_reordered", message, where, block, call.tool_names[i]))
        # The same names in another order may also hide an edited definition.
        before = dict(old.tools)
        edited = [j for j, (name, digest) in enumerate(new.tools) if before.get(name) != digest]
        if not edited:
            return found
        i = edited[0]
    where, block = _at(call.tools, i, "tools")
    name = call.tool_names[i] if i < len(call.tool_names) else None
    message = f"tools changed since the previous call, at {where}"
    found.append(_changed("tools_changed", message, where, block, name))
    return found


def _system_findings(old: _Snapshot, new: _Snapshot, call: _Call) -> list[Finding]:
    i = _first_difference(old.system, new.system)
    if i is None:
        return []
    where, block = _at(call.system, i, "system")
    return [
        _changed("system_changed", f"system prompt changed since the previous call, at {where}", where, block)
    ]


def _setting_findings(old: _Snapshot, new: _Snapshot, call: _Call) -> list[Finding]:
    found = []
    for (path, code), before, now in zip(_SETTINGS[call.family], old.settings, new.settings, strict=True):
        if before != now:
            where = ".".join(path)
            found.append(_changed(code, f"{where} changed since the previous call", where, None))
    return found


def _chunks(digests: bytes) -> list[bytes]:
    return [digests[i : i + 8] for i in range(0, len(digests), 8)]


def _message_findings(old: _Snapshot, new: _Snapshot, call: _Call) -> list[Finding]:
    if new.messages.startswith(old.messages) or old.messages.startswith(new.messages):
        return []  # the fast path of every growing conversation
    i = _first_difference(_chunks(old.messages), _chunks(new.messages))
    if i is None:  # not reached: one of the two would extend the other
        return []
    where, block = _at(call.messages, i, "messages")
    return [
        _changed(
            "messages_changed",
            f"earlier messages changed since the previous call, at {where}",
            where,
            block,
        )
    ]


#: The codes of what changed since a conversation's previous call (the others name volatile content).
CHANGE_CODES = frozenset(
    {
        "model_changed",
        "tools_reordered",
        "tools_changed",
        "system_changed",
        "tool_choice_changed",
        "thinking_changed",
        "effort_changed",
        "messages_changed",
    }
)


def first_change(findings: Sequence[Finding]) -> str | None:
    """Why a conversation's prefix stopped matching its previous call, in prefix order: the first
    change's code and place (``messages_changed; at=messages.3``), or ``None``. Names no prompt text."""
    for finding in findings:
        if finding.code in CHANGE_CODES:
            return f"{finding.code}; at={finding.where}"
    return None


def _compare(old: _Snapshot, new: _Snapshot, call: _Call) -> list[Finding]:
    """What changed between two calls of one conversation, in prefix order."""
    found: list[Finding] = []
    if old.model != new.model:
        found.append(_changed("model_changed", "model changed since the previous call", "model", None))
    found += _tool_findings(old, new, call)
    found += _system_findings(old, new, call)
    found += _setting_findings(old, new, call)
    found += _message_findings(old, new, call)
    return found


def _named_conversation(body: dict[str, Any]) -> str | None:
    """The conversation a request names itself: OpenAI's ``prompt_cache_key`` (the key its cache
    routing groups a conversation by), else Anthropic's ``metadata.user_id`` (what an agent such as
    Claude Code sets per session)."""
    for path in (("prompt_cache_key",), ("metadata", "user_id")):
        value = _field(body, path)
        if isinstance(value, str) and value:
            return value
    return None


def _conversation_key(partition: bytes, dialect: str, call: _Call, explicit: bytes | str | None) -> bytes:
    if explicit is None:
        explicit = _named_conversation(call.body)
    if explicit is not None:
        given = explicit.encode("utf-8", "surrogatepass") if isinstance(explicit, str) else explicit
        return _digest(b"explicit", partition, given)
    first = call.messages[0][1].content if call.messages else b""
    # The system prompt is part of the identity: two assistants (personas) whose users both open
    # with "Hi" are two conversations. A changed system prompt is found by the static scan (what
    # makes it change) or, across calls, with an explicit ``conversation``.
    system = b"".join(_block_digest(block) for _, block in call.system)
    return _digest(b"derived", partition, dialect.encode(), system, first)


class PrefixLinter:
    """Prefix lint across the calls of each conversation: :func:`lint_request`'s findings plus what
    changed since the conversation's previous call.

    A conversation is identified by the name it gives itself (``conversation=`` to :meth:`check`, which
    the pipeline takes from the ``x-cachekit-conversation`` header; else the body's
    ``prompt_cache_key``; else its ``metadata.user_id``), or else by ``(partition, dialect, its system
    prompt, its first message block)``, deliberately not by model or tools, so that changes to those
    show. A named conversation shows a changed system prompt as ``system_changed`` too.

    Per conversation it keeps digests only (8-byte BLAKE2b of each tool's name and definition, each
    system block, each message block, the model and the settings), never prompt text, so a changed
    system block is located by block (``offset`` is ``None``). Conversations are kept in an LRU of
    ``capacity`` entries; static findings are cached per block text. Thread-safe.

    Args:
        patterns: extra regular expressions (``str`` or compiled) reported as ``custom``.
        on_finding: called with each finding of each call (every time, not once).
        raise_on: raise :class:`PrefixLintError` from :meth:`check` when a call has any finding. The
            raising call is not remembered (it was not sent), so the next one is compared with the
            call before it.
        capacity: how many conversations to remember.

    Findings are logged to ``cachekit.lint`` at WARNING once per (conversation, code, place), with the
    code, the place and the fix: never the matched text.
    """

    def __init__(
        self,
        *,
        patterns: Iterable[Pattern] = (),
        on_finding: Callable[[Finding], object] | None = None,
        raise_on: bool = False,
        capacity: int = 4096,
    ) -> None:
        if capacity < 1:
            raise ConfigError(f"capacity must be at least 1, got {capacity!r}")
        self._scanner = _Scanner(patterns)
        self._on_finding = on_finding
        self._raise_on = raise_on
        self._capacity = capacity
        self._conversations: OrderedDict[bytes, _Conversation] = OrderedDict()
        self._lock = _fork.lock(self)

    def check(
        self,
        dialect: str,
        body: dict[str, Any],
        *,
        partition: bytes = b"",
        conversation: bytes | str | None = None,
        blocks: Sequence[Block] | None = None,
    ) -> list[Finding]:
        """Lint one request (about to be sent) and remember it as its conversation's latest call.

        ``partition`` keeps tenants apart; ``conversation`` replaces the derived conversation id;
        ``blocks`` are the body's :func:`~cachekit.shape.blocks.prompt_blocks` when the caller has them.
        Returns the findings (an empty list for a stable conversation); raises
        :class:`PrefixLintError` instead when ``raise_on`` is set and there are any.
        """
        if blocks is None:
            blocks = _blocks_or_none(dialect, body)
            if blocks is None:
                return []
        call = _Call.of(dialect, body, blocks)
        snapshot = call.snapshot()
        key = _conversation_key(partition, dialect, call, conversation)
        findings = self._scanner.findings(blocks)
        with self._lock:
            known = self._conversations.get(key)
            if known is not None:
                self._conversations.move_to_end(key)
        if known is not None:
            findings += _compare(known.snapshot, snapshot, call)
        to_log = self._remember(key, known, snapshot, findings)
        for finding in to_log:
            logger.warning("prefix lint: %s; fix: %s", finding.place, finding.fix)
        if self._on_finding is not None:
            for finding in findings:
                self._on_finding(finding)
        if findings and self._raise_on:
            raise PrefixLintError(findings)
        return findings

    def _remember(
        self, key: bytes, known: _Conversation | None, snapshot: _Snapshot, findings: list[Finding]
    ) -> list[Finding]:
        """Store the call (unless it is about to be refused) and pick the findings not logged yet."""
        with self._lock:
            entry = self._conversations.get(key) or known or _Conversation(snapshot, set())
            if not (findings and self._raise_on):
                entry.snapshot = snapshot
                self._conversations[key] = entry
                self._conversations.move_to_end(key)
                while len(self._conversations) > self._capacity:
                    self._conversations.popitem(last=False)
            if len(entry.logged) > _LOGGED_PER_CONVERSATION:
                entry.logged.clear()
            fresh = []
            for finding in findings:
                place = (finding.code, finding.where)
                if place not in entry.logged:
                    entry.logged.add(place)
                    fresh.append(finding)
            return fresh

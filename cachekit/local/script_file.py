"""Script files: a team's own answers for the scripted engine, turn by turn, in a small JSON file.

``cachekit serve --script turns.json`` (or ``ScriptedEngine(script=load_script("turns.json"))``)
answers each request from the first entry of ``turns`` that matches it; a request no entry matches
gets the scripted engine's own rules. A file::

    {
      "turns": [
        {"turn": 0, "text": "I'll look.", "tool_calls": [
            {"name": "get_weather", "arguments": {"city": "Paris"}},
            {"name": "get_time"}
        ]},
        {"user": "(?i)thank", "text": "You're welcome."},
        {"turn": 3, "error": {"status": 529, "message": "Overloaded"}},
        {"text": "Done."}
      ]
    }

Matching, every key given must hold:

* ``turn``: which answer of the conversation this is, from 0 (the assistant turns before it, those a
  compaction summarized included: :attr:`cachekit.local.engine.Prompt.answer_index`); a number or a
  list of numbers;
* ``user``: a regular expression searched in the last user message.

An entry with neither matches every request (a default for the rest).

Answering, at least one of:

* ``text``: the answer's text;
* ``tool_calls``: calls in this order, each ``{"name": ...}`` with ``arguments`` (used as given),
  or without them arguments built from the offered tool's JSON schema (required properties; those
  ``optional`` names too, or all optional ones with ``"optional": true``); a freeform (``custom``)
  tool takes an ``input`` string;
* ``error``: ``{"status": 429, "message": "..."}`` answers that status with the provider's error body.

When the request turns reasoning on, the answer starts with thinking, as the engine's own answers do.
A malformed file raises :class:`cachekit.ScriptError` naming the line (JSON syntax) or the turn and the
field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cachekit.errors import ScriptedError, ScriptError
from cachekit.local.engine import Block, Prompt, Text, ToolCall, ToolSpec
from cachekit.local.scripted import call_of, custom_input, reasoning_of

__all__ = ["ScriptFile", "load_script"]

_MATCH_KEYS = frozenset({"turn", "user"})
_ANSWER_KEYS = frozenset({"text", "tool_calls", "error"})
_CALL_KEYS = frozenset({"name", "arguments", "optional", "input"})


@dataclass(frozen=True)
class _Call:
    name: str
    arguments: Mapping[str, Any] | None
    optional: bool | tuple[str, ...]
    input: str | None


@dataclass(frozen=True)
class _Entry:
    turns: frozenset[int] | None
    user: re.Pattern[str] | None
    text: str | None
    calls: tuple[_Call, ...]
    error: tuple[int, str] | None

    def matches(self, prompt: Prompt) -> bool:
        if self.turns is not None and prompt.answer_index not in self.turns:
            return False
        if self.user is not None:
            users = [turn.text for turn in prompt.turns if turn.role == "user"]
            return bool(users) and self.user.search(users[-1]) is not None
        return True


class ScriptFile:
    """A loaded script file: call it with a :class:`~cachekit.local.engine.Prompt` for the blocks of
    the first matching entry's answer (``None`` when none matches); an ``error`` entry raises
    :class:`cachekit.ScriptedError`. Give it to :class:`~cachekit.local.ScriptedEngine` as ``script``."""

    def __init__(self, entries: Sequence[_Entry], source: str = "<script>") -> None:
        self._entries = tuple(entries)
        self.source = source

    def __len__(self) -> int:
        return len(self._entries)

    def __call__(self, prompt: Prompt) -> Sequence[Block] | None:
        entry = next((entry for entry in self._entries if entry.matches(prompt)), None)
        if entry is None:
            return None
        if entry.error is not None:
            raise ScriptedError(*entry.error)
        blocks: list[Block] = [reasoning_of(prompt)] if prompt.reasoning else []
        if entry.text is not None:
            blocks.append(Text(entry.text))
        blocks.extend(_made(call, prompt.tools) for call in entry.calls)
        return blocks

    @classmethod
    def parse(cls, document: Any, source: str = "<script>") -> ScriptFile:
        """A script from its parsed JSON document; :class:`cachekit.ScriptError` when malformed."""
        if not isinstance(document, dict) or not isinstance(document.get("turns"), list):
            raise ScriptError(f'{source}: must be an object with a "turns" list')
        unknown = sorted(set(document) - {"turns", "about"})
        if unknown:
            raise ScriptError(f"{source}: unknown top-level key {unknown[0]!r} (expected 'turns')")
        return cls([_entry(raw, n, source) for n, raw in enumerate(document["turns"])], source)


def load_script(path: str | Path) -> ScriptFile:
    """Read a script file (see the module docstring); :class:`cachekit.ScriptError` when it is
    unreadable or malformed, naming the line or the turn."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScriptError(f"{source}: cannot read the script: {exc}") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScriptError(f"{source}: line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    return ScriptFile.parse(document, source)


def _made(call: _Call, tools: Sequence[ToolSpec]) -> ToolCall:
    """The call a script entry asks for, completed from the offered tool's definition."""
    tool = next((t for t in tools if t.name == call.name), None)
    if tool is None:  # not offered: made as written
        return ToolCall(call.name, dict(call.arguments or {}), input=call.input)
    if tool.kind == "custom":
        text = call.input if call.input is not None else custom_input(tool)
        return ToolCall(tool.name, {}, namespace=tool.namespace, input=text)
    if call.arguments is not None:
        return ToolCall(tool.name, dict(call.arguments), namespace=tool.namespace)
    return call_of(tool, call.optional)


def _entry(raw: Any, n: int, source: str) -> _Entry:
    where = f"{source}: turns[{n}]"
    if not isinstance(raw, dict):
        raise ScriptError(f"{where}: must be an object")
    unknown = sorted(set(raw) - _MATCH_KEYS - _ANSWER_KEYS)
    if unknown:
        known = ", ".join(sorted(_MATCH_KEYS | _ANSWER_KEYS))
        raise ScriptError(f"{where}: unknown key {unknown[0]!r} (known: {known})")
    if not _ANSWER_KEYS & set(raw):
        raise ScriptError(f"{where}: says no answer: give 'text', 'tool_calls' or 'error'")
    if "error" in raw and len(_ANSWER_KEYS & set(raw)) > 1:
        raise ScriptError(f"{where}: an 'error' answer has no 'text' or 'tool_calls'")
    text = raw.get("text")
    if text is not None and not isinstance(text, str):
        raise ScriptError(f"{where}: 'text' must be a string")
    calls = raw.get("tool_calls", [])
    if not isinstance(calls, list):
        raise ScriptError(f"{where}: 'tool_calls' must be a list")
    return _Entry(
        turns=_turns(raw.get("turn"), where),
        user=_pattern(raw.get("user"), where),
        text=text,
        calls=tuple(_call(call, f"{where}.tool_calls[{k}]") for k, call in enumerate(calls)),
        error=_error(raw["error"], where) if "error" in raw else None,
    )


def _turns(value: Any, where: str) -> frozenset[int] | None:
    if value is None:
        return None
    values = value if isinstance(value, list) else [value]
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        raise ScriptError(f"{where}: 'turn' must be a number >= 0 or a list of them")
    return frozenset(values)


def _pattern(value: Any, where: str) -> re.Pattern[str] | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ScriptError(f"{where}: 'user' must be a regular expression (a string)")
    try:
        return re.compile(value)
    except re.error as exc:
        raise ScriptError(f"{where}: 'user' is not a valid regular expression: {exc}") from None


def _call(raw: Any, where: str) -> _Call:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not raw["name"]:
        raise ScriptError(f"{where}: must be an object with a 'name'")
    unknown = sorted(set(raw) - _CALL_KEYS)
    if unknown:
        raise ScriptError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_CALL_KEYS))})")
    arguments = raw.get("arguments")
    if arguments is not None and not isinstance(arguments, dict):
        raise ScriptError(f"{where}: 'arguments' must be an object")
    optional = raw.get("optional", False)
    if not (
        isinstance(optional, bool)
        or (isinstance(optional, list) and all(isinstance(o, str) for o in optional))
    ):
        raise ScriptError(f"{where}: 'optional' must be true, false or a list of property names")
    given = raw.get("input")
    if given is not None and not isinstance(given, str):
        raise ScriptError(f"{where}: 'input' must be a string")
    return _Call(raw["name"], arguments, optional if isinstance(optional, bool) else tuple(optional), given)


def _error(raw: Any, where: str) -> tuple[int, str]:
    status = raw.get("status") if isinstance(raw, dict) else None
    if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status <= 599:
        raise ScriptError(f"{where}: 'error' must be an object with a 'status' from 400 to 599")
    message = raw.get("message", "Scripted error")
    if not isinstance(message, str):
        raise ScriptError(f"{where}: 'error.message' must be a string")
    return status, message

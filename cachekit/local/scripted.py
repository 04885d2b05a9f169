"""The ``scripted`` engine: no model, answers that are a deterministic function of the request.

Instant, so tests, demos and trace replays can run thousands of calls. The answer quotes a digest of
the request and its last user message, so identical requests get identical text and different
requests different text. Tool calls: when the request offers tools and its final message is a user
message that mentions "weather", or its tool choice forces a tool, the answer is one call of the
forced tool (else the first) with arguments built from the tool's JSON schema. Structured output is
answered with a JSON document built from the schema. ``max_tokens`` truncates the answer at that
many tokens of the engine's tokenizer; a stop sequence cuts it before the sequence.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeGuard

import orjson

from cachekit.local.engine import FinishReason, Generation, GenerationState, Prompt, Tokenizer, ToolCall

__all__ = ["ByteTokenizer", "ScriptedEngine"]

_TEXT_PIECE = 12  # characters per streamed text piece


class ByteTokenizer:
    """A tokenizer without vocabulary files: one token per 4 bytes of UTF-8 (a common estimate).

    Token ids are the bytes themselves, so decoding is exact (a cut inside a character drops it).
    """

    def encode(self, text: str) -> list[int]:
        """Four bytes per id; the last id carries its length so short tails decode exactly."""
        data = text.encode()
        return [
            int.from_bytes(data[i : i + 4], "little") | (len(data[i : i + 4]) << 32)
            for i in range(0, len(data), 4)
        ]

    def decode(self, tokens: list[int]) -> str:
        """The text of ``tokens``; an incomplete UTF-8 character at the end is dropped."""
        data = b"".join((token & 0xFFFFFFFF).to_bytes(4, "little")[: token >> 32] for token in tokens)
        return data.decode(errors="ignore")


class _Scripted(GenerationState):
    """A finished answer replayed in pieces (the :class:`Generation` protocol)."""

    def __init__(
        self,
        text: str,
        tool_call: ToolCall | None,
        finish: FinishReason,
        output_tokens: int,
        stop_sequence: str | None = None,
    ) -> None:
        self.tool_call = tool_call
        self._text = text
        self._finish = finish
        self._output_tokens = output_tokens
        self._stop_sequence = stop_sequence

    def __iter__(self) -> Iterator[str]:
        for i in range(0, len(self._text), _TEXT_PIECE):
            yield self._text[i : i + _TEXT_PIECE]


class ScriptedEngine:
    """An :class:`~cachekit.local.engine.Engine` with scripted, deterministic answers.

    Args:
        tokenizer: counts tokens (billing, ``max_tokens``); by default tiktoken's ``o200k_base``
            (the ``tokens`` extra; :class:`ByteTokenizer` needs nothing).
        reply_prefix: the first words of every text answer.
        context_window: the longest prompt accepted, or ``None`` for the model table's limit only.
    """

    name = "scripted"

    def __init__(
        self,
        tokenizer: Tokenizer | None = None,
        *,
        reply_prefix: str = "Scripted reply",
        context_window: int | None = None,
    ) -> None:
        if tokenizer is None:
            tokenizer = _default_tokenizer()
        self.tokenizer: Tokenizer = tokenizer
        self.reply_prefix = reply_prefix
        self.context_window = context_window

    def prompt_tokens(self, prompt: Prompt) -> int:
        """Tokens of every turn's text and of the tool definitions."""
        total = sum(len(self.tokenizer.encode(turn.text)) for turn in prompt.turns)
        for tool in prompt.tools:
            total += len(self.tokenizer.encode(tool.name + tool.description))
            total += len(self.tokenizer.encode(orjson.dumps(dict(tool.parameters)).decode()))
        return total

    def generate(self, prompt: Prompt) -> Generation:
        """The scripted answer to ``prompt``."""
        choice = prompt.tool_choice
        final = prompt.turns[-1] if prompt.turns else None
        final_user = final.text if final is not None and final.role == "user" else ""
        if (
            prompt.tools
            and choice.mode != "none"
            and (choice.mode in ("any", "tool") or "weather" in final_user.lower())
        ):
            tool = next((t for t in prompt.tools if t.name == choice.name), prompt.tools[0])
            arguments = example(dict(tool.parameters), tool.name, dict(tool.parameters))
            call = ToolCall(tool.name, arguments if isinstance(arguments, dict) else {})
            count = len(self.tokenizer.encode(orjson.dumps(dict(call.arguments)).decode()))
            return _Scripted("", call, "tool_use", max(1, count))

        if prompt.output_schema is not None:
            schema = dict(prompt.output_schema)
            document = (
                {"reply": f"{self.reply_prefix} {prompt.digest}"}
                if not schema
                else example(schema, "reply", schema)
            )
            text = orjson.dumps(document).decode()
        else:
            users = [turn for turn in prompt.turns if turn.role == "user"]
            last_user = " ".join(users[-1].text.split()) if users else ""
            snippet = last_user if len(last_user) <= 80 else last_user[:77] + "..."
            text = " ".join(f"{self.reply_prefix} {prompt.digest} to: {snippet or '(no text)'}".split())
        return self._finish(text, prompt)

    def _finish(self, text: str, prompt: Prompt) -> Generation:
        finish: FinishReason = "end"
        stop_sequence = None
        cuts = [(text.find(stop), stop) for stop in prompt.stop if stop and stop in text]
        if cuts:
            position, stop_sequence = min(cuts)
            text, finish = text[:position], "stop_sequence"
        tokens = self.tokenizer.encode(text)
        if prompt.max_tokens is not None and len(tokens) > prompt.max_tokens:
            text = self.tokenizer.decode(tokens[: prompt.max_tokens]).rstrip()
            tokens, finish, stop_sequence = self.tokenizer.encode(text), "length", None
        return _Scripted(text, None, finish, max(1, len(tokens)) if text else 0, stop_sequence)

    def close(self) -> None:
        """Nothing to release."""


def _default_tokenizer() -> Tokenizer:
    from cachekit.shape.tokens import encoding

    return encoding("o200k_base")


_MAX_ITEMS = 8  # an array gets minItems items, at most this many
_MAX_NODES = 2_000  # values in one generated document: a schema cannot make the answer explode


def example(schema: Any, name: str, root: Any) -> Any:
    """A deterministic value that satisfies the common JSON-schema keywords of ``schema``.

    Malformed keywords are ignored rather than trusted, and the document is bounded in size and depth.
    """
    budget = [_MAX_NODES]
    return _example(schema, name, root, 0, budget)


def _number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _example(schema: Any, name: str, root: Any, depth: int, budget: list[int]) -> Any:
    budget[0] -= 1
    if not isinstance(schema, dict) or depth > 12 or budget[0] < 0:
        return f"example {name}"
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, dict) else None
        return _example(target, name, root, depth + 1, budget)
    if "const" in schema:
        return schema["const"]
    if "default" in schema:
        return schema["default"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            usable = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")]
            return _example((usable or options)[0], name, root, depth + 1, budget)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    properties = schema.get("properties")
    if kind == "object" or (kind is None and isinstance(properties, dict)):
        fields = properties if isinstance(properties, dict) else {}
        return {str(key): _example(value, str(key), root, depth + 1, budget) for key, value in fields.items()}
    if kind == "array":
        wanted = schema.get("minItems")
        count = min(
            max(1, wanted if isinstance(wanted, int) and not isinstance(wanted, bool) else 1), _MAX_ITEMS
        )
        return [_example(schema.get("items", {}), name, root, depth + 1, budget) for _ in range(count)]
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum"))
        value = 1 if not _number(low) else low + (0 if "minimum" in schema else 1)
        high = schema.get("maximum")
        if _number(high) and value > high:
            value = high
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return _STRING_FORMATS.get(schema.get("format"), f"example {name}")


_STRING_FORMATS: dict[Any, str] = {
    "date-time": "2025-01-01T00:00:00Z",
    "date": "2025-01-01",
    "time": "00:00:00",
    "email": "user@example.com",
    "uri": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
}

"""The ``scripted`` engine: no model, answers that are a deterministic function of the request.

Instant, so tests, demos and trace replays can run thousands of calls. The answer quotes a digest of
the request and its last user message, so identical requests get identical text and different
requests different text. Answers take the shapes the providers' answers take, by these rules, in
this order (each keyed on the request, as the providers' own behaviour is):

* **Reasoning.** When the request turns reasoning on (Messages ``thinking``, Chat
  ``reasoning_effort``, Responses ``reasoning``; an effort of ``none`` leaves it off), the answer
  starts with a :class:`~cachekit.local.engine.Thinking` block with a signature, or, when the final
  user message holds Anthropic's documented test string :data:`REDACTED_THINKING_TRIGGER`, a
  :class:`~cachekit.local.engine.RedactedThinking` block.
* **Refusal.** A final user message holding Anthropic's documented test string
  :data:`REFUSAL_TRIGGER` is refused (:class:`~cachekit.local.engine.Refusal`).
* **Tool calls.** When the request offers tools (and its tool choice is not ``none``) and either its
  final user message mentions "weather" or names offered tools, or its tool choice forces one, the
  answer calls tools, with arguments built from each tool's JSON schema: the forced tool; else each
  tool the message names, in the order offered, after a short text saying so (text and calls in one
  answer); else the first tool. Without parallel tool use (``disable_parallel_tool_use``,
  ``parallel_tool_calls: false``) only the first call is made.
* **Structured output** is answered with a JSON document built from the schema.
* **Citations.** When the request offers documents or search results with citations enabled, the
  answer quotes the first passage of each (at most three) in text blocks that cite it, between
  uncited text, as the Messages API splits a cited answer.
* **Web search.** When the request offers the provider's web-search tool, the answer searches (a
  :class:`~cachekit.local.engine.WebSearch` of the last user message) and cites the pages found.
* Otherwise one text answer.

``max_tokens`` cuts the reasoning and text at that many tokens of the engine's tokenizer (tool calls
are never cut); a stop sequence cuts the text before the sequence and ends the answer there.

A test that needs another shape gives the engine a ``script``: a function of the
:class:`~cachekit.local.engine.Prompt` that returns the answer's blocks (or ``None`` for the rules
above). The blocks are cut by ``max_tokens`` and stop sequences like any answer.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any, Literal, TypeGuard

import orjson

from cachekit.local.engine import (
    Block,
    Citation,
    Document,
    FinishReason,
    Generation,
    GenerationState,
    Prompt,
    RedactedThinking,
    Refusal,
    Text,
    Thinking,
    Tokenizer,
    ToolCall,
    ToolSpec,
    WebSearch,
)

__all__ = ["REDACTED_THINKING_TRIGGER", "REFUSAL_TRIGGER", "ByteTokenizer", "Script", "ScriptedEngine"]

_TEXT_PIECE = 12  # characters per streamed text piece

#: Anthropic's documented test prompt that makes the API return redacted thinking.
REDACTED_THINKING_TRIGGER = (
    "ANTHROPIC_MAGIC_STRING_TRIGGER_REDACTED_THINKING_"
    + "46C9A13E193C177646C7398A98432ECCCE4C1253D5E2D82641AC0E52CC2876CB"
)
#: Anthropic's documented test prompt that makes the API refuse.
REFUSAL_TRIGGER = (
    "ANTHROPIC_MAGIC_STRING_TRIGGER_REFUSAL_1FAEFB6177B4672DEE07F9D3AFC62588CCD2631EDCF22E8CCC1FB35B501C9C86"
)

Script = Callable[[Prompt], Sequence[Block] | None]
"""A test's own answers: the blocks to answer a prompt with, or ``None`` for the engine's rules."""

_MAX_CITED = 3  # documents quoted in one cited answer
_SIGNATURE_DOMAIN = b"cachekit.local.scripted.signature.v1\x00"


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
    """A finished answer (the :class:`Generation` protocol): its blocks, and their text in pieces."""

    def __init__(
        self,
        blocks: tuple[Block, ...],
        finish: FinishReason,
        output_tokens: int,
        reasoning_tokens: int,
        stop_sequence: str | None = None,
    ) -> None:
        self.blocks = blocks
        self._finish = finish
        self._output_tokens = output_tokens
        self._reasoning_tokens = reasoning_tokens
        self._stop_sequence = stop_sequence

    def __iter__(self) -> Iterator[str]:
        # The answer's text, for code that reads a generation's text by iterating it.
        for block in self.blocks:
            if isinstance(block, Text):
                for i in range(0, len(block.text), _TEXT_PIECE):
                    yield block.text[i : i + _TEXT_PIECE]


class ScriptedEngine:
    """An :class:`~cachekit.local.engine.Engine` with scripted, deterministic answers.

    Args:
        tokenizer: counts tokens (billing, ``max_tokens``); by default tiktoken's ``o200k_base``
            (the ``tokens`` extra; :class:`ByteTokenizer` needs nothing).
        reply_prefix: the first words of every text answer.
        context_window: the longest prompt accepted, or ``None`` for the model table's limit only.
        script: answers of a test's own: called with each prompt, it returns the answer's blocks,
            or ``None`` to answer by the engine's rules (see the module docstring).
    """

    name = "scripted"

    def __init__(
        self,
        tokenizer: Tokenizer | None = None,
        *,
        reply_prefix: str = "Scripted reply",
        context_window: int | None = None,
        script: Script | None = None,
    ) -> None:
        if tokenizer is None:
            tokenizer = _default_tokenizer()
        self.tokenizer: Tokenizer = tokenizer
        self.reply_prefix = reply_prefix
        self.context_window = context_window
        self.script = script

    def prompt_tokens(self, prompt: Prompt) -> int:
        """Tokens of every turn's text and of the tool definitions."""
        total = sum(len(self.tokenizer.encode(turn.text)) for turn in prompt.turns)
        for tool in prompt.tools:
            total += len(self.tokenizer.encode(tool.name + tool.description))
            total += len(self.tokenizer.encode(orjson.dumps(dict(tool.parameters)).decode()))
        return total

    def generate(self, prompt: Prompt) -> Generation:
        """The scripted answer to ``prompt``."""
        scripted = self.script(prompt) if self.script is not None else None
        if scripted is not None:
            return self._finish(tuple(scripted), prompt)
        final_user, snippet = _last_user(prompt)
        blocks: list[Block] = []
        if prompt.reasoning:
            blocks.append(reasoning_of(prompt))
        if REFUSAL_TRIGGER in final_user:
            blocks.append(Refusal("I'm sorry, but I can't help with that request."))
        elif (calls := _tool_calls(prompt, final_user)) is not None:
            preamble, chosen = calls
            if preamble:
                blocks.append(Text(f"I'll call {' and '.join(tool.name for tool in chosen)}."))
            blocks.extend(call_of(tool) for tool in chosen)
        elif prompt.output_schema is not None:
            schema = dict(prompt.output_schema)
            document = (
                {"reply": f"{self.reply_prefix} {prompt.digest}"}
                if not schema
                else example(schema, "reply", schema)
            )
            blocks.append(Text(orjson.dumps(document).decode()))
        elif prompt.documents:
            blocks.extend(_cited(prompt.documents))
        elif prompt.web_search and prompt.tool_choice.mode != "none":  # no tool at all, server ones too
            blocks.extend(_searched(prompt, snippet))
        else:
            reply = f"{self.reply_prefix} {prompt.digest} to: {snippet or '(no text)'}"
            blocks.append(Text(" ".join(reply.split())))
        return self._finish(tuple(blocks), prompt)

    def close(self) -> None:
        """Nothing to release."""

    # -- internals ------------------------------------------------------------------------------

    def _tokens(self, block: Block) -> int:
        if isinstance(block, ToolCall):
            return max(1, len(self.tokenizer.encode(orjson.dumps(dict(block.arguments)).decode())))
        return len(self.tokenizer.encode(_text_of(block)))

    def _cut(self, block: Block, budget: int) -> Block | None:
        """``block`` cut to ``budget`` tokens (``None`` when nothing is left of it)."""
        text = self.tokenizer.decode(self.tokenizer.encode(_text_of(block))[:budget]).rstrip()
        if not text:
            return None
        if isinstance(block, Thinking):
            return Thinking(text, block.signature)
        if isinstance(block, Refusal):
            return Refusal(text)
        assert isinstance(block, Text)
        return Text(text, block.citations)

    def _finish(self, blocks: tuple[Block, ...], prompt: Prompt) -> Generation:
        """The answer as the request's limits leave it: cut at the first stop sequence in its text,
        then at ``max_tokens`` (reasoning and text only: tool calls are never cut)."""
        finish: FinishReason = "end"
        stop_sequence = None
        kept: list[Block] = []
        for block in blocks:
            if isinstance(block, Text):
                cuts = [(block.text.find(stop), stop) for stop in prompt.stop if stop and stop in block.text]
                if cuts:
                    position, stop_sequence = min(cuts)
                    kept.append(Text(block.text[:position], block.citations))
                    finish = "stop_sequence"
                    break
            kept.append(block)
        if prompt.max_tokens is not None:
            budget, limited = prompt.max_tokens, []
            for block in kept:
                cost = self._tokens(block)
                if isinstance(block, (ToolCall, WebSearch, RedactedThinking)) or cost <= budget:
                    limited.append(block)
                    budget -= cost
                    continue
                cut = self._cut(block, max(0, budget))
                if cut is not None:
                    limited.append(cut)
                finish, stop_sequence = "length", None
                break
            kept = limited
        # A text answer is one text block, even an empty one (max_tokens 0 pre-warms the cache).
        kept = [block for block in kept if not (isinstance(block, Text) and not block.text)] or (
            [Text("")] if all(isinstance(block, Text) for block in blocks) else []
        )
        if finish == "end":
            if any(isinstance(block, ToolCall) for block in kept):
                finish = "tool_use"
            elif any(isinstance(block, Refusal) for block in kept):
                finish = "refusal"
        reasoning = sum(self._tokens(b) for b in kept if isinstance(b, (Thinking, RedactedThinking)))
        output = sum(self._tokens(block) for block in kept)
        return _Scripted(tuple(kept), finish, output, reasoning, stop_sequence)


def _last_user(prompt: Prompt) -> tuple[str, str]:
    """The final turn's text when a user wrote it (else empty), and a short snippet of the last user
    message (whatever came after it)."""
    final = prompt.turns[-1] if prompt.turns else None
    final_user = final.text if final is not None and final.role == "user" else ""
    users = [turn for turn in prompt.turns if turn.role == "user"]
    last_user = " ".join(users[-1].text.split()) if users else ""
    return final_user, last_user if len(last_user) <= 80 else last_user[:77] + "..."


def reasoning_of(prompt: Prompt) -> Thinking | RedactedThinking:
    """The thinking an answer to ``prompt`` starts with when the request turns reasoning on: with
    its signature, or redacted when the final user message holds :data:`REDACTED_THINKING_TRIGGER`."""
    final_user, snippet = _last_user(prompt)
    if REDACTED_THINKING_TRIGGER in final_user:
        return RedactedThinking(_opaque(prompt, "redacted"))
    thinking = f"Considering request {prompt.digest}: {snippet or '(no text)'}"
    return Thinking(thinking, _opaque(prompt, thinking))


def _text_of(block: Block) -> str:
    """The text a block's tokens are counted on."""
    if isinstance(block, Text):
        return block.text
    if isinstance(block, Thinking):
        return block.thinking
    if isinstance(block, RedactedThinking):
        return block.data
    if isinstance(block, Refusal):
        return block.text
    if isinstance(block, WebSearch):
        return block.query
    return orjson.dumps(dict(block.arguments)).decode()


def _opaque(prompt: Prompt, text: str) -> str:
    """A deterministic stand-in for a provider's signature or encrypted reasoning (base64)."""
    digest = hashlib.sha256(_SIGNATURE_DOMAIN + prompt.salt + prompt.digest.encode() + text.encode()).digest()
    return base64.b64encode(digest + hashlib.sha256(digest).digest()).decode()


def _named(tool: ToolSpec, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(tool.name)}(?![\w-])", text) is not None


def _tool_calls(prompt: Prompt, final_user: str) -> tuple[bool, list[ToolSpec]] | None:
    """Whether the answer calls tools: (text says so first, the tools to call), else ``None``.

    Text comes first only when the model chose to call tools (``auto``): a forced tool choice makes
    the call the answer's start, as the API prefills it. ``allowed_tools`` narrows what may be called."""
    choice = prompt.tool_choice
    offered = [t for t in prompt.tools if choice.allowed is None or t.name in choice.allowed]
    if not offered or choice.mode in ("none", "web_search"):
        return None
    if choice.mode == "tool":
        forced = [t for t in offered if t.name == choice.name]
        if choice.namespace is not None:
            forced = [t for t in forced if t.namespace == choice.namespace] or forced
        return (False, forced[:1]) if forced else None
    named = [tool for tool in offered if _named(tool, final_user)]
    if named:
        return choice.mode == "auto", named if prompt.parallel_tool_calls else named[:1]
    if choice.mode == "any" or "weather" in final_user.lower():
        return False, [offered[0]]
    return None


def call_of(tool: ToolSpec, optional: bool | Collection[str] = False) -> ToolCall:
    """A call of ``tool`` a real tool accepts: for a function, arguments that satisfy its JSON schema
    (required properties; ``optional`` ones too when asked: ``True`` or their names); for a freeform
    tool, an input its format accepts (:func:`custom_input`)."""
    if tool.kind == "custom":
        return ToolCall(tool.name, {}, namespace=tool.namespace, input=custom_input(tool))
    parameters = dict(tool.parameters)
    arguments = example(parameters, tool.name, parameters, optional=optional)
    return ToolCall(tool.name, arguments if isinstance(arguments, dict) else {}, namespace=tool.namespace)


def custom_input(tool: ToolSpec) -> str:
    """The input of a freeform tool's call: plain text, or for a ``regex`` grammar the first of a few
    plain strings it accepts (a ``lark`` grammar is not read: a script gives such a tool its input)."""
    text = f"example input for {tool.name}"
    form: Mapping[str, Any] = tool.format or {}
    nested = form.get("grammar")
    grammar: Mapping[str, Any] = nested if isinstance(nested, dict) else form
    if form.get("type") == "grammar" and grammar.get("syntax") == "regex":
        definition = grammar.get("definition")
        if isinstance(definition, str):
            return _matching(definition, [text, tool.name], full=True) or text
    return text


def _passage(document: Document) -> tuple[str, int, int]:
    """The passage of a document the answer quotes: (its text, start, end) in the document's units."""
    if document.kind == "text":
        text = document.parts[0] if document.parts else ""
        end = text.find(". ")
        end = len(text) if end < 0 else end + 1
        return text[:end], 0, end
    return (document.parts[0] if document.parts else ""), 0, 1


# How a document of each kind is cited: characters, content blocks, search-result blocks.
_CITATION_KINDS: dict[str, Literal["char", "block", "search_result"]] = {
    "text": "char",
    "content": "block",
    "search_result": "search_result",
}


def _cited(documents: Sequence[Document]) -> list[Block]:
    blocks: list[Block] = [Text("According to the documents, ")]
    for n, document in enumerate(documents[:_MAX_CITED]):
        passage, start, end = _passage(document)
        kind = _CITATION_KINDS[document.kind]
        citation = Citation(
            # A character span quotes the document exactly; a block span quotes its blocks.
            passage if kind == "char" else " ".join(passage.split()),
            kind,
            index=document.index,
            start=start,
            end=end,
            title=document.title,
            url=document.source,
        )
        if n:
            blocks.append(Text(" and "))
        blocks.append(Text(" ".join(passage.split()) or "(empty)", (citation,)))
    blocks.append(Text("."))
    return blocks


def _searched(prompt: Prompt, snippet: str) -> list[Block]:
    query = snippet or "(no text)"
    pages = tuple((f"https://example.com/{prompt.digest}/{n}", f"Result {n} for {query}") for n in (1, 2))
    blocks: list[Block] = [WebSearch(query, pages), Text("Here is what I found: ")]
    for n, (url, title) in enumerate(pages):
        if n:
            blocks.append(Text(" "))
        found = f"page {n + 1} answers {query}."
        blocks.append(Text(found, (Citation(found, "web", title=title, url=url),)))
    return blocks


def _default_tokenizer() -> Tokenizer:
    from cachekit.shape.tokens import encoding

    return encoding("o200k_base")


_MAX_ITEMS = 8  # an array gets minItems items, at most this many
_MAX_NODES = 2_000  # values in one generated document: a schema cannot make the answer explode


def example(schema: Any, name: str, root: Any, *, optional: bool | Collection[str] = True) -> Any:
    """A deterministic value that satisfies ``schema``: its type (integers as integers), ``const``,
    ``enum``, ``format``, numeric bounds and ``multipleOf``, string lengths and ``pattern`` (a few
    plain candidates are tried), array lengths, required properties, ``$ref``, ``allOf`` (merged),
    ``anyOf`` / ``oneOf`` (the first that is not null).

    ``optional`` says which optional properties of the top-level object are filled too: all
    (``True``, what a structured-output document gets), none (``False``: a tool call's arguments,
    as a model leaves out what it has no value for), or those named. Nested objects get their
    required properties (all of them when ``optional`` is ``True``), and at least ``minProperties``.
    Malformed keywords are ignored rather than trusted, and the document is bounded in size and depth.
    """
    return _Example(root).value(schema, name, 0, optional)


def _number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _integer(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


class _Example:
    """One generated document: the schema's root (``$ref`` targets) and a budget of values."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.budget = _MAX_NODES

    def merged(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        """``schema`` with its ``$ref`` resolved and its ``allOf`` parts merged into it."""
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#") and depth < 12:
            target: Any = self.root
            for part in [p for p in ref[1:].split("/") if p]:
                key = part.replace("~1", "/").replace("~0", "~")
                target = target.get(key) if isinstance(target, dict) else None
            if isinstance(target, dict):
                rest = {key: value for key, value in schema.items() if key != "$ref"}
                schema = {**self.merged(target, depth + 1), **rest}
        parts = schema.get("allOf")
        if not isinstance(parts, list) or depth >= 12:
            return schema
        merged = {key: value for key, value in schema.items() if key != "allOf"}
        for raw in parts:
            if not isinstance(raw, dict):
                continue
            for key, value in self.merged(raw, depth + 1).items():
                if key == "properties" and isinstance(value, dict):
                    merged["properties"] = {**(merged.get("properties") or {}), **value}
                elif key == "required" and isinstance(value, list):
                    merged["required"] = [*(merged.get("required") or []), *value]
                else:
                    merged.setdefault(key, value)
        return merged

    def value(self, schema: Any, name: str, depth: int, optional: bool | Collection[str]) -> Any:
        self.budget -= 1
        if not isinstance(schema, dict) or depth > 12 or self.budget < 0:
            return f"example {name}"
        schema = self.merged(schema, depth)
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return schema["enum"][0]
        if "default" in schema:
            return schema["default"]
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list) and options:
                usable = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")]
                chosen = (usable or options)[0]
                base = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}
                return self.value(
                    {**base, **chosen} if isinstance(chosen, dict) else chosen, name, depth + 1, optional
                )
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind == "object" or (kind is None and isinstance(schema.get("properties"), dict)):
            return self.object(schema, depth, optional)
        if kind == "array":
            return self.array(schema, name, depth, optional)
        if kind in ("integer", "number"):
            return _numeric(schema, integer=kind == "integer")
        if kind == "boolean":
            return True
        if kind == "null":
            return None
        return _string(schema, name)

    def object(self, schema: dict[str, Any], depth: int, optional: bool | Collection[str]) -> dict[str, Any]:
        raw_fields = schema.get("properties")
        fields: dict[str, Any] = raw_fields if isinstance(raw_fields, dict) else {}
        raw_required = schema.get("required")
        required = [str(key) for key in raw_required] if isinstance(raw_required, list) else []
        wanted = schema.get("minProperties")
        least = wanted if _integer(wanted) else 0
        asked = set() if isinstance(optional, bool) else set(optional)
        chosen = [key for key in fields if key in required or optional is True or key in asked]
        for key in fields:  # minProperties: optional properties in order, as few as it takes
            if len(chosen) >= least:
                break
            if key not in chosen:
                chosen.append(key)
        inner = optional is True  # names asked for apply to the top level only
        document = {key: self.value(fields[key], key, depth + 1, inner) for key in fields if key in chosen}
        extra = schema.get("additionalProperties")
        for key in required:  # required but not described: the additional properties' schema
            if key not in document:
                document[key] = self.value(extra if isinstance(extra, dict) else {}, key, depth + 1, inner)
        return document

    def array(
        self, schema: dict[str, Any], name: str, depth: int, optional: bool | Collection[str]
    ) -> list[Any]:
        low, high = schema.get("minItems"), schema.get("maxItems")
        count = low if _integer(low) and low > 0 else 1
        if _integer(high):
            count = min(count, max(0, high))
        items = schema.get("items", {})
        # Distinct names keep string items distinct (uniqueItems).
        return [
            self.value(items, name if n == 0 else f"{name} {n + 1}", depth + 1, optional is True)
            for n in range(min(count, _MAX_ITEMS))
        ]


def _bound(schema: dict[str, Any], inclusive: str, exclusive: str) -> tuple[float | None, bool]:
    """A numeric bound and whether it is exclusive (draft 4's boolean form included)."""
    value, flag = schema.get(inclusive), schema.get(exclusive)
    if _number(flag):
        if _number(value):
            tighter = max(value, flag) if inclusive == "minimum" else min(value, flag)
            return tighter, tighter == flag
        return flag, True
    return (value, flag is True) if _number(value) else (None, False)


def _numeric(schema: dict[str, Any], *, integer: bool) -> int | float:
    low, low_open = _bound(schema, "minimum", "exclusiveMinimum")
    high, high_open = _bound(schema, "maximum", "exclusiveMaximum")
    step = (
        schema.get("multipleOf") if _number(schema.get("multipleOf")) and schema["multipleOf"] > 0 else None
    )

    def fits(value: float) -> bool:
        above = low is None or value > low or (value == low and not low_open)
        below = high is None or value < high or (value == high and not high_open)
        return above and below

    if fits(1):
        value: float = 1
    elif low is not None:
        gap = 1 if integer or high is None else min(1.0, (high - low) / 2)
        value = math.floor(low) + 1 if integer and (low_open or low != int(low)) else low
        if not integer and low_open:
            value = low + gap
    elif high is not None:
        value = math.ceil(high) - 1 if integer and (high_open or high != int(high)) else high
        if not integer and high_open:
            value = high - 1
    else:
        value = 1
    if step is not None:
        multiple = math.ceil(value / step) * step
        if not fits(multiple):
            multiple = math.floor(value / step) * step
        value = multiple
    return int(value) if integer else float(value)


_STRING_FORMATS: dict[Any, str] = {
    "date-time": "2025-01-01T00:00:00Z",
    "date": "2025-01-01",
    "time": "00:00:00Z",
    "duration": "P1D",
    "email": "user@example.com",
    "idn-email": "user@example.com",
    "hostname": "example.com",
    "idn-hostname": "example.com",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "uri": "https://example.com/",
    "uri-reference": "https://example.com/",
    "iri": "https://example.com/",
    "iri-reference": "https://example.com/",
    "uri-template": "https://example.com/{id}",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "json-pointer": "/example",
    "relative-json-pointer": "0",
    "regex": "^example$",
}
_CANDIDATES = ("a", "A", "0", "1", "abc", "ABC", "a1", "A1", "a-b", "a_b", "example", "x" * 8, "1" * 8)


def _matching(pattern: str, first: list[str], *, full: bool = False) -> str | None:
    """The first candidate ``pattern`` accepts (JSON Schema patterns search; a grammar matches whole)."""
    try:
        compiled = re.compile(pattern)
    except (re.error, RecursionError):
        return None
    test = compiled.fullmatch if full else compiled.search
    return next((candidate for candidate in (*first, *_CANDIDATES) if test(candidate)), None)


def _string(schema: dict[str, Any], name: str) -> str:
    text = _STRING_FORMATS.get(schema.get("format"), f"example {name}")
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        text = _matching(pattern, [text]) or text
    low, high = schema.get("minLength"), schema.get("maxLength")
    if isinstance(high, int) and not isinstance(high, bool) and len(text) > high:
        text = text[: max(0, high)]
    if isinstance(low, int) and not isinstance(low, bool) and len(text) < low:
        text = text + "x" * (low - len(text))
    return text

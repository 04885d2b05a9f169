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
import re
from collections.abc import Callable, Iterator, Sequence
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
        final = prompt.turns[-1] if prompt.turns else None
        final_user = final.text if final is not None and final.role == "user" else ""
        users = [turn for turn in prompt.turns if turn.role == "user"]
        last_user = " ".join(users[-1].text.split()) if users else ""
        snippet = last_user if len(last_user) <= 80 else last_user[:77] + "..."
        blocks: list[Block] = []
        if prompt.reasoning:
            blocks.append(self._reasoning(prompt, final_user, snippet))
        if REFUSAL_TRIGGER in final_user:
            blocks.append(Refusal("I'm sorry, but I can't help with that request."))
        elif (calls := _tool_calls(prompt, final_user)) is not None:
            preamble, chosen = calls
            if preamble:
                blocks.append(Text(f"I'll call {' and '.join(tool.name for tool in chosen)}."))
            blocks.extend(_call(tool) for tool in chosen)
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
        elif prompt.web_search:
            blocks.extend(_searched(prompt, snippet))
        else:
            reply = f"{self.reply_prefix} {prompt.digest} to: {snippet or '(no text)'}"
            blocks.append(Text(" ".join(reply.split())))
        return self._finish(tuple(blocks), prompt)

    def close(self) -> None:
        """Nothing to release."""

    # -- internals ------------------------------------------------------------------------------

    def _reasoning(self, prompt: Prompt, final_user: str, snippet: str) -> Block:
        if REDACTED_THINKING_TRIGGER in final_user:
            return RedactedThinking(_opaque(prompt, "redacted"))
        thinking = f"Considering request {prompt.digest}: {snippet or '(no text)'}"
        return Thinking(thinking, _opaque(prompt, thinking))

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
    the call the answer's start, as the API prefills it."""
    choice = prompt.tool_choice
    if not prompt.tools or choice.mode == "none":
        return None
    named = [tool for tool in prompt.tools if _named(tool, final_user)]
    if choice.mode == "tool":
        return False, [next((t for t in prompt.tools if t.name == choice.name), prompt.tools[0])]
    if named:
        return choice.mode == "auto", named if prompt.parallel_tool_calls else named[:1]
    if choice.mode == "any" or "weather" in final_user.lower():
        return False, [prompt.tools[0]]
    return None


def _call(tool: ToolSpec) -> ToolCall:
    arguments = example(dict(tool.parameters), tool.name, dict(tool.parameters))
    return ToolCall(tool.name, arguments if isinstance(arguments, dict) else {})


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

"""What an engine of the local backend is given and what it gives back.

The HTTP layer (:mod:`cachekit.local.backend`) parses each provider's request into one neutral
:class:`Prompt`; an :class:`Engine` turns it into a :class:`Generation`. Engines know nothing about
HTTP, SSE or the providers' JSON shapes, and the HTTP layer nothing about models.

An answer is either text produced as it is generated (iterate the generation), a single
:class:`ToolCall`, or a sequence of :data:`Block` values in the order the answer gives them: text
with its :class:`Citation` list, tool calls, :class:`Thinking` (with its signature),
:class:`RedactedThinking`, a :class:`Refusal`, a :class:`WebSearch`. :mod:`cachekit.local.wire`
renders each block the way each provider's API carries it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "Block",
    "Citation",
    "Document",
    "Engine",
    "Generation",
    "GenerationState",
    "Prompt",
    "RedactedThinking",
    "Refusal",
    "Text",
    "Thinking",
    "Tokenizer",
    "ToolCall",
    "ToolChoice",
    "ToolSpec",
    "Turn",
    "WebSearch",
]

FinishReason = Literal["end", "length", "stop_sequence", "tool_use", "refusal", "compaction"]


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call: its name, description and JSON-schema parameters.

    ``kind`` is ``function`` (called with a JSON object of arguments) or ``custom`` (OpenAI's freeform
    tools, called with a string; ``format`` is the tool's input format: ``{"type": "text"}`` or a
    grammar). ``namespace`` names the Responses ``namespace`` tool that declared it, which its calls
    carry.
    """

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=dict)
    kind: Literal["function", "custom"] = "function"
    namespace: str | None = None
    format: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class ToolCall:
    """A call of one tool with its arguments (a JSON object).

    A call of a freeform (``custom``) tool carries its string ``input`` instead (``arguments`` is then
    empty); ``namespace`` is the namespace of the tool called, when it was declared in one.
    """

    name: str
    arguments: Mapping[str, Any]
    id: str = ""
    namespace: str | None = None
    input: str | None = None

    @property
    def custom(self) -> bool:
        """Whether this calls a freeform (``custom``) tool."""
        return self.input is not None


@dataclass(frozen=True)
class Citation:
    """Where a passage of an answer comes from.

    ``kind`` says what is cited and how ``start`` / ``end`` count (end exclusive):

    * ``char``: characters of a plain-text document (``index``: its document index);
    * ``block``: content blocks of a custom-content document (``index``: its document index);
    * ``page``: pages of a PDF document, from 1 (``index``: its document index);
    * ``search_result``: content blocks of a search result (``index``: its search-result index,
      ``url``: its source);
    * ``web``: a page a web search found (``url``, ``title``).

    Anthropic's Messages API carries every kind; OpenAI's APIs annotate web citations only.
    """

    cited_text: str
    kind: Literal["char", "block", "page", "search_result", "web"]
    index: int = 0
    start: int = 0
    end: int = 0
    title: str | None = None
    url: str = ""


@dataclass(frozen=True)
class Text:
    """Answer text, with the citations that back it (the Messages API cites per text block)."""

    text: str
    citations: tuple[Citation, ...] = ()


@dataclass(frozen=True)
class Thinking:
    """The model's reasoning before it answers, and the opaque ``signature`` that vouches for it."""

    thinking: str
    signature: str


@dataclass(frozen=True)
class RedactedThinking:
    """Reasoning the provider withheld: only its opaque, encrypted ``data`` is returned."""

    data: str


@dataclass(frozen=True)
class Refusal:
    """The model declines to answer; ``text`` says so."""

    text: str


@dataclass(frozen=True)
class WebSearch:
    """A web search the provider ran for the answer (a server tool): the query and the pages found,
    as (url, title) pairs."""

    query: str
    results: tuple[tuple[str, str], ...] = ()
    id: str = ""


Block = Text | Thinking | RedactedThinking | Refusal | ToolCall | WebSearch
"""One part of an answer."""


@dataclass(frozen=True)
class Document:
    """A source the request offers for citation (the Messages API's ``document`` and ``search_result``
    blocks with citations enabled).

    ``index`` is its document index, or for a search result its search-result index, as the API
    counts them; ``parts`` holds its text (one part for a plain-text document, one per content block
    otherwise); ``source`` is a search result's source.
    """

    index: int
    kind: Literal["text", "content", "search_result"]
    parts: tuple[str, ...]
    title: str | None = None
    source: str = ""


@dataclass(frozen=True)
class ToolChoice:
    """How the request constrains tool use: ``auto``, ``any`` (some tool), ``none``, ``tool`` (the tool
    ``name``, of ``namespace`` when given) or ``web_search`` (the provider's search).

    ``allowed`` restricts the tools the model may call to these names (OpenAI's ``allowed_tools``);
    ``None`` allows every tool offered.
    """

    mode: Literal["auto", "any", "none", "tool", "web_search"] = "auto"
    name: str | None = None
    allowed: tuple[str, ...] | None = None
    namespace: str | None = None


@dataclass(frozen=True)
class Turn:
    """One message of the conversation, reduced to what a chat template renders.

    ``role`` is ``system``, ``user``, ``assistant`` or ``tool`` (a tool result; ``tool_call_id``
    names the call it answers). An assistant turn may carry ``tool_calls``.
    """

    role: Literal["system", "user", "assistant", "tool"]
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


@dataclass(frozen=True)
class Prompt:
    """One generation request, whatever API it arrived through.

    ``turns`` hold the system prompt first (when there is one), then the conversation in order.
    ``salt`` separates tenants in any cache the engine keeps (the backend derives it from the
    caller's credential); ``digest`` is a stable hash of the whole request, for engines whose
    answers are a deterministic function of it.
    """

    model: str
    turns: tuple[Turn, ...]
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoice = ToolChoice()
    output_schema: Mapping[str, Any] | None = None
    """A JSON schema the answer must satisfy (structured output); ``{}`` for free-form JSON."""
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    salt: bytes = b""
    digest: str = ""
    reasoning: bool = False
    """The request turns the model's reasoning on (Messages ``thinking``, Chat ``reasoning_effort``,
    Responses ``reasoning``; an effort of ``none`` turns it off)."""
    parallel_tool_calls: bool = True
    """Several tool calls may share one answer (Messages ``disable_parallel_tool_use``, OpenAI
    ``parallel_tool_calls``)."""
    documents: tuple[Document, ...] = ()
    """The sources the answer may cite."""
    web_search: bool = False
    """The request offers the provider's web-search tool."""
    compacted_turns: int = 0
    """Answers that came before a compaction the request replays (the compacted context stands in
    for them: ``turns`` holds only what came after it)."""

    @property
    def answer_index(self) -> int:
        """Which answer of the conversation this is, from 0: the assistant turns before it (those a
        compaction summarized included)."""
        return self.compacted_turns + sum(turn.role == "assistant" for turn in self.turns)


class Generation(Protocol):
    """An answer being produced.

    ``blocks``, when not empty, is the whole answer, in order (engines that know it at once give it
    so; iterating may still yield its text). Otherwise the answer is a tool call (``tool_call`` is
    set, iteration yields nothing) or text: iterating yields the text in pieces as it is generated.
    ``finish_reason``, ``output_tokens`` and ``reasoning_tokens`` are final once the iteration has
    ended. Engines written before ``blocks`` and ``reasoning_tokens`` existed still work: a
    generation without them is read as having none.
    """

    tool_call: ToolCall | None

    @property
    def blocks(self) -> Sequence[Block]:
        """The whole answer when the engine gives it at once, else empty."""
        ...

    def __iter__(self) -> Iterator[str]: ...

    @property
    def finish_reason(self) -> FinishReason:
        """Why the answer ended: ``end``, ``length`` (max tokens), ``stop_sequence`` or ``tool_use``."""
        ...

    @property
    def stop_sequence(self) -> str | None:
        """The stop sequence that ended the answer, if one did."""
        ...

    @property
    def output_tokens(self) -> int:
        """How many tokens the answer took (its reasoning included)."""
        ...

    @property
    def reasoning_tokens(self) -> int:
        """How many of ``output_tokens`` went to reasoning."""
        ...


class GenerationState:
    """The end state every :class:`Generation` reports, for engines to inherit.

    Subclasses set ``_finish``, ``_stop_sequence``, ``_output_tokens`` and ``_reasoning_tokens`` as
    they produce the answer (and ``blocks`` when they give the whole answer at once).
    """

    tool_call: ToolCall | None = None
    blocks: Sequence[Block] = ()
    _finish: FinishReason | None = None
    _stop_sequence: str | None = None
    _output_tokens: int = 0
    _reasoning_tokens: int = 0

    @property
    def finish_reason(self) -> FinishReason:
        """Why the answer ended; raises :class:`RuntimeError` before it has."""
        if self._finish is None:
            raise RuntimeError("the generation has not finished")
        return self._finish

    @property
    def stop_sequence(self) -> str | None:
        """The stop sequence that ended the answer, if one did."""
        return self._stop_sequence

    @property
    def output_tokens(self) -> int:
        """Tokens generated so far (the final count once the answer has ended)."""
        return self._output_tokens

    @property
    def reasoning_tokens(self) -> int:
        """Tokens of reasoning generated so far (the final count once the answer has ended)."""
        return self._reasoning_tokens


@runtime_checkable
class Tokenizer(Protocol):
    """Text to token ids and back."""

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text``."""
        ...

    def decode(self, tokens: list[int]) -> str:
        """The text of ``tokens``."""
        ...


@runtime_checkable
class Engine(Protocol):
    """A model (or a script) that answers prompts.

    ``tokenizer`` counts the tokens that the backend's cache accounting bills;
    ``context_window`` is the longest prompt plus answer it accepts, or ``None`` for no limit.
    ``generate`` may be called from several threads; an engine serializes what it must.
    """

    name: str
    tokenizer: Tokenizer
    context_window: int | None

    def prompt_tokens(self, prompt: Prompt) -> int:
        """How many tokens ``prompt`` occupies in this engine's context (rendered as it renders it)."""
        ...

    def generate(self, prompt: Prompt) -> Generation:
        """Start answering ``prompt``."""
        ...

    def close(self) -> None:
        """Release what the engine holds (persisting its caches where it keeps them on disk)."""
        ...

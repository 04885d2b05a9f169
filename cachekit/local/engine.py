"""What an engine of the local backend is given and what it gives back.

The HTTP layer (:mod:`cachekit.local.backend`) parses each provider's request into one neutral
:class:`Prompt`; an :class:`Engine` turns it into a :class:`Generation`. Engines know nothing about
HTTP, SSE or the providers' JSON shapes, and the HTTP layer nothing about models.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "Engine",
    "Generation",
    "GenerationState",
    "Prompt",
    "Tokenizer",
    "ToolCall",
    "ToolChoice",
    "ToolSpec",
    "Turn",
]

FinishReason = Literal["end", "length", "stop_sequence", "tool_use"]


@dataclass(frozen=True)
class ToolSpec:
    """A function the model may call: its name, description and JSON-schema parameters."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolCall:
    """A call of one tool with its arguments (a JSON object)."""

    name: str
    arguments: Mapping[str, Any]
    id: str = ""


@dataclass(frozen=True)
class ToolChoice:
    """How the request constrains tool use: ``auto``, ``any`` (some tool), ``none`` or ``tool`` (``name``)."""

    mode: Literal["auto", "any", "none", "tool"] = "auto"
    name: str | None = None


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


class Generation(Protocol):
    """An answer being produced.

    Either a tool call (``tool_call`` is set, iteration yields nothing) or text: iterating yields
    the text in pieces as it is generated. ``finish_reason`` and ``output_tokens`` are final once
    the iteration has ended.
    """

    tool_call: ToolCall | None

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
        """How many tokens the answer took."""
        ...


class GenerationState:
    """The end state every :class:`Generation` reports, for engines to inherit.

    Subclasses set ``_finish``, ``_stop_sequence`` and ``_output_tokens`` as they produce the answer.
    """

    tool_call: ToolCall | None = None
    _finish: FinishReason | None = None
    _stop_sequence: str | None = None
    _output_tokens: int = 0

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

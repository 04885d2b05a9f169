"""What may be answered from cache: every input a request can carry, per API dialect, in one table.

``docs/correctness.md`` is the written rule; this module is the same rule as data, and
:func:`classify` is the one function every stage asks. Each row names inputs by their path in the
request body and puts them in one of four classes:

* **key** — answer-determining and immutable (text, tool definitions, sampling parameters, uploaded
  file ids): part of the cache key, so a different value is a different request;
* **live** — fetched or resolved by the provider at call time (documents and images given by URL,
  server tools that search or fetch the web, run code or call a remote MCP server): the answer can
  change while the request bytes do not;
* **state** — server-side state the request names (a Responses ``conversation``, a
  ``previous_response_id`` chain, an unpinned stored prompt, a reused container, ...): the answer
  depends on state outside the request, and a replay would skip what the caller asked the server to
  do (append a turn, run a background job);
* **neutral** — answer-neutral (metadata, stream flags, prompt-cache hints): named with the reason it
  is safe, and whether it stays in the key to be safe or is left out.

A request with a live or state input is never answered from the cache, never coalesced with an
identical one and never stored: it goes upstream as a bypass whose ``x-cachekit-bypass-reason`` names
each reason (``live-data:url``, ``server-state:conversation``, ...). The one exception is the caller's
explicit opt-in for URLs (``url_ttl``): content given by URL is then taken as unchanged for that many
seconds (:data:`URL_REASONS`). Live server tools stay bypassed even then: what they read is chosen by
the model at answer time, which no caller can vouch for.

Paths: the keys from the top of the body joined by ``.``; a list is transparent (its items share the
list's path); an object with a string ``type`` adds it in angle brackets
(``messages.content<image>.source<url>``). In a pattern, ``*`` is any run of characters within one
segment (a map's keys: ``prompt.variables.*``), ``**`` any number of segments, ``<a|b>`` one of these
types (an empty alternative: no ``type`` at all), a name without ``<...>`` matches whatever type the
object has, ``a|b`` outside brackets is either pattern, and a pattern ending in ``.**`` names a whole
subtree. A live or state row names each position explicitly (``**`` only at its end), because
:func:`classify` follows the rows' own paths through a body instead of visiting every key of it;
:attr:`Field.anywhere` says what a row must cover, and ``tests/providers/test_classification.py``
checks it against both installed SDKs' request types, as it checks that every field they define is
decided here on purpose. A field no row names is answer-determining: fields are opted *out* of the
key.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, Literal

from cachekit._types import Dialect

__all__ = [
    "FIELDS",
    "KINDS",
    "REASONS",
    "UNKEYED_FIELDS",
    "URL_REASONS",
    "Field",
    "Kind",
    "Verdict",
    "alternatives",
    "classify",
    "compile_pattern",
    "segment",
    "server_state",
]

#: The class of an input: see the module's docstring.
Kind = Literal["key", "live", "state", "neutral"]
KINDS: Final[tuple[Kind, ...]] = ("key", "live", "state", "neutral")

Body = Mapping[str, Any]
#: A row's condition, on the value at its path and the object that holds it.
When = Callable[[Any, Mapping[str, Any]], bool]


def _present(value: Any, _: Mapping[str, Any]) -> bool:
    """Set and not null (an id, or an object naming one)."""
    return value is not None


@dataclass(frozen=True, slots=True)
class Field:
    """One row of the table: the inputs at ``pattern`` in ``dialects`` are of class ``kind``."""

    dialects: tuple[Dialect, ...]
    pattern: str
    kind: Kind
    #: Why the row's class is right (shown in ``docs/correctness.md``).
    why: str
    #: For live and state rows: the bypass reason token (``live-data:url``, ``server-state:...``).
    reason: str | None = None
    #: For live and state rows: whether the value at the path makes the request depend on it.
    when: When = _present
    #: When :attr:`when` applies, in words for the docs (``"a URL"``); empty: whenever it is set.
    condition: str = ""
    #: For live and state rows: a ``**`` pattern of every position such an input can take; the
    #: classification test fails when one of the SDKs' positions is missing from :attr:`pattern`.
    anywhere: str = ""
    #: For neutral rows: kept in the key (to be safe) rather than left out.
    keyed: bool = True
    #: Not in the official SDKs' types: the compatible provider that documents it, and where.
    provider: str | None = None

    def __post_init__(self) -> None:
        bypass = self.kind in ("live", "state")
        if bypass != (self.reason is not None):
            raise ValueError(f"{self.pattern}: live and state rows (only) carry a reason token")
        if not self.keyed and self.kind != "neutral":
            raise ValueError(f"{self.pattern}: only a neutral field may be left out of the key")
        if bypass and any("**" in part.removesuffix(".**") for part in alternatives(self.pattern)):
            raise ValueError(f"{self.pattern}: a live or state row names its positions (** only at the end)")


@dataclass(frozen=True, slots=True)
class Verdict:
    """What :func:`classify` found in one request: its bypass reasons, in the table's order."""

    reasons: tuple[str, ...] = ()

    def remaining(self, *, urls_vouched: bool) -> tuple[str, ...]:
        """The reasons left when the caller vouches (or not) for content given by URL."""
        if not urls_vouched:
            return self.reasons
        return tuple(reason for reason in self.reasons if reason not in URL_REASONS)

    @property
    def fetches_urls(self) -> bool:
        """Whether the provider fetches content the request gives by URL."""
        return any(reason in URL_REASONS for reason in self.reasons)


#: Reasons the caller's ``url_ttl`` opt-in lifts: the content behind a URL the caller names is
#: something the caller can know to be stable (a versioned asset, its own storage).
URL_REASONS: Final[frozenset[str]] = frozenset({"live-data:url"})


# -- patterns --------------------------------------------------------------------------------------


def segment(key: str, value: Any) -> str:
    """A path segment: the key, and the value's ``type`` in angle brackets when it is an object with
    a plain string ``type`` (one that cannot be mistaken for path syntax)."""
    kind = _type_of(value)
    return f"{key}<{kind}>" if kind is not None else key


def _type_of(value: Any) -> str | None:
    if type(value) is dict:
        kind = value.get("type")
        if type(kind) is str and kind and "." not in kind and "<" not in kind and ">" not in kind:
            return kind
    return None


def alternatives(pattern: str) -> list[str]:
    """``pattern`` split at each ``|`` outside angle brackets."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(pattern):
        depth += {"<": 1, ">": -1}.get(char, 0)
        if char == "|" and depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
    return [*parts, pattern[start:]]


def _glob(text: str) -> str:
    return "".join("[^.<>]*" if char == "*" else re.escape(char) for char in text)


def _split_segment(part: str) -> tuple[str, list[str] | None]:
    """A pattern segment's name and its type choices (``None``: any type or none)."""
    match = re.fullmatch(r"([^<>]+)(?:<([^<>]*)>)?", part)
    if match is None:
        raise ValueError(f"not a path pattern segment: {part!r}")
    name, types = match.groups()
    return name, None if types is None else types.split("|")


def _segment_regex(part: str) -> str:
    name, choices = _split_segment(part)
    regex = _glob(name)
    if choices is None:
        return regex + "(?:<[^.<>]*>)?"
    typed = "|".join(_glob(choice) for choice in choices if choice)
    if not typed:
        return regex  # <>: no type at all
    return regex + f"(?:<(?:{typed})>)" + ("?" if "" in choices else "")


def _path_regex(pattern: str) -> str:
    pieces: list[str] = []
    leading_any = False
    for i, part in enumerate(pattern.split(".")):
        if part == "**":
            if i == 0:
                pieces.append(r"(?:[^.]+\.)*")
                leading_any = True
            else:
                pieces.append(r"(?:\.[^.]+)*")
            continue
        if i > 0 and not (leading_any and i == 1):
            pieces.append(r"\.")
        pieces.append(_segment_regex(part))
    return "".join(pieces)


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """The regular expression that matches the paths ``pattern`` names (see the module docstring)."""
    return re.compile("|".join(f"(?:{_path_regex(part)})" for part in alternatives(pattern)))


# -- conditions over a value and the object holding it --------------------------------------------

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def _fetched(value: Any, _: Mapping[str, Any]) -> bool:
    """A URL the provider fetches: any ``scheme://`` (a ``data:`` URL, or bare base64, is the content)."""
    return isinstance(value, str) and _SCHEME.match(value) is not None


def _true(value: Any, _: Mapping[str, Any]) -> bool:
    return value is True


def _a_string(value: Any, _: Mapping[str, Any]) -> bool:
    return isinstance(value, str)


def _unpinned(value: Any, _: Mapping[str, Any]) -> bool:
    """A stored object (a skill) without a pinned version resolves to whichever is current."""
    return isinstance(value, Mapping) and value.get("version") in (None, "latest")


def _unpinned_prompt(value: Any, _: Mapping[str, Any]) -> bool:
    return isinstance(value, Mapping) and value.get("version") is None


def _id_only(value: Any, holder: Mapping[str, Any]) -> bool:
    """An input item given by ``id`` alone (its ``type`` is optional): read from the provider's store."""
    return value is not None and "role" not in holder and holder.get("type") is None


def _search_model(value: Any, _: Mapping[str, Any]) -> bool:
    """Chat models that search the web on every call (``gpt-4o-search-preview``, ``...-search-api``)."""
    return isinstance(value, str) and ("-search-preview" in value or "-search-api" in value)


def _builtin_name(value: Any) -> str | None:
    function = value.get("function") if isinstance(value, Mapping) else None
    name = function.get("name") if isinstance(function, Mapping) else None
    return name if isinstance(name, str) else None


def _kimi_search(value: Any, _: Mapping[str, Any]) -> bool:
    """Kimi's built-in web search: ``{"type": "builtin_function", "function": {"name": "$web_search"}}``."""
    return _builtin_name(value) == "$web_search"


def _other_builtin(value: Any, _: Mapping[str, Any]) -> bool:
    return _builtin_name(value) != "$web_search"


# -- the rows --------------------------------------------------------------------------------------

_ANTHROPIC: Final[tuple[Dialect, ...]] = ("anthropic_messages", "anthropic_count_tokens")
_MESSAGES: Final[tuple[Dialect, ...]] = ("anthropic_messages",)
_COUNT: Final[tuple[Dialect, ...]] = ("anthropic_count_tokens",)
_CHAT: Final[tuple[Dialect, ...]] = ("openai_chat",)
_RESPONSES: Final[tuple[Dialect, ...]] = ("openai_responses",)
_OPENAI: Final[tuple[Dialect, ...]] = ("openai_chat", "openai_responses")
_ALL: Final[tuple[Dialect, ...]] = _ANTHROPIC + _OPENAI


def _key(dialects: tuple[Dialect, ...], pattern: str, why: str, **extra: Any) -> Field:
    return Field(dialects, pattern, "key", why, **extra)


def _neutral(dialects: tuple[Dialect, ...], pattern: str, why: str, **extra: Any) -> Field:
    return Field(dialects, pattern, "neutral", why, **extra)


def _live(dialects: tuple[Dialect, ...], pattern: str, reason: str, why: str, **extra: Any) -> Field:
    return Field(dialects, pattern, "live", why, reason="live-data:" + reason, **extra)


def _state(dialects: tuple[Dialect, ...], pattern: str, reason: str, why: str, **extra: Any) -> Field:
    return Field(dialects, pattern, "state", why, reason="server-state:" + reason, **extra)


_URL_WHY = "fetched by the provider on each call: the page or file can change behind the same URL"
_URL: Final[dict[str, Any]] = {
    "when": _fetched,
    "condition": "a `scheme://` URL (a `data:` URL is the content)",
}
_CALLER_RUNS = "a tool the caller's code runs: its result comes back in a later request"
_SEARCHES_REQUEST = "searches the tool definitions of this request (`defer_loading`), nothing outside it"
_CODE_RUNS = (
    "code runs at call time (the clock, randomness, the sandbox's state), and the answer names the "
    "container and files it made, which expire"
)

# Anthropic Messages (and count_tokens, which reads the same prompt but runs no tool).

#: Where an Anthropic image or document sits: in a message, in a tool result, inside a document's
#: content, and in a web fetch result sent back.
_ANTHROPIC_SOURCES = (
    "messages.content<image|document>.source<url>.**"
    "|messages.content<document>.source<content>.content<image>.source<url>.**"
    "|messages.content<tool_result>.content<image|document>.source<url>.**"
    "|messages.content<tool_result>.content<document>.source<content>.content<image>.source<url>.**"
    "|messages.content<web_fetch_tool_result>.content<web_fetch_result>.content<document>.source<url>.**"
    "|messages.content<web_fetch_tool_result>.content<web_fetch_result>.content<document>"
    ".source<content>.content<image>.source<url>.**"
)


def _anthropic_tools(kinds: str) -> str:
    """Where an Anthropic tool definition sits: ``tools``, and the definitions a ``tool_addition``
    block adds mid-conversation (also inside a ``compaction`` block)."""
    return (
        f"tools<{kinds}>.**"
        f"|messages.content<tool_addition>.tool<tool_definition>.definition<{kinds}>.**"
        f"|messages.content<compaction>.tool_changes<tool_addition>.tool<tool_definition>.definition<{kinds}>.**"
    )


def _anthropic_anywhere(kinds: str) -> str:
    return f"**.tools<{kinds}>.**|**.definition<{kinds}>.**"


_ANTHROPIC_ROWS: Final[tuple[Field, ...]] = (
    _state(
        _MESSAGES, "thread.**", "thread", "the conversation is held by the server (`continue` resumes it)"
    ),
    _state(
        _MESSAGES,
        "container",
        "container",
        "a code-execution container reused by id keeps the files earlier requests left in it",
        when=_a_string,
        condition="an id (a string)",
    ),
    _state(_MESSAGES, "container.id", "container", "a container reused by id keeps its files"),
    _state(
        _MESSAGES,
        "container.skills",
        "skills",
        "a skill at `latest` (the default) changes when a new version is published",
        when=_unpinned,
        condition="no `version`, or `latest`",
    ),
    _state(
        _MESSAGES,
        "diagnostics.**",
        "diagnostics",
        "the answer reports how this call's prompt cache compares with a previous message's",
    ),
    _live(
        _ANTHROPIC,
        _ANTHROPIC_SOURCES,
        "url",
        _URL_WHY + " (images and documents in messages, tool results and documents)",
        anywhere="**.source<url>.**",
    ),
    _live(
        _MESSAGES,
        _anthropic_tools("web_search_*"),
        "web_search",
        "the provider searches the web for the model",
        anywhere=_anthropic_anywhere("web_search_*"),
    ),
    _live(
        _MESSAGES,
        _anthropic_tools("web_fetch_*"),
        "web_fetch",
        "the provider fetches the pages the model names",
        anywhere=_anthropic_anywhere("web_fetch_*"),
    ),
    _live(
        _MESSAGES,
        _anthropic_tools("code_execution_*"),
        "code_execution",
        _CODE_RUNS,
        anywhere=_anthropic_anywhere("code_execution_*"),
    ),
    _live(
        _ANTHROPIC,
        "mcp_servers.**",
        "mcp",
        "a remote MCP server's live answers and tool list (the tool list counts in count_tokens too)",
    ),
    _live(
        _ANTHROPIC,
        _anthropic_tools("mcp_toolset"),
        "mcp",
        "tools served by a remote MCP server",
        anywhere=_anthropic_anywhere("mcp_toolset"),
    ),
    _key(
        _COUNT,
        _anthropic_tools("web_search_*|web_fetch_*|code_execution_*"),
        "counting tokens reads a server tool's definition; the tool does not run",
    ),
    _key(_ANTHROPIC, "model", "which model answers"),
    _key(_MESSAGES, "max_tokens|stop_sequences", "where the answer stops"),
    _key(
        _ANTHROPIC,
        "temperature|top_p|top_k",
        "sampling: changes the answer",
        provider="anthropic: sampling parameters the 2.x SDK does not type (sent with `extra_body`)",
    ),
    _key(_ANTHROPIC, "system|system<text>.**", "the system prompt"),
    _key(
        _ANTHROPIC,
        "messages.role|messages.clear_at|messages.output_config.**",
        "who says it, and for how long",
    ),
    _key(_ANTHROPIC, "messages.content", "the message's text (the string form)"),
    _key(
        _ANTHROPIC,
        "messages.content<text|thinking|redacted_thinking|compaction|fallback>.**",
        "text, earlier thinking and summaries the model reads (thinking is signed: it cannot change)",
    ),
    _key(
        _ANTHROPIC,
        "**.content<image|document|search_result>.**",
        "an image or document given inline (base64, text) or by the id of an upload, which never "
        "changes (a `url` source is live, above)",
    ),
    _key(_ANTHROPIC, "messages.content<container_upload>.**", "a file uploaded to the container, by its id"),
    _key(
        _ANTHROPIC,
        "messages.content<tool_use|server_tool_use|mcp_tool_use>.**",
        "an earlier tool call, sent back whole (its `input` is the model's JSON)",
    ),
    _key(
        _ANTHROPIC,
        "messages.content<tool_result|*_tool_result|mcp_tool_listing>.**",
        "a tool's result (the caller's, or a server tool's from an earlier turn), sent back whole",
    ),
    _key(_ANTHROPIC, _anthropic_tools("|custom|bash_*|text_editor_*|computer_*|memory_*"), _CALLER_RUNS),
    _key(
        _ANTHROPIC,
        _anthropic_tools("browser_toolset_*|computer_toolset_*"),
        "a family of tools the caller's code runs: their results come back in a later request",
    ),
    _key(_ANTHROPIC, _anthropic_tools("tool_search_tool_*"), _SEARCHES_REQUEST),
    _key(
        _ANTHROPIC,
        _anthropic_tools("advisor_*"),
        "another model advises inside the call: sampled like the answer itself, nothing fetched",
    ),
    _key(
        _ANTHROPIC,
        "messages.content<tool_addition|tool_removal>.**|messages.content<compaction>.tool_changes.**",
        "tools added or removed mid-conversation (server tools among them are live, above)",
    ),
    _key(_MESSAGES, "container.**", "skills pinned to a version, which never change"),
    _key(_ANTHROPIC, "tool_choice.**", "which tools the model may or must call"),
    _key(_ANTHROPIC, "thinking.**", "whether and how much the model thinks"),
    _key(_ANTHROPIC, "output_config.**", "effort and the form the answer must take"),
    _key(
        _ANTHROPIC,
        "output_format.**",
        "the form the answer must take",
        provider="anthropic: the structured-outputs beta's `output_format` (sent with `extra_body`)",
    ),
    _key(_ANTHROPIC, "context_management.**|compaction.**", "which earlier content the model still sees"),
    _key(_MESSAGES, "fallbacks.**", "which models answer when the first declines"),
    _key(
        _ANTHROPIC,
        "betas|workspace_id|user_profile_id",
        "sent as the `anthropic-beta`, `anthropic-workspace-id` and `anthropic-user-profile-id` "
        "headers, which the key covers",
    ),
    _neutral(
        _MESSAGES,
        "metadata.**",
        "an end-user id for abuse detection; kept in the key to be safe "
        "(`CacheConfig(ignore_fields={'metadata'})` leaves it out)",
    ),
    _neutral(
        _ANTHROPIC,
        "cache_control.**|**.cache_control.**|**.caching.**",
        "prompt-cache breakpoints change what is billed, not the answer; kept in the key",
    ),
    _neutral(
        _ANTHROPIC,
        "service_tier|speed|inference_geo",
        "which capacity, speed or region serves the call; kept in the key to be safe",
    ),
    _neutral(
        _ANTHROPIC,
        "billing_policy.**|fallback_credit_token.**",
        "who is billed, and at which rate; kept in the key to be safe",
    ),
)

# OpenAI Chat Completions, and the compatible providers' extensions of it.

_CHAT_ROWS: Final[tuple[Field, ...]] = (
    _live(_CHAT, "web_search_options.**", "web_search", "the model searches the web on every call"),
    _live(
        _CHAT,
        "model",
        "web_search",
        "a search model searches the web on every call",
        when=_search_model,
        condition="a search model (`*-search-preview`, `*-search-api`)",
    ),
    _live(
        _CHAT,
        "messages.content<image_url>.image_url.url|messages.content<file>.file.file_data",
        "url",
        _URL_WHY,
        anywhere="**<image_url>.image_url.url|**<file>.file.file_data",
        **_URL,
    ),
    _live(
        _CHAT,
        "messages.content<image_url>.image_url|messages.content<video_url>.video_url"
        "|messages.content<video_url>.video_url.url",
        "url",
        _URL_WHY,
        provider="kimi: video parts, and image or video URLs given as a plain string "
        "(platform.kimi.ai/docs/api/chat)",
        **_URL,
    ),
    _live(
        _CHAT,
        "enable_search",
        "web_search",
        "the model searches the web when it sees fit",
        when=_true,
        condition="`true`",
        provider="bailian: web search (alibabacloud.com/help/en/model-studio/web-search)",
    ),
    _live(
        _CHAT,
        "search_parameters.**",
        "web_search",
        "Live Search: the model searches the web and X",
        provider="xai: Live Search, now answered 410 Gone (docs.x.ai)",
    ),
    _live(
        _CHAT,
        "tools<web_search>.**",
        "web_search",
        "the provider runs a web search for the model",
        provider="glm: the `web_search` tool (docs.bigmodel.cn, chat completions)",
    ),
    _live(
        _CHAT,
        "tools<builtin_function>",
        "web_search",
        "Kimi's built-in `$web_search` searches the web on the provider's side",
        when=_kimi_search,
        condition="`function.name` is `$web_search`",
        provider="kimi: builtin_function.$web_search (platform.kimi.ai/docs/guide/use-web-search)",
    ),
    _live(
        _CHAT,
        "tools<builtin_function>.**",
        "builtin_function",
        "another built-in function runs on the provider's side, out of the caller's sight",
        when=_other_builtin,
        condition="any other built-in function",
        provider="kimi: built-in functions (platform.kimi.ai/docs/guide/use-web-search)",
    ),
    _state(
        _CHAT,
        "tools<retrieval>.**",
        "retrieval",
        "searches a knowledge base, which changes as documents are added or removed",
        provider="glm: the `retrieval` tool (docs.bigmodel.cn, chat completions)",
    ),
    _key(_CHAT, "model", "which model answers"),
    _key(_CHAT, "messages.role|messages.name", "who says it"),
    _key(_CHAT, "messages.content", "the message's text (the string form)"),
    _key(_CHAT, "messages.content<text|refusal>.**|messages.refusal", "the text the model reads"),
    _key(_CHAT, "messages.content<image_url>.image_url.detail", "the resolution the image is read at"),
    _key(_CHAT, "messages.content<input_audio>.**", "audio given inline (base64)"),
    _key(
        _CHAT,
        "messages.content<file>.file.**",
        "a file given inline (base64) or by the id of an upload, which never changes (a URL is live, above)",
    ),
    _key(
        _CHAT,
        "messages.tool_calls.**|messages.function_call.**|messages.tool_call_id",
        "the tool calls of an earlier turn, and which call a tool result answers",
    ),
    _key(_CHAT, "messages.audio.**", "an earlier audio answer, by the id of what the provider generated"),
    _key(_CHAT, "tools<function|custom>.**|functions.**", _CALLER_RUNS),
    _key(
        _CHAT, "tool_choice.**|function_call.**|parallel_tool_calls", "which tools the model may or must call"
    ),
    _key(_CHAT, "response_format.**", "the form the answer must take"),
    _key(_CHAT, "prediction.**", "a predicted answer, which the provider checks against its own"),
    _key(
        _CHAT,
        "temperature|top_p|n|seed|stop|max_tokens|max_completion_tokens|presence_penalty|frequency_penalty"
        "|logit_bias.**",
        "sampling and length: change the answer",
    ),
    _key(_CHAT, "logprobs|top_logprobs", "adds log probabilities to the answer"),
    _key(_CHAT, "reasoning_effort|verbosity", "how much the model reasons and writes"),
    _key(_CHAT, "modalities|audio.**", "which modalities the answer holds, and its voice"),
)

# OpenAI Responses, and the compatible providers' extensions of it.


def _responses_tools(kinds: str) -> str:
    """Where a Responses tool definition sits: ``tools``, and the tools an ``additional_tools`` or
    ``tool_search_output`` input item makes available."""
    return f"tools<{kinds}>.**|input<additional_tools|tool_search_output>.tools<{kinds}>.**"


def _responses_parts(kinds: str, name: str) -> str:
    """Where a Responses content part sits: a message's content, a tool call's output, a prompt variable."""
    return (
        f"input<|message>.content<{kinds}>.{name}"
        f"|input<function_call_output|custom_tool_call_output|computer_call_output>.output<{kinds}>.{name}"
        f"|prompt.variables.*<{kinds}>.{name}"
    )


_RESPONSES_ROWS: Final[tuple[Field, ...]] = (
    _state(
        _RESPONSES,
        "conversation.**",
        "conversation",
        "the conversation's items are prepended, and this turn is appended to it",
    ),
    _state(
        _RESPONSES,
        "previous_response_id",
        "previous_response_id",
        "the context is the stored chain, and each turn creates the response the next one continues from",
    ),
    _state(
        _RESPONSES,
        "background",
        "background",
        "the answer is a job to poll, not the result",
        when=_true,
        condition="`true`",
    ),
    _state(
        _RESPONSES,
        "prompt",
        "prompt",
        "a stored prompt template at its latest version, which a new version changes",
        when=_unpinned_prompt,
        condition="no `version`",
    ),
    _state(
        _RESPONSES,
        "input<item_reference>.**",
        "item_reference",
        "the item's content is read from the provider's store",
    ),
    _state(
        _RESPONSES,
        "input<>.id",
        "item_reference",
        "an item given by `id` alone (its `type` is optional) is read from the provider's store",
        when=_id_only,
        condition="with no `type` and no `role`",
    ),
    _state(
        _RESPONSES,
        _responses_tools("file_search"),
        "file_search",
        "vector stores change as files are added or removed",
        anywhere="**.tools<file_search>.**",
    ),
    _state(
        _RESPONSES,
        "tools<code_interpreter>.container|input<additional_tools|tool_search_output>.tools<code_interpreter>.container",
        "container",
        "a container reused by id keeps the files earlier calls left in it",
        when=_a_string,
        condition="a container id (a string)",
        anywhere="**.tools<code_interpreter>.container",
    ),
    _state(
        _RESPONSES,
        "tools<shell>.environment<container_reference>.**"
        "|input<additional_tools|tool_search_output>.tools<shell>.environment<container_reference>.**",
        "container",
        "a container reused by id keeps the files earlier calls left in it",
        anywhere="**.tools<shell>.environment<container_reference>.**",
    ),
    _state(
        _RESPONSES,
        "tools<shell>.environment.skills<skill_reference>"
        "|input<additional_tools|tool_search_output>.tools<shell>.environment.skills<skill_reference>",
        "skills",
        "a skill at `latest` (the default) changes when a new version is published",
        when=_unpinned,
        condition="no `version`, or `latest`",
        anywhere="**.skills<skill_reference>",
    ),
    _state(
        _RESPONSES,
        "prompt_cache_options.comparison_response_id",
        "diagnostics",
        "the answer reports how this call's prompt cache compares with a stored response's",
    ),
    _state(
        _RESPONSES,
        "prompt_cache_options.prewarm",
        "prewarm",
        "the call exists to write the provider's prompt cache; a replay would skip that",
        when=_true,
        condition="`true`",
    ),
    _live(
        _RESPONSES,
        _responses_parts("input_image|computer_screenshot", "image_url")
        + "|"
        + _responses_parts("input_file", "file_url")
        + "|tools<image_generation>.input_image_mask.image_url"
        + "|input<additional_tools|tool_search_output>.tools<image_generation>.input_image_mask.image_url",
        "url",
        _URL_WHY + " (in messages, tool outputs, screenshots, prompt variables and image masks)",
        anywhere="**<input_image|computer_screenshot>.image_url|**<input_file>.file_url|**.input_image_mask.image_url",
        **_URL,
    ),
    _live(
        _RESPONSES,
        _responses_tools("web_search*"),
        "web_search",
        "the provider searches the web for the model",
        anywhere="**.tools<web_search*>.**",
    ),
    _live(
        _RESPONSES,
        _responses_tools("x_search"),
        "web_search",
        "the provider searches X for the model",
        provider="xai: the `x_search` tool (docs.x.ai, tools)",
    ),
    _live(
        _RESPONSES,
        _responses_tools("web_extractor"),
        "web_fetch",
        "the provider fetches the pages the model names",
        provider="bailian: the `web_extractor` tool (alibabacloud.com/help/en/model-studio/web-search)",
    ),
    _live(
        _RESPONSES,
        _responses_tools("mcp"),
        "mcp",
        "a remote MCP server's live answers (and side effects)",
        anywhere="**.tools<mcp>.**",
    ),
    _live(
        _RESPONSES,
        _responses_tools("code_interpreter|programmatic_tool_calling")
        + "|tools<shell>.environment<container_auto>.**"
        + "|input<additional_tools|tool_search_output>.tools<shell>.environment<container_auto>.**",
        "code_execution",
        _CODE_RUNS + " (`programmatic_tool_calling` runs the model's JavaScript)",
        anywhere="**.tools<code_interpreter|programmatic_tool_calling>.**|**.tools<shell>.environment<container_auto>.**",
    ),
    _key(_RESPONSES, "model", "which model answers"),
    _key(_RESPONSES, "instructions", "the system prompt"),
    _key(_RESPONSES, "input|input<|message>.**", "the question, and messages: their text, images and files"),
    _key(_RESPONSES, "prompt.id|prompt.version", "a stored prompt pinned to a version, which never changes"),
    _key(_RESPONSES, "prompt.variables.**", "the values put into the prompt template"),
    _key(
        _RESPONSES,
        "input<function_call|function_call_output|custom_tool_call|custom_tool_call_output|computer_call"
        "|computer_call_output|local_shell_call|local_shell_call_output|shell_call|shell_call_output"
        "|apply_patch_call|apply_patch_call_output|program|program_output>.**",
        "a client tool's call or result, sent back whole",
    ),
    _key(
        _RESPONSES,
        "input<reasoning|compaction|compaction_trigger|configuration_update>.**",
        "reasoning, a summary of earlier context, or a setting, sent back whole",
    ),
    _key(
        _RESPONSES,
        "input<web_search_call|file_search_call|code_interpreter_call|image_generation_call|mcp_call"
        "|mcp_list_tools|mcp_approval_request|mcp_approval_response|tool_search_call|tool_search_output"
        "|additional_tools>.**",
        "an output item sent back whole: its content is in the request (server tools it declares are "
        "live, above)",
    ),
    _key(
        _RESPONSES,
        _responses_tools(
            "function|custom|namespace|computer|computer_use_preview|local_shell|shell|apply_patch"
        ),
        _CALLER_RUNS + " (a `shell` in a hosted container is live, above)",
    ),
    _key(_RESPONSES, _responses_tools("tool_search"), _SEARCHES_REQUEST),
    _key(
        _RESPONSES,
        _responses_tools("image_generation"),
        "an image generated like text: sampled, not fetched",
    ),
    _key(
        _RESPONSES,
        "tool_choice.**|max_tool_calls|parallel_tool_calls",
        "which tools the model may or must call",
    ),
    _key(_RESPONSES, "text.**", "the form and length of the answer"),
    _key(_RESPONSES, "reasoning.**", "how much the model reasons, and the summary it returns"),
    _key(
        _RESPONSES,
        "temperature|top_p|max_output_tokens|top_logprobs",
        "sampling and length: change the answer",
    ),
    _key(_RESPONSES, "truncation|context_management.**", "which earlier context the model still sees"),
    _key(_RESPONSES, "include", "what the answer includes"),
    _key(_RESPONSES, "image.**|access_programs.**", "how images are read, and which access programs apply"),
    _key(
        _RESPONSES,
        "background_options.**",
        "when a background response runs (a background request bypasses the cache, above)",
    ),
)

# Shared by the dialects.

_COMMON_ROWS: Final[tuple[Field, ...]] = (
    _key(_ALL, "**.type", "an object's kind (the rows above decide the kinds that matter)"),
    _key(_OPENAI, "moderation.**", "moderation that may block the input or the answer"),
    _neutral(
        _OPENAI,
        "metadata.**",
        "labels for the provider's dashboards; kept in the key to be safe "
        "(`CacheConfig(ignore_fields={'metadata'})` leaves it out)",
    ),
    _neutral(
        _OPENAI,
        "store",
        "keeps a copy at the provider; the answer is the same (a replayed Responses answer carries the "
        "id of the response stored the first time)",
    ),
    _neutral(
        _OPENAI, "user|safety_identifier", "identifies the end user for abuse monitoring; kept in the key"
    ),
    _neutral(_OPENAI, "service_tier", "which capacity serves the call; kept in the key to be safe"),
    _neutral(
        _OPENAI,
        "prompt_cache_key|prompt_cache_retention|prompt_cache_options.**|**.prompt_cache_breakpoint.**",
        "the provider's prompt cache: routing, lifetime and breakpoints change what is billed, not the "
        "answer; kept in the key",
    ),
    _neutral(
        _ALL,
        "stream",
        "chooses the form of the answer (one document or events), not the answer: one entry serves both",
        keyed=False,
    ),
    _neutral(
        _OPENAI,
        "stream_options.**",
        "chooses the form of a streamed answer (usage in the stream, obfuscation padding), not the answer",
        keyed=False,
    ),
)

#: Every row; bypass reasons are reported in this order (see docs/correctness.md).
FIELDS: Final[tuple[Field, ...]] = (*_RESPONSES_ROWS, *_CHAT_ROWS, *_ANTHROPIC_ROWS, *_COMMON_ROWS)


# -- the walk: the live and state rows as a tree of the paths they name -----------------------------


@dataclass(slots=True)
class _Edge:
    """One pattern segment below a node: the rows that end here, and the segments that go on."""

    rows: list[Field] = field(default_factory=list)
    below: _Node | None = None


@dataclass(slots=True)
class _Slot:
    """The edges for one key of an object, by the ``type`` of the value found there."""

    any_type: list[_Edge] = field(default_factory=list)
    untyped: list[_Edge] = field(default_factory=list)
    typed: dict[str, list[_Edge]] = field(default_factory=dict)
    globs: list[tuple[re.Pattern[str], _Edge]] = field(default_factory=list)
    #: :meth:`edges` for a value without a type, and for each type a row names (built by :meth:`seal`).
    _none: tuple[_Edge, ...] = ()
    _by_type: dict[str, tuple[_Edge, ...]] = field(default_factory=dict)
    _other: tuple[_Edge, ...] = ()

    def seal(self) -> None:
        """Precompute the answers of :meth:`edges` once every row is in."""
        self._none = (*self.any_type, *self.untyped)
        self._other = tuple(self.any_type)
        self._by_type = {kind: (*self.any_type, *edges) for kind, edges in self.typed.items()}

    def edges(self, kind: str | None) -> tuple[_Edge, ...]:
        """The edges a value of this ``type`` (``None``: none) follows."""
        if kind is None:
            return self._none
        found = self._by_type.get(kind, self._other)
        if self.globs:
            found = (*found, *(edge for regex, edge in self.globs if regex.fullmatch(kind)))
        return found


@dataclass(slots=True)
class _Node:
    """The keys an object is asked about (``wild``: name patterns, a map's keys)."""

    named: dict[str, _Slot] = field(default_factory=dict)
    wild: list[tuple[re.Pattern[str], _Slot]] = field(default_factory=list)
    _edges: dict[str, _Edge] = field(default_factory=dict)

    def edges(self) -> list[_Edge]:
        """Every edge below this node."""
        return list(self._edges.values())

    def edge(self, part: str) -> _Edge:
        """The edge for pattern segment ``part`` (one per distinct segment: rows share prefixes)."""
        if part in self._edges:
            return self._edges[part]
        edge = self._edges[part] = _Edge()
        name, choices = _split_segment(part)
        if "*" in name:
            slot = next((s for regex, s in self.wild if regex.pattern == _glob(name)), None)
            if slot is None:
                slot = _Slot()
                self.wild.append((re.compile(_glob(name)), slot))
        else:
            slot = self.named.setdefault(name, _Slot())
        if choices is None:
            slot.any_type.append(edge)
            return edge
        for choice in choices:
            if not choice:
                slot.untyped.append(edge)
            elif "*" in choice:
                slot.globs.append((re.compile(_glob(choice)), edge))
            else:
                slot.typed.setdefault(choice, []).append(edge)
        return edge


def _seal(node: _Node) -> None:
    for slot in (*node.named.values(), *(slot for _, slot in node.wild)):
        slot.seal()
    for edge in node.edges():
        if edge.below is not None:
            _seal(edge.below)


class _Matcher:
    """The live and state rows of one dialect as a tree of the paths they name, walked along a body:
    only the keys some row names are looked at, so a long conversation costs a few lookups per block."""

    def __init__(self, rows: tuple[Field, ...]) -> None:
        self._root = _Node()
        self._order: dict[str, int] = {}
        for row in rows:
            if row.reason is None:
                continue
            self._order.setdefault(row.reason, len(self._order))
            for part in alternatives(row.pattern):
                node, edge = self._root, None
                for name in part.removesuffix(".**").split("."):  # decided at the subtree's root
                    if edge is not None:
                        node = edge.below = edge.below or _Node()
                    edge = node.edge(name)
                assert edge is not None
                edge.rows.append(row)
        _seal(self._root)

    def reasons(self, body: Body) -> tuple[str, ...]:
        """The reasons of every live and state row whose condition holds in ``body``, in table order."""
        found: set[str] = set()
        self._visit(body, self._root, found)
        return tuple(sorted(found, key=self._order.__getitem__))

    def _visit(self, holder: Mapping[str, Any], node: _Node, found: set[str]) -> None:
        # The hot loop of a new request: plain lookups, no helper calls per item.
        for key, slot in node.named.items():
            if key in holder:
                self._items(holder, holder[key], slot, found)
        for regex, slot in node.wild:
            for key, value in holder.items():
                if regex.fullmatch(key):
                    self._items(holder, value, slot, found)

    def _items(self, holder: Mapping[str, Any], value: Any, slot: _Slot, found: set[str]) -> None:
        for item in value if type(value) is list else (value,):
            kind = item.get("type") if type(item) is dict else None
            if type(kind) is not str or not kind or "." in kind or "<" in kind or ">" in kind:
                kind = None  # as _type_of: not a type a path can name
            for edge in slot.edges(kind):
                for row in edge.rows:
                    if row.reason not in found and row.when(item, holder):
                        found.add(row.reason)  # type: ignore[arg-type]  # only rows with a reason
                below = edge.below
                if below is None:
                    continue
                if type(item) is dict:
                    self._visit(item, below, found)
                elif type(item) is list:  # a list of lists: its items share the path
                    for inner in item:
                        if type(inner) is dict:
                            self._visit(inner, below, found)


_MATCHERS: Final[Mapping[Dialect, _Matcher]] = MappingProxyType(
    {
        dialect: _Matcher(tuple(row for row in FIELDS if dialect in row.dialects))
        for dialect in ("anthropic_messages", "anthropic_count_tokens", "openai_chat", "openai_responses")
    }
)

#: The top-level fields the key leaves out: the neutral rows not kept in it (they choose the form of
#: the answer, not the answer, so one entry serves both forms).
UNKEYED_FIELDS: Final[frozenset[str]] = frozenset(
    part.removesuffix(".**") for row in FIELDS if not row.keyed for part in alternatives(row.pattern)
)

#: Every bypass reason token, each once, in the table's order (each is documented in
#: docs/correctness.md; a test keeps the page honest).
REASONS: Final[tuple[str, ...]] = tuple(dict.fromkeys(row.reason for row in FIELDS if row.reason is not None))


def classify(dialect: Dialect, body: Body) -> Verdict:
    """What ``body`` depends on outside itself: every live and state input it carries, by reason."""
    matcher = _MATCHERS.get(dialect)
    return Verdict(matcher.reasons(body)) if matcher is not None else Verdict()


def server_state(dialect: Dialect, body: Body) -> tuple[str, ...]:
    """The reasons ``body`` cannot be answered from a cache (empty when it can): :func:`classify`'s
    reasons, before any opt-in."""
    return classify(dialect, body).reasons

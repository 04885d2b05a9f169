"""Requests whose answer depends on state outside the request, per API dialect, as data.

A cache key covers the request's bytes. Some requests name state that lives elsewhere and changes
between two identical requests, so the same bytes ask a different question each time:

* **server state** the caller keeps at the provider: a Responses ``conversation`` (each turn is
  appended to it), a ``previous_response_id`` chain, an unpinned prompt template (its latest
  version), a vector store behind ``file_search``, a code-execution container reused by id, an
  Anthropic thread or unpinned skills. Replaying such a request would also skip the side effect
  the caller asked for (the turn the conversation must receive, the background job);
* **live data** the provider fetches while answering: web search, web fetch, remote MCP servers.

Such a request is never answered from a cache, never coalesced and never stored. Each rule is one
reason token (``server-state:<what>`` or ``live-data:<what>``), sent back to the caller in
``x-cachekit-bypass-reason``, and a test of the parsed body. Content referenced by an id that never
changes (an uploaded ``file_id``, a pinned prompt ``version``, an output item sent back whole) is
not state: it is covered by its id in the key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from cachekit._types import Dialect

__all__ = ["REASONS", "RULES", "StateRule", "server_state"]

Body = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class StateRule:
    """One way a request can depend on state outside its body: the reason token and its test."""

    reason: str
    applies: Callable[[Body], bool]


# -- small tests over a parsed body, combined into the rules below -------------------------------


def _set(field: str) -> Callable[[Body], bool]:
    """The field is present and not null (an id, or an object naming one)."""
    return lambda body: body.get(field) is not None


def _true(field: str) -> Callable[[Body], bool]:
    return lambda body: body.get(field) is True


def _any(*tests: Callable[[Body], bool]) -> Callable[[Body], bool]:
    return lambda body: any(test(body) for test in tests)


def _items(body: Body, field: str) -> list[Mapping[str, Any]]:
    value = body.get(field)
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def _tool(*prefixes: str) -> Callable[[Body], bool]:
    """A tool whose type starts with one of ``prefixes`` (server tools carry a dated version suffix:
    ``web_search_20250305``, ``web_search_preview_2025_03_11``)."""
    return lambda body: any(
        isinstance(tool.get("type"), str) and tool["type"].startswith(prefixes)
        for tool in _items(body, "tools")
    )


def _unpinned_prompt(body: Body) -> bool:
    """A stored prompt template without a version resolves to whichever version is current."""
    prompt = body.get("prompt")
    return isinstance(prompt, Mapping) and prompt.get("version") is None


def _item_reference(body: Body) -> bool:
    """An input item given by id only: its content is read from the provider's store (``type`` is
    optional there, so an item with an id and neither a type nor a role is one too)."""
    return any(
        item.get("type") == "item_reference"
        or (item.get("type") is None and "role" not in item and "id" in item)
        for item in _items(body, "input")
    )


def _responses_container(body: Body) -> bool:
    """A hosted tool that runs in an existing container (its files persist and change), rather
    than in a fresh one (``{"type": "auto"}``)."""
    for tool in _items(body, "tools"):
        if tool.get("type") == "code_interpreter" and isinstance(tool.get("container"), str):
            return True
        environment = tool.get("environment")
        if isinstance(environment, Mapping) and environment.get("type") == "container_reference":
            return True
    return False


def _search_model(body: Body) -> bool:
    """Chat models that search the web on every call (``gpt-4o-search-preview``, ``...-search-api``)."""
    model = body.get("model")
    return isinstance(model, str) and ("-search-preview" in model or "-search-api" in model)


def _anthropic_container(body: Body) -> bool:
    """A container reused by id (a string, or an object with an ``id``)."""
    container = body.get("container")
    return isinstance(container, str) or (isinstance(container, Mapping) and container.get("id") is not None)


def _unpinned_skills(body: Body) -> bool:
    """Skills loaded at ``latest`` (the default) change when a new version is published."""
    container = body.get("container")
    if not isinstance(container, Mapping):
        return False
    return any(skill.get("version") in (None, "latest") for skill in _items(container, "skills"))


_WEB_SEARCH = StateRule("live-data:web_search", _tool("web_search"))

#: The rules of each dialect, in the order their reasons are reported.
RULES: Mapping[Dialect, tuple[StateRule, ...]] = MappingProxyType(
    {
        "openai_responses": (
            StateRule("server-state:conversation", _set("conversation")),
            StateRule("server-state:previous_response_id", _set("previous_response_id")),
            StateRule("server-state:background", _true("background")),
            StateRule("server-state:prompt", _unpinned_prompt),
            StateRule("server-state:item_reference", _item_reference),
            StateRule("server-state:file_search", _tool("file_search")),
            StateRule("server-state:container", _responses_container),
            _WEB_SEARCH,
            StateRule("live-data:mcp", _tool("mcp")),
        ),
        "openai_chat": (StateRule("live-data:web_search", _any(_set("web_search_options"), _search_model)),),
        "anthropic_messages": (
            StateRule("server-state:thread", _set("thread")),
            StateRule("server-state:container", _anthropic_container),
            StateRule("server-state:skills", _unpinned_skills),
            _WEB_SEARCH,
            StateRule("live-data:web_fetch", _tool("web_fetch")),
            StateRule("live-data:mcp", lambda body: bool(body.get("mcp_servers"))),
        ),
        # Counting tokens reads the prompt only: nothing it answers depends on the tools' results.
        "anthropic_count_tokens": (),
    }
)

#: Every reason token, each once (documented in docs/exact.md; a test keeps the page honest).
REASONS: tuple[str, ...] = tuple(dict.fromkeys(rule.reason for rules in RULES.values() for rule in rules))


def server_state(dialect: Dialect, body: Body) -> tuple[str, ...]:
    """The reasons ``body`` depends on state outside the request (empty when it does not)."""
    return tuple(rule.reason for rule in RULES.get(dialect, ()) if rule.applies(body))

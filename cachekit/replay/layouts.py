"""The OpenAI layouts of ``cachekit replay``: trace requests (Anthropic Messages layout) rewritten as
Chat Completions and Responses requests, and the breakpoint policies a client of an OpenAI-style
explicit cache (GPT-5.6 and later) can follow.

The rewrite keeps every block in order and each block's text: the system prompt becomes a leading
system message (Chat) or developer message (Responses) of text parts, each tool a function tool, a
``tool_use`` block an assistant tool call (Chat ``tool_calls``, Responses ``function_call``), a
``tool_result`` block a tool message (Chat) or ``function_call_output`` item (Responses), and text
a text part (``input_text`` / ``output_text`` in Responses). Content is always a list of parts, so
each part can carry a breakpoint.

Policies (:data:`OPENAI_POLICIES`): ``none`` turns caching off (``prompt_cache_options.mode`` is
``explicit`` and no block has a breakpoint, "the request does not use prompt caching"); ``implicit``
sends the request as it is (OpenAI's own breakpoint at the newest user or tool message); ``last``
puts one explicit breakpoint on the last block that takes one, with the implicit one off;
``cachekit`` sends it as it is and lets cachekit's planner place breakpoints.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson

from cachekit.providers.cache_rules import cache_rules
from cachekit.shape.blocks import prompt_blocks, text_of
from cachekit.shape.markers import rebind
from cachekit.shape.planner import add_marker

__all__ = [
    "LAYOUTS",
    "OPENAI_POLICIES",
    "Layout",
    "apply_openai_policy",
    "dialect_of",
    "policies_of",
    "rewrite",
]

Layout = Literal["chat", "responses"]
#: The request layouts an OpenAI replay can use.
LAYOUTS: tuple[Layout, ...] = ("chat", "responses")
#: The breakpoint policies of an OpenAI-style explicit cache.
OPENAI_POLICIES = ("none", "implicit", "last", "cachekit")
# Model Studio (Bailian) has no implicit breakpoint: its implicit cache is another mode, not billed
# by the local backend.
_BAILIAN_POLICIES = ("none", "last", "cachekit")


def policies_of(provider: str) -> tuple[str, ...]:
    """The policies a replay through ``provider``'s OpenAI-compatible API compares."""
    return _BAILIAN_POLICIES if provider == "bailian" else OPENAI_POLICIES


def dialect_of(layout: Layout) -> str:
    """The cachekit dialect name of a layout."""
    return "openai_chat" if layout == "chat" else "openai_responses"


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content] if content else []
    return [b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text" and b.get("text")]


def _tool_text(block: dict[str, Any]) -> str:
    return text_of(block.get("content"))


def _chat_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in body["messages"]:
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if message["role"] == "assistant":
            parts = [{"type": "text", "text": t} for t in _texts(blocks)]
            calls = [
                {
                    "id": b["id"],
                    "type": "function",
                    "function": {"name": b["name"], "arguments": orjson.dumps(b.get("input", {})).decode()},
                }
                for b in blocks
                if isinstance(b, dict) and b.get("type") == "tool_use"
            ]
            item: dict[str, Any] = {"role": "assistant", "content": parts or None}
            if calls:
                item["tool_calls"] = calls
            out.append(item)
            continue
        for b in blocks:
            if isinstance(b, dict) and b.get("type") == "tool_result":
                text = _tool_text(b) or "(empty)"
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": b["tool_use_id"],
                        "content": [{"type": "text", "text": text}],
                    }
                )
        parts = [{"type": "text", "text": t} for t in _texts(blocks)]
        if parts:
            out.append({"role": "user", "content": parts})
    return out


def _responses_input(body: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in _chat_messages(body):
        role = message["role"]
        if role == "tool":
            output = message["content"][0]["text"]
            out.append({"type": "function_call_output", "call_id": message["tool_call_id"], "output": output})
        elif role == "assistant":
            texts = [p["text"] for p in message["content"] or []]
            if texts:
                parts = [{"type": "output_text", "text": t, "annotations": []} for t in texts]
                out.append({"type": "message", "role": "assistant", "content": parts})
            for call in message.get("tool_calls", []):
                fn = call["function"]
                out.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": fn["name"],
                        "arguments": fn["arguments"],
                    }
                )
        else:
            parts = [{"type": "input_text", "text": p["text"]} for p in message["content"]]
            out.append({"type": "message", "role": "user", "content": parts})
    return out


def rewrite(body: dict[str, Any], layout: Layout) -> dict[str, Any]:
    """A trace request (Messages layout) as a Chat Completions or Responses request."""
    system = _texts(body.get("system") or [])
    tools = body.get("tools") or []
    if layout == "chat":
        out: dict[str, Any] = {"model": body["model"], "max_completion_tokens": body["max_tokens"]}
        lead = (
            [{"role": "system", "content": [{"type": "text", "text": t} for t in system]}] if system else []
        )
        out["messages"] = lead + _chat_messages(body)
        if tools:
            out["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t["name"],
                        "description": t.get("description", ""),
                        "parameters": t["input_schema"],
                    },
                }
                for t in tools
            ]
        return out
    out = {"model": body["model"], "max_output_tokens": max(16, body["max_tokens"])}
    lead = [
        {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": t} for t in system],
        }
    ]
    out["input"] = (lead if system else []) + _responses_input(body)
    if tools:
        out["tools"] = [
            {
                "type": "function",
                "name": t["name"],
                "description": t.get("description", ""),
                "parameters": t["input_schema"],
            }
            for t in tools
        ]
    return out


def apply_openai_policy(
    policy: str, body: dict[str, Any], layout: Layout, provider: str = "openai"
) -> dict[str, Any]:
    """``body`` (already in ``layout``) as a client following ``policy`` sends it."""
    if policy in ("implicit", "cachekit"):
        return body
    rules = cache_rules(provider, str(body["model"]))
    # Turning OpenAI's implicit breakpoint off; Model Studio has none.
    explicit = {**body, "prompt_cache_options": {"mode": "explicit"}} if rules.implicit_breakpoint else body
    if policy == "none":
        return explicit
    if policy == "last":
        dialect = dialect_of(layout)
        blocks = rebind(dialect, body, prompt_blocks(dialect, body), rules)
        eligible = [b for b in blocks if b.eligible]
        return add_marker(explicit, eligible[-1].where, "5m", rules) if eligible else explicit
    raise ValueError(f"unknown policy {policy!r}; one of {', '.join(policies_of(provider))}")

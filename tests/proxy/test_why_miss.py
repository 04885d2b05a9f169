""" "Why did it miss?" through the proxy: when a conversation's prefix stops matching its previous
call, the answer says where in ``x-cachekit-prefix-changed``, the ledger records it and ``cachekit
report`` counts it. The conversation is found by ``metadata.user_id`` (Anthropic, what Claude Code
sets per session) or ``prompt_cache_key`` (OpenAI)."""

from __future__ import annotations

from typing import Any

from cachekit.cost.report import render_report
from tests.conftest import sdk_client
from tests.proxy.conftest import CHAT_MODEL, MODEL, Stack

SYSTEM = "You are a meticulous coding agent. Follow the repository's conventions. " * 80
FIRST = [{"role": "user", "content": "Read the file and summarise it."}]
LATER = [
    *FIRST,
    {"role": "assistant", "content": "It parses the config."},
    {"role": "user", "content": "Next?"},
]


def _claude(stack: Stack, system: str, messages: list[dict[str, Any]]) -> Any:
    with sdk_client("anthropic", plain=True, api_key="k", base_url=stack.anthropic_url) as client:
        return client.messages.with_raw_response.create(
            model=MODEL, max_tokens=16, system=system, messages=messages, metadata={"user_id": "session-7"}
        )


def test_a_changed_system_prompt_is_named_in_the_header_the_ledger_and_the_report(stack: Stack) -> None:
    first = _claude(stack, SYSTEM, FIRST)
    grown = _claude(stack, SYSTEM, LATER)  # the same prefix, grown: nothing changed
    changed = _claude(stack, "Today is 2026-12-05. " + SYSTEM, [*LATER, {"role": "user", "content": "And?"}])
    assert "x-cachekit-prefix-changed" not in first.headers
    assert "x-cachekit-prefix-changed" not in grown.headers
    why = changed.headers["x-cachekit-prefix-changed"]
    assert why.startswith("system_changed; at=system")
    records = stack.ledger.read()
    assert [r.prefix_change for r in records] == [None, None, why]
    report = render_report(records)
    assert "Why conversations' cached prefixes stopped matching" in report
    assert f"{why}  1 call" in report


def test_an_edited_earlier_message_of_an_openai_conversation_is_named(stack: Stack) -> None:
    def chat(messages: list[dict[str, Any]]) -> Any:
        with sdk_client("openai", plain=True, api_key="k", base_url=stack.openai_url) as client:
            return client.chat.completions.with_raw_response.create(
                model=CHAT_MODEL,
                messages=[{"role": "system", "content": SYSTEM}, *messages],
                prompt_cache_key="session-9",
            )

    chat(FIRST)
    edited = chat([{"role": "user", "content": "Read the other file."}, *LATER[1:]])
    assert edited.headers["x-cachekit-prefix-changed"].startswith("messages_changed; at=messages.")

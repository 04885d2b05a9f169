"""Done when (issue 29): an agent loop written against each SDK runs offline on ``cachekit serve`` with
the scripted engine and a script file, read with the SDKs' typed streaming.

``cachekit serve --script`` runs as a process on a loopback port. Each loop declares tools every way
its API allows, gets parallel calls, sends their results back with its reasoning replayed, meets a
compaction and carries on after it (the OpenAI loop resumes with ``previous_response_id``), and reads
the prompt cache on its second turn. Every event and final answer is checked to be the SDK's typed
data (:func:`tests.local.conftest.typed`).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from tests.local.conftest import CLAUDE, GPT, claude_client, gpt_client, typed

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = {
    "turns": [
        {
            "turn": 0,
            "user": "customer",
            "text": "Looking it up.",
            "tool_calls": [
                {"name": "lookup", "arguments": {"id": 7}},
                {"name": "apply_patch", "input": "*** Begin Patch\n*** End Patch\n"},
                {"name": "note"},
            ],
        },
        {
            "turn": 0,
            "user": "weather",
            "text": "Checking.",
            "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "bash"}],
        },
        {"turn": 1, "text": "All done."},
        {"turn": 2, "text": "You're welcome."},
    ]
}
RULES = " ".join(f"Rule {i}: keep answers short and cite rule {i} of the handbook." for i in range(200))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``cachekit serve --script`` on a free loopback port; yields its base URL."""
    script = tmp_path_factory.mktemp("script") / "turns.json"
    script.write_text(json.dumps(SCRIPT))
    process = subprocess.Popen(
        [sys.executable, "-m", "cachekit", "serve", "--script", str(script), "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()  # written once the socket listens
        found = re.search(r"listening on (http://\S+)", banner)
        assert found, banner
        yield found.group(1)
    finally:
        process.terminate()
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()


# -- OpenAI Responses: a Codex-style loop ----------------------------------------------------------

CRM = {
    "type": "namespace",
    "name": "crm",
    "description": "Customer records.",
    "tools": [
        {
            "type": "function",
            "name": "lookup",
            "description": "Find a customer.",
            "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
        }
    ],
}
TOOLS: Any = [
    {
        "type": "function",
        "name": "shell",
        "parameters": {"type": "object", "properties": {}},
        "strict": False,
    },
    CRM,
    {"type": "custom", "name": "apply_patch", "description": "Apply a patch.", "format": {"type": "text"}},
]
NOTE = {
    "type": "function",
    "name": "note",
    "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    "strict": False,
}


def _turn(gpt: openai.OpenAI, **request: Any) -> Any:
    with gpt.responses.stream(
        model=GPT,
        instructions=RULES,
        tools=TOOLS,
        reasoning={"effort": "low", "summary": "auto"},
        include=["reasoning.encrypted_content"],
        **request,
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    typed(*events, final)
    return final


def _run(call: Any, output: str) -> dict[str, Any]:
    kind = "custom_tool_call_output" if call.type == "custom_tool_call" else "function_call_output"
    return {"type": kind, "call_id": call.call_id, "output": output}


def test_an_openai_responses_agent_loop(served: str) -> None:
    with gpt_client(served, key="agent") as gpt:
        asked: list[Any] = [
            {
                "type": "additional_tools",
                "role": "developer",
                "tools": [NOTE],
            },  # a tool declared in the input
            {"role": "user", "content": "Look up customer 7 and fix the bug"},
        ]
        first = _turn(gpt, input=asked)
        kinds = [item.type for item in first.output]
        assert kinds == ["reasoning", "message", "function_call", "custom_tool_call", "function_call"]
        reasoning, _, lookup, patch, note = first.output
        assert reasoning.encrypted_content
        assert (lookup.name, lookup.namespace, lookup.arguments) == ("lookup", "crm", '{"id":7}')
        assert patch.input.startswith("*** Begin Patch")
        assert note.name == "note"
        # Results back with the whole turn replayed (its reasoning included), as a stateless client does.
        replayed = [item.model_dump(exclude_none=True) for item in first.output]
        results = [_run(lookup, "Ada, premium"), _run(patch, "applied"), _run(note, "noted")]
        usage = first.usage
        assert usage is not None
        # The reasoning is counted: its tokens are part of the output the turn bills.
        assert 0 < usage.output_tokens_details.reasoning_tokens < usage.output_tokens
        threshold = usage.input_tokens + 1  # this turn's prompt is longer: it compacts
        second = _turn(
            gpt,
            input=[*asked, *replayed, *results],
            context_management=[{"type": "compaction", "compact_threshold": threshold}],
        )
        assert [item.type for item in second.output] == ["compaction", "reasoning", "message"]
        assert second.output[-1].content[0].text == "All done."
        assert second.usage is not None
        assert second.usage.input_tokens_details.cached_tokens >= 1024  # the second turn reads the cache
        # Resumed from the stored response: after the compaction the script's turn count goes on.
        third = _turn(gpt, previous_response_id=second.id, input="Thanks")
        assert third.previous_response_id == second.id
        assert third.output[-1].content[0].text == "You're welcome."
        assert third.usage is not None
        assert third.usage.input_tokens_details.cached_tokens >= 1024


# -- Anthropic Messages: a Claude Code-style loop ------------------------------------------------

CLAUDE_TOOLS: Any = [
    {
        "name": "get_weather",
        "description": "Weather for a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
    {"type": "bash_20250124", "name": "bash"},
    {"type": "web_search_20250305", "name": "web_search"},
]
# Over compaction's 50,000-token minimum trigger, so the loop can reach it.
LONG_RULES = " ".join([RULES] * 20)
COMPACT = "compact-2026-01-12"


def _claude_turn(claude: anthropic.Anthropic, messages: list[Any], **request: Any) -> Any:
    with claude.beta.messages.stream(
        model=CLAUDE,
        max_tokens=1024,
        system=LONG_RULES,
        tools=CLAUDE_TOOLS,
        thinking={"type": "enabled", "budget_tokens": 512},
        cache_control={"type": "ephemeral"},
        betas=[COMPACT],
        messages=messages,
        **request,
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    typed(*events, final)
    return final


def _billed(usage: Any) -> int:
    return int(usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens)


def test_an_anthropic_messages_agent_loop(served: str) -> None:
    with claude_client(served, key="agent") as claude:
        messages: list[Any] = [
            {"role": "user", "content": "What's the weather in Oslo? Check with bash too."}
        ]
        first = _claude_turn(claude, messages)
        assert [block.type for block in first.content] == ["thinking", "text", "tool_use", "tool_use"]
        thinking, _, weather, bash = first.content
        assert thinking.signature
        assert (weather.name, weather.input, bash.name) == ("get_weather", {"city": "Oslo"}, "bash")
        assert isinstance(bash.input["command"], str)
        assert first.usage.cache_creation_input_tokens > 50_000
        details = first.usage.output_tokens_details  # the thinking is counted in the output
        assert details is not None
        assert 0 < details.thinking_tokens < first.usage.output_tokens
        # The thinking block goes back with its signature, then the results.
        messages += [
            {
                "role": "assistant",
                "content": [block.model_dump(exclude_none=True) for block in first.content],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": weather.id, "content": "sunny"},
                    {"type": "tool_result", "tool_use_id": bash.id, "content": "README.md"},
                ],
            },
        ]
        edit = {
            "type": "compact_20260112",
            "trigger": {"type": "input_tokens", "value": _billed(first.usage) + 1},
        }
        second = _claude_turn(claude, messages, context_management={"edits": [edit]})
        assert [block.type for block in second.content] == ["compaction", "thinking", "text"]
        assert second.content[-1].text == "All done."
        assert second.usage.cache_read_input_tokens > 50_000  # the second turn reads the cache
        # Carried on after the compaction: the earlier turns are summarized, the count goes on.
        messages += [
            {
                "role": "assistant",
                "content": [block.model_dump(exclude_none=True) for block in second.content],
            },
            {"role": "user", "content": "Thanks"},
        ]
        third = _claude_turn(claude, messages)
        assert [block.type for block in third.content] == ["thinking", "text"]
        assert third.content[-1].text == "You're welcome."
        assert _billed(third.usage) < _billed(second.usage)  # what came before the compaction is dropped

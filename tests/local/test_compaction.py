"""Context management (issue 29 item 2): the Responses API's compaction and the Messages API's,
accepted or refused as the APIs do, read by the SDKs' typed parsing and streaming."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from cachekit.local import ByteTokenizer, LocalServer
from cachekit.local.backend import tenant_of
from cachekit.local.compaction import open_item, seal
from cachekit.local.parse import parse
from tests.local.conftest import CLAUDE, GPT, gpt_client, typed

LONG = " ".join(f"Fact {i}: the archive keeps record {i} on shelf {i % 7}." for i in range(400))


def test_responses_compaction_is_one_item_before_the_answer(gpt: openai.OpenAI) -> None:
    manage: Any = [{"type": "compaction", "compact_threshold": 1000}]
    with gpt.responses.stream(model=GPT, input=LONG, context_management=manage) as stream:
        events = list(stream)
        final = stream.get_final_response()
    typed(*events, final)
    assert [item.type for item in final.output] == ["compaction", "message"]
    assert "response.compaction.compacting" in [event.type for event in events]
    short = gpt.responses.create(model=GPT, input="Short.", context_management=manage)
    assert [item.type for item in short.output] == ["message"]  # under the threshold: none
    # The client replays it: accepted as the context it stands for, the turns it summarized counted.
    replay: list[Any] = [item.model_dump(exclude_none=True) for item in final.output]
    later = gpt.responses.create(
        model=GPT, input=[*replay, {"role": "user", "content": "Go on"}], context_management=manage
    )
    typed(later)
    assert [item.type for item in later.output] == ["message"]
    assert open_item(tenant_of({"authorization": "Bearer k1"}), final.output[0].encrypted_content) == 0  # type: ignore[union-attr]


def test_a_compaction_trigger_item_compacts_now(gpt: openai.OpenAI) -> None:
    items: Any = [
        {"role": "user", "content": "Hi"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello"}]},
        {"type": "compaction_trigger"},
    ]
    response = gpt.responses.create(model=GPT, input=items)
    typed(response)
    [item] = response.output
    assert item.type == "compaction"
    assert open_item(tenant_of({"authorization": "Bearer k1"}), item.encrypted_content) == 1
    with pytest.raises(openai.BadRequestError, match="final input item"):
        gpt.responses.create(
            model=GPT, input=[{"type": "compaction_trigger"}, {"role": "user", "content": "x"}]
        )


def test_the_compact_endpoint(server: LocalServer) -> None:
    # The API lists the user messages as output items (role "user"), which the SDK's output type does
    # not declare: read without strict validation, as a client does by default.
    with gpt_client(server, strict=False) as gpt:
        conversation: Any = [
            {"role": "user", "content": "First question"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "A"}]},
            {"role": "user", "content": "Second question"},
        ]
        compacted = gpt.responses.compact(model=GPT, input=conversation)
    assert compacted.object == "response.compaction"
    assert [item.type for item in compacted.output] == ["message", "message", "compaction"]
    assert compacted.usage.input_tokens > 0


# -- Anthropic -----------------------------------------------------------------------------------

COMPACT = "compact-2026-01-12"


def _edit(trigger: int, *, pause: bool = False) -> Any:
    edit: dict[str, Any] = {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": trigger}}
    if pause:
        edit["pause_after_compaction"] = True
    return {"edits": [edit]}


def test_anthropic_compaction_block_before_the_answer(claude: anthropic.Anthropic) -> None:
    long = " ".join([LONG] * 12)  # over the 50,000-token minimum trigger
    with claude.beta.messages.stream(
        model=CLAUDE,
        max_tokens=64,
        betas=[COMPACT],
        context_management=_edit(50_000),
        messages=[{"role": "user", "content": long}],
    ) as stream:
        events = list(stream)
        message = stream.get_final_message()
    typed(*events, message)
    assert [block.type for block in message.content] == ["compaction", "text"]
    assert message.context_management is not None
    assert message.context_management.applied_edits == []
    paused = claude.beta.messages.create(
        model=CLAUDE,
        max_tokens=64,
        betas=[COMPACT],
        context_management=_edit(50_000, pause=True),
        messages=[{"role": "user", "content": long}],
    )
    typed(paused)
    assert paused.stop_reason == "compaction"
    assert [block.type for block in paused.content] == ["compaction"]
    # Replayed, the block stands for everything before it: earlier blocks are neither seen nor billed.
    replay: Any = [
        {"role": "user", "content": long},
        {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in message.content]},
        {"role": "user", "content": "Go on"},
    ]
    later = claude.beta.messages.create(model=CLAUDE, max_tokens=64, betas=[COMPACT], messages=replay)
    typed(later)
    assert later.usage.input_tokens < 1000
    with pytest.raises(anthropic.BadRequestError, match="greater than or equal to 50000"):
        claude.beta.messages.create(
            model=CLAUDE, max_tokens=8, betas=[COMPACT], context_management=_edit(100), messages=replay
        )
    with pytest.raises(anthropic.BadRequestError, match="does not match any of the expected tags"):
        claude.messages.create(model=CLAUDE, max_tokens=64, messages=replay)  # no beta: no such block


def test_anthropic_on_demand_compaction(claude: anthropic.Anthropic) -> None:
    messages: Any = [
        {"role": "user", "content": "Plan a trip"},
        {"role": "assistant", "content": "Where to?"},
        {"role": "user", "content": "Rome"},
    ]
    message = claude.beta.messages.create(
        model=CLAUDE,
        max_tokens=64,
        betas=["compact-2026-09-04"],
        compaction={"type": "summarize"},
        messages=messages,
    )
    typed(message)
    assert message.stop_reason == "compaction"
    [block] = message.content
    assert block.type == "compaction"
    assert open_item(tenant_of({"authorization": "Bearer k1"}), block.encrypted_content) == 1
    with pytest.raises(anthropic.BadRequestError, match="compaction: Extra inputs are not permitted"):
        claude.beta.messages.create(
            model=CLAUDE, max_tokens=64, betas=[COMPACT], compaction={"type": "summarize"}, messages=messages
        )


def test_only_the_api_key_that_made_a_compaction_reads_it() -> None:
    """A compaction item counts the answers it summarized for the key that made it; another key's
    (or a forged one) is context that summarized nothing the backend can count."""
    mine, theirs = tenant_of({"authorization": "Bearer k1"}), tenant_of({"authorization": "Bearer k2"})
    sealed = seal(mine, 3)
    assert open_item(mine, sealed) == 3
    assert open_item(theirs, sealed) is None
    items = [
        {"type": "compaction", "encrypted_content": sealed},
        {"role": "user", "content": "Go on"},
    ]
    payload = {"model": GPT, "input": items}
    assert parse("openai_responses", payload, ByteTokenizer(), salt=mine).prompt.answer_index == 3
    assert parse("openai_responses", payload, ByteTokenizer(), salt=theirs).prompt.answer_index == 0

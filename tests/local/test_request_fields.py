"""Validation in both directions (issue 29 item 5): every field the installed SDKs type is taken, and
what the API would refuse is refused with the provider's own 400.

The known fields are data (``cachekit/providers/request_fields.json``); the first test walks the
installed SDKs' request types (:mod:`tests.local.sdk_fields`) and fails when they type a field or an
item type the file does not list, so a new SDK field is a decision, not a silent 400.
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2
import openai
import orjson
import pytest

from cachekit.local import LocalServer
from cachekit.providers.request_fields import endpoint_fields
from tests.local.conftest import CLAUDE, GPT, claude_client, gpt_client
from tests.local.sdk_fields import DATA, data_sdk_view, sdk_view


def test_the_data_file_lists_what_the_installed_sdks_type() -> None:
    data = orjson.loads(DATA.read_bytes())
    assert data_sdk_view(data) == sdk_view(), (
        "the SDKs type other request fields than cachekit/providers/request_fields.json lists: "
        "run `python -m tests.local.sdk_fields` and review the change"
    )


@pytest.mark.parametrize(
    "endpoint",
    [
        "anthropic_messages",
        "anthropic_count_tokens",
        "openai_chat",
        "openai_responses",
        "openai_responses_compact",
    ],
)
def test_every_typed_field_is_taken(endpoint: str) -> None:
    view = sdk_view()[endpoint]
    table = endpoint_fields(endpoint)
    assert table.unknown_field(view["fields"], frozenset()) is None
    # Beta-only fields with the beta header each names (or any beta), never without one.
    for name in view.get("beta_fields", ()):
        needed = table.beta_headers.get(name, ("some-beta-2026-01-01",))
        assert table.unknown_field([name], frozenset(needed[:1])) is None, name
        assert table.unknown_field([name], frozenset()) == name
    for kind in view.get("item_types", ()):
        assert table.knows_item(kind, frozenset()), kind


def _post(server: LocalServer, path: str, body: dict[str, Any], **headers: str) -> httpx2.Response:
    with httpx2.Client(base_url=server.url) as http:
        return http.post(path, json=body, headers={"x-api-key": "k", **headers})


def test_unknown_top_level_fields_are_the_providers_400(server: LocalServer) -> None:
    with gpt_client(server, key="k", strict=False) as gpt:
        for call in (
            lambda: gpt.responses.create(model=GPT, input="hi", extra_body={"reasoning_budget": 3}),
            lambda: gpt.chat.completions.create(
                model=GPT, messages=[{"role": "user", "content": "hi"}], extra_body={"reasoning_budget": 3}
            ),
        ):
            with pytest.raises(openai.BadRequestError) as refused:
                call()
            assert refused.value.body == {
                "message": "Unknown parameter: 'reasoning_budget'.",
                "type": "invalid_request_error",
                "param": "reasoning_budget",
                "code": "unknown_parameter",
            }
    with claude_client(server, key="k", strict=False) as claude:
        with pytest.raises(anthropic.BadRequestError) as refused_here:
            claude.messages.create(
                model=CLAUDE,
                max_tokens=8,
                messages=[{"role": "user", "content": "hi"}],
                extra_body={"foo": 1},
            )
        assert refused_here.value.body["error"]["message"] == "foo: Extra inputs are not permitted"  # type: ignore[index]
        # A field the SDK does not type but the API takes: accepted.
        claude.messages.create(
            model=CLAUDE, max_tokens=8, messages=[{"role": "user", "content": "hi"}], extra_body={"top_k": 5}
        )


def test_unknown_items_are_the_providers_400(server: LocalServer) -> None:
    refused = _post(server, "/v1/responses", {"model": GPT, "input": [{"type": "memo", "text": "x"}]})
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert (error["param"], error["code"]) == ("input[0]", "invalid_value")
    assert error["message"].startswith("Invalid value: 'memo'. Supported values are: 'additional_tools', ")
    assert "'message'" in error["message"]
    block = {"role": "user", "content": [{"type": "memo", "text": "x"}]}
    refused = _post(server, "/v1/messages", {"model": CLAUDE, "max_tokens": 8, "messages": [block]})
    assert refused.status_code == 400
    message = refused.json()["error"]["message"]
    assert message.startswith(
        "messages.0.content.0: Input tag 'memo' found using 'type' does not match any of the expected "
        "tags: 'text', 'image', "
    )


def test_beta_fields_need_their_beta_header(server: LocalServer) -> None:
    """Context management is a beta of the Messages API: refused without its header (what a client
    that sends it to a server without the beta meets), taken with it."""
    body = {
        "model": CLAUDE,
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "hi"}],
        "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},
    }
    refused = _post(server, "/v1/messages", body)
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == "context_management: Extra inputs are not permitted"
    wrong = _post(server, "/v1/messages", body, **{"anthropic-beta": "compact-2026-09-04"})
    assert wrong.status_code == 400  # another beta's header does not enable the field
    assert wrong.json()["error"]["message"] == "context_management: Extra inputs are not permitted"
    taken = _post(server, "/v1/messages", body, **{"anthropic-beta": "context-management-2025-06-27"})
    assert taken.status_code == 200
    assert taken.json()["context_management"] == {"applied_edits": []}
    compact_edit = {**body, "context_management": {"edits": [{"type": "compact_20260112"}]}}
    needs_its_own = _post(
        server, "/v1/messages", compact_edit, **{"anthropic-beta": "context-management-2025-06-27"}
    )
    assert needs_its_own.status_code == 400
    assert "compact-2026-01-12" in needs_its_own.json()["error"]["message"]

"""What the installed SDKs' request types name, walked from their TypedDicts (:mod:`tests.sdk_paths`):
the top-level fields of each endpoint, the Responses input item types and the Messages content block
types, stable and beta. ``cachekit/providers/request_fields.json`` must say the same
(``tests/local/test_request_fields.py``); ``python -m tests.local.sdk_fields`` rewrites its SDK part.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import anthropic
import openai
import orjson
from anthropic.types import message_count_tokens_params as anthropic_count
from anthropic.types import message_create_params as anthropic_create
from anthropic.types.beta import message_count_tokens_params as beta_count
from anthropic.types.beta import message_create_params as beta_create
from openai.types.chat import completion_create_params as chat_create
from openai.types.responses import response_compact_params as responses_compact
from openai.types.responses import response_create_params as responses_create

from tests.sdk_paths import walk

DATA = Path(__file__).resolve().parents[2] / "cachekit" / "providers" / "request_fields.json"

# Parameters the SDK takes but sends as headers, never in the body.
SDK_ONLY = frozenset({"betas"})

STABLE: dict[str, tuple[type, ...]] = {
    "anthropic_messages": (
        anthropic_create.MessageCreateParamsNonStreaming,
        anthropic_create.MessageCreateParamsStreaming,
    ),
    "anthropic_count_tokens": (anthropic_count.MessageCountTokensParams,),
    "openai_chat": (
        chat_create.CompletionCreateParamsNonStreaming,
        chat_create.CompletionCreateParamsStreaming,
    ),
    "openai_responses": (
        responses_create.ResponseCreateParamsNonStreaming,
        responses_create.ResponseCreateParamsStreaming,
    ),
    "openai_responses_compact": (responses_compact.ResponseCompactParams,),
}
BETA: dict[str, tuple[type, ...]] = {
    "anthropic_messages": (
        beta_create.MessageCreateParamsNonStreaming,
        beta_create.MessageCreateParamsStreaming,
    ),
    "anthropic_count_tokens": (beta_count.MessageCountTokensParams,),
}
# Where a dialect's typed items are: Responses input items, Messages content blocks.
ITEMS = {
    "anthropic_messages": "messages.content",
    "anthropic_count_tokens": "messages.content",
    "openai_responses": "input",
    "openai_responses_compact": "input",
}


def _ordered(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))


def top_level(roots: tuple[type, ...]) -> list[str]:
    """The top-level fields of the request types, in the SDK's order."""
    names = [re.split(r"[.<]", path.path, maxsplit=1)[0] for root in roots for path in walk(root)]
    return [name for name in _ordered(names) if name not in SDK_ONLY]


def item_types(roots: tuple[type, ...], where: str) -> list[str]:
    """The ``type`` tags an item at ``where`` may take, in the SDK's order."""
    pattern = re.compile(re.escape(where) + r"<([^>]+)>")
    return _ordered(
        [match.group(1) for root in roots for path in walk(root) if (match := pattern.fullmatch(path.path))]
    )


def sdk_view() -> dict[str, Any]:
    """Each dialect's fields and item types as the SDKs type them (the SDK part of the data file)."""
    view: dict[str, Any] = {}
    for dialect, roots in STABLE.items():
        fields = top_level(roots)
        entry: dict[str, Any] = {"fields": fields}
        if dialect in BETA:
            entry["beta_fields"] = [name for name in top_level(BETA[dialect]) if name not in fields]
        if dialect in ITEMS:
            items = item_types(roots, ITEMS[dialect])
            entry["item_types"] = items
            if dialect in BETA:
                beta = item_types(BETA[dialect], ITEMS[dialect])
                entry["beta_item_types"] = [name for name in beta if name not in items]
        view[dialect] = entry
    return view


def data_sdk_view(data: dict[str, Any]) -> dict[str, Any]:
    """The SDK part of the data file, in the shape :func:`sdk_view` returns."""
    view: dict[str, Any] = {}
    for dialect, entry in data["dialects"].items():
        view[dialect] = {
            key: list(value)
            for key, value in entry.items()
            if key in ("fields", "beta_fields", "item_types", "beta_item_types")
        }
    return view


def rewrite() -> None:
    """Rewrite the SDK part of the data file from the installed SDKs (the rest is kept)."""
    data = orjson.loads(DATA.read_bytes())
    data["sdk_versions"] = {"anthropic": anthropic.__version__, "openai": openai.__version__}
    for dialect, entry in sdk_view().items():
        data["dialects"].setdefault(dialect, {}).update(entry)
    DATA.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")


if __name__ == "__main__":
    rewrite()
    sys.stdout.write(f"wrote {DATA}\n")

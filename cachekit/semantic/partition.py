"""Which requests the semantic cache may answer, and the exact partition each one lives in.

A semantic hit is only allowed between requests that are identical in everything but the wording of
the last user turn: same provider endpoint, model, system prompt, tools, tool choice, sampling and
output-format parameters, every earlier turn, tenant/credential partition, namespace and embedding
model. All of that is hashed into the *partition*; only the last user turn's text is compared by
meaning, inside one partition.

Not served semantically (the reason is counted):

* the last turn is not a user turn, or carries tool results, images, audio or files (an answer to
  "what is in this picture?" depends on the picture, not the words);
* the request asks for variety (:func:`asks_for_variety`: several answers with ``n`` > 1, or a
  ``temperature`` above the providers' default of 1) unless ``allow_sampling`` is set. A request
  that merely samples at the default is served: opting in to the semantic layer is the user's
  statement that interchangeable questions may share an answer, and the exact cache already replays
  sampled answers (``anthropic`` 2.x has no ``temperature`` parameter at all, so every one of its
  requests samples);
* a request that depends on server-side state or live data (:func:`cachekit.providers.state.classify`,
  the one table of docs/correctness.md): a Responses ``previous_response_id`` or ``conversation``, an
  Anthropic ``container``, a web search, a document given by URL (unless the caller vouched for its
  URLs with ``url_ttl``). What the answer depends on is not in the request, so the partition cannot
  cover it;
* an empty question.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cachekit._types import Dialect
from cachekit.providers.state import UNKEYED_FIELDS, Verdict, classify
from cachekit.shape import canonical

__all__ = ["SemanticRequest", "asks_for_variety", "split_request"]

_PARTITION_DOMAIN = b"cachekit/semantic-partition/v1"
_TEXT_PARTS = frozenset({"text", "input_text"})


@dataclass(frozen=True, slots=True)
class SemanticRequest:
    """A request the semantic cache may answer: its partition id and the question to compare."""

    partition: str
    question: str


def split_request(
    dialect: Dialect,
    body: Mapping[str, Any],
    *,
    scope: Iterable[str],
    options: canonical.CanonicalOptions,
    ignore_fields: frozenset[str] = frozenset(),
    allow_sampling: bool = False,
    urls_vouched: bool = False,
    verdict: Verdict | None = None,
) -> SemanticRequest | str:
    """The partition and question of ``body``, or the reason it cannot be served semantically.

    Args:
        dialect: the request's API.
        body: the parsed request body.
        scope: what else bounds the partition, as strings: namespace, the exact cache's partition
            (tenant or credential HMAC), endpoint, embedding model id.
        options: the canonicalization options the exact layer uses (tool order, whitespace).
        ignore_fields: top-level fields the exact key leaves out (``CacheConfig.ignore_fields``).
        allow_sampling: also serve requests that ask for variety (:func:`asks_for_variety`).
        urls_vouched: the caller takes content given by URL as unchanged (``url_ttl``).
        verdict: :func:`~cachekit.providers.state.classify`'s verdict on ``body`` when the caller
            already has it (the pipeline classified it once, at admission); else it is asked here.
    """
    if not allow_sampling and asks_for_variety(body):
        return "sampling"
    if verdict is None:
        verdict = classify(dialect, body)
    if remaining := verdict.remaining(urls_vouched=urls_vouched):
        return "server_state" if any(r.startswith("server-state:") for r in remaining) else "live_data"
    if dialect == "openai_responses":
        split = _split_responses(body)
    elif dialect in ("anthropic_messages", "openai_chat"):
        split = _split_messages(body)
    else:
        return "endpoint"
    if isinstance(split, str):
        return split
    question, rest = split
    if not question.strip():
        return "empty_question"
    kept = {k: v for k, v in rest.items() if k not in UNKEYED_FIELDS and k not in ignore_fields}
    digest = hashlib.sha256()
    for field in (_PARTITION_DOMAIN, *(s.encode() for s in scope), dialect.encode()):
        digest.update(len(field).to_bytes(8, "big"))
        digest.update(field)
    digest.update(canonical.dumps(canonical.canonicalize(kept, dialect, options).body, dialect))
    return SemanticRequest("sem1:" + digest.hexdigest(), question)


def asks_for_variety(body: Mapping[str, Any]) -> bool:
    """Whether the request asks for variety rather than for an answer: several choices (``n`` > 1,
    Chat Completions) or a ``temperature`` above 1, the default of both providers (OpenAI accepts up
    to 2; Anthropic's maximum is 1, so no Anthropic request asks for it this way).

    Sampling at the default is not asking for variety: the user who turns the semantic layer on has
    said that interchangeable questions may share an answer.
    """
    return _number(body.get("n")) > 1 or _number(body.get("temperature")) > 1


def _number(value: Any) -> float:
    """``value`` as a number; 0 when it is none (absent, ``null``, a boolean, a string)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _split_messages(body: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | str:
    """Anthropic Messages and Chat Completions: the last message must be the user's, text only."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        return "no_user_turn"
    last = messages[-1]
    if last.get("role") != "user":
        return "no_user_turn"
    question = _text_only(last.get("content"))
    if question is None:
        return "not_text"
    rest = dict(body)
    rest["messages"] = [*messages[:-1], {**last, "content": None}]
    return question, rest


def _split_responses(body: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | str:
    """OpenAI Responses: ``input`` is the question itself, or a list whose last item is a user message."""
    items = body.get("input")
    rest = dict(body)
    if isinstance(items, str):
        rest["input"] = None
        return items, rest
    if not isinstance(items, list) or not items or not isinstance(items[-1], dict):
        return "no_user_turn"
    last = items[-1]
    if last.get("type", "message") != "message" or last.get("role") != "user":
        return "no_user_turn"
    question = _text_only(last.get("content"))
    if question is None:
        return "not_text"
    rest["input"] = [*items[:-1], {**last, "content": None}]
    return question, rest


def _text_only(content: Any) -> str | None:
    """The text of a message's content, or ``None`` when it holds anything but text parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts: list[str] = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") not in _TEXT_PARTS:
            return None
        text = part.get("text")
        if not isinstance(text, str):
            return None
        texts.append(text)
    return "\n".join(texts)

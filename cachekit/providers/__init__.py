"""Which provider and API dialect a request speaks, as data plus small functions.

A request is *routed* when its method and path name an endpoint cachekit understands (Anthropic
Messages, OpenAI Chat Completions or Responses). The provider is then recognized from the host, so an
OpenAI-compatible endpoint (DeepSeek, Kimi, GLM, Bailian, Gemini, xAI) is cached with the dialect it
speaks. Anything else is not routed and passes through untouched. A routed request that depends on
state outside its body (a Responses ``conversation``, a live web search, ...) is never cached:
:func:`server_state` says why (:mod:`cachekit.providers.state`). Only a complete answer of its dialect
is stored: :func:`incomplete_answer` (:mod:`cachekit.providers.answers`). A host outside the table may
announce the prompt-caching rules it bills by (``x-cachekit-rules``): :class:`HostRules`
(:mod:`cachekit.providers.announced`). Answers as stored and replayed: each dialect's SSE streams
(:mod:`cachekit.providers.sse`) and the prompt fields a provider echoes back
(:mod:`cachekit.providers.echo`). Errors in each provider's shape, for every answer cachekit or its
local backend makes: :mod:`cachekit.providers.error_bodies`.
"""

from __future__ import annotations

from cachekit.providers.announced import NO_PROMPT_CACHE, RULES_HEADER, HostRules
from cachekit.providers.answers import incomplete_answer
from cachekit.providers.error_bodies import error_body
from cachekit.providers.registry import (
    CREDENTIAL_HEADERS,
    PROVIDERS,
    Family,
    Provider,
    Route,
    dialect_of,
    family_of,
    route_request,
)
from cachekit.providers.state import server_state

__all__ = [
    "CREDENTIAL_HEADERS",
    "NO_PROMPT_CACHE",
    "PROVIDERS",
    "RULES_HEADER",
    "Family",
    "HostRules",
    "Provider",
    "Route",
    "dialect_of",
    "error_body",
    "family_of",
    "incomplete_answer",
    "route_request",
    "server_state",
]

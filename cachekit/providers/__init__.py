"""Which provider and API dialect a request speaks, as data plus small functions.

A request is *routed* when its method and path name an endpoint cachekit understands (Anthropic
Messages, OpenAI Chat Completions or Responses). The provider is then recognized from the host, so an
OpenAI-compatible endpoint (DeepSeek, Kimi, GLM, Bailian, Gemini, xAI) is cached with the dialect it
speaks. Anything else is not routed and passes through untouched.
"""

from __future__ import annotations

from cachekit.providers.registry import (
    CREDENTIAL_HEADERS,
    PROVIDERS,
    Provider,
    Route,
    error_body,
    route_request,
)

__all__ = ["CREDENTIAL_HEADERS", "PROVIDERS", "Provider", "Route", "error_body", "route_request"]

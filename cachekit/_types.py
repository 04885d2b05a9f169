"""Small frozen types shared by every layer."""

from __future__ import annotations

from typing import Any, Literal, NewType

__all__ = ["CacheOutcome", "Dialect", "JSONObject", "PartitionId", "Section", "ToolOrder", "Ttl"]

#: The API dialects cachekit understands. A provider speaks one or more of them.
Dialect = Literal["anthropic_messages", "anthropic_count_tokens", "openai_chat", "openai_responses"]

#: What the response cache did for one request (sent back as ``x-cachekit-cache``).
CacheOutcome = Literal["hit", "miss", "bypass", "semantic"]

#: The sections of a prompt, in the prefix order of the providers' caches.
Section = Literal["tools", "system", "messages"]

#: A prompt-cache entry's lifetime option (Anthropic's ``cache_control.ttl``).
Ttl = Literal["5m", "1h"]

#: How tools are ordered in the canonical body: as the caller sent them, or sorted by name.
ToolOrder = Literal["keep", "sort"]

#: A parsed JSON object (request or response body).
JSONObject = dict[str, Any]

#: The partition a cache entry belongs to: an HMAC of the credential, or an explicit tenant.
PartitionId = NewType("PartitionId", str)

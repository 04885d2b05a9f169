"""The provider table and request routing.

Providers are data: the hosts that identify them, the dialects they speak, the request headers that
change an answer (and therefore belong in the cache key) and the headers that carry credentials.
Routing is a pure function of method and URL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from cachekit._types import Dialect

__all__ = [
    "CREDENTIAL_HEADERS",
    "ENDPOINTS",
    "PROVIDERS",
    "ROUTING_HEADERS",
    "RULES_AS",
    "STREAM_USAGE",
    "Family",
    "Provider",
    "Route",
    "dialect_of",
    "family_of",
    "route_request",
]

#: Whose API a dialect belongs to: Anthropic's or OpenAI's (whose error shapes, ids and headers it
#: answers with; the compatible providers copy the API they speak).
Family = Literal["anthropic", "openai"]

# Path suffixes of the endpoints cachekit caches, longest first so ".../messages/count_tokens" is not
# mistaken for ".../messages". Suffixes (not whole paths) because compatible providers mount the same
# API under their own prefixes: /compatible-mode/v1/chat/completions, /api/paas/v4/chat/completions,
# /v1beta/openai/chat/completions, /anthropic/v1/messages.
ENDPOINTS: tuple[tuple[str, Dialect], ...] = (
    ("/v1/messages/count_tokens", "anthropic_count_tokens"),
    ("/v1/messages", "anthropic_messages"),
    ("/chat/completions", "openai_chat"),
    ("/responses", "openai_responses"),
)

_ANTHROPIC_DIALECTS: frozenset[Dialect] = frozenset({"anthropic_messages", "anthropic_count_tokens"})
_OPENAI_DIALECTS: frozenset[Dialect] = frozenset({"openai_chat", "openai_responses"})


def family_of(api: Dialect | Family) -> Family:
    """The family ``api`` belongs to (a family is its own)."""
    return "anthropic" if api == "anthropic" or api in _ANTHROPIC_DIALECTS else "openai"


def _endpoint(method: str, path: str) -> tuple[Dialect, str] | None:
    """The dialect of the endpoint ``path`` names and the path prefix it hangs off. Only ``POST`` to
    one of :data:`ENDPOINTS` has one (method names are case-sensitive: RFC 9110, 9.1)."""
    if method != "POST":
        return None
    trimmed = path.rstrip("/")
    for suffix, dialect in ENDPOINTS:
        if trimmed.endswith(suffix):
            return dialect, trimmed[: -len(suffix)]
    return None


def dialect_of(method: str, path: str) -> Dialect | None:
    """The dialect a request speaks, by its method and path alone (any host, any prefix); ``None``
    for anything but a call to one of :data:`ENDPOINTS`."""
    found = _endpoint(method, path)
    return None if found is None else found[0]


# Headers whose value changes what the provider answers. The SDKs' volatile headers (x-stainless-*,
# idempotency keys, user-agent, retry counts) are deliberately absent: they never reach the key.
# The workspace and user profile (SDK parameters sent as headers) select whose settings apply.
_ANTHROPIC_KEY_HEADERS = (
    "anthropic-version",
    "anthropic-beta",
    "anthropic-workspace-id",
    "anthropic-user-profile-id",
)
_OPENAI_KEY_HEADERS = ("openai-organization", "openai-project", "openai-beta")

# Headers that carry a credential; their value is HMAC'd into the partition and never stored.
CREDENTIAL_HEADERS = ("x-api-key", "authorization", "api-key", "x-goog-api-key")


@dataclass(frozen=True, slots=True)
class Provider:
    """A hosted API: how to recognize it and which of its request headers matter."""

    name: str
    hosts: tuple[str, ...]
    dialects: frozenset[Dialect]
    key_headers: tuple[str, ...]
    host_suffixes: tuple[str, ...] = ()
    """Hosts under these domains are this provider too (Azure's per-resource hosts)."""
    rules_as: str | None = None
    """The provider whose caching rules (cache_rules.json) apply to this one's models."""
    routing_header: str | None = None
    """The Chat Completions header that routes a conversation to one cache server, as OpenAI's
    ``prompt_cache_key`` does (xAI: "The x-grok-conv-id HTTP header routes requests with the same
    conversation ID to the same server", docs.x.ai, Prompt Caching, Maximizing Cache Hits)."""
    stream_usage: bool = False
    """Its Chat Completions accept ``stream_options.include_usage`` and then end a stream with a
    usage-only chunk (``"choices": []``), every other chunk carrying ``"usage": null``, as OpenAI
    documents it. cachekit then asks for usage on every Chat stream it may store, and gives the
    caller that did not ask for it the stream without it. Off for providers that are not known to
    accept the option: their requests go as the caller wrote them."""


PROVIDERS: tuple[Provider, ...] = (
    Provider("anthropic", ("api.anthropic.com",), _ANTHROPIC_DIALECTS, _ANTHROPIC_KEY_HEADERS),
    # stream_options.include_usage: the Chat Completions API reference (the SDK's
    # ChatCompletionStreamOptionsParam says the same: a usage-only last chunk, usage null elsewhere).
    Provider("openai", ("api.openai.com",), _OPENAI_DIALECTS, _OPENAI_KEY_HEADERS, stream_usage=True),
    # DeepSeek and Kimi also serve an Anthropic-compatible API under /anthropic.
    # stream_options.include_usage: DeepSeek's Create Chat Completion reference lists it, with OpenAI's
    # wording (a usage-only chunk before [DONE]).
    Provider(
        "deepseek",
        ("api.deepseek.com",),
        _OPENAI_DIALECTS | _ANTHROPIC_DIALECTS,
        _OPENAI_KEY_HEADERS + _ANTHROPIC_KEY_HEADERS,
        stream_usage=True,
    ),
    Provider(
        "kimi",
        ("api.moonshot.ai", "api.moonshot.cn"),
        _OPENAI_DIALECTS | _ANTHROPIC_DIALECTS,
        _OPENAI_KEY_HEADERS + _ANTHROPIC_KEY_HEADERS,
    ),
    # Z.ai (/api/anthropic) and Model Studio (/apps/anthropic) serve an Anthropic-compatible API too.
    Provider(
        "glm",
        ("open.bigmodel.cn", "api.z.ai"),
        _OPENAI_DIALECTS | _ANTHROPIC_DIALECTS,
        _OPENAI_KEY_HEADERS + _ANTHROPIC_KEY_HEADERS,
    ),
    # stream_options.include_usage: Model Studio's OpenAI-compatible Chat documents it (the last chunk
    # carries the usage, its choices empty).
    Provider(
        "bailian",
        ("dashscope.aliyuncs.com", "dashscope-intl.aliyuncs.com", "dashscope-us.aliyuncs.com"),
        _OPENAI_DIALECTS | _ANTHROPIC_DIALECTS,
        _OPENAI_KEY_HEADERS + _ANTHROPIC_KEY_HEADERS,
        stream_usage=True,
    ),
    Provider("gemini", ("generativelanguage.googleapis.com",), _OPENAI_DIALECTS, _OPENAI_KEY_HEADERS),
    Provider("xai", ("api.x.ai",), _OPENAI_DIALECTS, _OPENAI_KEY_HEADERS, routing_header="x-grok-conv-id"),
    # Azure OpenAI: one host per resource. "On GPT-5.6 models and later model families, cache writes can
    # incur charges", and the GPT-5.6 family takes the same breakpoints (learn.microsoft.com, Azure
    # OpenAI prompt caching; the Foundry SDK's PromptCacheBreakpointConfig).
    Provider(
        "azure",
        (),
        _OPENAI_DIALECTS,
        _OPENAI_KEY_HEADERS,
        host_suffixes=(".openai.azure.com", ".cognitiveservices.azure.com"),
        rules_as="openai",
    ),
)

_BY_HOST: dict[str, Provider] = {host: p for p in PROVIDERS for host in p.hosts}
#: Providers billed by another's caching rules (Azure OpenAI by OpenAI's): provider -> whose rules.
RULES_AS: dict[str, str] = {p.name: p.rules_as for p in PROVIDERS if p.rules_as}
#: Providers that route a conversation to one cache server by a header (xAI's x-grok-conv-id).
ROUTING_HEADERS: dict[str, str] = {p.name: p.routing_header for p in PROVIDERS if p.routing_header}
#: Providers whose Chat streams cachekit asks for usage (``Provider.stream_usage``). The others (Kimi,
#: GLM, Gemini, xAI, Azure, whose support depends on the api-version) and hosts outside the table get
#: the request as written: a stream of theirs stored without usage serves only streams that did not
#: ask for it (``cachekit.providers.answers.carries_usage``).
STREAM_USAGE: frozenset[str] = frozenset(p.name for p in PROVIDERS if p.stream_usage)


@dataclass(frozen=True, slots=True)
class Route:
    """Where a routed request goes: provider, dialect, and the base URL the endpoint hangs off."""

    provider: str
    dialect: Dialect
    base_url: str
    key_headers: tuple[str, ...]


def _provider_for(host: str, dialect: Dialect) -> Provider | None:
    provider = _BY_HOST.get(host) or next(
        (p for p in PROVIDERS if p.host_suffixes and host.endswith(p.host_suffixes)), None
    )
    if provider is not None and dialect in provider.dialects:
        return provider
    return None


def route_request(method: str, scheme: str, host: str, port: int | None, path: str) -> Route | None:
    """Route a request to a provider dialect, or return ``None`` for anything cachekit leaves alone.

    Only ``POST`` to a known endpoint is routed. A host outside the table (a proxy, a gateway, the local
    backend) is routed by path alone and named by its host, so its entries never mix with a known
    provider's.
    """
    found = _endpoint(method, path)
    if found is None:
        return None
    dialect, prefix = found
    authority = host if port is None else f"{host}:{port}"
    base_url = f"{scheme}://{authority}{prefix}"
    provider = _provider_for(host, dialect)
    if provider is not None:
        return Route(provider.name, dialect, base_url, provider.key_headers)
    generic = _ANTHROPIC_KEY_HEADERS if dialect in _ANTHROPIC_DIALECTS else _OPENAI_KEY_HEADERS
    return Route(authority, dialect, base_url, generic)

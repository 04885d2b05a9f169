"""The local backend: provider HTTP APIs answered by a local engine, billed by the providers' rules.

:class:`LocalBackend` is sans-I/O: :meth:`LocalBackend.handle` takes a request's method, path,
headers and body and returns a :class:`~cachekit.local.wire.Reply`. Two thin shells serve it: the
in-process httpx transports (:mod:`cachekit.local.transport`) and a real HTTP server
(:mod:`cachekit.local.server`, ``cachekit serve``).

A request goes through: routing (the providers' own table:
:func:`cachekit.providers.registry.dialect_of`) → JSON → validation (:mod:`cachekit.local.parse`, the
provider's error shapes) → model check → context-window check → cache accounting
(:mod:`cachekit.local.accounting`, which may refuse the request as the provider would, e.g. a 5th
breakpoint) → the engine → rendering (:mod:`cachekit.local.wire`). Billing is separate from any
physical reuse the engine does (its prefix KV cache), as at the providers.

Which rules bill a request (``rules=``): ``"auto"`` bills each API by its provider's rules
(Messages: Anthropic's explicit breakpoints; Chat Completions and Responses: OpenAI's automatic
prefix caching); ``"anthropic"`` applies the explicit-breakpoint rules to every API (OpenAI-compatible
providers with Anthropic-style markers, such as Alibaba Cloud Model Studio); ``"openai"`` applies
automatic caching to every API; ``"none"`` bills every token as uncached.

Every answer names the rules it was billed by in ``x-cachekit-rules`` (``anthropic``, ``bailian``,
``openai`` or ``none``: :meth:`LocalBackend.rules_for`), so cachekit plans breakpoints for the backend
without being told which provider it stands in for (:class:`cachekit.providers.HostRules`).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

import orjson

from cachekit import _fork
from cachekit._types import Dialect, Ttl
from cachekit.cost import genai
from cachekit.errors import RequestRefusedError, ScriptedError
from cachekit.local.accounting import AnthropicCache, OpenAICache, Retention
from cachekit.local.clock import Clock
from cachekit.local.compaction import seal
from cachekit.local.encoding import MAX_DECODED, decoded_body
from cachekit.local.engine import Engine
from cachekit.local.parse import Parsed, check_fields, parse
from cachekit.local.wire import (
    Billing,
    Empty,
    Extras,
    Reply,
    error_reply,
    family_for,
    json_reply,
    render,
    responses_usage,
)
from cachekit.providers.announced import NO_PROMPT_CACHE, RULES_HEADER
from cachekit.providers.cache_rules import cache_rules, default_cache_rules
from cachekit.providers.error_bodies import BAD_JSON, stream_error_event
from cachekit.providers.registry import Family, dialect_of, family_of

__all__ = ["BackendStats", "LocalBackend", "Rules"]

logger = logging.getLogger("cachekit.local")

#: Whose prompt-caching rules bill the responses (auto: each API by its provider's).
Rules = Literal["auto", "anthropic", "openai", "none"]
#: What OpenAI's ``prompt_cache_key`` does in the emulator (see :class:`LocalBackend`).
CacheKeyReading = Literal["partition", "routing"]
_RULES = ("auto", "anthropic", "openai", "none")
_TENANT_DOMAIN = b"cachekit.local.tenant.v1\x00"


@dataclass(frozen=True)
class BackendStats:
    """Counters of one backend: requests answered, errors returned, tokens billed by kind."""

    requests: int
    errors: int
    input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int


def tenant_of(headers: Mapping[str, str]) -> bytes:
    """The caller's partition: a digest of its credential (caches never cross API keys)."""
    credential = headers.get("x-api-key") or headers.get("authorization") or ""
    return hashlib.sha256(_TENANT_DOMAIN + credential.encode()).digest()[:16]


class LocalBackend:
    """Answers the Anthropic and OpenAI HTTP APIs from a local engine, with the providers' cache billing.

    Args:
        engine: what answers; by default the instant :class:`~cachekit.local.scripted.ScriptedEngine`.
        rules: which provider's prompt-caching rules bill each API (see the module docstring).
        clock: the time the cache's TTLs run on (a :class:`~cachekit.local.clock.ManualClock` lets a
            test expire entries); monotonic seconds by default.
        capacity_tokens: how many prompt tokens the simulated provider cache holds (LRU beyond).
        models: the model names accepted; others get the provider's 404. By default every model in
            cachekit's price and cache-rule tables plus the engine's own name.
        accept_any_model: accept every model name (a test double of an unknown provider).
        announce: name the rules each answer is billed by in its ``x-cachekit-rules`` header (the
            real providers do not; :class:`cachekit.testing.FakeUpstream` imitates them).
        strict_fields: refuse top-level fields, input items and content blocks the API does not take
            with the provider's 400 (:mod:`cachekit.providers.request_fields`); off for a test double
            that takes anything.
        stored_responses: how many Responses answers sent with ``store`` (the API's default) are kept
            for ``GET /v1/responses/{id}`` and ``previous_response_id``, least recently used first out.
        max_body: the most bytes a request body may take once its ``Content-Encoding`` is undone.
        prompt_cache_key: what OpenAI's ``prompt_cache_key`` does: ``partition`` (another key is
            another cache: a test of a key's effect sees it always) or ``routing`` (a hint that sends
            requests to a server that holds their prefix, as OpenAI's guide describes it: the emulator's
            one cache serves every key, so the key changes nothing billed).
    """

    def __init__(
        self,
        engine: Engine | None = None,
        *,
        rules: Rules = "auto",
        clock: Clock | None = None,
        capacity_tokens: int = 50_000_000,
        models: Iterable[str] | None = None,
        accept_any_model: bool = False,
        announce: bool = True,
        strict_fields: bool = True,
        stored_responses: int = 1000,
        max_body: int = MAX_DECODED,
        prompt_cache_key: CacheKeyReading = "partition",
    ) -> None:
        if rules not in _RULES:
            raise ValueError(f"rules must be one of {', '.join(_RULES)}, not {rules!r}")
        if engine is None:
            from cachekit.local.scripted import ScriptedEngine

            engine = ScriptedEngine()
        self.engine = engine
        self.rules: Rules = rules
        # Explicit breakpoints on the Messages API follow Anthropic's table; on the OpenAI-compatible
        # APIs (rules="anthropic") they follow Alibaba Cloud Model Studio's, whose API that is.
        self._anthropic = AnthropicCache(clock=clock, capacity_tokens=capacity_tokens)
        self._bailian = AnthropicCache(provider="bailian", clock=clock, capacity_tokens=capacity_tokens)
        self._openai = OpenAICache(clock=clock, capacity_tokens=capacity_tokens)
        # GPT-5.6 and later: explicit breakpoints (and an implicit one), billed writes.
        self._openai_explicit = AnthropicCache(
            provider="openai", clock=clock, capacity_tokens=capacity_tokens
        )
        self._models = frozenset(models) if models is not None else None
        self._accept_any_model = accept_any_model
        self._announce = announce
        if prompt_cache_key not in ("partition", "routing"):
            raise ValueError(f"prompt_cache_key must be 'partition' or 'routing', not {prompt_cache_key!r}")
        self._key_partitions = prompt_cache_key == "partition"
        self._strict = strict_fields
        self._max_body = max_body
        self._stored: OrderedDict[str, _Stored] = OrderedDict()
        self._store_limit = max(0, stored_responses)
        self._lock = _fork.lock(self)  # the counters
        self._requests = 0
        self._errors = 0
        self._billed = [0, 0, 0]

    # -- public -------------------------------------------------------------------------------

    @property
    def stats(self) -> BackendStats:
        """A snapshot of the counters."""
        with self._lock:
            total, read, write = self._billed
            return BackendStats(self._requests, self._errors, total, read, write)

    def handle(
        self, method: str, path: str, headers: Mapping[str, str], body: bytes, *, host: str = "localhost"
    ) -> Reply:
        """Answer one request (``headers`` with lower-case names). Never raises for bad input."""
        lowered = {key.lower(): value for key, value in headers.items()}
        dialect = dialect_of(method, path)
        route = _route(method, path, lowered) if dialect is None else None
        family = "openai" if route is not None else family_for(dialect, lowered)
        with self._lock:
            self._requests += 1
        try:
            if route is not None:
                reply = self._serve_route(route, lowered, body, host)
            else:
                reply = self._serve(
                    method=method,
                    path=path,
                    dialect=dialect,
                    family=family,
                    headers=lowered,
                    body=body,
                    host=host,
                )
        except Exception:  # a bug here must cost one request its 500, never the connection or the server
            logger.exception("the local backend failed on a %s request", dialect or "non-API")
            reply = error_reply(family, 500, "Internal server error")
        if reply.status >= 400:
            with self._lock:
                self._errors += 1
        return replace(reply, headers=(*reply.headers, *self.announcement(family)))

    def rules_for(self, family: Family) -> str:
        """The provider whose prompt-caching rules bill the APIs of ``family`` (``anthropic``: Messages;
        ``openai``: Chat Completions and Responses): a name of cachekit's cache-rules table, or
        ``none``."""
        rules = self.rules
        if rules == "auto":
            rules = family
        if rules == "anthropic":
            # Explicit breakpoints on the OpenAI-compatible APIs are Alibaba Cloud Model Studio's.
            return "anthropic" if family == "anthropic" else "bailian"
        return rules if rules == "openai" else NO_PROMPT_CACHE

    def announcement(self, family: Family) -> tuple[tuple[str, str], ...]:
        """The header that names the rules an answer in ``family``'s shape is billed by (none when
        ``announce`` is off). Every answer carries it, errors included."""
        return ((RULES_HEADER, self.rules_for(family)),) if self._announce else ()

    def close(self) -> None:
        """Close the engine (it persists its caches where it keeps them on disk)."""
        self.engine.close()

    def __enter__(self) -> LocalBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- internals ------------------------------------------------------------------------------

    def _serve(
        self,
        *,
        method: str,
        path: str,
        dialect: Dialect | None,
        family: Family,
        headers: dict[str, str],
        body: bytes,
        host: str,
    ) -> Reply:
        if dialect is None:
            message = "Not Found" if family == "anthropic" else f"Invalid URL ({method} {path})"
            return error_reply(family, 404, message, code="")  # OpenAI: no code for an unknown path
        try:
            payload = self._payload(family, headers, body)
            tenant = tenant_of(headers)
            effective = self._resolved(dialect, payload, tenant)
            betas = _betas(headers) if family == "anthropic" else frozenset()
            parsed = parse(
                dialect, effective, self.engine.tokenizer, salt=tenant, betas=betas, strict=self._strict
            )
            self._check_model(family, parsed)
            self._check_context(dialect, parsed)
            billing = self._bill(dialect, effective, parsed, tenant)
        except RequestRefusedError as error:
            return error_reply(family, error.status, error.message, param=error.param, code=error.code)
        if dialect == "anthropic_count_tokens":
            return render(dialect, payload, Empty(), billing)
        compaction = parsed.compaction
        compacting = compaction is not None and compaction.triggered(billing.total)
        extras = Extras(
            host=host,
            compaction=seal(tenant, parsed.prompt.answer_index) if compacting else None,
            summary=f"Summary of the conversation so far ({parsed.prompt.answer_index} answers).",
            context_management=compaction is not None and compaction.edits,
            keep=self._keeper(payload, effective, tenant) if dialect == "openai_responses" else None,
        )
        try:
            if compacting and compaction is not None and compaction.pause:
                generation: Any = Empty("compaction")
            else:
                generation = self.engine.generate(parsed.prompt)
            reply = render(dialect, payload, generation, billing, extras)
        except ScriptedError as error:
            return error_reply(family, error.status, error.message)
        except Exception:  # an engine failure is the provider's 500, never a crashed server
            logger.exception("the %s engine failed", self.engine.name)
            return error_reply(family, 500, "Internal server error")
        if reply.events is not None:
            return Reply(
                reply.status, reply.headers, events=_guarded(reply.events, dialect, self.engine.name)
            )
        return reply

    # -- requests beside the generation endpoints --------------------------------------------------

    def _payload(self, family: Family, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
        """The request's JSON object, its ``Content-Encoding`` undone."""
        body = decoded_body(headers, body, self._max_body)
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise RequestRefusedError(BAD_JSON[family]) from None
        if not isinstance(payload, dict):
            raise RequestRefusedError(BAD_JSON[family])
        return payload

    def _serve_route(self, route: _Route, headers: dict[str, str], body: bytes, host: str) -> Reply:
        """The Responses API's other requests: a WebSocket attempt, a stored response, compaction."""
        if route.kind == "websocket":
            # "Responses WebSocket mode" is not offered: 426 makes a client (Codex) fall back to HTTP
            # at once, where any other failure goes through its retries first.
            reply = error_reply(
                "openai", 426, "The Responses WebSocket mode is not offered here: send POST /v1/responses."
            )
            return replace(reply, headers=(*reply.headers, ("connection", "close")))
        tenant = tenant_of(headers)
        if route.kind in ("retrieve", "delete"):
            with self._lock:
                stored = self._stored.get(route.response_id)
                found = stored is not None and stored.tenant == tenant
                if found and route.kind == "delete":
                    del self._stored[route.response_id]
                elif found:
                    self._stored.move_to_end(route.response_id)
            if not found or stored is None:
                message = f"Response with id '{route.response_id}' not found."
                return error_reply("openai", 404, message, param="response_id")
            if route.kind == "delete":
                return json_reply("openai", {"id": route.response_id, "object": "response", "deleted": True})
            return json_reply("openai", stored.response)
        try:
            return self._compact(headers, body, tenant)
        except RequestRefusedError as error:
            return error_reply("openai", error.status, error.message, param=error.param, code=error.code)

    def _compact(self, headers: dict[str, str], body: bytes, tenant: bytes) -> Reply:
        """``POST /v1/responses/compact``: the conversation's user messages, then one compaction item."""
        payload = self._payload("openai", headers, body)
        if self._strict:
            check_fields("openai_responses_compact", payload)
        effective = self._resolved("openai_responses", payload, tenant)
        if "input" not in effective:
            effective = {**effective, "input": []}
        probe = {**effective, "input": effective["input"] or [{"role": "user", "content": ""}]}
        parsed = parse("openai_responses", probe, self.engine.tokenizer, salt=tenant, strict=False)
        self._check_model("openai", parsed)
        billing = self._bill("openai_responses", probe, parsed, tenant)
        items = effective["input"] if isinstance(effective["input"], list) else []
        users = [
            {
                "id": "msg_" + secrets.token_hex(24),
                "type": "message",
                "status": "completed",
                "role": "user",
                "content": _input_parts(item.get("content")),
            }
            for item in items
            if isinstance(item, dict)
            and item.get("type", "message") == "message"
            and item.get("role") == "user"
        ]
        compaction = {
            "id": "cmp_" + secrets.token_hex(24),
            "type": "compaction",
            "encrypted_content": seal(tenant, parsed.prompt.answer_index),
        }
        usage = responses_usage(billing)
        return json_reply(
            "openai",
            {
                "id": "resp_" + secrets.token_hex(24),
                "object": "response.compaction",
                "created_at": int(time.time()),
                "output": [*users, compaction],
                "usage": usage,
            },
        )

    def _resolved(self, dialect: Dialect, payload: dict[str, Any], tenant: bytes) -> dict[str, Any]:
        """The request as the model sees it: a Responses ``previous_response_id`` replaced by the
        stored conversation it names (its input and output, then this request's input; its
        instructions are not carried over, as the API documents)."""
        rid = payload.get("previous_response_id") if dialect == "openai_responses" else None
        if rid is None:
            return payload
        with self._lock:
            stored = self._stored.get(rid) if isinstance(rid, str) else None
            if stored is not None and stored.tenant == tenant:
                self._stored.move_to_end(rid)
            else:
                stored = None
        if stored is None:
            raise RequestRefusedError(
                f"Previous response with id '{rid}' not found.", status=404, param="previous_response_id"
            )
        new = payload.get("input", [])
        new_items = [{"role": "user", "content": new}] if isinstance(new, str) else new
        if not isinstance(new_items, list):
            raise RequestRefusedError(
                "Invalid 'input': expected a string or an array.", param="input", code="invalid_value"
            )
        history = [*stored.input, *stored.response.get("output", [])]
        return {
            **{key: value for key, value in payload.items() if key != "previous_response_id"},
            "input": [*history, *new_items],
        }

    def _keeper(self, payload: dict[str, Any], effective: dict[str, Any], tenant: bytes) -> Any:
        """What keeps a Responses answer sent with ``store`` (the default); ``None`` with ``store: false``."""
        if payload.get("store") is False or self._store_limit == 0:
            return None
        items = effective.get("input", [])
        conversation = [{"role": "user", "content": items}] if isinstance(items, str) else list(items)

        def keep(response: dict[str, Any]) -> None:
            with self._lock:
                self._stored[response["id"]] = _Stored(tenant, conversation, response)
                while len(self._stored) > self._store_limit:
                    self._stored.popitem(last=False)

        return keep

    def _check_model(self, family: Family, parsed: Parsed) -> None:
        model = parsed.prompt.model
        if self._accept_any_model or model == self.engine.name:
            return
        known = self._models if self._models is not None else _known_models()
        if model in known:
            return
        if self._models is None and (
            model.lower() in known
            or _known_prefix(model)
            or genai.knows(family, model)
            # A later version of a family whose rules the provider says hold for later versions.
            or default_cache_rules().resolve(family, model)[1] == "later"
        ):
            return
        if family == "anthropic":
            raise RequestRefusedError(f"model: {model}", status=404)
        raise RequestRefusedError(
            f"The model `{model}` does not exist or you do not have access to it.",
            status=404,
            code="model_not_found",
        )

    def _check_context(self, dialect: Dialect, parsed: Parsed) -> None:
        family = family_of(dialect)
        window = _context_window(family, parsed.prompt.model, self.engine.context_window)
        if window is None:
            return
        length = max(self.engine.prompt_tokens(parsed.prompt), sum(s.tokens for s in parsed.segments))
        if length <= window:
            return
        if family == "anthropic":
            raise RequestRefusedError(f"prompt is too long: {length} tokens > {window} maximum")
        if dialect == "openai_responses":
            raise RequestRefusedError(
                "Your input exceeds the context window of this model. "
                "Please adjust your input and try again.",
                param="input",
                code="context_length_exceeded",
            )
        raise RequestRefusedError(
            f"This model's maximum context length is {window} tokens. However, your messages resulted in "
            f"{length} tokens. Please reduce the length of the messages.",
            param="messages",
            code="context_length_exceeded",
        )

    def _bill(self, dialect: Dialect, payload: dict[str, Any], parsed: Parsed, tenant: bytes) -> Billing:
        total = sum(segment.tokens for segment in parsed.segments)
        rules = self.rules_for(family_of(dialect))
        if dialect == "anthropic_count_tokens" or rules == NO_PROMPT_CACHE:
            billing = Billing(total)
        elif rules != "openai":
            # The rule sets lock their own state: no backend lock around them.
            explicit = self._anthropic if rules == "anthropic" else self._bailian
            usage = explicit.account(
                model=parsed.prompt.model,
                partition=tenant,
                segments=parsed.segments,
                automatic=parsed.automatic,
                context=parsed.context,
            )
            billing = Billing(
                total,
                usage.cache_read_input_tokens,
                usage.ephemeral_5m_input_tokens,
                usage.ephemeral_1h_input_tokens,
            )
        elif cache_rules("openai", parsed.prompt.model).mode == "explicit":
            billing = self._bill_breakpoints(dialect, payload, parsed, tenant)
        else:
            retention: Retention = "24h" if payload.get("prompt_cache_retention") == "24h" else "in_memory"
            key = payload.get("prompt_cache_key") if self._key_partitions else None
            cached = self._openai.account(
                model=parsed.prompt.model,
                partition=tenant,
                tokens=parsed.tokens,
                retention=retention,
                cache_key=key if isinstance(key, str) else None,
            )
            billing = Billing(total, cached.cached_tokens)
        if dialect != "anthropic_count_tokens":
            with self._lock:
                self._billed[0] += billing.total
                self._billed[1] += billing.cache_read
                self._billed[2] += billing.cache_write
        return billing

    def _bill_breakpoints(
        self, dialect: Dialect, payload: dict[str, Any], parsed: Parsed, tenant: bytes
    ) -> Billing:
        """OpenAI GPT-5.6 and later: breakpoints, the implicit one unless ``prompt_cache_options.mode``
        is ``explicit``, writes reported in ``cache_write_tokens``."""
        implicit = _prompt_cache_options(dialect, payload)
        key = payload.get("prompt_cache_key") if self._key_partitions else None
        usage = self._openai_explicit.account(
            model=parsed.prompt.model,
            partition=tenant,
            segments=parsed.segments,
            context=parsed.context,
            implicit=implicit,
            cache_key=key if isinstance(key, str) else None,
        )
        return Billing(
            usage.total_input_tokens,
            usage.cache_read_input_tokens,
            usage.ephemeral_5m_input_tokens,
            usage.ephemeral_1h_input_tokens,
            writes_as="openai",
        )


def _prompt_cache_options(dialect: Dialect, payload: dict[str, Any]) -> Ttl | None:
    """The implicit breakpoint's lifetime tier from ``prompt_cache_options``, or ``None`` in explicit
    mode; refused as the API refuses it ("ttl defaults to 30m"; Chat takes only 30m, Responses 30m
    and 12h: the openai SDK's types)."""
    options = payload.get("prompt_cache_options")
    if options is None:
        return "5m"
    if not isinstance(options, dict):
        raise RequestRefusedError(
            "Invalid type for 'prompt_cache_options': expected an object.", param="prompt_cache_options"
        )
    mode = options.get("mode", "implicit")
    if mode not in ("implicit", "explicit"):
        raise RequestRefusedError(
            "Invalid value for 'prompt_cache_options.mode'.",
            param="prompt_cache_options.mode",
            code="invalid_value",
        )
    ttls = ("30m", "12h") if dialect == "openai_responses" else ("30m",)
    ttl = options.get("ttl", "30m")
    if ttl not in ttls:
        raise RequestRefusedError(
            "Invalid value for 'prompt_cache_options.ttl'.",
            param="prompt_cache_options.ttl",
            code="invalid_value",
        )
    if mode == "explicit":
        return None
    return "5m" if ttl == "30m" else "1h"


@dataclass(frozen=True)
class _Stored:
    """A kept Responses answer: whose it is, the conversation it answered, and the response object."""

    tenant: bytes
    input: list[Any]
    response: dict[str, Any]


@dataclass(frozen=True)
class _Route:
    """A Responses request beside ``POST /v1/responses``."""

    kind: Literal["websocket", "retrieve", "delete", "compact"]
    response_id: str = ""


_RESPONSE_PATH = re.compile(r".*/responses/([A-Za-z0-9_-]+)")


def _route(method: str, path: str, headers: Mapping[str, str]) -> _Route | None:
    """Which of the Responses API's other requests ``method`` ``path`` is, if any (``headers``:
    lower-case names; ``GET .../responses`` asking to upgrade to a WebSocket is the SDK's
    ``responses.connect()``)."""
    trimmed = path.rstrip("/")
    if method == "POST" and trimmed.endswith("/responses/compact"):
        return _Route("compact")
    if method == "GET" and trimmed.endswith("/responses"):
        upgrade = headers.get("upgrade", "").lower()
        return _Route("websocket") if "websocket" in upgrade else None
    match = _RESPONSE_PATH.fullmatch(trimmed)
    if match is None or match.group(1) == "compact":
        return None
    if method == "GET":
        return _Route("retrieve", match.group(1))
    if method == "DELETE":
        return _Route("delete", match.group(1))
    return None


def _input_parts(content: Any) -> list[Any]:
    """A message's content as a list of parts (a string is one ``input_text`` part)."""
    if isinstance(content, str):
        return [{"type": "input_text", "text": content}]
    return list(content) if isinstance(content, list) else []


def _betas(headers: Mapping[str, str]) -> frozenset[str]:
    """The request's ``anthropic-beta`` values (comma-separated)."""
    return frozenset(part.strip() for part in headers.get("anthropic-beta", "").split(",") if part.strip())


def _guarded(events: Iterable[bytes], dialect: Dialect, engine: str) -> Iterator[bytes]:
    """A stream whose engine fails midway ends with the provider's error event, not a broken socket."""
    sent = 0
    try:
        for event in events:
            sent += 1
            yield event
    except Exception:
        logger.exception("the %s engine failed while streaming", engine)
        yield stream_error_event(dialect, sent)


@functools.lru_cache(maxsize=1)
def _known_models() -> frozenset[str]:
    """Every model (or model family) named in the price table or the cache-rules table."""
    from cachekit.cost.prices import default_prices
    from cachekit.providers.cache_rules import default_cache_rules

    names = {row.model.lower() for row in default_prices()}
    names.update(row.prefix.lower() for row in default_cache_rules() if row.prefix)
    return frozenset(names)


def _known_prefix(model: str) -> bool:
    """A dated or suffixed name of a known model (``claude-sonnet-4-5-20250929``)."""
    lowered = model.lower()
    return any(lowered.startswith((name + "-", name + "@", name + ":")) for name in _known_models())


def _context_window(family: Family, model: str, engine_window: int | None) -> int | None:
    """The smaller of the model's documented window and the engine's own."""
    from cachekit.providers.cache_rules import cache_rules

    # An engine must keep room for at least one generated token.
    room = engine_window - 1 if engine_window is not None else None
    windows = [w for w in (cache_rules(family, model).context_window, room) if w is not None]
    return min(windows) if windows else None

"""Stage 3, key: the request's exact-cache key, its partition (tenant or credential HMAC) and the
scope that bounds its semantic partition.

Reads the view's route, headers and the canonical body's digest (:class:`~cachekit.pipeline.view.Seen`);
writes nothing on the view; yields no effects (the store's secret is read through a callable the
store gives, guarded by the store's circuit breaker).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from cachekit._types import PartitionId
from cachekit.pipeline.controls import Control
from cachekit.pipeline.runtime import Runtime
from cachekit.pipeline.view import Form, RequestView
from cachekit.providers import CREDENTIAL_HEADERS, Route
from cachekit.providers.state import Verdict
from cachekit.semantic.binding import EntryBinding
from cachekit.stores.keys import EXACT_KIND, exact_key, key_prefix, partition_for

__all__ = ["Call", "Keyer"]


@dataclass(frozen=True, slots=True)
class Call:
    """One cacheable request, as the steps after keying see it."""

    key: str
    route: Route
    form: Form
    control: Control
    model: str
    #: The exact partition (tenant or credential HMAC): it bounds the semantic partition too.
    partition: str = ""
    #: Everything outside the body that the exact key covers (namespace, partition, endpoint, query,
    #: answer-changing headers, the store): the semantic partition covers it too.
    scope: tuple[str, ...] = ()
    #: Binds the semantic index entries this request may be served to its partition.
    binding: EntryBinding | None = None
    #: Set by shaping on a miss: what changed since the conversation's previous call (lint's first
    #: change), for the answer's header and the ledger.
    prefix_change: str | None = None
    #: What the body depends on outside itself, as admission classified it (once per body: the
    #: semantic stage reads it rather than classifying the body again).
    verdict: Verdict | None = None


class Keyer:
    """Keys and partitions for one pipeline; holds the store's secret once read."""

    def __init__(self, runtime: Runtime, secret: bytes | Callable[[], bytes]) -> None:
        self._rt = runtime
        config = runtime.config
        # A network store's secret is read from the store on first use, not when the client is built:
        # a cache that is down when the application starts must not stop it from starting.
        self._secret: bytes | None = secret if isinstance(secret, bytes) else None
        self._secret_source = secret if callable(secret) else None
        self._store_tag: tuple[bytes, str] | None = None
        self._plan_salt = os.urandom(16)
        self._credential_headers = CREDENTIAL_HEADERS + tuple(h.lower() for h in config.credential_headers)

    def key(self, view: RequestView, control: Control, body_digest: bytes) -> tuple[str, str] | None:
        """The exact key and the partition, or ``None`` while the store cannot give its secret."""
        secret = self._current_secret()
        if secret is None:
            return None
        request, route, headers = view.request, view.route, view.headers
        partition = self.partition(headers, control, secret)
        key = exact_key(
            namespace=control.namespace,
            partition=partition,
            method=request.method,
            base_url=route.base_url,
            path=request.url.path,
            query=request.url.query,
            headers=[(name, headers.get(name, "")) for name in route.key_headers],
            body_digest=body_digest,
            secret=secret,
        )
        return key, partition

    def plan_partition(self, view: RequestView, control: Control) -> str:
        """The planner's and lint's partition for a call without a cache key (bypassed, cache off, store
        down): the cache's partition rules with a per-process salt for the store's secret, so tenants
        and credentials never share their state."""
        return self.partition(view.request.headers, control, self._plan_salt)

    def partition(self, headers: Mapping[str, str], control: Control, secret: bytes) -> PartitionId:
        """The partition of a request (see :func:`cachekit.stores.keys.partition_for`)."""
        config = self._rt.config
        return partition_for(
            headers,
            secret=secret,
            credential_headers=self._credential_headers,
            tenant=config.tenant,
            share_across_credentials=config.share_across_credentials,
            request_tenant=control.request_tenant,
            trust_request_tenant=config.trust_tenant_header,
            credential_tenants=config.credential_tenants,
        )

    def semantic_scope(
        self, view: RequestView, control: Control, partition: str
    ) -> tuple[tuple[str, ...], EntryBinding]:
        """What bounds a semantic partition besides the body: everything else the exact key covers,
        plus an HMAC of the store's secret (partition ids are then unguessable and store-specific);
        and the binding of index entries to this partition, under the same secret."""
        secret = self._secret or b""
        if self._store_tag is None or self._store_tag[0] != secret:  # the secret may be re-read
            self._store_tag = (
                secret,
                hmac.new(secret, b"cachekit/semantic-scope", hashlib.sha256).hexdigest(),
            )
        store_tag = self._store_tag[1]
        request, route, headers = view.request, view.route, view.headers
        scope = (
            control.namespace,
            partition,
            route.base_url,
            request.url.path,
            request.url.query.decode("latin-1"),
            *(f"{name}:{headers.get(name, '')}" for name in route.key_headers),
            store_tag,
        )
        # A hit may only serve an answer of this request's own exact partition.
        return scope, EntryBinding(secret, key_prefix(EXACT_KIND, control.namespace, partition))

    def _current_secret(self) -> bytes | None:
        """The store's secret: asked of the store on each request (stores keep it in memory; a network
        store re-checks it now and then, so processes converge on one after the store loses it)."""
        if self._secret_source is None or self._secret is None:
            return self._secret if self._secret is not None else self._load_secret()
        with contextlib.suppress(Exception):  # the store could not check: keep the last known secret
            self._secret = self._secret_source()
        return self._secret

    def _load_secret(self) -> bytes | None:
        """The store's secret, read once; ``None`` while the store cannot give it (counted, and
        raised with ``on_cache_error="raise"``)."""
        if self._secret_source is None:  # pragma: no cover - one of the two is always set
            raise AssertionError("a pipeline needs a secret")
        if not self._rt.breaker.allow():
            self._rt.unavailable("secret", None)
            return None
        try:
            secret = self._secret_source()
        except Exception as exc:
            self._rt.unavailable("secret", exc)
            return None
        self._rt.breaker.success()
        self._secret = secret
        return secret

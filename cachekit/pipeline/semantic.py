"""Stage 5, semantic lookup: after an exact miss, the stored answer of a question that means the
same, inside the request's exact partition; and, once the store stage wrote a fresh answer, its
indexing (:meth:`SemanticStage.remember`, or :meth:`SemanticStage.remember_later` for a stream).

Reads the view's parsed body and the keyed call's scope and binding; writes nothing on the view;
yields :class:`~cachekit.pipeline.effects.Offload` (embedding, vector search, indexing) and
:class:`~cachekit.pipeline.effects.Load` (the indexed answer); gives a
:class:`~cachekit.pipeline.entries.Hit`, or the :class:`SemanticCall` that indexes the fresh answer.
Any failure of the embedder or index is a counted miss, never the caller's error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cachekit import _fork
from cachekit.pipeline import respond
from cachekit.pipeline.breaker import CircuitBreaker
from cachekit.pipeline.controls import INELIGIBLE_HEADER, REFUSED_HEADER, SIMILARITY_HEADER, Control
from cachekit.pipeline.effects import Offload, Step
from cachekit.pipeline.entries import Hit, lookup, reechoed
from cachekit.pipeline.key import Call
from cachekit.pipeline.respond import Headers
from cachekit.pipeline.runtime import Runtime
from cachekit.pipeline.view import RequestView
from cachekit.semantic.base import DimensionMismatchError
from cachekit.shape.canonical import CanonicalOptions

if TYPE_CHECKING:
    from cachekit.semantic.layer import Lookup, SemanticLayer

__all__ = ["SemanticCall", "SemanticStage"]

logger = logging.getLogger("cachekit.pipeline")


@dataclass(frozen=True, slots=True)
class SemanticCall:
    """A semantic lookup that missed, kept to index the fresh answer once it is stored; or, with no
    lookup, why the request was not eligible (told in ``x-cachekit-semantic-ineligible``)."""

    layer: SemanticLayer
    lookup: Lookup | None
    ineligible: str | None = None

    @property
    def headers(self) -> Headers:
        """What the semantic layer tells on a miss: the guards that refused similar stored questions
        (``x-cachekit-semantic-refused``), or why the request was not eligible."""
        headers: list[tuple[str, str]] = []
        if self.lookup is not None and self.lookup.rejected:
            headers.append((REFUSED_HEADER, ", ".join(sorted(self.lookup.rejected))))
        if self.ineligible is not None:
            headers.append((INELIGIBLE_HEADER, self.ineligible))
        return tuple(headers)


class SemanticStage:
    """The semantic layer of one pipeline: built when configured, or on a first per-request opt-in."""

    def __init__(self, runtime: Runtime, options: CanonicalOptions) -> None:
        self._rt = runtime
        self._options = options
        self._layer: SemanticLayer | None = None
        self._lock = _fork.lock(self)
        config = runtime.config
        #: Skips the semantic layer while its index or embedder keeps failing.
        self.breaker = CircuitBreaker(
            failure_threshold=config.breaker_threshold,
            cooldown=config.breaker_cooldown,
            name="semantic layer",
        )
        if config.semantic:
            self._layer = self._build()

    @property
    def layer(self) -> SemanticLayer | None:
        """The semantic layer, once configured or first opted in to."""
        return self._layer

    def _build(self) -> SemanticLayer:
        from cachekit.semantic.layer import SemanticConfig, SemanticLayer

        setting = self._rt.config.semantic
        semantic_config = (
            setting if isinstance(setting, SemanticConfig) else SemanticConfig(enabled=bool(setting))
        )
        return SemanticLayer(semantic_config, store_prompts=self._rt.config.store_prompts)

    def wants(self, control: Control) -> bool:
        """Whether this request uses the semantic layer (header or call site, else the client's setting)."""
        if control.semantic is not None:
            return control.semantic
        layer = self._layer
        return layer is not None and layer.config.enabled

    def layer_for(self, control: Control) -> SemanticLayer | None:
        """The semantic layer when this request uses it (built on a first opt-in)."""
        if not self.wants(control):
            return None
        layer = self._layer
        if layer is None:  # opted in per request or call site on a client without a semantic config
            with self._lock:
                if self._layer is None:
                    try:
                        self._layer = self._build()
                    except Exception as exc:  # e.g. store_prompts=False: the opt-in is refused, not fatal
                        self._rt.stats.add("semantic_errors")
                        logger.warning("semantic cache unavailable for this client: %s", exc)
                        return None
                layer = self._layer
        return layer

    def find(
        self, layer: SemanticLayer, view: RequestView, call: Call, *, search: bool = True
    ) -> Step[tuple[Hit | None, SemanticCall | None]]:
        """After an exact miss: the stored answer of a question that means the same, if any.

        Returns the hit (or ``None``) and what indexing the fresh answer needs once it is stored. With
        ``search=False`` (a refresh) only the question is embedded, to index it.
        """
        rt = self._rt
        parsed = view.parsed()
        binding = call.binding
        if parsed is None or binding is None:
            return None, None
        if not self.breaker.allow():
            rt.stats.add("semantic_skips")
            return None, None
        threshold = call.control.semantic_threshold

        def look() -> Lookup | str:
            prepared = layer.prepare(
                call.route.dialect,
                parsed,
                scope=call.scope,
                options=self._options,
                ignore_fields=rt.config.ignore_fields,
                urls_vouched=call.control.url_ttl is not None,
            )
            if isinstance(prepared, str):
                return prepared  # not eligible: the reason
            return layer.lookup(prepared, binding, threshold, search=search)

        try:
            found: Lookup | str = yield Offload(lambda: layer.run(look))
        except Exception as exc:
            self.failed("lookup", exc, layer)
            return None, None
        if isinstance(found, str):
            return None, SemanticCall(layer, None, ineligible=found)
        self.breaker.success()  # only once the index (or embedder) was actually used
        semantic = SemanticCall(layer, found)
        hit = found.hit
        if hit is None:
            return None, semantic
        served, failed, source = yield from lookup(rt, hit.entry_key, call.route.dialect, call.form)
        if served is None or source is None:
            if not failed:  # the indexed answer expired or was evicted: drop it from the index too
                yield from self._step(semantic, "forget", hit.entry_key, None)
            return None, semantic
        max_age = call.control.max_age
        if max_age is not None and rt.clock() - served.created_at > max_age:
            return None, semantic  # older than this request's url_ttl accepts (still good for others)
        replayed = reechoed(rt, served, view)
        if replayed is None:
            return None, semantic  # its echoed prompt cannot be put back: answered upstream
        rt.stats.add("semantic_hits")
        logger.debug("semantic hit similarity=%.4f key=%s", hit.similarity, hit.entry_key[-16:])
        extra = ((SIMILARITY_HEADER, f"{hit.similarity:.4f}"),)
        response = respond.replay(
            view.request, replayed, hit.entry_key, rt.clock, outcome="semantic", extra=extra
        )
        return Hit(response, source, "semantic_hit"), None

    def remember(self, semantic: SemanticCall, call: Call) -> Step[None]:
        """Index the fresh answer the store stage wrote under ``call``'s key."""
        yield from self._step(semantic, "remember", call.key, call.control.ttl)

    def _step(self, semantic: SemanticCall, what: str, entry_key: str, ttl: float | None) -> Step[None]:
        """Index a stored answer (``remember``) or drop a stale one (``forget``); failures are counted."""
        layer, found = semantic.layer, semantic.lookup
        if found is None:  # the request was not eligible: nothing to index
            return
        if what == "remember":
            action: Callable[[], None] = lambda: layer.remember(found, entry_key, ttl)  # noqa: E731
        else:
            action = lambda: layer.forget(found.request.partition, entry_key)  # noqa: E731
        try:
            yield Offload(action)
        except Exception as exc:
            self.failed(what, exc, layer)
        else:
            self.breaker.success()

    def remember_later(self, semantic: SemanticCall, call: Call) -> None:
        """Index a streamed answer the store stage wrote under ``call``'s key, in the semantic layer's
        background workers (this runs where the stream ended: the caller's thread or event loop)."""
        if not self.breaker.allow():
            return
        layer, found = semantic.layer, semantic.lookup
        if found is None:  # the request was not eligible: nothing to index
            return

        def remember() -> None:
            try:
                layer.remember(found, call.key, call.control.ttl)
            except Exception as failure:
                self.failed("remember", failure, layer)
            else:
                self.breaker.success()

        layer.submit(remember)  # off the stream's thread or event loop: the index may be remote

    def failed(self, what: str, exc: Exception, layer: SemanticLayer) -> None:
        """Count a failure of the semantic layer and open its breaker after enough of them."""
        self.breaker.failure()
        layer.stats.add("errors")
        self._rt.stats.add("semantic_errors")
        if isinstance(exc, DimensionMismatchError):
            logger.error("semantic %s refused: %s", what, exc)
        else:
            logger.warning("semantic %s failed, going on without it: %s: %s", what, type(exc).__name__, exc)

    def close(self) -> None:
        """Close the semantic layer's index if it opened one."""
        if self._layer is not None:
            self._layer.close()

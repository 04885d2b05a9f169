"""Stage 5, semantic lookup: after an exact miss, the stored answer of a question that means the
same, inside the request's exact partition; and, once the store stage wrote a fresh answer, its
indexing (:meth:`SemanticStage.remember`, or :meth:`SemanticStage.remember_later` for a stream).

Reads the view's parsed body and the keyed call's scope and binding; writes nothing on the view;
yields :class:`~cachekit.pipeline.effects.Offload` (embedding, vector search, indexing) and
:class:`~cachekit.pipeline.effects.Load` (the indexed answer); gives a
:class:`~cachekit.pipeline.entries.Hit`, or the :class:`SemanticCall` that indexes the fresh answer.
Any failure of the embedder or index is a counted miss, never the caller's error.

In shadow mode (``SemanticConfig(mode="shadow")``) this stage decides never to serve: it looks up
and loads the stored answer it would have served, exactly as for a hit, and hands it on in the
:class:`SemanticCall`; once the fresh answer is in, :meth:`SemanticStage.judge_later` compares the two
in the layer's workers and gives a :class:`~cachekit.cost.shadow.ShadowRecord` to record cost
(hashes, scores and verdicts only: never the question or the answers).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from cachekit import _fork
from cachekit.cost.shadow import ShadowRecord
from cachekit.pipeline import respond
from cachekit.pipeline.breaker import CircuitBreaker
from cachekit.pipeline.controls import INELIGIBLE_HEADER, REFUSED_HEADER, SIMILARITY_HEADER, Control
from cachekit.pipeline.effects import Offload, Step
from cachekit.pipeline.entries import Hit, lookup, reechoed
from cachekit.pipeline.key import Call
from cachekit.pipeline.respond import Headers
from cachekit.pipeline.runtime import Runtime
from cachekit.pipeline.view import RequestView
from cachekit.providers import sse
from cachekit.providers.answers import answer_content
from cachekit.semantic.base import DimensionMismatchError
from cachekit.shape.canonical import CanonicalOptions
from cachekit.stores import record

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
    #: Shadow mode: the stored answer the layer would have served (``None``: none to judge).
    would_serve: record.CachedResponse | None = None

    @property
    def shadow(self) -> bool:
        """Whether this lookup only watched (shadow mode): the fresh answer is to judge it."""
        return self.lookup is not None and self.lookup.shadow is not None

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
        # Shadow mode: the same lookup, decided here never to serve (a refresh only indexes).
        shadow = search and layer.config.mode == "shadow"

        def look() -> Lookup | str:
            prepared = layer.prepare(
                call.route.dialect,
                parsed,
                scope=call.scope,
                options=self._options,
                ignore_fields=rt.config.ignore_fields,
                urls_vouched=call.control.url_ttl is not None,
                verdict=call.verdict,
            )
            if isinstance(prepared, str):
                return prepared  # not eligible: the reason
            if shadow:
                return layer.shadow_lookup(prepared, binding, threshold)
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
        if found.shadow is not None:
            candidate = found.shadow.candidate
            if candidate is None:
                return None, semantic
            # The stored answer it would have served, read as a hit reads it (in the form the
            # request asked for; a JSON document where either form is one).
            served, failed, source = yield from lookup(rt, candidate.entry_key, call.route.dialect, call.form)
            if served is None or source is None:
                if not failed:
                    yield from self._step(semantic, "forget", candidate.entry_key, None)
                return None, semantic
            max_age = call.control.max_age
            if max_age is not None and rt.clock() - served.created_at > max_age:
                return None, semantic  # a hit would not serve it either
            return None, SemanticCall(layer, found, would_serve=source)
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

    def judge_later(
        self,
        semantic: SemanticCall,
        call: Call,
        fresh: record.CachedResponse,
        document: dict[str, Any] | None,
        recorded: Callable[[ShadowRecord], None],
    ) -> None:
        """Shadow mode: judge the stored answer the layer would have served against the ``fresh`` one
        (its parsed ``document`` when read) in the layer's workers, off the request's path, and hand
        the :class:`ShadowRecord` to ``recorded`` (record cost's). Never raises; a judge that fails
        leaves the verdict unknown (counted in the layer's errors)."""
        layer, found = semantic.layer, semantic.lookup
        if found is None or found.shadow is None:
            return
        examined, clock, dialect = found.shadow, self._rt.clock, call.route.dialect
        stored = semantic.would_serve
        limit = layer.matcher.threshold if found.threshold is None else found.threshold
        judge = layer.config.shadow_judge

        def judged() -> None:
            candidate = examined.candidate if stored is not None else None
            verdict: bool | None = None
            if candidate is not None and stored is not None:
                try:
                    fresh_text = answer_content(dialect, _document(dialect, fresh, document))
                    stored_text = answer_content(dialect, _document(dialect, stored, None))
                    verdict = (
                        stored_text == fresh_text
                        if judge is None
                        else _verdict(judge(found.request.question, stored_text, fresh_text))
                    )
                except Exception as exc:  # the user's judge, or an answer that cannot be read
                    layer.stats.add("errors")
                    # The exception's type only: its message may quote the question or the answers.
                    logger.warning(
                        "semantic shadow judge failed; verdict not recorded: %s", type(exc).__name__
                    )
            shadow = ShadowRecord(
                time=clock(),
                model=call.model,
                partition=found.request.partition,
                threshold=limit,
                candidate=None if candidate is None else _digest(candidate.entry_key),
                similarity=None if candidate is None else candidate.similarity,
                passed=candidate is not None and examined.passed,
                would_serve=candidate is not None and examined.serves(limit),
                refused=examined.refused if candidate is not None else (),
                score=examined.score if candidate is not None else None,
                judge="exact" if judge is None else "custom",
                verdict=verdict,
            )
            recorded(shadow)

        layer.submit(judged)

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


def _document(dialect: Any, answer: record.CachedResponse, parsed: dict[str, Any] | None) -> Any:
    """An answer's JSON document: ``parsed`` when the stages read it, else its body (a stream
    assembled)."""
    if parsed is not None:
        return parsed
    if answer.form == "sse":
        return sse.assemble(dialect, answer.body)
    return orjson.loads(answer.body)


def _verdict(value: object) -> bool:
    """A shadow judge's answer, which must be a bool (a number 0 or 1 is taken as one)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise TypeError(f"a shadow_judge returns a bool, not {type(value).__name__}")


def _digest(entry_key: str) -> str:
    """What a shadow record keeps of the stored entry it judged: a short digest of its key."""
    return hashlib.sha256(entry_key.encode()).hexdigest()[:16]

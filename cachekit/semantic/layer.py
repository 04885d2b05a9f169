"""The semantic layer: what the pipeline asks after an exact miss, and tells after a store.

One :class:`SemanticLayer` per cache. It owns the embedder, the vector index and the matcher (the
threshold and the guards). The pipeline decides *when* to use it; this module decides *how*:

* :meth:`SemanticLayer.prepare` — is the request eligible, and which partition and question is it?
* :meth:`SemanticLayer.lookup` — embed the question once, search its partition, drop the candidates
  not bound to the requester (:mod:`cachekit.semantic.binding`), let the matcher (the threshold, then
  every guard) pick one of the rest. The vector is kept for :meth:`remember`.
* :meth:`SemanticLayer.remember` — after the fresh answer was stored under its exact key, index it
  with its MAC.
* :meth:`SemanticLayer.forget` — an indexed entry whose stored response is gone (expired, evicted).
* :meth:`SemanticLayer.shadow_lookup` — in shadow mode (``SemanticConfig(mode="shadow")``): what a
  lookup would serve, with every guard's verdict, searched down to a lower floor so that the report
  can tell what other thresholds would have done (:mod:`cachekit.cost.shadow`). It never gives a hit.

Every method is synchronous and may take milliseconds (embedding runs a model). A lookup runs on the
layer's worker threads with a deadline (:meth:`SemanticLayer.run`), which the pipeline reaches through
an ``Offload`` effect (in a worker thread on the async transport, so the event loop never waits); a
streamed answer is indexed in the background when its stream ends (:meth:`SemanticLayer.submit`).
"""

from __future__ import annotations

import logging
import math
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures import wait as wait_for
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_args

from cachekit import _fork
from cachekit._types import Dialect
from cachekit.cost.shadow import SHADOW_FLOOR
from cachekit.errors import ConfigError
from cachekit.semantic.base import Candidate, Embedder, SemanticError, Vector, VectorIndex
from cachekit.semantic.binding import EntryBinding
from cachekit.semantic.partition import SemanticRequest, split_request
from cachekit.shape import canonical

if TYPE_CHECKING:
    from cachekit.providers.state import Verdict
    from cachekit.semantic.matcher import CalibrationSource, Examination, Matcher

__all__ = ["Lookup", "SemanticConfig", "SemanticLayer", "SemanticMode", "SemanticStats", "ShadowJudge"]

logger = logging.getLogger("cachekit.semantic")

T = TypeVar("T")

#: What the layer does with a stored answer it finds: serve it, or only record what it would have
#: served (``shadow``: every request still goes upstream).
SemanticMode = Literal["serve", "shadow"]
#: Judges, in shadow mode, whether the stored answer would have served the request: called with the
#: question, the stored answer's content and the fresh answer's (normalized text, tool calls as
#: ``tool:<name>(<JSON>)``: :func:`cachekit.providers.answers.answer_content`); returns a bool.
ShadowJudge = Callable[[str, str, str], bool]
_EMBEDDER_NAMES = ("auto", "onnx", "sentence-transformers")


@dataclass(frozen=True, slots=True)
class SemanticConfig:
    """How the semantic cache behaves (``CacheConfig(semantic=SemanticConfig(...))``).

    Attributes:
        index: where vectors live: ``"memory://"`` (this process; the default), a Redis 8 URL
            (``redis://``, ``rediss://``, ``redis+cluster://``), or a :class:`VectorIndex` object.
        embedder: the :class:`Embedder`, or the name of a bundled all-MiniLM-L6-v2 (offline):
            ``"onnx"`` (onnxruntime, no torch: the ``semantic`` extra), ``"sentence-transformers"``
            (the ``semantic-torch`` extra), or ``"auto"`` / ``None`` (the default): sentence-
            transformers where it is installed, else ONNX
            (:func:`cachekit.semantic.embedders.choose_embedder`).
        threshold: the cosine similarity (in [-1, 1]) a candidate needs before the guards look at it;
            ``None`` for :data:`cachekit.semantic.matcher.DEFAULT_THRESHOLD` (or, with a precision
            target, the verifier's cosine floor, 0.6). A request can raise or lower it with
            ``x-cachekit-semantic: <number>``.
        target_precision: the share of semantic hits that should be right answers, in (0, 1]: the
            layer then scores candidates with the shipped verifier and picks the lowest operating
            point whose precision, measured on held-out pairs, reaches the target at the lower end
            of its 95 % confidence interval (:mod:`cachekit.semantic.verifier`). A target the
            calibration never reached is a :class:`ConfigError` here.
        max_false_hit_rate: ... or at most this share of pairs needing different answers served,
            overall and for every kind of pair in the calibration (negation, antonym, ...), at the
            upper end of each rate's interval.
        calibration: where the operating point is read from: ``None`` for the calibration shipped
            with the verifier, or the path of a calibration that ``cachekit semantic-eval
            --calibrate PAIRS.jsonl --out CAL.json`` wrote from your own labelled pairs (or of a
            whole verifier file built with ``scripts/build_semantic_verifier.py``).
        verifier: allow the verifier (all-MiniLM-L6-v2 only) where a precision target asks for it.
        guards: run the guards (negation, numbers, order, changed content words, ...). Turning them
            off (which turns the verifier off too) is for measurement only.
        allow_sampling: also answer requests that ask for variety (``n`` > 1, or a ``temperature``
            above the providers' default of 1). A request sampling at the default is served without
            it: turning the layer on says that interchangeable questions may share an answer.
        k: candidates fetched per lookup (the best one that passes every guard wins).
        max_entries_per_partition: the oldest entries of a partition are dropped beyond this.
        enabled: on for every request of the client (``False``: only where a request or call site opts
            in with ``x-cachekit-semantic: on`` or ``cachekit.policy(semantic=True)``).
        timeout: seconds one lookup (embedding, search, guards) may take before it counts as a failed
            miss and the request goes upstream.
        mode: ``"serve"`` (the default) answers from a stored answer that passes; ``"shadow"`` never
            does: every request still goes upstream, and what the layer would have served is judged
            against the fresh answer and recorded in the cost ledger (``cachekit report`` shows the
            precision and recall it would have had, and the threshold that reaches a target).
        shadow_judge: in shadow mode, ``judge(question, stored_answer, fresh_answer) -> bool``
            decides whether the stored answer would have served; by default the two answers' contents
            must be equal (:data:`ShadowJudge`). It runs in the layer's worker threads, after the
            caller has the fresh answer.
    """

    index: VectorIndex | str = "memory://"
    embedder: Embedder | str | None = None
    threshold: float | None = None
    target_precision: float | None = None
    max_false_hit_rate: float | None = None
    calibration: CalibrationSource | None = None
    verifier: bool = True
    guards: bool = True
    allow_sampling: bool = False
    k: int = 4
    max_entries_per_partition: int = 10_000
    enabled: bool = True
    timeout: float = 2.0
    mode: SemanticMode = "serve"
    shadow_judge: ShadowJudge | None = None

    def __post_init__(self) -> None:
        if self.mode not in get_args(SemanticMode):
            raise ConfigError(f"semantic mode is 'serve' or 'shadow', not {self.mode!r}")
        if self.shadow_judge is not None and not callable(self.shadow_judge):
            raise ConfigError("shadow_judge is a function (question, stored_answer, fresh_answer) -> bool")
        if self.shadow_judge is not None and self.mode != "shadow":
            raise ConfigError("shadow_judge only judges in mode='shadow'")
        if isinstance(self.embedder, str) and self.embedder not in _EMBEDDER_NAMES:
            raise ConfigError(f"an embedder is one of {', '.join(_EMBEDDER_NAMES)}, not {self.embedder!r}")
        if self.threshold is not None and not -1.0 <= self.threshold <= 1.0:
            raise ConfigError(f"semantic threshold is a cosine in [-1, 1], not {self.threshold!r}")
        if self.target_precision is not None and not 0 < self.target_precision <= 1:
            raise ConfigError(f"target_precision is a share in (0, 1], not {self.target_precision!r}")
        if self.max_false_hit_rate is not None and not 0 <= self.max_false_hit_rate < 1:
            raise ConfigError(f"max_false_hit_rate is a share in [0, 1), not {self.max_false_hit_rate!r}")
        targeted = (self.target_precision, self.max_false_hit_rate) != (None, None)
        if targeted and not (self.verifier and self.guards):
            raise ConfigError("a precision target needs the guards and the verifier (both on by default)")
        if self.calibration is not None and not targeted:
            raise ConfigError(
                "a calibration is read for a target: set target_precision or max_false_hit_rate"
            )
        if targeted:
            from cachekit.semantic.verifier import load_calibration, load_verifier, operating_point

            source = self.calibration if self.calibration is not None else load_verifier()
            operating_point(  # a target nobody measured is refused now, not at the first lookup
                load_calibration(source)[1],
                target_precision=self.target_precision,
                max_false_hit_rate=self.max_false_hit_rate,
            )
        if not isinstance(self.k, int) or self.k < 1:
            raise ConfigError(f"semantic k must be an integer >= 1, not {self.k!r}")
        if not isinstance(self.max_entries_per_partition, int) or self.max_entries_per_partition < 1:
            raise ConfigError("max_entries_per_partition must be an integer >= 1")
        if not 0 < self.timeout < math.inf:
            raise ConfigError(f"semantic timeout must be a positive number of seconds, not {self.timeout!r}")


@dataclass
class SemanticStats:
    """Counters of the semantic layer: lookups, hits, and why requests were not served."""

    lookups: int = 0
    hits: int = 0
    misses: int = 0
    errors: int = 0
    stale: int = 0
    #: Shadow mode: lookups that found a stored answer the layer would have served (never served).
    would_hit: int = 0
    #: Requests the layer does not answer, by reason (``sampling``, ``not_text``, ...).
    ineligible: Counter[str] = field(default_factory=Counter)
    #: Candidates above the threshold that a guard rejected, by reason.
    rejected: Counter[str] = field(default_factory=Counter)
    #: Candidates dropped before the guards because their index entry is not bound to the requester,
    #: by reason: ``foreign`` (the answer lies outside the requester's partition), ``forged`` (the MAC
    #: does not verify), ``unsigned`` (no MAC: written before entries were bound).
    unverified: Counter[str] = field(default_factory=Counter)
    # Set by __post_init__: a lock the fork registry renews, which holds its owner weakly (so no slots).
    _lock: threading.Lock = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._lock = _fork.lock(self)

    def add(self, name: str, reason: str | None = None, count: int = 1) -> None:
        """Increment a counter (``reason`` picks the entry of ``ineligible``/``rejected``/``unverified``)."""
        with self._lock:
            if reason is None:
                setattr(self, name, getattr(self, name) + count)
            else:
                getattr(self, name)[reason] += count


@dataclass(frozen=True, slots=True)
class Lookup:
    """The outcome of one lookup: the chosen candidate (if any) and the question's vector."""

    request: SemanticRequest
    #: Seals what :meth:`SemanticLayer.remember` indexes for this request.
    binding: EntryBinding
    vector: Vector
    hit: Candidate | None
    #: Candidates above the threshold that a guard refused, counted by the guard's reason.
    rejected: Mapping[str, int] = field(default_factory=dict)
    #: Shadow mode: what the layer would have served (the examined candidates' verdicts).
    shadow: Examination | None = None
    #: The threshold the lookup ran under.
    threshold: float | None = None


class SemanticLayer:
    """The embedder, index and matcher of one cache (see the module docstring)."""

    def __init__(self, config: SemanticConfig, *, store_prompts: bool = True) -> None:
        if not store_prompts:
            raise ConfigError(
                "the semantic cache keeps each question's text for its guards; it cannot be combined "
                "with store_prompts=False"
            )
        self.config = config
        self.stats = SemanticStats()
        self._lock = _fork.lock(self)
        self._embedder: Embedder | None = config.embedder if not isinstance(config.embedder, str) else None
        self._index: VectorIndex | None = config.index if not isinstance(config.index, str) else None
        self._matcher: Matcher | None = None
        self._warmed = False
        self._workers: ThreadPoolExecutor | None = None
        # Background work not finished yet (wait() waits for it); under its own lock, which the pool's
        # threads take when work ends, never while a model loads under the layer's lock.
        self._pending: set[Future[object]] = set()
        self._pending_lock = _fork.lock(self)
        _fork.register(self)

    def _after_fork_in_child(self) -> None:
        # The pool's threads are the parent's: a task submitted here would wait for a thread the pool
        # believes idle. The child makes a pool of its own on first use.
        if self._workers is not None:
            _fork.keep(self._workers)
            self._workers = None
        self._pending = set()

    # -- lazily built parts (loading a model or connecting must not slow down building a client) -----

    @property
    def embedder(self) -> Embedder:
        """The embedder (the default one is shared by the process and loads on first use)."""
        if self._embedder is None:
            from cachekit.semantic.embedders import default_embedder

            name = self.config.embedder if isinstance(self.config.embedder, str) else "auto"
            with self._lock:
                if self._embedder is None:
                    self._embedder = default_embedder(name)
        return self._embedder

    @property
    def index(self) -> VectorIndex:
        """The vector index, opened from its URL on first use."""
        if self._index is None:
            with self._lock:
                if self._index is None:
                    self._index = _open_index(self.config)
        return self._index

    @property
    def matcher(self) -> Matcher:
        """The matcher (threshold, guards, verifier at its operating point); a request's own threshold
        is passed per lookup."""
        from cachekit.semantic.matcher import build_matcher

        if self._matcher is None:
            embedder = self.embedder  # built first: it takes the same lock
            with self._lock:
                if self._matcher is None:
                    config = self.config
                    self._matcher = build_matcher(
                        embedder,
                        threshold=config.threshold,
                        guards=config.guards,
                        verifier=config.verifier,
                        target_precision=config.target_precision,
                        max_false_hit_rate=config.max_false_hit_rate,
                        calibration=config.calibration,
                    )
        return self._matcher

    # -- the steps ------------------------------------------------------------------------------------

    def prepare(
        self,
        dialect: Dialect,
        body: Mapping[str, Any],
        *,
        scope: Iterable[str],
        options: canonical.CanonicalOptions,
        ignore_fields: frozenset[str],
        urls_vouched: bool = False,
        verdict: Verdict | None = None,
    ) -> SemanticRequest | str:
        """The request's partition and question, or why it is not eligible (counted by that reason:
        ``sampling``, ``not_text``, ...; the pipeline says it in ``x-cachekit-semantic-ineligible``).
        ``urls_vouched``: the caller takes content given by URL as unchanged (``url_ttl``);
        ``verdict``: the body's classification when the caller already has it (the pipeline's
        admission), else it is classified here.

        The embedding model's id is part of the partition: vectors of two models never meet.
        """
        prepared = split_request(
            dialect,
            body,
            scope=(*scope, self.embedder.model_id),
            options=options,
            ignore_fields=ignore_fields,
            allow_sampling=self.config.allow_sampling,
            urls_vouched=urls_vouched,
            verdict=verdict,
        )
        if isinstance(prepared, str):
            self.stats.add("ineligible", prepared)
        return prepared

    def lookup(
        self,
        request: SemanticRequest,
        binding: EntryBinding,
        threshold: float | None = None,
        *,
        search: bool = True,
    ) -> Lookup:
        """Embed the question, search its partition, and pick the best candidate that is bound to the
        requester (``binding``) and that the guards accept.

        With ``search=False`` only the embedding is computed (a refresh: the fresh answer is indexed).
        """
        vector = self.embedder.embed([request.question])[0]
        if not search:
            return Lookup(request, binding, vector, None)
        self.stats.add("lookups")
        matcher = self.matcher
        limit = matcher.threshold if threshold is None else threshold
        found = self.index.search(request.partition, vector, k=self.config.k, min_similarity=limit)
        candidates = self._bound(request.partition, binding, found)
        result = matcher.match(request.question, candidates, threshold=limit)
        for reason, count in result.rejected.items():
            self.stats.add("rejected", reason, count)
        self.stats.add("hits" if result.hit is not None else "misses")
        return Lookup(request, binding, vector, result.hit, dict(result.rejected), threshold=limit)

    def shadow_lookup(
        self, request: SemanticRequest, binding: EntryBinding, threshold: float | None = None
    ) -> Lookup:
        """What :meth:`lookup` would serve, without serving it (shadow mode): the candidates down to
        :data:`~cachekit.cost.shadow.SHADOW_FLOOR` (or the threshold, if lower), every guard's verdict
        on them (:meth:`Matcher.examine`). The result never has a ``hit``; its ``shadow`` says what
        would have been served at ``threshold`` and at any other."""
        vector = self.embedder.embed([request.question])[0]
        self.stats.add("lookups")
        matcher = self.matcher
        limit = matcher.threshold if threshold is None else threshold
        floor = min(limit, SHADOW_FLOOR)
        found = self.index.search(request.partition, vector, k=self.config.k, min_similarity=floor)
        examined = matcher.examine(request.question, self._bound(request.partition, binding, found))
        self.stats.add("misses")
        if examined.serves(limit):
            self.stats.add("would_hit")
        return Lookup(request, binding, vector, None, shadow=examined, threshold=limit)

    def _bound(self, partition: str, binding: EntryBinding, found: list[Candidate]) -> list[Candidate]:
        """The candidates the requester may be served; the others are counted and logged (never their
        text: it is prompt text), before any guard sees them."""
        kept: list[Candidate] = []
        for candidate in found:
            reason = binding.check(partition, candidate)
            if reason is None:
                kept.append(candidate)
                continue
            self.stats.add("unverified", reason)
            # An entry from before binding is expected after an upgrade; the others mean that something
            # other than cachekit wrote to the index.
            level = logging.INFO if reason == "unsigned" else logging.WARNING
            logger.log(
                level,
                "semantic index entry not served (%s: %s), key ...%s",
                reason,
                _UNVERIFIED[reason],
                candidate.entry_key[-16:],
            )
        return kept

    def run(self, work: Callable[[], T]) -> T:
        """Run ``work`` on the layer's worker threads, waiting at most ``config.timeout`` seconds.

        A model or index that hangs must not hold the request: past the deadline the lookup is a
        :class:`SemanticError` (a counted miss) while the work finishes in the background.
        """
        self._warm()
        future = self._pool().submit(work)
        try:
            return future.result(timeout=self.config.timeout)
        except FutureTimeout:
            raise SemanticError(f"semantic lookup took longer than {self.config.timeout:g} s") from None

    def _warm(self) -> None:
        """Load the model (and hash its files) once, outside the deadline: the first request waits for
        it instead of counting a cold start as a failure."""
        if not self._warmed:
            embedder = self.embedder
            embedder.embed(["warm up"])
            _ = embedder.model_id
            self._warmed = True

    def submit(self, work: Callable[[], object]) -> None:
        """Run ``work`` in the background (indexing a streamed answer when its stream ends, judging a
        shadow lookup once the fresh answer is in)."""
        future = self._pool().submit(work)
        with self._pending_lock:
            self._pending.add(future)
        future.add_done_callback(self._done)

    def _done(self, future: Future[object]) -> None:
        with self._pending_lock:
            self._pending.discard(future)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the background work submitted so far has finished (at most ``timeout``
        seconds); whether it has. For tests and orderly shutdowns: nothing on a request's path waits."""
        with self._pending_lock:
            pending = list(self._pending)
        return not wait_for(pending, timeout=timeout).not_done

    def _pool(self) -> ThreadPoolExecutor:
        if self._workers is None:
            with self._lock:
                if self._workers is None:
                    self._workers = ThreadPoolExecutor(max_workers=4, thread_name_prefix="cachekit-semantic")
        return self._workers

    def remember(self, lookup: Lookup, entry_key: str, ttl: float | None) -> None:
        """Index the question of ``lookup`` as answered by the stored entry ``entry_key``, sealed with
        its MAC."""
        partition, question = lookup.request.partition, lookup.request.question
        mac = lookup.binding.seal(partition, entry_key, question)
        self.index.add(partition, entry_key, lookup.vector, question, ttl=ttl, mac=mac)

    def forget(self, partition: str, entry_key: str) -> None:
        """Drop an indexed entry whose stored response is gone."""
        self.stats.add("stale")
        self.index.remove(partition, entry_key)

    def close(self) -> None:
        """Stop the worker threads and close the index if this layer opened it. In shadow mode, the
        judgments still running get up to ``timeout`` seconds to land in the ledger first."""
        if self.config.mode == "shadow":
            self.wait(self.config.timeout)
        if self._workers is not None:
            self._workers.shutdown(wait=False, cancel_futures=True)
        if isinstance(self.config.index, str) and self._index is not None:
            self._index.close()


_UNVERIFIED = {
    "foreign": "its answer lies outside the requester's partition",
    "forged": "its MAC does not verify",
    "unsigned": "it has no MAC, written by an older cachekit",
}


def _open_index(config: SemanticConfig) -> VectorIndex:
    url = config.index
    if not isinstance(url, str):  # pragma: no cover - the caller checks
        return url
    scheme = url.partition("://")[0].lower()
    if scheme == "memory":
        from cachekit.semantic.index_memory import MemoryVectorIndex

        if url.rstrip("/") != "memory:":
            raise ConfigError(f"a memory vector index takes no host or path, got {url!r}")
        return MemoryVectorIndex(max_entries_per_partition=config.max_entries_per_partition)
    if scheme in ("redis", "rediss", "redis+cluster", "rediss+cluster"):
        from cachekit.semantic.index_redis import RedisVectorIndex

        return RedisVectorIndex(url, max_entries_per_partition=config.max_entries_per_partition)
    raise ConfigError("a semantic index is memory:// or a Redis 8 URL (redis://, redis+cluster://, ...)")

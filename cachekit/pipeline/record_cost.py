"""Stage 8, record cost: each answer's usage, normalized and priced into the ledger (a hit records
the cost it avoided), and the provider's token count taught to the planner's estimator; and the
semantic cache's shadow records (:meth:`Accountant.shadow`) beside the calls.

Reads the answer (and, when an earlier stage parsed it, its body), the keyed call (route, model,
tenant, call site) and what shaping planned; writes nothing on the view; yields no effects (the
ledger writes off the request path).
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from cachekit.cost.ledger import Outcome
from cachekit.cost.shadow import ShadowRecord
from cachekit.cost.usage import usage_of_body
from cachekit.pipeline.key import Call
from cachekit.pipeline.runtime import Runtime
from cachekit.providers import sse
from cachekit.shape.planner import Applied
from cachekit.stores import record

__all__ = ["Accountant"]

logger = logging.getLogger("cachekit.pipeline")


class Accountant:
    """Records calls in the ledger for one pipeline."""

    def __init__(self, runtime: Runtime) -> None:
        self._rt = runtime

    def wanted(self, applied: Applied | None) -> bool:
        """Whether an answer has anything to record or teach (else it passes untouched)."""
        return self._rt.ledger is not None or (applied is not None and bool(applied.estimate))

    def account(
        self,
        call: Call,
        answer: record.CachedResponse,
        outcome: Outcome | None,
        parsed: Any = None,
        *,
        applied: Applied | None = None,
    ) -> None:
        """Record the call's usage and cost in the ledger (a hit records the cost it avoided), and
        teach the token estimator the provider's count for a prompt cachekit estimated (``applied``).

        Streams are accounted from their assembled body, so a streamed and a non-streamed call of
        the same request produce the same record. Never fails the call.
        """
        ledger = self._rt.ledger
        if not self.wanted(applied):
            return
        try:
            if parsed is not None:
                body: Any = parsed
            elif answer.form == "sse":
                body = sse.assemble(call.route.dialect, answer.body)
            else:
                body = orjson.loads(answer.body)
            if not isinstance(body, dict):
                body = {}
            model = body.get("model")
            provider = self._rt.priced_as(call.route)
            # The usage is normalized once: the ledger's record carries it for the calibration too.
            usage = (
                ledger.record_body(
                    provider,
                    call.route.dialect,
                    model if isinstance(model, str) and model else call.model,
                    body,
                    outcome=outcome,
                    tenant=call.control.tenant,
                    site=call.control.site,
                    prefix_change=call.prefix_change,
                ).usage
                if ledger is not None
                else usage_of_body(provider, call.route.dialect, body)
            )
            if applied is not None and applied.estimate and usage.input_total:
                self._rt.planner.estimator.observe(applied.model, applied.estimate, usage.input_total)
        except Exception as exc:
            logger.warning("cost ledger failed to record a call: %s: %s", type(exc).__name__, exc)

    def shadow(self, shadow: ShadowRecord) -> None:
        """Record what the semantic layer would have served (shadow mode) in the ledger, beside the
        calls; without a ledger it is only logged at debug level. Never fails."""
        ledger = self._rt.ledger
        if ledger is None:
            logger.debug("no cost ledger: a semantic shadow record is not kept")
            return
        try:
            ledger.record_shadow(shadow)
        except Exception as exc:
            logger.warning("cost ledger failed to record a shadow record: %s: %s", type(exc).__name__, exc)

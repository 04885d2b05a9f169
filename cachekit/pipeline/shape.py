"""Stage 2, shape: the request as it goes upstream. The canonical form (built by the view), prefix
lint, stable-first ordering, and cache breakpoints (or OpenAI's ``prompt_cache_key``) planned for the
provider whose caching rules apply.

Reads the view's body and its prompt blocks (built once, reused across a conversation's calls for
the unchanged prefix through a :class:`~cachekit.shape.blocks.BlockMemo`) and the partition the key
stage derived; writes :attr:`RequestView.shaped` when it changes the body; yields no effects; gives
:class:`Shaped` (what was planned) to the stages after the answer. Once the provider answered, the
planner learns what it accepted (:meth:`Shaper.commit`) and hosts outside the provider table may
announce their rules (:meth:`Shaper.learn_rules`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from cachekit._http import Response
from cachekit.pipeline import respond
from cachekit.pipeline.controls import Control
from cachekit.pipeline.runtime import KNOWN_PROVIDERS, Runtime
from cachekit.pipeline.view import RequestView
from cachekit.providers import RULES_HEADER, Route
from cachekit.shape.blocks import BlockMemo
from cachekit.shape.lint import PrefixLinter, PrefixLintError, first_change, lint_blocks
from cachekit.shape.planner import Applied, PlanError, stable_first

__all__ = ["Shaped", "Shaper"]

logger = logging.getLogger("cachekit.pipeline")

# Why no breakpoints were planned, as ``x-cachekit-breakpoints: off; <why>`` says it (the reasons a
# host gives are :meth:`Runtime.rules_provider`'s).
_OFF_CONFIG = 'CacheConfig(breakpoints="off")'
_OFF_REQUEST = "x-cachekit-breakpoints: off"
_OFF_NOT_JSON = "not a JSON object"
_OFF_PLAN_ERROR = "plan error"


def _off(why: str) -> str:
    return f"off; {why}"


@dataclass(frozen=True, slots=True)
class Shaped:
    """What shaping did to a request (the body itself is on the view)."""

    #: The planner's work, or ``None`` when nothing was planned.
    applied: Applied | None = None
    #: The ``x-cachekit-breakpoints`` value (``None``: an answer that has no breakpoints to speak of).
    breakpoints: str | None = None
    #: What changed since the conversation's previous call, first in prefix order (lint's
    #: ``code; at=where``): why the provider's prompt cache cannot read the rest. ``None``: nothing.
    changed: str | None = None


class Shaper:
    """Lint, stable-first and breakpoint planning for one pipeline."""

    def __init__(self, runtime: Runtime) -> None:
        self._rt = runtime
        config = runtime.config
        #: The blocks of prompt parts seen before (a growing conversation's unchanged prefix).
        self.memo = BlockMemo()
        self.linter = (
            PrefixLinter(
                patterns=config.volatile_patterns,
                on_finding=config.on_lint,
                raise_on=config.lint == "raise",
            )
            if config.lint != "off"
            else None
        )

    def shape(self, view: RequestView, control: Control, partition: str | Callable[[], str]) -> Shaped:
        """Lint the request, then plan its cache breakpoints (or OpenAI's ``prompt_cache_key``); the
        result says what was planned or why nothing was. A lint error the caller asked to raise
        propagates; anything else that goes wrong here is logged and the request goes as it was.
        ``partition`` keeps tenants apart in lint and the planner (a callable: derived only if needed)."""
        route = view.route
        if route.dialect == "anthropic_count_tokens":
            return Shaped()  # counting tokens is not billed: no breakpoints to speak of
        config = self._rt.config
        off = "" if control.breakpoints else _OFF_CONFIG if config.breakpoints == "off" else _OFF_REQUEST
        if self.linter is None and off:
            return Shaped(breakpoints=_off(off))
        body = view.body()
        if body is None:
            return Shaped(breakpoints=_off(off or _OFF_NOT_JSON))
        scope = (partition if isinstance(partition, str) else partition()).encode()
        try:
            blocks = view.blocks(self.memo, scope)
        except (TypeError, ValueError):  # not serializable: the provider will refuse it anyway
            return Shaped(breakpoints=_off(off or _OFF_PLAN_ERROR))
        changed: str | None = None
        if self.linter is not None:
            try:
                changed = first_change(
                    self.linter.check(
                        route.dialect, body, partition=scope, conversation=control.conversation, blocks=blocks
                    )
                )
            except PrefixLintError:
                raise
            except Exception as exc:
                logger.warning("cachekit lint failed: %s: %s", type(exc).__name__, exc)
        if off:
            return Shaped(breakpoints=_off(off), changed=changed)
        provider, why = self._rt.rules_provider(route)
        if provider is None:
            return Shaped(breakpoints=_off(why), changed=changed)
        try:
            volatile: set[str] = set()
            if config.stable_first:
                patterns = config.volatile_patterns
                volatile = {f.where for f in lint_blocks(blocks, patterns=patterns)}
                reordered = stable_first(route.dialect, body, volatile)
                if reordered is not body:
                    self._rt.stats.add("reordered")
                    view.shaped = body = reordered
                    # The moved blocks' paths changed: find them again in the new order.
                    blocks = view.blocks(self.memo, scope)
                    volatile = {f.where for f in lint_blocks(blocks, patterns=patterns)}
            applied = self._rt.planner.apply(
                provider,
                route.dialect,
                body,
                partition=scope,
                now=self._rt.clock(),
                volatile=volatile,
                blocks=blocks,
                expect=control.expect,
            )
            if applied.changed:
                self._rt.stats.add("planned")
                view.shaped = applied.body
                view.added_headers = applied.headers
            view.serialize()  # the last change to the body: it is written once, here
            return Shaped(applied, applied.header(), changed)
        except PlanError as exc:
            # The provider will refuse the request with its own 400; it goes as the caller wrote it.
            self._rt.stats.add("plan_errors")
            logger.warning("cachekit: no breakpoints planned: %s", exc)
        except Exception as exc:
            self._rt.stats.add("plan_errors")
            logger.warning("cachekit: breakpoint planning failed: %s: %s", type(exc).__name__, exc)
        view.unshape()
        return Shaped(breakpoints=_off(_OFF_PLAN_ERROR), changed=changed)

    def refusal(self, view: RequestView, exc: PrefixLintError) -> Response:
        """``lint="raise"``: the answer to a request :meth:`shape` refused, a 400 that names the
        findings (the SDKs raise their BadRequestError, and do not retry); nothing goes upstream."""
        self._rt.stats.add("lint_refusals")
        message = f"cachekit: {exc}"
        return respond.synthetic(
            view.request, view.route.dialect, 400, "invalid_request_error", message, reason="lint"
        )

    def commit(self, applied: Applied | None) -> None:
        """The provider accepted a planned request: remember what it wrote."""
        if applied is not None:
            self._rt.planner.commit(applied)

    def learn_rules(self, route: Route, response: Response) -> None:
        """Remember the rules a host outside the provider table announced with its answer; warn once
        per host that announced none, when the caller named no ``price_as`` either and something is
        lost (planning or prices)."""
        if route.provider in KNOWN_PROVIDERS:
            return  # its rules are in the table
        config = self._rt.config
        answered = 200 <= response.status_code < 300
        silent = self._rt.hosts.learn(route, response.headers.get(RULES_HEADER), answered=answered)
        wanted = config.breakpoints != "off" or self._rt.ledger is not None
        if silent and config.price_as is None and wanted:
            logger.warning(
                "cachekit: %s is not a provider cachekit knows and announced no caching rules: its calls "
                "get no cache breakpoints and no price. Name the provider behind it with "
                "CacheConfig(price_as=...), e.g. price_as='anthropic'",
                route.provider,
            )

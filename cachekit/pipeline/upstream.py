"""Stage 6, upstream: the shaped request goes to the provider, serialized once; a streamed answer is
handed to the caller through a tee that records it as it passes, and, when it ends, runs what the
driver composed to follow the answer (store, record cost). A Chat stream the caller asked without
usage goes asking for it (:func:`ask_usage`), and reaches the caller without it.

Reads the view (its outgoing request) and the keyed call's form; writes the view's
:attr:`~cachekit.pipeline.view.RequestView.sent_fields`; yields :class:`~cachekit.pipeline.effects.Send`
and :class:`~cachekit.pipeline.effects.Tee` (the driver yields :class:`~cachekit.pipeline.effects.Read`
for a document).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cachekit._http import Response
from cachekit.pipeline.effects import Save, Send, Step, Tee, nothing
from cachekit.pipeline.exact import Lead
from cachekit.pipeline.key import Call
from cachekit.pipeline.view import Form, RequestView
from cachekit.providers import Route, sse
from cachekit.providers.registry import STREAM_USAGE

__all__ = ["AfterStream", "ask_usage", "asks_usage", "send", "tee"]

#: What follows a streamed answer once the stream ended: given its bytes (``None`` when it was cut,
#: errored or abandoned) and the message they assemble (when complete), the store write to perform.
AfterStream = Callable[[bytes | None, dict[str, Any] | None], Save | None]


def asks_usage(route: Route, form: Form) -> bool:
    """Whether a request of ``form`` is sent asking for a usage the caller did not ask for: a Chat
    stream without ``stream_options.include_usage``, to a provider known to accept the option (a
    stored stream then carries its usage; the caller's stream is given without it)."""
    return (
        form.streaming
        and not form.include_usage
        and route.dialect == "openai_chat"
        and route.provider in STREAM_USAGE
    )


def ask_usage(view: RequestView, call: Call) -> bool:
    """Every stored answer carries its usage (it is priced, and serves every form): a Chat stream the
    caller asked without it is asked with it (set on the view before shaping, which serializes the
    body). Whether it was."""
    return asks_usage(view.route, call.form) and view.ask_usage()


def send(view: RequestView) -> Step[Response]:
    """Send the request upstream as shaped (every path does it here, sync and async alike)."""
    response: Response = yield Send(view.outgoing())
    return response


def tee(
    view: RequestView,
    response: Response,
    *,
    after: AfterStream,
    stored: Callable[[Exception | None], None],
    lead: Lead | None,
    asked: bool,
) -> Tee:
    """The :class:`Tee` that hands a streamed answer to the caller as it arrives and records a copy:
    when the stream ends the transport calls ``after`` and performs the :class:`Save` it gives, reports
    the write to ``stored``, then lands ``lead``'s flight (its followers watch the stream meanwhile).
    ``asked``: the caller's stream is given without the usage :func:`ask_usage` asked for."""
    recorder = sse.StreamRecorder(view.route.dialect)
    rewrite = sse.UsageStripper() if asked else None
    if rewrite is not None:
        response.headers.pop("content-length", None)  # the caller's stream is shorter
    return Tee(
        response,
        recorder,
        on_end=lambda raw: after(raw, recorder.message),
        release=lead.land if lead is not None else nothing,
        stored=stored,
        idle=lead.idle if lead is not None else nothing,
        rewrite=rewrite,
    )

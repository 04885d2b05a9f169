"""The providers' error documents: one shape per API family, the defaults each status has, and the
event a stream fails with.

Everything that answers a request with an error in a provider's shape makes it here: the pipeline's
own answers (a refused control header, an ``only-if-cached`` miss:
:func:`cachekit.pipeline.respond.synthetic`) and the local backend's (:mod:`cachekit.local`, and
:class:`cachekit.testing.FakeUpstream` through it), so an SDK raises the same typed error, with the
same message, from either. The shapes are the
SDKs' types: anthropic ``types/shared/error_response.py`` (``type``, ``error``, an optional
``request_id``) and openai ``types/shared/error_object.py`` (``message``, ``type``, ``param``,
``code``); a Responses stream fails with openai ``types/responses/response_error_event.py``.
"""

from __future__ import annotations

from cachekit._types import Dialect
from cachekit.providers.registry import Family, family_of
from cachekit.providers.sse import encode_event

__all__ = ["BAD_JSON", "error_body", "status_error", "stream_error_event"]

#: What each family answers (a 400) to a body that is not JSON.
BAD_JSON: dict[Family, str] = {
    "anthropic": "There was an error parsing the body of your request. Please check that it is valid JSON.",
    "openai": "We could not parse the JSON body of your request. (HINT: This likely means you aren't "
    "using your HTTP library correctly.)",
}

# status -> (error.type, default message); https://docs.claude.com/en/api/errors
_ANTHROPIC_ERRORS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Invalid request."),
    401: ("authentication_error", "invalid x-api-key"),
    402: ("billing_error", "Your credit balance is too low to access the Anthropic API."),
    403: ("permission_error", "Your API key does not have permission to use the specified resource."),
    404: ("not_found_error", "Not found"),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit."),
    500: ("api_error", "Internal server error"),
    504: ("timeout_error", "Request timed out"),
    529: ("overloaded_error", "Overloaded"),
}

# status -> (error.type, error.code, default message); what api.openai.com sends
_OPENAI_ERRORS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Invalid request."),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    403: (
        "invalid_request_error",
        "unsupported_country_region_territory",
        "Country, region, or territory not supported",
    ),
    404: (
        "invalid_request_error",
        "model_not_found",
        "The model does not exist or you do not have access to it.",
    ),
    429: ("requests", "rate_limit_exceeded", "Rate limit reached for requests. Please try again later."),
    500: ("server_error", None, "The server had an error while processing your request. Sorry about that!"),
    503: ("server_error", None, "The engine is currently overloaded, please try again later."),
}


def error_body(
    api: Dialect | Family,
    error_type: str,
    message: str,
    *,
    param: str | None = None,
    code: str | None = None,
    request_id: str | None = None,
) -> dict[str, object]:
    """An error document in the shape of ``api``'s family, so the SDK raises its typed error with
    ``message``. ``param`` and ``code`` are OpenAI's fields; ``request_id`` is Anthropic's (left out
    when ``None``: an answer cachekit makes has no provider request behind it)."""
    if family_of(api) == "anthropic":
        body: dict[str, object] = {"type": "error", "error": {"type": error_type, "message": message}}
        if request_id is not None:
            body["request_id"] = request_id
        return body
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def status_error(
    api: Dialect | Family,
    status: int,
    message: str | None = None,
    *,
    param: str | None = None,
    code: str | None = None,
    request_id: str | None = None,
) -> dict[str, object]:
    """The error document the provider sends with ``status``: its type, and its default message and
    code unless given (an empty ``code`` sends ``null`` where the status has a default one, as OpenAI
    does for an unknown path)."""
    if family_of(api) == "anthropic":
        kind, default = _ANTHROPIC_ERRORS.get(
            status, ("api_error" if status >= 500 else "invalid_request_error", f"HTTP {status}")
        )
        return error_body(api, kind, message or default, request_id=request_id)
    kind, default_code, default = _OPENAI_ERRORS.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", None, f"HTTP {status}")
    )
    chosen = default_code if code is None else (code or None)
    return error_body(api, kind, message or default, param=param, code=chosen)


def stream_error_event(dialect: Dialect, sequence: int = 0) -> bytes:
    """The event a provider sends when a stream fails midway (no terminator follows it): Anthropic's
    ``error`` event (overloaded), Chat's error chunk (a server error), a Responses ``error`` event
    numbered ``sequence``."""
    if family_of(dialect) == "anthropic":
        return encode_event(status_error(dialect, 529), "error")
    if dialect == "openai_chat":
        return encode_event(status_error(dialect, 500))
    # The fields in the order of the API's schema for this event (sequence_number last), not in
    # cachekit.providers.sse.responses_event's.
    failure = {
        "type": "error",
        "code": "server_error",
        "message": "The server had an error while processing your request.",
        "param": None,
        "sequence_number": sequence,
    }
    return encode_event(failure, "error")

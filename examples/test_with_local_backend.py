"""Test your app against cachekit's local backend (the providers' APIs and caching rules, offline):
the `local_backend` fixture gives each test a fresh backend, memory cache and cost ledger; no network,
no API key. Run: `python -m pytest test_with_local_backend.py`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for the type hints only; pytest_plugins loads cachekit.testing as a plugin
    import anthropic

    from cachekit.testing import LocalAPI

# In your suite, put this in the top-level conftest.py (or there: from cachekit.testing import local_backend).
pytest_plugins = ["cachekit.testing"]

HANDBOOK = "\n".join(f"Section {i}: staff may work remotely {i % 4 + 1} days a week." for i in range(150))


def ask_handbook(client: anthropic.Anthropic, question: str) -> str:
    """The application under test (normally imported from your package); it is handed its client."""
    message = client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=300,
        system="Answer from the staff handbook:\n" + HANDBOOK,
        messages=[{"role": "user", "content": question}],
    )
    return message.content[0].text


def test_a_repeated_question_is_answered_from_the_cache(local_backend: LocalAPI) -> None:
    client = local_backend.anthropic()  # a cachekit.Anthropic on this test's own memory cache
    first = ask_handbook(client, "Can I work from home on Fridays?")
    assert ask_handbook(client, "Can I work from home on Fridays?") == first
    assert local_backend.calls == 1  # the repeat never reached the provider
    miss, hit = local_backend.ledger.records()
    assert (miss.outcome, hit.outcome) == ("miss", "exact_hit")
    assert hit.saving == miss.cost_without_caching  # the hit saved the full price of the call


def test_the_handbook_is_read_from_the_prompt_cache(local_backend: LocalAPI) -> None:
    client = local_backend.anthropic()  # cachekit places the cache_control breakpoints
    ask_handbook(client, "How many remote days do I get?")
    ask_handbook(client, "Who approves remote work?")
    first, second = local_backend.ledger.records()
    assert first.usage.cache_write_5m > 1024  # the handbook is written to the provider's cache once...
    assert second.usage.cache_read > 1024  # ...and read back for the next question, at 0.1x the price
    assert (second.cost or 0) < (first.cost or 0)


def test_without_cachekit_every_call_reaches_the_provider(local_backend: LocalAPI) -> None:
    client = local_backend.anthropic(cache=False)  # the plain anthropic.Anthropic
    ask_handbook(client, "Can I work from home on Fridays?")
    ask_handbook(client, "Can I work from home on Fridays?")
    assert local_backend.calls == 2

"""The semantic guards and the matcher, on hand-written questions (none taken from an evaluation file).

Runs the real all-MiniLM-L6-v2 (bundled, offline) for the similarities and the word embeddings.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np  # the semantic extra is part of the test install (scripts/test)
import pytest

from cachekit.semantic.base import Candidate, Embedder
from cachekit.semantic.embedders import default_embedder
from cachekit.semantic.guards import (
    ContentWordGuard,
    analyze,
    antonym_guard,
    are_opposites,
    default_guards,
    direction_guard,
    entity_guard,
    negation_guard,
    numbers_guard,
    question_guard,
)
from cachekit.semantic.matcher import DEFAULT_THRESHOLD, Matcher


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    """The real bundled all-MiniLM-L6-v2 (shared by the process; loads once)."""
    return default_embedder()


def cosine(embedder: Embedder, a: str, b: str) -> float:
    va, vb = embedder.embed([a, b])
    return float(np.dot(va, vb))


# -- negation ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Is the printer working?", "Is the printer not working?"),
        ("Does the hotel allow pets?", "Doesn't the hotel allow pets?"),
        ("Can I pay by card?", "I cannot pay by card?"),
        ("Which cheeses should I eat while pregnant?", "Which cheeses should I avoid while pregnant?"),
        ("Is there a fee for this?", "Is there no fee for this?"),
        ("Do you ship parcels with tracking?", "Do you ship parcels without tracking?"),
        ("Is the ladder safe to use?", "Is the ladder unsafe to use?"),
        ("Is this form valid?", "Is this form invalid?"),
        ("Has he ever lied?", "Has he never lied?"),
        ("It's cold outside, isn't it?", "It's not cold outside, is it?"),
    ],
)
def test_negation_guard_rejects_a_flipped_negation(a: str, b: str) -> None:
    assert negation_guard(a, b) == "negation"
    assert negation_guard(b, a) == "negation"


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Why isn't my printer working?", "Why is my printer not working?"),
        ("Is the ladder unsafe?", "Is the ladder not safe?"),
        ("Is the venue step-free or not?", "Is the venue step-free?"),
        ("You're coming tonight, aren't you?", "You are coming tonight, are you?"),
        ("How do I reset my voicemail code?", "How can I reset my voicemail code?"),
    ],
)
def test_negation_guard_passes_the_same_polarity(a: str, b: str) -> None:
    assert negation_guard(a, b) is None


def test_negation_is_counted_not_just_detected() -> None:
    # Two negations against one: the count differs even though both sides have a cue.
    assert negation_guard("I never said I didn't agree", "I never said I agreed") == "negation"
    assert analyze("Nobody knows nothing, not really").negations == 3


# -- numbers -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Reserve a table for 4", "Reserve a table for 6"),
        ("Reserve a table for four", "Reserve a table for six"),
        ("Is the 2019 model waterproof?", "Is the 2021 model waterproof?"),
        ("Is the 3rd floor accessible?", "Is the 4th floor accessible?"),
        ("Is the third floor accessible?", "Is the fourth floor accessible?"),
        ("How far is 10 km in miles?", "How far is 10 miles in km?"),
        ("Is it a 5 km walk?", "Is it a 5 mile walk?"),
        ("Does it cost $20?", "Does it cost £20?"),
        ("Does it cost 1,200 dollars?", "Does it cost 12,000 dollars?"),
        ("Is the rate 2.5%?", "Is the rate 25%?"),
        ("Wake me up at 6am", "Wake me up at 6pm"),
        ("Wake me up at 6:30", "Wake me up at 7:30"),
        ("Is the shop open on Monday?", "Is the shop open on Tuesday?"),
        ("Is the deadline in June?", "Is the deadline in July?"),
        ("Is the deadline 12 March?", "Is the deadline 13 March?"),
        ("Can I come tomorrow?", "Can I come today?"),
        ("Does the kit include a dozen screws?", "Does the kit include ten screws?"),
        ("Is twenty-five too old to start?", "Is thirty-five too old to start?"),
        ("Can I return it within 30 days?", "Can I return it within 30 months?"),
        ("How long does a 2-day course take?", "How long does a course take?"),
        ("Is order 55123 shipped?", "Is order 55132 shipped?"),
    ],
)
def test_numbers_guard_rejects_changed_numbers(a: str, b: str) -> None:
    assert numbers_guard(a, b) == "numbers"
    assert numbers_guard(b, a) == "numbers"


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Reserve a table for 4", "Reserve a table for four"),
        ("Does it cost $1,500?", "Does it cost 1500 dollars?"),
        ("Is 40% off the list price?", "Is 40 percent off the list price?"),
        ("Wake me up at 18:00", "Wake me up at 6 pm"),
        ("Wake me up at 7 o'clock", "Wake me up at 7:00"),
        ("Is the 2nd floor accessible?", "Is the second floor accessible?"),
        ("Is the deadline 5 May?", "Is the deadline May 5th?"),
        ("I need a dozen eggs", "I need 12 eggs"),
        ("Can two hundred and fifty people attend?", "Can 250 people attend?"),
        ("Is a 10k salary rise normal?", "Is a 10,000 salary rise normal?"),
        ("Which one is cheaper?", "Which is cheaper?"),
        ("Can I buy one ticket?", "Can I buy a ticket?"),
        ("Can I buy one ticket?", "Can I buy 1 ticket?"),
        ("May I pay later?", "Can I pay later?"),
    ],
)
def test_numbers_guard_passes_the_same_numbers(a: str, b: str) -> None:
    assert numbers_guard(a, b) is None


def test_a_bare_one_still_differs_from_another_number() -> None:
    assert numbers_guard("Can I buy one ticket?", "Can I buy two tickets?") == "numbers"
    assert numbers_guard("Can I buy one ticket?", "Can I buy 2 tickets?") == "numbers"


# -- question words, direction, antonyms, entities -----------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "reason"),
    [
        ("Who designed the bridge?", "When was the bridge designed?", "question"),
        ("Where can I park my bike?", "Why can I park my bike?", "question"),
        ("How many staff work here?", "How long have the staff worked here?", "question"),
        ("Why is the sky blue?", "Is the sky blue?", "question"),
        ("When does the library open?", "What time does the library open?", None),
        ("How much does a haircut cost?", "How does a haircut cost?", None),
        ("Which team won the cup?", "Who won the cup?", None),
    ],
)
def test_question_guard(a: str, b: str, reason: str | None) -> None:
    assert question_guard(a, b) == reason
    assert question_guard(b, a) == reason


@pytest.mark.parametrize(
    ("a", "b", "reason"),
    [
        ("How do I get from Leeds to York?", "How do I get from York to Leeds?", "direction"),
        ("How do I convert a JPEG to a PNG?", "How do I convert a PNG to a JPEG?", "direction"),
        ("Is tea healthier than coffee?", "Is coffee healthier than tea?", "direction"),
        ("Move my savings into my current account", "Move my current account into my savings", "direction"),
        ("How do I get from Leeds to York?", "How can I travel from Leeds to York?", None),
        ("What's the best way to learn to swim?", "How do I learn to swim?", None),
    ],
)
def test_direction_guard(a: str, b: str, reason: str | None) -> None:
    assert direction_guard(a, b) == reason


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Is the museum open on holidays?", "Is the museum closed on holidays?"),
        ("When should I buy shares?", "When should I sell shares?"),
        ("Is buying a car a good idea?", "Is selling a car a good idea?"),
        ("Do you offer monthly billing?", "Do you offer annual billing?"),
        ("Should I stretch before running?", "Should I stretch after running?"),
        ("Is the north entrance open?", "Is the south entrance open?"),
        ("How do I enable the night theme?", "How do I disable the night theme?"),
        ("Is the upstairs room bigger?", "Is the upstairs room smaller?"),
        ("How do I import my contacts?", "How do I export my contacts?"),
        ("What is the maximum dose?", "What is the minimum dose?"),
    ],
)
def test_antonym_guard_rejects_opposites(a: str, b: str) -> None:
    assert antonym_guard(a, b) == "antonym"


def test_antonym_guard_passes_synonyms_and_leaves_affixes_to_negation() -> None:
    assert antonym_guard("Is the shop big?", "Is the shop large?") is None
    assert antonym_guard("Can I buy tickets online?", "Can I purchase tickets online?") is None
    assert antonym_guard("Is the ladder unsafe?", "Is the ladder safe?") is None  # negation's job
    assert are_opposites("closed", "open")
    assert are_opposites("easier", "difficult")
    assert not are_opposites("annually", "yearly")


@pytest.mark.parametrize(
    ("a", "b", "reason"),
    [
        (
            "How long is the train from Leeds to Paris?",
            "How long is the train from Leeds to Brussels?",
            "entity",
        ),
        ("Is Spotify available offline?", "Is Deezer available offline?", "entity"),
        ("Does the plan cover the UK?", "Does the plan cover the EU?", "entity"),
        ("How do I install Ruby on Windows?", "How do I install Ruby on Windows 11?", None),
        ("HOW DO I RESET MY ROUTER?", "How do I reset my router?", None),
        ("What Is The Best Way To Learn Chess?", "what is the best way to learn chess?", None),
    ],
)
def test_entity_guard(a: str, b: str, reason: str | None) -> None:
    assert entity_guard(a, b) == reason
    assert entity_guard(b, a) == reason


# -- content words -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("How do I clean a carpet?", "How do I clean a window?"),
        ("Do you sell printer ink?", "Do you sell printer paper?"),
        ("Can I bring my dog?", "Can I bring my cat?"),
        ("How do I renew my library card?", "How do I renew my expired library card?"),
        ("What is the postage for letters?", "What is the postage for parcels?"),
    ],
)
def test_content_guard_rejects_a_changed_or_added_word(embedder: Embedder, a: str, b: str) -> None:
    guard = ContentWordGuard(embedder)
    assert guard(a, b) == "content"
    assert guard(b, a) == "content"


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("How do I buy a ticket?", "How do I purchase a ticket?"),
        ("Is the flat big?", "Is the flat large?"),
        ("Where is the nearest doctor?", "Where is the nearest physician?"),
        ("How do I set up email on my phone?", "How do I set up e-mail on my phone?"),
        ("What's the colour of the logo?", "What is the color of the logo?"),
        ("Can kids join the club?", "Can children join the club?"),
        ("Is the movie good?", "Is the film good?"),
    ],
)
def test_content_guard_passes_synonyms(embedder: Embedder, a: str, b: str) -> None:
    assert ContentWordGuard(embedder)(a, b) is None


def test_content_guard_threshold_is_the_word_cosine(embedder: Embedder) -> None:
    a, b = "How do I buy a ticket?", "How do I purchase a ticket?"
    word_cosine = cosine(embedder, "buy", "purchase")
    assert ContentWordGuard(embedder, threshold=word_cosine - 0.01)(a, b) is None
    assert ContentWordGuard(embedder, threshold=word_cosine + 0.01)(a, b) == "content"
    with pytest.raises(ValueError, match="cosine"):
        ContentWordGuard(embedder, threshold=1.5)


def test_content_guard_caches_word_vectors(embedder: Embedder) -> None:
    calls: list[list[str]] = []

    class Counting:
        model_id = embedder.model_id
        dimension = embedder.dimension

        def embed(self, texts: Sequence[str]) -> Any:
            calls.append(list(texts))
            return embedder.embed(texts)

    guard = ContentWordGuard(Counting())
    guard("Can I bring my dog?", "Can I bring my cat?")
    guard("Can I bring my cat?", "Can I bring my dog?")
    assert sorted(w for call in calls for w in call) == ["cat", "dog"]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("How do I reset my router?", "how do i reset my router"),
        ("How do I reset my router?", "Hi, how do I reset my router? Thanks"),
        ("Why isn't my printer working?", "Why is my printer not working?"),
        ("How can I buy one ticket for Saturday?", "How do I buy a ticket for Saturday?"),
        ("Is the ladder unsafe?", "Is the ladder not safe?"),
        ("Can I get a refund for 2 nights?", "Can I get a refund for two nights?"),
        ("When does the library open?", "What time does the library open?"),
    ],
)
def test_true_paraphrases_pass_every_default_guard(embedder: Embedder, a: str, b: str) -> None:
    assert [g(a, b) for g in default_guards(embedder) if g(a, b) is not None] == []


# -- the matcher -------------------------------------------------------------------------------------


def candidates(embedder: Embedder, query: str, stored: Sequence[str]) -> list[Candidate]:
    vectors = embedder.embed([query, *stored])
    return [
        Candidate(f"key-{i}", float(np.dot(vectors[0], vectors[i + 1])), text)
        for i, text in enumerate(stored)
    ]


def test_matcher_rejects_the_negation_the_embedding_misses(embedder: Embedder) -> None:
    query, stored = "Is the API rate limited?", "Is the API not rate limited?"
    found = candidates(embedder, query, [stored])
    assert found[0].similarity > DEFAULT_THRESHOLD  # the embedding alone would serve it
    assert Matcher(embedder, guards=()).match(query, found).hit == found[0]
    result = Matcher(embedder).match(query, found)
    assert result.hit is None
    assert result.rejected == {"negation": 1}


def test_matcher_picks_the_best_candidate_that_passes(embedder: Embedder) -> None:
    query = "Is the gym open on Sundays?"
    found = candidates(
        embedder,
        query,
        ["Is the gym closed on Sundays?", "Is the gym open on Sunday?", "Is the gym open on Mondays?"],
    )
    matcher = Matcher(embedder, threshold=0.5)
    result = matcher.match(query, found)
    assert result.hit is not None
    assert result.hit.text == "Is the gym open on Sunday?"
    # Every candidate more similar than the winner was rejected and counted; none after it ran.
    better = [c for c in found if c.similarity > result.hit.similarity]
    assert sum(result.rejected.values()) == len(better)


def test_matcher_picks_the_most_similar_of_passing_candidates(embedder: Embedder) -> None:
    query = "How do I reset my router?"
    found = [Candidate("low", 0.91, "How do I reset my router?"), Candidate("high", 0.97, query)]
    assert Matcher(embedder, threshold=0.9).match(query, found).hit == found[1]


def test_matcher_ignores_candidates_below_the_threshold(embedder: Embedder) -> None:
    query = "How do I reset my router?"
    found = [Candidate("k", 0.79, query)]
    assert Matcher(embedder, threshold=0.8).match(query, found).hit is None
    assert Matcher(embedder, threshold=0.8).match(query, found).rejected == {}
    assert Matcher(embedder, threshold=0.8).match(query, found, threshold=0.75).hit == found[0]
    assert Matcher(embedder, threshold=0.79).match(query, found).hit == found[0]
    with pytest.raises(ValueError, match="cosine"):
        Matcher(embedder, threshold=1.2)


def test_matcher_stats_total_rejections_across_threads(embedder: Embedder) -> None:
    matcher = Matcher(embedder, threshold=0.0)
    found = [
        Candidate("a", 0.95, "Is the museum closed on holidays?"),
        Candidate("b", 0.94, "Is the museum open on holidays 2 times?"),
    ]
    query = "Is the museum open on holidays?"
    assert matcher.match(query, found).rejected == {"antonym": 1, "numbers": 1}

    def work() -> None:
        for _ in range(50):
            matcher.match(query, found)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert matcher.stats() == {"antonym": 401, "numbers": 401}


def test_default_threshold_is_a_cosine() -> None:
    assert 0.0 < DEFAULT_THRESHOLD < 1.0

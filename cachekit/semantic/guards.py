"""Guards: rules that veto a semantic hit which the embedding similarity alone would serve.

An embedding scores "Is the API rate limited?" and "Is the API not rate limited?" at 0.93 cosine, and
"annual plans" against "monthly plans" at 0.91, while the answers differ. So every candidate above the
threshold is compared with the query by a few general rules, each stated in one sentence (its
docstring), with general parameters (a word-similarity threshold, generic English word lists):

==========  ========================================================================================
reason      the candidate is rejected when ...
==========  ========================================================================================
question    the two ask for a different kind of answer (who / when / where / why / how many / yes-no)
negation    they hold a different number of negations
numbers     their numbers, dates, times or quantities (with units) differ
operator    an operator with its operands, a number's sign, or two words joined by a hyphen or slash
            the other way round differ ("15 + 27" / "15 - 27", "-40" / "40", "2>&1" / "1>&2")
code        escape sequences, regex classes, command-line flags or code identifiers differ
            (``\\s`` / ``\\S``, ``-r`` / ``-R``, ``C++`` / ``C``)
case        in two texts that use case, a unit or identifier differs only by case (mV / MV, Kb / KB)
direction   a word's role around from / to / into / than is swapped
order       two terms trade places around the same words, a content word or a one-way relation
            (to, in, by, of, ...) between them ("divide 10 by 2" / "divide 2 by 10")
antonym     a word of one is a listed opposite of a word of the other
entity      a name (a capitalized word or an acronym) appears in only one of them
content     a content word of one has no near-synonym among the other's differing words
==========  ========================================================================================

A guard is any callable ``guard(query, stored) -> str | None``: ``None`` lets the candidate pass, a
short reason string rejects it (the matcher counts rejections by reason). Text analysis is pure Python
and cached per text (:func:`analyze`); only :class:`ContentWordGuard` needs the embedder (single
words, cached).
"""

from __future__ import annotations

import itertools
import os
import re
from collections import Counter, OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import numpy as np
import numpy.typing as npt

from cachekit import _fork
from cachekit.semantic.base import Embedder
from cachekit.semantic.symbols import REASON_CASE, REASON_CODE, REASON_OPERATOR, symbols_guard

__all__ = [
    "DEFAULT_WORD_THRESHOLD",
    "NEGATING_VERBS",
    "NEGATION_WORDS",
    "REASON_ANTONYM",
    "REASON_CASE",
    "REASON_CODE",
    "REASON_CONTENT",
    "REASON_DIRECTION",
    "REASON_ENTITY",
    "REASON_NEGATION",
    "REASON_NUMBERS",
    "REASON_OPERATOR",
    "REASON_ORDER",
    "REASON_QUESTION",
    "STOPWORDS",
    "Analysis",
    "ContentWordGuard",
    "Guard",
    "analyze",
    "antonym_guard",
    "are_opposites",
    "default_guards",
    "differing_words",
    "direction_guard",
    "entity_guard",
    "negation_guard",
    "normalize_word",
    "numbers_guard",
    "order_guard",
    "question_guard",
    "symbols_guard",
]

REASON_QUESTION = "question"
REASON_NEGATION = "negation"
REASON_NUMBERS = "numbers"
REASON_DIRECTION = "direction"
REASON_ORDER = "order"
REASON_ANTONYM = "antonym"
REASON_ENTITY = "entity"
REASON_CONTENT = "content"

#: The cosine (in [-1, 1]) two single words' embeddings need for one to stand in for the other.
#: Single-word cosines of all-MiniLM-L6-v2 overlap between synonyms and opposites (big/large 0.81,
#: buy/purchase 0.87, but open/closed 0.70, buy/sell 0.76, cheap/expensive 0.80), so the bar is high:
#: a rewording that swaps a word for a looser synonym is given up (a miss) rather than risk an opposite.
DEFAULT_WORD_THRESHOLD = 0.8


class Guard(Protocol):
    """A rule comparing a query with a stored question: ``None`` passes, a reason string rejects."""

    def __call__(self, query: str, stored: str, /) -> str | None:
        """Check ``stored`` (a candidate's question) against ``query``."""
        ...


# --------------------------------------------------------------------------------------------------
# Vocabulary (generic English; nothing here comes from an evaluation file)
# --------------------------------------------------------------------------------------------------

#: Negation words ("n't" and "cannot" are read as "not", "anything but" as "not").
NEGATION_WORDS = frozenset(
    {"not", "no", "never", "none", "nobody", "nothing", "nowhere", "neither", "nor", "without", "non"}
)
#: Verbs that negate their object ("avoid X" is "do not X"), in any inflection.
NEGATING_VERBS = frozenset({"avoid", "lack", "fail", "refuse", "prevent"})
#: Prefixes that negate a word ("unsafe", "invalid", "disagree", "non-profit").
_NEGATIVE_PREFIXES = ("un", "in", "im", "il", "ir", "dis", "non")

#: Question words asking for a specific kind of answer; "what", "which" and "how" alone are generic.
_QUESTION_WORDS = {
    "who": "who",
    "whom": "who",
    "whose": "who",
    "when": "when",
    "where": "where",
    "why": "why",
}
#: "what" and "which" can ask for anything ("what time" is "when"); a plain "how" only for a "how ...".
_GENERIC_QUESTION_WORDS = frozenset({"what", "which"})
_HOW_WORDS = {
    "many": "how-much",
    "much": "how-much",
    "long": "how-long",
    "often": "how-often",
    "far": "how-far",
    "old": "how-old",
    "big": "how-big",
}
#: Words whose object's role matters: "from A to B" is not "from B to A", "A than B" not "B than A".
_PIVOTS = frozenset({"from", "to", "into", "than"})

#: Function words, fillers and greetings: not content words.
STOPWORDS = frozenset(
    """
    a an the this that these those there here it its itself i me my mine myself we us our ours
    ourselves you your yours yourself yourselves he him his himself she her hers herself they them
    their theirs themselves one ones someone something anyone anything everyone everything
    am is are was were be been being have has had having do does did doing done
    will would shall should can could may might must ought need
    and or but if then else than so as because while though although whether
    of at by for with about into through during to from in on upon onto via per
    what which how
    any some such same own very too also just really actually basically quite rather
    please kindly thanks thank thx hi hiya hello hey cheers sorry regards um uh er hmm ok okay pls plz
    yes yeah yep like
    s t d ll m re ve
    get got go going way thing ever possible
    """.split()  # noqa: SIM905 - a word list reads better as text
)

#: Common opposites and groups of mutually exclusive terms: within a group, words of different entries
#: are opposites; "a/b" within one entry are synonyms. Negative-affix pairs (safe/unsafe) are left to
#: the negation guard.
_OPPOSITE_GROUPS: tuple[tuple[str, ...], ...] = tuple(
    tuple(group.split())
    for group in """
    open closed/close/shut
    good bad
    best worst
    better worse
    true false
    right wrong
    right left
    yes no
    before after
    above below
    over under
    up down
    in out
    on off
    inside outside
    north south east west
    northern southern eastern western
    first last
    early late
    earlier later
    earliest latest
    past future
    old new
    old young
    ancient modern
    start/begin stop/end/finish
    enable disable
    allow/permit forbid/ban/prohibit/block
    accept reject/decline/refuse
    approve reject/deny/decline
    grant revoke/deny
    add remove/delete
    include exclude/omit
    buy/purchase sell rent
    lend borrow
    give take
    send receive
    import export
    upload download
    push pull
    win lose
    victory defeat
    pass fail
    succeed fail
    success failure
    love/like hate
    happy sad
    hot cold
    warm cool
    high low
    big/large small/little/tiny
    long short
    tall short
    wide/broad narrow
    thick thin
    fat thin
    deep shallow
    heavy light
    fast/quick slow
    cheap expensive/dear/costly
    rich/wealthy poor
    strong weak
    hard soft
    hard/difficult easy
    loud quiet
    tight loose
    sharp blunt/dull
    smooth rough
    bright dark/dim
    light dark
    safe dangerous
    healthy sick/ill
    guilty innocent
    polite rude
    asleep awake
    present absent
    major minor
    superior inferior
    mandatory/compulsory/required optional/voluntary
    paid free
    public private
    internal external
    interior exterior
    vertical horizontal
    ascending descending
    positive negative
    plus minus
    increase/raise/rise decrease/reduce/lower/cut/drop/fall
    expand/grow shrink
    gain lose/loss
    profit loss
    more less/fewer
    most least/fewest
    many few
    all some none
    always sometimes never often/frequently rarely/seldom
    maximum/max minimum/min
    full empty
    full part/partial
    wet dry
    clean dirty
    alive dead
    live die
    male female
    man woman
    men women
    boy girl
    husband wife
    father mother
    son daughter
    brother sister
    parent child
    adult child/kid teen/teenager baby/infant
    student teacher
    employer employee
    buyer seller
    landlord tenant
    client server
    input output
    read write
    arrive depart/leave
    arrival departure
    enter exit/leave
    entry exit
    incoming outgoing
    inbound outbound
    support oppose
    for against
    with without
    pro con
    advantage/benefit/pro drawback/downside/risk/con
    strength weakness
    friend enemy
    hero villain
    war peace
    day night
    morning afternoon evening night
    summer winter spring autumn/fall
    hourly daily weekly monthly quarterly annual/annually/yearly
    weekday weekend
    domestic international/foreign
    local remote
    urban rural
    online offline
    manual automatic
    physical digital/virtual
    natural artificial
    indoor outdoor
    inner outer
    upper lower
    top bottom
    front back/rear
    encrypt decrypt
    encode decode
    compress decompress
    deposit withdraw/withdrawal
    credit debit
    income expense
    asset liability
    show hide
    remember forget
    attack defend
    lead follow
    praise criticize/criticise
    real/genuine/true fake
    legit scam
    optimistic pessimistic
    majority minority
    maximize/maximise minimize/minimise
    overestimate underestimate
    overweight underweight
    overpaid underpaid
    odd even
    same different
    similar different
    common rare
    permanent temporary
    fixed variable
    single double multiple
    single married divorced
    economy business premium first
    beginner intermediate advanced expert
    junior senior
    undergraduate postgraduate/graduate
    vegetarian vegan
    sweet sour bitter salty
    raw cooked
    fresh frozen
    red blue green yellow black white orange purple pink brown grey/gray
    latitude longitude
    numerator denominator
    row column
    width height length depth
    horizontal vertical diagonal
    sine cosine tangent
    mean median mode
    prefix suffix
    ceiling floor
    synonym antonym
    inhale exhale
    pre post
    inter intra
    hyper hypo
    macro micro
    sub super
    """.strip().splitlines()
)

_MONTHS = {
    name: index
    for index, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
_WEEKDAYS = {
    name: index
    for index, names in enumerate(
        (
            ("monday", "mon"),
            ("tuesday", "tue", "tues"),
            ("wednesday", "wed"),
            ("thursday", "thu", "thur", "thurs"),
            ("friday", "fri"),
            ("saturday", "sat"),
            ("sunday", "sun"),
        ),
        start=1,
    )
    for name in names
}
_RELATIVE_DAYS = {"yesterday": -1, "today": 0, "tonight": 0, "tomorrow": 1}

_UNITS_WORDS = {
    "zero": 0,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
    "nineteen": 19,
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "seventy": 70,
    "eighty": 80,
    "ninety": 90,
}
_SCALE_WORDS = {"hundred": 100, "thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000}
_ORDINAL_WORDS = {
    "first": 1,
    "second": 2,
    "third": 3,
    "fourth": 4,
    "fifth": 5,
    "sixth": 6,
    "seventh": 7,
    "eighth": 8,
    "ninth": 9,
    "tenth": 10,
    "eleventh": 11,
    "twelfth": 12,
    "thirteenth": 13,
    "fourteenth": 14,
    "fifteenth": 15,
    "sixteenth": 16,
    "seventeenth": 17,
    "eighteenth": 18,
    "nineteenth": 19,
    "twentieth": 20,
    "thirtieth": 30,
    "hundredth": 100,
    "thousandth": 1000,
}
_NUMBER_WORDS = frozenset({*_UNITS_WORDS, *_SCALE_WORDS, *_ORDINAL_WORDS, "dozen"})

#: Unit words and symbols, mapped to one spelling (a number's unit is part of the number).
_UNIT_ALIASES: dict[str, str] = {}
for _canonical, _aliases in (
    ("%", ("%", "percent", "pct")),
    ("dollar", ("$", "dollar", "dollars", "usd", "buck", "bucks")),
    ("pound", ("£", "pound", "pounds", "gbp", "quid", "lb", "lbs")),
    ("euro", ("€", "euro", "euros", "eur")),
    ("yen", ("¥", "yen", "jpy")),
    ("rupee", ("₹", "rupee", "rupees", "inr", "rs")),
    ("cent", ("cent", "cents", "penny", "pence", "p")),
    ("mm", ("mm", "millimeter", "millimeters", "millimetre", "millimetres")),
    ("cm", ("cm", "centimeter", "centimeters", "centimetre", "centimetres")),
    ("m", ("m", "meter", "meters", "metre", "metres")),
    ("km", ("km", "kms", "kilometer", "kilometers", "kilometre", "kilometres")),
    ("inch", ("inch", "inches")),
    ("foot", ("ft", "foot", "feet")),
    ("yard", ("yd", "yard", "yards")),
    ("mile", ("mi", "mile", "miles")),
    ("mg", ("mg", "milligram", "milligrams", "milligramme", "milligrammes")),
    ("g", ("g", "gram", "grams", "gramme", "grammes")),
    ("kg", ("kg", "kgs", "kilo", "kilos", "kilogram", "kilograms", "kilogramme", "kilogrammes")),
    ("ounce", ("oz", "ounce", "ounces")),
    ("stone", ("stone", "stones")),
    ("ton", ("t", "ton", "tons", "tonne", "tonnes")),
    ("ml", ("ml", "milliliter", "milliliters", "millilitre", "millilitres")),
    ("l", ("l", "liter", "liters", "litre", "litres")),
    ("gallon", ("gal", "gallon", "gallons")),
    ("pint", ("pint", "pints")),
    ("cup", ("cup", "cups")),
    ("degree", ("°", "degree", "degrees", "deg")),
    ("celsius", ("c", "celsius", "centigrade")),
    ("fahrenheit", ("f", "fahrenheit")),
    ("second", ("s", "sec", "secs", "seconds")),
    ("minute", ("min", "mins", "minute", "minutes")),
    ("hour", ("h", "hr", "hrs", "hour", "hours")),
    ("day", ("day", "days")),
    ("week", ("wk", "wks", "week", "weeks")),
    ("fortnight", ("fortnight", "fortnights")),
    ("month", ("mo", "mos", "month", "months")),
    ("year", ("yr", "yrs", "year", "years")),
    ("decade", ("decade", "decades")),
    ("century", ("century", "centuries")),
    ("byte", ("b", "byte", "bytes")),
    ("kb", ("kb", "kilobyte", "kilobytes")),
    ("mb", ("mb", "megabyte", "megabytes")),
    ("gb", ("gb", "gig", "gigs", "gigabyte", "gigabytes")),
    ("tb", ("tb", "terabyte", "terabytes")),
    ("mbps", ("mbps",)),
    ("hz", ("hz", "hertz")),
    ("ghz", ("ghz", "gigahertz")),
    ("w", ("w", "watt", "watts")),
    ("kw", ("kw", "kilowatt", "kilowatts")),
    ("kwh", ("kwh",)),
    ("v", ("v", "volt", "volts")),
    ("mph", ("mph",)),
    ("kph", ("kph", "kmh")),
    ("calorie", ("cal", "kcal", "calorie", "calories")),
    ("time", ("am", "pm", "o'clock", "oclock")),
    ("times", ("times", "x")),
):
    for _alias in _aliases:
        _UNIT_ALIASES[_alias] = _canonical


def _opposites() -> dict[str, frozenset[str]]:
    table: dict[str, set[str]] = {}
    for group in _OPPOSITE_GROUPS:
        entries = [entry.split("/") for entry in group]
        for index, entry in enumerate(entries):
            others = {word for k, other in enumerate(entries) if k != index for word in other}
            for word in entry:
                table.setdefault(word, set()).update(others - set(entry))
    return {word: frozenset(others) for word, others in table.items()}


_OPPOSITES = _opposites()
_SKIP_WORDS = STOPWORDS | NEGATION_WORDS | _NUMBER_WORDS | frozenset(_QUESTION_WORDS)


# --------------------------------------------------------------------------------------------------
# Text analysis
# --------------------------------------------------------------------------------------------------

_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "`": "'", "\u00b4": "'"})
_REWRITES = (
    (re.compile(r"\bcan'?t\b|\bcannot\b", re.I), "can not"),
    (re.compile(r"\bwon'?t\b", re.I), "will not"),
    (re.compile(r"\bshan'?t\b", re.I), "shall not"),
    (re.compile(r"\bain'?t\b", re.I), "is not"),
    (re.compile(r"n't\b", re.I), " not"),
    (re.compile(r"\banything\s+but\b", re.I), "not"),
    (re.compile(r"\bo'?clock\b", re.I), " oclock"),
    (re.compile(r"\b([ap])\.m\.?(?=\W|$)", re.I), r"\1m"),
    (re.compile(r"\bper\s+cent\b", re.I), "percent"),
    (re.compile(r"(?<=[A-Za-z])'(?:s|re|ve|ll|d|m)\b", re.I), ""),
    (re.compile(r"(?<=[A-Za-z]s)'(?=\W|$)"), ""),
    # A trailing question tag (", isn't it?") mirrors its sentence and says nothing of its own.
    (
        re.compile(
            r",\s*(?:is|are|was|were|am|do|does|did|have|has|had|can|could|will|would|shall|should)"
            r"(?:\s+not)?\s+(?:i|you|he|she|it|we|they|there|that)\s*(?=[?.!]*\s*$)",
            re.I,
        ),
        "",
    ),
)
#: Tokens: a time of day, a number (digits with thousands separators and decimals, and the letters,
#: "%" or "°" written right after it), a word, a currency or unit symbol, a sentence end.
_TOKEN_RE = re.compile(
    r"""
    (?P<time>\d{1,2}:\d{2})(?::\d{2})?
    | (?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)(?P<suffix>°?[A-Za-z]+|%|°)?
    | (?P<word>[A-Za-z]+)
    | (?P<sym>[$£€¥₹%°])
    | (?P<stop>[.!?;:]+)
    """,
    re.X,
)
_ORDINAL_SUFFIXES = frozenset({"st", "nd", "rd", "th"})
_TIME_WORDS = {"noon": 720.0, "midday": 720.0, "midnight": 0.0}


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "word", "num", "time", "sym", "stop"
    text: str  # words lower-cased
    upper: bool = False  # written with a capital first letter
    capital: bool = False  # ... and not as the first word of a sentence (nor in a title-case text)
    acronym: bool = False  # written in capitals, two letters or more (in a text not all in capitals)
    value: float = 0.0
    suffix: str = ""


@dataclass(frozen=True, slots=True)
class Analysis:
    """What the guards need to know about one question (see :func:`analyze`)."""

    #: The lower-cased words, in order (contractions expanded; digits are not words).
    words: tuple[str, ...]
    #: How many negation words and negating verbs the text holds ("or not" tags excluded).
    negations: int
    #: The numbers, as sorted ``(value, unit)`` pairs; unit ``""`` when none is attached.
    numbers: tuple[tuple[float, str], ...]
    #: How many bare "one"s the text holds (a number, or a pronoun/article: may go unmatched).
    soft_ones: int
    #: The specific question words ("who", "when", "where", "why", "how-much", ...).
    question_words: frozenset[str]
    #: Whether the text asks with a generic question word (what, which).
    generic_question: bool
    #: Whether the text asks with a plain "how" (not "how many", "how long", ...).
    plain_how: bool
    #: Content words, normalized (plural and possessive removed) -> the surface form to embed.
    content: dict[str, str]
    #: The normalized content words written as names (capitalized mid-sentence, or acronyms).
    names: frozenset[str]
    #: Two adjacent words joined -> their normalized forms ("e mail" -> "email"), to match compounds.
    joined: dict[str, tuple[str, str]]
    #: For each of from/to/into/than in the text: the content words right after it (its objects).
    pivots: dict[str, frozenset[str]]
    #: Every word (normalized) and number, in the order written (what :func:`order_guard` compares).
    terms: tuple[str, ...] = ()
    #: The first content word after each negation: what it negates (:func:`negation_guard`).
    negated: frozenset[str] = frozenset()


def normalize_word(word: str) -> str:
    """A light normalization of a lower-case word: the plural "-s" / "-es" / "-ies" removed."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("sses", "shes", "ches", "xes", "zes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is", "os")):
        return word[:-1]
    return word


@lru_cache(maxsize=16384)
def _forms(word: str) -> frozenset[str]:
    """A lower-case word and its likely base forms ("closed" -> "close", "easier" -> "easy")."""
    forms = {word, normalize_word(word)}
    for suffix, replacement in (
        ("ied", "y"),
        ("ier", "y"),
        ("iest", "y"),
        ("ed", ""),
        ("ed", "e"),
        ("ing", ""),
        ("ing", "e"),
        ("er", ""),
        ("est", ""),
        ("d", ""),
        ("r", ""),
        ("st", ""),
    ):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            stem = word[: -len(suffix)] + replacement
            forms.add(stem)
            if len(stem) > 3 and stem[-1] == stem[-2]:
                forms.add(stem[:-1])  # "stopped" -> "stop", "bigger" -> "big"
    return frozenset(forms)


def _tokenize(text: str) -> list[_Token]:
    text = text.translate(_APOSTROPHES)
    for pattern, replacement in _REWRITES:
        text = pattern.sub(replacement, text)
    text = text.replace("'", " ")
    letters = re.findall(r"[A-Za-z]{2,}", text)
    title_case = bool(letters) and sum(w[0].isupper() for w in letters) >= 0.8 * len(letters)
    all_caps = bool(letters) and sum(w.isupper() for w in letters) >= 0.8 * len(letters)
    tokens: list[_Token] = []
    sentence_start = True
    for match in _TOKEN_RE.finditer(text):
        if match.group("stop"):
            tokens.append(_Token("stop", match.group("stop")))
            sentence_start = True
            continue
        word = match.group("word")
        if word is not None:
            upper = word[0].isupper()
            tokens.append(
                _Token(
                    "word",
                    word.lower(),
                    upper=upper,
                    capital=upper and not title_case and not sentence_start and word != "I",
                    acronym=len(word) > 1 and word.isupper() and not all_caps,
                )
            )
        elif match.group("time") is not None:
            hours, minutes = match.group("time").split(":")
            tokens.append(_Token("time", match.group(0), value=int(hours) + int(minutes) / 100))
        elif match.group("num") is not None:
            value = float(match.group("num").replace(",", ""))
            suffix = (match.group("suffix") or "").lower()
            tokens.append(_Token("num", match.group(0), value=value, suffix=suffix))
        else:
            tokens.append(_Token("sym", match.group("sym")))
        sentence_start = False
    return tokens


def _unit(token: _Token | None) -> str:
    if token is None or token.kind not in ("word", "sym"):
        return ""
    return _UNIT_ALIASES.get(token.text, "")


def _clock(value: float, meridiem: str) -> float:
    """Minutes after midnight of ``value`` o'clock ("7.30" is 7:30); ``meridiem`` "am", "pm" or ""."""
    hours = int(value)
    minutes = round((value - hours) * 100)
    if meridiem in ("am", "pm"):
        hours = hours % 12 + (12 if meridiem == "pm" else 0)
    return float(hours * 60 + minutes)


def _month(token: _Token) -> int | None:
    """The month a word names: full names in any case ("May" only mid-sentence), abbreviations capitalized."""
    if token.kind != "word" or token.text not in _MONTHS:
        return None
    if token.text == "may":
        return 5 if token.capital else None
    if len(token.text) <= 4 and token.text not in ("june", "july"):
        return _MONTHS[token.text] if token.upper else None
    return _MONTHS[token.text]


def _weekday(token: _Token) -> int | None:
    """The weekday a word names: full names in any case ("Sundays" too), abbreviations capitalized."""
    text = normalize_word(token.text)
    if token.kind != "word" or text not in _WEEKDAYS:
        return None
    if not text.endswith("day") and not token.upper:
        return None
    return _WEEKDAYS[text]


def _read_number_words(tokens: list[_Token], i: int) -> tuple[float, bool, int]:
    """Parse the number words starting at ``tokens[i]``: (value, is_ordinal, tokens consumed)."""
    total, current, j, ordinal = 0.0, 0.0, i, False
    while j < len(tokens) and tokens[j].kind == "word":
        word = tokens[j].text
        if word == "and" and j > i and j + 1 < len(tokens) and tokens[j + 1].text in _NUMBER_WORDS:
            j += 1
            continue
        if word in _UNITS_WORDS:
            current += _UNITS_WORDS[word]
        elif word in ("dozen", "hundred"):
            current = max(current, 1) * (12 if word == "dozen" else 100)
        elif word in _SCALE_WORDS:
            total += max(current, 1) * _SCALE_WORDS[word]
            current = 0
        elif word in _ORDINAL_WORDS:
            value = _ORDINAL_WORDS[word]
            current = max(current, 1) * value if value >= 100 else current + value
            ordinal = True
            j += 1
            break
        else:
            break
        j += 1
    return total + current, ordinal, j - i


class _NumberReader:
    """Reads the numbers of a token list (see :func:`numbers_guard` for what counts)."""

    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.found: list[tuple[float, str]] = []
        self.used: set[int] = set()  # token indices read as numbers or units: not content words
        self.soft_ones = 0
        self.months = {
            i
            for i, t in enumerate(tokens)
            if _month(t) is not None or (t.text == "may" and t.upper and self.next_to_number(i))
        }

    def next_to_number(self, i: int) -> bool:
        return any(0 <= j < len(self.tokens) and self.tokens[j].kind == "num" for j in (i - 1, i + 1))

    def text(self, i: int) -> str:
        return self.tokens[i].text if 0 <= i < len(self.tokens) else ""

    def near_month(self, i: int, j: int) -> bool:
        """Whether ``tokens[i:j]`` (a number) is a day of a month: "5 March", "March 5th", "5th of May"."""
        return bool(
            {i - 1, j} & self.months
            or (j + 1 in self.months and self.text(j) == "of")
            or (i - 2 in self.months and self.text(i - 1) == "the")
        )

    def unit_at(self, j: int) -> str:
        unit = _unit(self.tokens[j]) if 0 <= j < len(self.tokens) else ""
        if unit:
            self.used.add(j)
        return unit

    def read(self) -> None:
        i = 0
        while i < len(self.tokens):
            token = self.tokens[i]
            if token.kind == "time":
                i = self.read_time(i)
            elif token.kind == "num":
                i = self.read_digits(i)
            elif token.kind == "word" and token.text in _NUMBER_WORDS:
                i = self.read_words(i)
            else:
                self.read_calendar(i)
                i += 1

    def read_time(self, i: int) -> int:
        meridiem = self.text(i + 1)
        width = 2 if meridiem in ("am", "pm") else 1
        self.found.append((_clock(self.tokens[i].value, meridiem), "time"))
        self.used.update(range(i, i + width))
        return i + width

    def read_digits(self, i: int) -> int:
        token = self.tokens[i]
        value, unit, width = token.value, "", 1
        if token.suffix in _ORDINAL_SUFFIXES:
            unit = "ordinal"
        elif token.suffix == "k":
            value *= 1000
        elif token.suffix in ("am", "pm"):
            value, unit = _clock(value, token.suffix), "time"
        elif token.suffix:
            unit = _UNIT_ALIASES.get(token.suffix.lstrip("°"), token.suffix)
        after = self.text(i + 1)
        if not unit and after in ("am", "pm", "oclock"):
            value, unit, width = _clock(value, after), "time", 2
        elif not unit and i > 0 and self.tokens[i - 1].kind == "sym":
            unit = self.unit_at(i - 1)
        if not unit:
            unit = self.unit_at(i + 1)
        if unit in ("", "ordinal") and 1 <= value <= 31 and self.near_month(i, i + 1):
            unit = "day-of-month"
        self.found.append((value, unit))
        self.used.update(range(i, i + width))
        return i + width

    def read_words(self, i: int) -> int:
        token = self.tokens[i]
        if token.text == "second" and i > 0 and self.tokens[i - 1].kind == "num":
            return i + 1  # "30 second": a unit, read with its number
        value, ordinal, width = _read_number_words(self.tokens, i)
        self.used.update(range(i, i + width))
        unit = "ordinal" if ordinal else self.unit_at(i + width)
        if unit == "" and self.text(i + width) in ("am", "pm", "oclock"):
            value, unit = _clock(value, self.text(i + width)), "time"
            self.used.add(i + width)
        if unit in ("", "ordinal") and 1 <= value <= 31 and self.near_month(i, i + width):
            unit = "day-of-month"
        if width == 1 and token.text == "one" and not unit:
            self.soft_ones += 1
        else:
            self.found.append((value, unit))
        return i + width

    def read_calendar(self, i: int) -> None:
        token = self.tokens[i]
        if token.kind != "word":
            return
        month, weekday = _month(token), _weekday(token)
        if token.text in _TIME_WORDS:
            self.found.append((_TIME_WORDS[token.text], "time"))
        elif weekday is not None:
            self.found.append((float(weekday), "weekday"))
        elif token.text in _RELATIVE_DAYS:
            self.found.append((float(_RELATIVE_DAYS[token.text]), "relative-day"))
        elif month is not None or i in self.months:
            self.found.append((float(month or 5), "month"))
        else:
            return
        self.used.add(i)


def _question_words(words: tuple[str, ...]) -> set[str]:
    found: set[str] = set()
    for word, following in itertools.zip_longest(words, words[1:], fillvalue=""):
        if word in _QUESTION_WORDS:
            found.add(_QUESTION_WORDS[word])
        elif word == "how" and following in _HOW_WORDS:
            found.add(_HOW_WORDS[following])
        elif word == "what" and following == "time":
            found.add("when")  # "what time" asks "when"
    return found


@lru_cache(maxsize=8192)
def analyze(text: str) -> Analysis:
    """Tokenize ``text`` once for every guard (cached per text; the result is immutable)."""
    tokens = _tokenize(text)
    words = tuple(t.text for t in tokens if t.kind == "word")
    negations = sum(
        1
        for word, previous in zip(words, ("", *words), strict=False)
        if (word in NEGATION_WORDS and not (word == "not" and previous == "or"))
        or not NEGATING_VERBS.isdisjoint(_forms(word))
    )
    reader = _NumberReader(tokens)
    reader.read()

    content: dict[str, str] = {}
    names: set[str] = set()
    sequence: list[str] = []  # content words and pivots, in order
    terms: list[str] = []  # words and numbers, in order
    previous = ""
    for index, token in enumerate(tokens):
        if token.kind != "word":
            if token.kind in ("num", "time"):
                terms.append(f"#{token.value:g}")
            previous = ""
            continue
        word, norm = token.text, normalize_word(token.text)
        terms.append(norm)
        if word in _PIVOTS:
            sequence.append(word)
        skip = (
            index in reader.used
            or ((word in _SKIP_WORDS or norm in _SKIP_WORDS) and not (token.acronym or token.capital))
            or (previous == "how" and word in _HOW_WORDS)
            or (previous == "what" and word == "time")
            or len(word) < 2
        )
        previous = word
        if skip:
            continue
        content.setdefault(norm, word)
        sequence.append(norm)
        if token.capital or token.acronym:
            names.add(norm)

    pivots = {
        pivot: frozenset(
            following
            for word, following in itertools.pairwise(sequence)
            if word == pivot and following not in _PIVOTS
        )
        for pivot in _PIVOTS & set(sequence)
    }

    return Analysis(
        words=words,
        negations=negations,
        numbers=tuple(sorted(reader.found)),
        soft_ones=reader.soft_ones,
        question_words=frozenset(_question_words(words)),
        generic_question=not _GENERIC_QUESTION_WORDS.isdisjoint(words),
        plain_how=any(w == "how" and f not in _HOW_WORDS for w, f in itertools.zip_longest(words, words[1:])),
        content=content,
        names=frozenset(names),
        joined={a + b: (normalize_word(a), normalize_word(b)) for a, b in itertools.pairwise(words)},
        pivots=pivots,
        terms=tuple(terms),
        negated=_negated_heads(words),
    )


#: Auxiliaries that open a question ("is it ...", "why don't you ...").
_AUXILIARIES = frozenset(
    "am is are was were do does did have has had can could will would shall should may might must".split()  # noqa: SIM905
)


def _inverted(words: tuple[str, ...], index: int) -> bool:
    """Whether the negation at ``index`` follows a question's opening auxiliary ("isn't it", "why
    don't you"): the auxiliary comes first, or right after a question word."""
    if index == 0 or words[index - 1] not in _AUXILIARIES:
        return False
    return index == 1 or words[index - 2] in (*_QUESTION_WORDS, "how", "what", "which")


def _negated_heads(words: tuple[str, ...]) -> frozenset[str]:
    """The first content word after each negation word (an "or not" tag excluded), normalized: what
    the negation applies to ("did not say he was guilty" -> say; "said he was not guilty" -> guilty)."""
    heads: set[str] = set()
    for index, word in enumerate(words):
        if word not in NEGATION_WORDS or (word == "not" and index and words[index - 1] == "or"):
            continue
        if _inverted(words, index):
            continue  # "why isn't my printer working": it negates the whole clause, not "printer"
        following = (w for w in words[index + 1 :] if w not in _SKIP_WORDS and len(w) > 1)
        if (head := next(following, None)) is not None:
            heads.add(normalize_word(head))
    return frozenset(heads)


def _negated_form(word: str, base_words: frozenset[str] | set[str]) -> bool:
    """Whether ``word`` is a negative-prefix form ("unsafe") of one of ``base_words`` ("safe")."""
    return any(
        word.startswith(prefix)
        and len(word) - len(prefix) >= 3
        and word[len(prefix) :].lstrip("-") in base_words
        for prefix in _NEGATIVE_PREFIXES
    )


def _compounds(words: set[str], one: Analysis, other: Analysis) -> tuple[set[str], set[str]]:
    """Those of ``words`` (of ``one``) that ``other`` writes as two adjacent words, and those words."""
    whole = {w for w in words if one.content[w] in other.joined}
    return whole, {part for w in whole for part in other.joined[one.content[w]]}


def differing_words(a: Analysis, b: Analysis) -> tuple[set[str], set[str]]:
    """The normalized content words only ``a`` has, and those only ``b`` has.

    A word written as one on one side and as two adjacent words on the other ("email" and "e mail")
    is the same word; a word and its negative-prefix form ("unsafe" and "safe") are left to the
    negation guard.
    """
    only_a = {w for w in a.content if w not in b.content}
    only_b = {w for w in b.content if w not in a.content}
    whole_a, parts_b = _compounds(only_a, a, b)
    whole_b, parts_a = _compounds(only_b, b, a)
    only_a -= whole_a | parts_a
    only_b -= whole_b | parts_b
    pairs = [(x, y) for x in only_a for y in only_b if _negated_form(x, {y}) or _negated_form(y, {x})]
    return only_a - {x for x, _ in pairs}, only_b - {y for _, y in pairs}


# --------------------------------------------------------------------------------------------------
# The guards
# --------------------------------------------------------------------------------------------------


def _answerable(specific: frozenset[str], other: Analysis) -> bool:
    """Whether ``other``'s generic question words can ask for each of ``specific``."""
    return (
        not specific
        or other.generic_question
        or (other.plain_how and all(q.startswith("how-") for q in specific))
    )


def question_guard(query: str, stored: str) -> str | None:
    """Reject when the two ask for a different kind of answer: a specific question word (who, when or
    "what time", where, why, how many/much/long/often/far/old/big) of one is neither in the other nor
    asked for by its generic what/which (or, for a "how ...", its plain how); a yes/no question has none."""
    a, b = analyze(query), analyze(stored)
    only_a, only_b = a.question_words - b.question_words, b.question_words - a.question_words
    if (only_a and only_b) or not _answerable(only_a, b) or not _answerable(only_b, a):
        return REASON_QUESTION
    return None


def negation_guard(query: str, stored: str) -> str | None:
    """Reject when the two hold a different number of negations: negation words (not, n't, no, never,
    none, nobody, nothing, nowhere, neither, nor, without, cannot, anything but), the negating verbs
    avoid, lack, fail, refuse, prevent, and words whose un-/in-/im-/il-/ir-/dis-/non- prefix negates a
    word of the other ("unsafe" against "safe"); an "or not" and a question tag ("isn't it?") are none.

    The count, not its parity: a double negation ("not unusual") is not taken to cancel out. With as
    many negations on both sides, also reject when a negation applies to another word (the first
    content word after it) that both questions hold: the negation moved to another clause.
    """
    a, b = analyze(query), analyze(stored)
    words_a, words_b = set(a.words), set(b.words)
    count_a = a.negations + sum(_negated_form(w, words_b) for w in words_a - words_b)
    count_b = b.negations + sum(_negated_form(w, words_a) for w in words_b - words_a)
    if count_a != count_b:
        return REASON_NEGATION
    # As many negations, but one moved to another word that both have: "I did not say he was guilty"
    # against "I said he was not guilty".
    moved_a = {w for w in a.negated - b.negated if _holds(b, w)}
    moved_b = {w for w in b.negated - a.negated if _holds(a, w)}
    if moved_a and moved_b:
        return REASON_NEGATION
    return None


def _holds(analysis: Analysis, word: str) -> bool:
    """Whether ``analysis`` has ``word`` among its content words, in any inflection ("says", "saying")."""
    return any(not _forms(word).isdisjoint(_forms(other)) for other in analysis.content)


def numbers_guard(query: str, stored: str) -> str | None:
    """Reject when the two's numbers differ as multisets of (value, unit): digits (decimals, thousands
    separators, "k"), number words, ordinals, times of day, weekdays, months, days of the month and
    today/tomorrow/yesterday, each with the unit or currency written next to it — a bare "one" (also a
    pronoun or an article) may go unmatched."""
    a, b = analyze(query), analyze(stored)
    if a.numbers == b.numbers:
        return None
    only_a, only_b = Counter(a.numbers) - Counter(b.numbers), Counter(b.numbers) - Counter(a.numbers)
    for extra, soft in ((only_a, b.soft_ones), (only_b, a.soft_ones)):
        if (1.0, "") in extra:
            extra[(1.0, "")] -= min(extra[(1.0, "")], soft)
    if +only_a or +only_b:
        return REASON_NUMBERS
    return None


def direction_guard(query: str, stored: str) -> str | None:
    """Reject when the objects of from/to/into/than are swapped: each question has a word right after
    one of these that the other has too, but not right after it ("from A to B" against "from B to A",
    "convert A to B" against "convert B to A", "A than B" against "B than A")."""
    a, b = analyze(query), analyze(stored)
    for pivot in a.pivots.keys() & b.pivots.keys():
        moved_a = {w for w in a.pivots[pivot] - b.pivots[pivot] if w in b.content}
        moved_b = {w for w in b.pivots[pivot] - a.pivots[pivot] if w in a.content}
        if moved_a and moved_b:
            return REASON_DIRECTION
    return None


#: Words relating two things symmetrically: "A and B", "A vs B", "A plus B", "A times B" (read "time"
#: once normalized), "compare A with B" mean the same with A and B swapped, so two terms with one of
#: these between them may trade places.
_SYMMETRIC = frozenset(
    """
    and or nor vs versus compare compared comparing comparison similar similarity different difference differ
    equal equals equivalent same between plus sum time times multiplied product together married marry
    meet met related relation relationship connection link linked
    """.split()  # noqa: SIM905 - a word list reads better as text
)


def _single_positions(terms: tuple[str, ...]) -> dict[str, int]:
    """Where each term that occurs exactly once stands."""
    counts = Counter(terms)
    return {term: index for index, term in enumerate(terms) if counts[term] == 1}


#: Words relating two terms one way (prepositions, a closed class of English): "A to B" is not "B to
#: A", "10 by 2" not "2 by 10", "3pm EST in PST" not "3pm PST in EST", "a km in miles" not "a mile in
#: km". The symmetric ones ("with", "between", "among", "like") are left out.
_RELATIONS = frozenset(
    """
    about above across after against along around as at before behind below beneath beside beyond by
    down during for from in inside into near of off on onto out outside over past per since than
    through to toward towards under underneath until up upon via within
    """.split()  # noqa: SIM905 - a word list reads better as text
)


def _is_term(word: str, analysis: Analysis) -> bool:
    """A content word or a number: something that can fill a role."""
    return word.startswith("#") or word in analysis.content


def order_guard(query: str, stored: str) -> str | None:
    """Reject when two terms (content words or numbers) trade places around the same words:
    the roles changed while the frame stayed ("10 minus 3" / "3 minus 10", "is 17 greater than 13" /
    "is 13 greater than 17", "did the dog bite the man" / "did the man bite the dog", "divide 10 by
    2" / "divide 2 by 10", "3pm EST in PST" / "3pm PST in EST").

    Only terms written once in each are compared, and only when the words between them are the same
    in both and hold a content word or a one-way relation (a preposition: to, from, in, into, by, of,
    per, ...), and no symmetric relation (and, vs, plus, similar, ...): "A vs B" / "B vs A" passes,
    and so does a rewording that reorders with other words ("prison rape" / "rape in prison") or
    moves a whole clause ("can I X if Y" / "if Y, can I X")."""
    a, b = analyze(query), analyze(stored)
    in_a, in_b = _single_positions(a.terms), _single_positions(b.terms)
    shared = sorted(
        (t for t in in_a.keys() & in_b.keys() if _is_term(t, a) and _is_term(t, b)), key=in_a.__getitem__
    )
    for x, y in itertools.combinations(shared, 2):  # x before y in the query
        if in_b[y] > in_b[x]:
            continue
        between = a.terms[in_a[x] + 1 : in_a[y]]
        if (
            between == b.terms[in_b[y] + 1 : in_b[x]]
            and (any(_is_term(w, a) for w in between) or not _RELATIONS.isdisjoint(between))
            and _SYMMETRIC.isdisjoint(between)
        ):
            return REASON_ORDER
    return None


def _listed_opposites(a: str, b: str) -> bool:
    forms_b = _forms(b)
    return any(not _OPPOSITES.get(form, frozenset()).isdisjoint(forms_b) for form in _forms(a))


def are_opposites(a: str, b: str) -> bool:
    """Whether two lower-case words are listed opposites (in any inflection: "closed" / "open"), or
    compounds that differ only by listed opposites in front of one shared part of three letters or
    more ("uppercase" / "lowercase", "upstream" / "downstream", "postwar" / "prewar")."""
    if _listed_opposites(a, b):
        return True
    # The shared ending, letter by letter (commonprefix of the reversed words).
    ending = os.path.commonprefix([a[::-1], b[::-1]])  # noqa: RUF071 - letters are what is compared
    shared = min(len(ending), len(a) - 1, len(b) - 1)
    return any(_listed_opposites(a[:-k], b[:-k]) for k in range(3, shared + 1))


def antonym_guard(query: str, stored: str) -> str | None:
    """Reject when a word only one of the two has is a listed opposite of a word only the other has:
    a common antonym (open/closed, buy/sell) or a mutually exclusive term (daily/monthly, north/south)."""
    a, b = analyze(query), analyze(stored)
    only_a = set(a.words) - set(b.words)
    only_b = set(b.words) - set(a.words)
    if any(are_opposites(x, y) for x in only_a for y in only_b):
        return REASON_ANTONYM
    return None


def entity_guard(query: str, stored: str) -> str | None:
    """Reject when a name — a word capitalized other than at the start of a sentence, or an acronym —
    appears in only one of the two (names are never matched by similarity)."""
    a, b = analyze(query), analyze(stored)
    only_a, only_b = differing_words(a, b)
    if not only_a.isdisjoint(a.names) or not only_b.isdisjoint(b.names):
        return REASON_ENTITY
    return None


class ContentWordGuard:
    """Reject when a content word only one of the two has finds no counterpart, among the content words
    only the other has, whose single-word embedding has a cosine of at least ``threshold`` with it.

    Content words are lower-cased, without stopwords, numbers and negation words, with the plural and
    possessive endings removed. Single words are embedded with the matcher's embedder; their vectors are
    cached here too (bounded), so an embedder without a cache of its own is not asked twice.
    """

    def __init__(
        self, embedder: Embedder, *, threshold: float = DEFAULT_WORD_THRESHOLD, cache_size: int = 8192
    ) -> None:
        """Compare words with ``embedder``; ``threshold`` is a cosine in [-1, 1]."""
        if not -1.0 <= threshold <= 1.0:
            raise ValueError(f"a word threshold is a cosine in [-1, 1], not {threshold!r}")
        self.embedder = embedder
        self.threshold = threshold
        self._cache: OrderedDict[str, npt.NDArray[np.float32]] = OrderedDict()
        self._cache_size = cache_size
        self._lock = _fork.lock(self)

    def __call__(self, query: str, stored: str, /) -> str | None:
        """Check ``stored`` against ``query`` (see the class docstring)."""
        a, b = analyze(query), analyze(stored)
        only_a, only_b = differing_words(a, b)
        if not only_a and not only_b:
            return None
        if not only_a or not only_b:
            return REASON_CONTENT  # a word with nothing to stand for
        left = [a.content[w] for w in sorted(only_a)]
        right = [b.content[w] for w in sorted(only_b)]
        vectors = self.vectors([*left, *right])
        sims = vectors[: len(left)] @ vectors[len(left) :].T
        if bool((sims.max(axis=1) < self.threshold).any() or (sims.max(axis=0) < self.threshold).any()):
            return REASON_CONTENT
        return None

    def prepare(self, pairs: Iterable[tuple[str, str]], *, batch_size: int = 256) -> None:
        """Embed, in batches, the words this guard will compare for each ``(query, stored)`` pair
        (a bulk warm-up of the word cache, as for an evaluation run)."""
        words: dict[str, None] = {}
        for query, stored in pairs:
            a, b = analyze(query), analyze(stored)
            only_a, only_b = differing_words(a, b)
            if only_a and only_b:
                words.update(dict.fromkeys(a.content[w] for w in only_a))
                words.update(dict.fromkeys(b.content[w] for w in only_b))
        todo = list(words)[: self._cache_size]
        for start in range(0, len(todo), batch_size):
            self.vectors(todo[start : start + batch_size])

    def vectors(self, words: Sequence[str]) -> npt.NDArray[np.float32]:
        """The embeddings of single ``words`` (rows L2-normalized), from the cache where possible."""
        with self._lock:
            found = {w: self._cache[w] for w in words if w in self._cache}
            for word in found:
                self._cache.move_to_end(word)
        missing = [w for w in dict.fromkeys(words) if w not in found]
        if missing:
            fresh = np.asarray(self.embedder.embed(missing), dtype=np.float32)
            found.update(zip(missing, fresh, strict=True))
            with self._lock:
                self._cache.update(zip(missing, fresh, strict=True))
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return np.stack([found[w] for w in words])


def default_guards(
    embedder: Embedder, *, word_threshold: float = DEFAULT_WORD_THRESHOLD
) -> tuple[Guard, ...]:
    """The guards a :class:`~cachekit.semantic.matcher.Matcher` runs by default, cheapest first."""
    return (
        question_guard,
        negation_guard,
        numbers_guard,
        symbols_guard,
        direction_guard,
        order_guard,
        antonym_guard,
        entity_guard,
        ContentWordGuard(embedder, threshold=word_threshold),
    )

"""Generated hard pairs: questions that differ only in a meaning-bearing token, and rewordings that
keep every such token.

Each *template* writes a *core* (an expression, a command, a relation between two terms) into one of
several question *frames*. A different-meaning pair puts the core and a changed core (another
operator, a flipped sign or case, the two sides of a relation swapped) into two frames; a
same-meaning pair puts the same core (or an equivalent spelling of it: ``15 + 27`` / ``15 plus 27``,
``x > y`` / ``y < x``, ``-la`` / ``-al``) into two frames. The frames change the wording around the
core, so a rule that only passes identical strings fails the same-meaning pairs, and one that
ignores the core fails the different ones.

Used by the tests of the guards (:mod:`cachekit.semantic.symbols`, ``order_guard``) and by
``scripts/build_semantic_verifier.py`` as hard negatives. Everything here is written for cachekit: no
pair comes from a data set.

    >>> from cachekit.semantic.generated import generate
    >>> pairs = generate(seed=1, per_template=2)
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cachekit.semantic.evaluate import Pair

__all__ = ["SOURCE", "TEMPLATES", "Template", "generate"]

#: The ``source`` of every generated pair.
SOURCE = "generated"

#: (core, an equivalent core, a core of another meaning), drawn with a random generator.
Cores = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class Template:
    """A family of pairs: question frames (``{}`` is where the core goes) and a core drawer."""

    #: The kind of meaning-bearing token the family varies ("operator", "relation", ...).
    kind: str
    frames: tuple[str, ...]
    draw: Callable[[random.Random], Cores]


CITIES = [
    "Tokyo",
    "London",
    "Paris",
    "Berlin",
    "Madrid",
    "Rome",
    "Delhi",
    "Sydney",
    "Toronto",
    "Chicago",
    "Boston",
    "Seattle",
    "Dubai",
    "Singapore",
    "Lagos",
    "Cairo",
    "Lima",
    "Oslo",
    "Vienna",
    "Prague",
    "Lisbon",
    "Dublin",
    "Seoul",
    "Bangkok",
    "Nairobi",
    "Denver",
    "Atlanta",
    "Munich",
]
CURRENCIES = ["USD", "EUR", "GBP", "JPY", "INR", "CAD", "AUD", "CHF", "CNY", "SEK"]
ZONES = ["EST", "PST", "CST", "MST", "GMT", "UTC", "CET", "IST", "JST", "AEST"]
LANGUAGES = [
    "English",
    "French",
    "German",
    "Spanish",
    "Italian",
    "Japanese",
    "Hindi",
    "Arabic",
    "Portuguese",
    "Russian",
    "Dutch",
]
FORMATS = ["PDF", "JPEG", "PNG", "CSV", "JSON", "XML", "MP3", "MP4", "WAV", "GIF", "DOCX", "HTML"]
UNIT_PAIRS = (
    ("km", "miles"),
    ("kilograms", "pounds"),
    ("liters", "gallons"),
    ("celsius", "fahrenheit"),
    ("inches", "centimeters"),
    ("feet", "meters"),
    ("ounces", "grams"),
    ("hours", "minutes"),
    ("acres", "hectares"),
    ("cups", "milliliters"),
)
ACCOUNTS = ["savings", "checking", "brokerage", "pension", "business", "joint"]
TOOLS = ["ls", "rm", "grep", "cp", "chmod", "tar", "sort", "curl", "ssh", "git", "diff", "find"]
LETTERS = "xyzmnpqkbc"


def _two(rng: random.Random, items: Sequence[str]) -> tuple[str, str]:
    first, second = rng.sample(list(items), 2)
    return first, second


def _number(rng: random.Random) -> int:
    return rng.choice((rng.randint(2, 20), rng.randint(21, 999)))


# -- operators and signs ---------------------------------------------------------------------------

_OPERATORS = {
    "+": ("+", "plus"),
    "-": ("-", "minus"),
    "*": ("*", "times", "multiplied by"),
    "/": ("/", "divided by"),
    "^": ("^", "to the power of"),
    "%": ("%", "mod"),
}
_COMMUTATIVE = frozenset("+*")


def _write(x: int | str, op: str, y: int | str, rng: random.Random) -> str:
    spelling = rng.choice(_OPERATORS[op])
    if spelling in "+-*/^%" and rng.random() < 0.3:
        return f"{x}{spelling}{y}"
    return f"{x} {spelling} {y}"


def _arithmetic(rng: random.Random) -> Cores:
    x, y = _number(rng), _number(rng)
    while y == x:
        y = _number(rng)
    op = rng.choice(list(_OPERATORS))
    core = _write(x, op, y, rng)
    same = _write(y, op, x, rng) if op in _COMMUTATIVE and rng.random() < 0.5 else _write(x, op, y, rng)
    change = rng.choice(("operator", "swap", "sign"))
    if change == "swap" and op not in _COMMUTATIVE:
        different = _write(y, op, x, rng)
    elif change == "sign":
        different = _write(f"-{x}", op, y, rng)
    else:
        different = _write(x, rng.choice([o for o in _OPERATORS if o != op]), y, rng)
    return core, same, different


_COMPARISONS = {
    "<": ("<", "less than", "smaller than"),
    ">": (">", "greater than", "larger than"),
    "<=": ("<=", "less than or equal to"),
    ">=": (">=", "greater than or equal to"),
    "==": ("==", "equal to"),
    "!=": ("!=", "not equal to"),
}
_FLIP = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "==": "==", "!=": "!="}


def _comparison(rng: random.Random) -> Cores:
    if rng.random() < 0.5:
        x, y = _two(rng, LETTERS)
    else:
        x, y = (str(n) for n in rng.sample(range(2, 500), 2))
    op = rng.choice(list(_COMPARISONS))

    def write(a: str, o: str, b: str) -> str:
        return f"{a} {rng.choice(_COMPARISONS[o])} {b}"

    core = write(x, op, y)
    same = write(y, _FLIP[op], x) if rng.random() < 0.5 else write(x, op, y)
    if op in ("<", ">", "<=", ">=") and rng.random() < 0.5:
        different = write(y, op, x)  # the sides swapped
    else:
        others = [o for o in _COMPARISONS if o != op]
        different = write(x, rng.choice(others), y)
    return core, same, different


def _sign(rng: random.Random) -> Cores:
    n = rng.randint(1, 90)
    unit = rng.choice(("°F", "°C", "°", " degrees", " degrees Celsius", " Fahrenheit"))
    spelled = rng.choice(("-", "minus ", "negative "))
    core = f"-{n}{unit}"
    return core, f"{spelled}{n}{unit}", f"{n}{unit}"


# -- code ------------------------------------------------------------------------------------------

_ESCAPES = "sdwbSDWB"


def _escape(rng: random.Random) -> Cores:
    letter = rng.choice(_ESCAPES)
    other = letter.swapcase() if rng.random() < 0.7 else rng.choice([c for c in _ESCAPES if c != letter])
    wrap = rng.choice(("\\{}", "\\{}+", "^\\{}*$", "(\\{}+)", "[\\{}]"))
    core = wrap.format(letter)
    return core, core, wrap.format(other)


_FLAG_LETTERS = "rfvinlxsaph"


def _flag(rng: random.Random) -> Cores:
    tool = rng.choice(TOOLS)
    letter = rng.choice(_FLAG_LETTERS)
    if rng.random() < 0.3:
        pair = rng.sample(_FLAG_LETTERS, 2)
        core = f"{tool} -{pair[0]}{pair[1]}"
        same = f"{tool} -{pair[1]}{pair[0]}"  # bundled short flags in any order
        different = f"{tool} -{pair[0]}{pair[1].upper()}"
        return core, same, different
    other = letter.upper() if rng.random() < 0.6 else rng.choice([c for c in _FLAG_LETTERS if c != letter])
    core = f"{tool} -{letter}"
    return core, core, f"{tool} -{other}"


def _shell(rng: random.Random) -> Cores:
    tool, other_tool = _two(rng, TOOLS)
    name = rng.choice(("out.txt", "log", "errors.log", "result.csv"))
    choices: tuple[tuple[str, str], ...] = (
        (f"{tool} 2>&1", f"{tool} 1>&2"),
        (f"{tool} > {name}", f"{tool} < {name}"),
        (f"{tool} >> {name}", f"{tool} > {name}"),
        (f"{tool} && {other_tool}", f"{tool} || {other_tool}"),
        (f"{tool} | {other_tool}", f"{other_tool} | {tool}"),
        (f"{tool} 2> {name}", f"{tool} 1> {name}"),
    )
    core, different = rng.choice(choices)
    return core, core, different


_IDENTIFIERS = (
    ("C++", "C#"),
    ("C++", "C"),
    ("C#", "F#"),
    ("os.path.join", "os.path.split"),
    ("os.path", "os.Path"),
    ("my_var", "my_val"),
    ("df.groupby", "df.group_by"),
    ("np.array", "np.asarray"),
    ("user_id", "userId_"),
    ("self.items", "self.Items"),
)


def _identifier(rng: random.Random) -> Cores:
    core, different = rng.choice(_IDENTIFIERS)
    if rng.random() < 0.5:
        core, different = different, core
    return core, core, different


_UNITS_CASED = (
    ("mV", "MV"),
    ("mW", "MW"),
    ("Mb", "MB"),
    ("Gb", "GB"),
    ("Kb", "KB"),
    ("mA", "MA"),
    ("ms", "Ms"),
)


def _unit_case(rng: random.Random) -> Cores:
    n = rng.randint(1, 500)
    unit, other = rng.choice(_UNITS_CASED)
    if rng.random() < 0.5:
        unit, other = other, unit
    gap = rng.choice(("", " "))
    return f"{n}{gap}{unit}", f"{n}{gap}{unit}", f"{n}{gap}{other}"


# -- relations -------------------------------------------------------------------------------------


def _relation(
    pattern: str, pools: Callable[[random.Random], tuple[str, str]]
) -> Callable[[random.Random], Cores]:
    """A core ``pattern`` with ``{a}`` and ``{b}`` filled from ``pools``; the different core swaps them."""

    def draw(rng: random.Random) -> Cores:
        a, b = pools(rng)
        n = _number(rng)
        core = pattern.format(a=a, b=b, n=n)
        return core, core, pattern.format(a=b, b=a, n=n)

    return draw


def _pick(items: Sequence[str]) -> Callable[[random.Random], tuple[str, str]]:
    return lambda rng: _two(rng, items)


def _units(rng: random.Random) -> tuple[str, str]:
    a, b = rng.choice(UNIT_PAIRS)
    return (a, b) if rng.random() < 0.5 else (b, a)


def _numbers(rng: random.Random) -> tuple[str, str]:
    x, y = rng.sample(range(2, 500), 2)
    return str(x), str(y)


def _clock(rng: random.Random) -> str:
    return f"{rng.randint(1, 12)}{rng.choice(('am', 'pm', ' am', ' pm', ':30 pm', ':15 am'))}"


def _zones(rng: random.Random) -> Cores:
    a, b = _two(rng, ZONES)
    time = _clock(rng)
    joiner = rng.choice(("in", "to"))
    core = f"{time} {a} {joiner} {b}"
    return core, core, f"{time} {b} {joiner} {a}"


_QUESTION = ("What is {}?", "What's {}?", "Can you tell me what {} is?", "Please tell me what {} is.")

TEMPLATES: tuple[Template, ...] = (
    Template("operator", _QUESTION, _arithmetic),
    Template(
        "operator",
        ("Is {} true?", "Is it true that {}?", "Does {} hold?", "Is {} correct?"),
        _comparison,
    ),
    Template(
        "sign",
        ("Is {} cold?", "Is {} a cold temperature?", "Would {} feel cold?", "Is it cold at {}?"),
        _sign,
    ),
    Template(
        "code",
        (
            "What does {} match in a regex?",
            "What does the regex {} match?",
            "In a regular expression, what does {} match?",
            "Which strings does {} match in a regex?",
        ),
        _escape,
    ),
    Template(
        "code",
        (
            "What does `{}` do?",
            "What does {} do?",
            "What is the effect of {}?",
            "Can you explain what {} does?",
        ),
        _flag,
    ),
    Template(
        "operator",
        (
            "What does `{}` do in bash?",
            "In bash, what does {} do?",
            "What happens when I run {} in bash?",
            "Explain what {} does in a bash shell",
        ),
        _shell,
    ),
    Template(
        "code",
        (
            "What is {} used for?",
            "What's {} used for?",
            "What do people use {} for?",
            "What is the use of {}?",
        ),
        _identifier,
    ),
    Template(
        "case",
        ("Is {} dangerous?", "Is {} a dangerous level?", "Can {} hurt me?", "Is it dangerous to touch {}?"),
        _unit_case,
    ),
    Template(
        "relation",
        (
            "How do I get {}?",
            "How can I get {}?",
            "What is the best way to get {}?",
            "How should I travel {}?",
        ),
        _relation("from {a} to {b}", _pick(CITIES)),
    ),
    Template(
        "relation",
        (
            "How long is the flight {}?",
            "How long does the flight {} take?",
            "What is the flight time {}?",
            "How many hours is a flight {}?",
        ),
        _relation("{a} to {b}", _pick(CITIES)),
    ),
    Template(
        "relation",
        ("Convert {}", "Please convert {}", "How much is {} when converted?", "Can you convert {}?"),
        _relation("{n} {a} to {b}", _pick(CURRENCIES)),
    ),
    Template(
        "relation",
        (
            "What is the exchange rate {}?",
            "What's the current exchange rate {}?",
            "Tell me the exchange rate {}",
            "How much is the exchange rate {} today?",
        ),
        _relation("from {a} to {b}", _pick(CURRENCIES)),
    ),
    Template(
        "relation",
        ("Convert {}", "How do I convert {}?", "Please convert {}", "Can you convert {} for me?"),
        _relation("{n} {a} to {b}", _units),
    ),
    Template(
        "relation",
        ("How many {}?", "Tell me how many {}", "Do you know how many {}?", "How many {} exactly?"),
        _relation("{a} are in a {b}", _units),
    ),
    Template(
        "relation",
        ("What time is {}?", "What is {} in local time?", "Convert {}", "Can you convert {}?"),
        _zones,
    ),
    Template(
        "relation",
        ("What do I get if I {}?", "What is the result if I {}?", "What do you get when you {}?"),
        _relation("divide {a} by {b}", _numbers),
    ),
    Template(
        "relation",
        (
            "How do I translate a letter {}?",
            "How can I translate a letter {}?",
            "What is the best way to translate a letter {}?",
        ),
        _relation("from {a} to {b}", _pick(LANGUAGES)),
    ),
    Template(
        "relation",
        ("How do I convert {}?", "How can I convert {}?", "What is the easiest way to convert {}?"),
        _relation("a {a} file to {b}", _pick(FORMATS)),
    ),
    Template(
        "relation",
        (
            "How do I move money {}?",
            "How can I move money {}?",
            "What is the way to move money {}?",
            "How do I transfer money {}?",
        ),
        _relation("from my {a} account into my {b} account", _pick(ACCOUNTS)),
    ),
    Template(
        "relation",
        ("Is {}?", "Is it true that {}?", "Can you tell me if {}?"),
        _relation("{a} bigger than {b}", _pick(CITIES)),
    ),
)


def generate(*, seed: int = 0, per_template: int = 20) -> list[Pair]:
    """``per_template`` same-meaning and as many different-meaning pairs from every template,
    reproducibly from ``seed``; each pair's two questions use two different frames. ``kind`` is
    ``"generated-<template kind>"``, ``source`` :data:`SOURCE`."""
    rng = random.Random(seed)
    pairs: list[Pair] = []
    for template in TEMPLATES:
        for _ in range(per_template):
            core, same, different = template.draw(rng)
            first, second = rng.sample(template.frames, 2)
            kind = f"generated-{template.kind}"
            pairs.append(Pair(first.format(core), second.format(same), True, kind, SOURCE))
            first, second = rng.sample(template.frames, 2)
            pairs.append(Pair(first.format(core), second.format(different), False, kind, SOURCE))
    return pairs

"""Meaning-bearing tokens: the symbols, signs, escapes, flags, code identifiers and case-carrying units
that a sentence embedding does not see, read from the raw text and compared exactly.

An embedding scores "What is 15 + 27?" against "What is 15 - 27?", "\\s" against "\\S" and "2>&1"
against "1>&2" above 0.95: it reads words, and these differences are one character. So the text is
scanned by a tokenizer that keeps runs of symbols (``[^\\w\\s]+``) whole and classifies every token
by its shape, not by a list of examples:

* **operators** (``+ - * / ^ % = < > ! & | ~`` and their runs: ``<=``, ``!=``, ``->``, ``>&``, ``.*``),
  each kept with the operand written right before and right after it, so "15 - 27" / "27 - 15" and
  "2>&1" / "1>&2" differ; the English names of arithmetic and comparison operators between two
  numbers or variables ("15 plus 27", "x greater than y") read as their symbols;
* **signs**: a ``-`` (or "minus", "negative") written right before a number that follows no operand
  ("-40°F");
* **code**: escape sequences (``\\s``, ``\\D``, case kept), regex character classes (``[a-z]``),
  command-line flags (``-r``, ``--force``; case kept), URLs, e-mail addresses, dotted and snake_case
  identifiers (``os.path``, ``my_var``), ``C++`` / ``C#`` style names, ``$VAR`` and ``@name``;
* **case-carrying units**: a unit written after a number in the shape of an SI or IEC symbol (``mV`` /
  ``MV``, ``Kb`` / ``KB``), compared with its case when both texts use case at all (a text written all
  in lower case, all in capitals or in title case says nothing by its case).

:func:`marks` lists them (cached per text); :func:`symbols_guard` refuses a pair whose lists differ. A
word-to-word hyphen or slash ("Tokyo-London", "TCP/IP") is prose more often than a relation: it only
refuses a pair where the other text writes the same two words the other way round.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

__all__ = [
    "REASON_CASE",
    "REASON_CODE",
    "REASON_OPERATOR",
    "Marks",
    "marks",
    "symbols_guard",
    "uses_case",
]

REASON_OPERATOR = "operator"
REASON_CODE = "code"
REASON_CASE = "case"

#: Unicode spellings of operators, read as their ASCII forms (an en dash between numbers is a minus or
#: a range: either way the hyphen's meaning).
_UNICODE = str.maketrans(
    {
        "\u2212": "-",
        "\u2013": "-",
        "\u00d7": "*",
        "\u22c5": "*",
        "\u00f7": "/",
        "\u2215": "/",
        "\u2264": "<=",
        "\u2265": ">=",
        "\u2260": "!=",
        "\u2192": "->",
        "\u2190": "<-",
        "\u21d2": "=>",
        "\u2019": "'",
        "\u2018": "'",
        "\u201c": '"',
        "\u201d": '"',
    }
)

_SCAN = re.compile(
    r"""
    (?P<url>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s<>"']+)
    | (?P<email>\b[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)
    | (?P<escape>\\(?:[A-Za-z0-9]|[^\sA-Za-z0-9]))
    | (?P<cls>\[\^?(?:\\.|[^\]\s\\])*?(?:[A-Za-z0-9]-[A-Za-z0-9]|\\[A-Za-z])(?:\\.|[^\]\s\\])*\])
    | (?P<flag>(?<![\w\-/.])--?[A-Za-z][\w-]*)
    | (?P<num>\d+(?:[.,]\d+)*)(?P<suffix>[A-Za-z]+)?
    | (?P<ident>[$@]?[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?:\+\+|\#)?)
    | (?P<sym>(?:(?!(?<![\w\-/.])--?[A-Za-z])[^\w\s\\\[\]])+)
    """,
    re.X,
)

#: Characters of sentence punctuation: a symbol run made only of these (after trimming) is prose.
_LEADING_PUNCT = ".,;:?'\"([{\u2026`"
_TRAILING_PUNCT = ".,;:!?'\")]}\u2026`"
#: A symbol run is an operator when, without the punctuation around it, it is made of these and holds
#: one of the operator characters proper (others -- currency and degree signs, accents, zero-width
#: spaces, emoji -- are prose).
_OPERATOR_RUN = re.compile(r"[-+*/^%=<>!&|~.?:#$@]*[-+*/^%=<>!&|~][-+*/^%=<>!&|~.?:#$@]*")
#: "&" alone means "and".
_PROSE_RUNS = frozenset({"&"})
#: Operators that can be written in front of a number alone (a sign): "-40", "+5".
_SIGNS = frozenset({"-", "+"})
#: Operators whose two sides may be swapped without changing the meaning, and the comparison flips.
_COMMUTATIVE = frozenset({"+", "*", "==", "!=", "&&", "||"})
_FLIPPED = {">": "<", ">=": "<="}

#: English names of operators, read as the symbol when written between two numbers or variables.
_SPELLED_BINARY: tuple[tuple[tuple[str, ...], str], ...] = (
    (("greater", "than", "or", "equal", "to"), ">="),
    (("less", "than", "or", "equal", "to"), "<="),
    (("not", "equal", "to"), "!="),
    (("is", "not", "equal", "to"), "!="),
    (("multiplied", "by"), "*"),
    (("divided", "by"), "/"),
    (("to", "the", "power", "of"), "^"),
    (("greater", "than"), ">"),
    (("more", "than"), ">"),
    (("larger", "than"), ">"),
    (("bigger", "than"), ">"),
    (("higher", "than"), ">"),
    (("less", "than"), "<"),
    (("fewer", "than"), "<"),
    (("smaller", "than"), "<"),
    (("lower", "than"), "<"),
    (("equal", "to"), "=="),
    (("equals",), "=="),
    (("plus",), "+"),
    (("minus",), "-"),
    (("times",), "*"),
    (("mod",), "%"),
    (("to",), "-"),  # "1 to 10" is the range "1-10" (between two numbers only, as every entry)
    (("modulo",), "%"),
)
#: ... and in front of a number alone: a sign.
_SPELLED_SIGNS = frozenset({"minus", "negative"})

#: A unit in the shape of an SI or IEC symbol: an optional prefix (milli m, mega M, kilo k, kibi Ki,
#: ...) and a base unit (volt V, byte B, bit b, hertz Hz, ...). Their case is their meaning.
_SI_UNIT = re.compile(
    r"(?:[yzafpnu\u00b5mcdhkKMGTPEZY]|da|[KMGTPE]i)?"
    r"(?:V|W|A|Wh|Ah|VA|B|b|bit|bps|Bps|Hz|g|m|s|l|L|J|N|Pa|F|H|T|\u03a9|ohm|eV|cal|mol|K|C|lm|lx)"
)
#: Times of day look like units ("a" atto + "m" metre) and are written in any case.
_NOT_UNITS = frozenset({"am", "pm", "AM", "PM", "Am", "Pm"})


class _Tok(NamedTuple):  # a tuple, not a frozen dataclass: built for every token of every text
    kind: str  # "num", "word", "code", "escape", "cls", "flag", "sym"
    text: str  # as written (operators: normalized, punctuation trimmed)
    space_before: bool
    space_after: bool
    suffix: str = ""  # letters written right after a number


@dataclass(frozen=True, slots=True)
class Marks:
    """The meaning-bearing tokens of one text (see the module docstring)."""

    #: Operators with their operands, and signs: ``("-", "15", "27")``, ``("-", "", "40")``.
    operators: tuple[tuple[str, str, str], ...]
    #: Escapes, character classes and flags as written, URLs and identifiers lower-cased:
    #: ``("escape", "\\s")``, ``("flag", "-R")``, ``("code", "os.path")``.
    code: tuple[tuple[str, str], ...]
    #: Code identifiers as written ("os.Path").
    cased: tuple[tuple[str, str], ...]
    #: Numbers with an SI/IEC-shaped unit, as written: ``("5", "mV")``.
    units: tuple[tuple[str, str], ...]
    #: Two words joined by a hyphen or a slash, in order: ``("tokyo", "-", "london")``.
    joined: tuple[tuple[str, str, str], ...]
    #: Whether the text uses case (see :func:`uses_case`).
    cased_text: bool


def uses_case(text: str) -> bool:
    """Whether ``text`` says anything by its case: it has capitals and lower-case letters, and is not
    written in title case (most words capitalized)."""
    letters = [c for c in text if c.isalpha()]
    if not any(c.isupper() for c in letters) or not any(c.islower() for c in letters):
        return False
    words = re.findall(r"[A-Za-z]{2,}", text)
    return not words or sum(w[0].isupper() for w in words) < 0.8 * len(words)


def _trim(run: str) -> tuple[str, str, str]:
    """A symbol run split into the sentence punctuation before it, its operator core, and the
    punctuation after it ("?)" -> ("?)", "", ""); "(-" -> ("(", "-", ""))."""
    start, end = 0, len(run)
    while start < end and run[start] in _LEADING_PUNCT and run[start : start + 2] not in (".*", ".+"):
        start += 1
    while end > start and run[end - 1] in _TRAILING_PUNCT:
        end -= 1
    return run[:start], run[start:end], run[end:]


def _tokens(text: str) -> list[_Tok]:
    text = text.translate(_UNICODE)
    tokens: list[_Tok] = []
    for match in _SCAN.finditer(text):
        start, end = match.span()
        before = start == 0 or text[start - 1].isspace()
        after = end == len(text) or text[end].isspace()
        kind = "num" if match.group("num") is not None else (match.lastgroup or "sym")
        value = match.group(0)
        if kind == "num":
            tokens.append(_Tok("num", match.group("num"), before, after, match.group("suffix") or ""))
            continue
        if kind == "sym":
            # Prose punctuation around an operator separates it from what is outside (nothing
            # reaches across a comma or a bracket).
            lead, core, trail = _trim(value)
            if core and not _OPERATOR_RUN.fullmatch(core):
                lead, core, trail = value, "", ""
            if lead:
                tokens.append(_Tok("punct", lead, before, not core and after))
            if core:
                tokens.append(_Tok("sym", core, before and not lead, after and not trail))
            if trail:
                tokens.append(_Tok("punct", trail, False, after))
            continue
        if kind in ("url", "email"):
            kind, value = "code", value.rstrip(_TRAILING_PUNCT)
        elif kind == "ident":
            kind = "code" if _code_shaped(value) else "word"
        tokens.append(_Tok(kind, value, before, after))
    return tokens


def _code_shaped(word: str) -> bool:
    """Whether an identifier is written as code: dotted (not an abbreviation such as "e.g" nor a
    missing space such as "home.Then"), snake_case, ``C++``/``C#``, ``$VAR``, ``@name``."""
    if word[0] in "$@" or word.endswith(("++", "#")):
        return len(word) > 2 or word.endswith(("++", "#"))  # "$B" is a billion dollars
    if "_" in word.strip("_"):
        return True
    parts = word.split(".")
    if len(parts) < 2 or any(len(p) < 2 for p in parts):
        return False
    # "home.Then": a sentence whose space after the full stop went missing.
    return not (len(parts) == 2 and parts[0].islower() and parts[1][0].isupper() and parts[1][1:].islower())


def _number(text: str) -> str:
    """A number's digits without thousands separators ("1,000" -> "1000"; "3.50" stays)."""
    return text.replace(",", "") if re.fullmatch(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?", text) else text


def _operand(token: _Tok | None, *, words: bool) -> str | None:
    """The operand ``token`` is, canonical, or ``None``: numbers and code always; a single letter (a
    variable); with ``words``, any word (the caller passes it for a word written against the
    operator: "a->b", not the "is" of "is ^\\d")."""
    if token is None:
        return None
    if token.kind == "num":
        return _number(token.text) + token.suffix.lower()
    if token.kind in ("code", "escape", "cls"):
        return token.text.lower()  # their case is compared with the code marks
    if token.kind == "word" and (words or len(token.text) == 1):
        return token.text.lower()
    return None


def _text(token: _Tok | None) -> str:
    return "" if token is None else token.text.lower()


def _at(tokens: list[_Tok], i: int) -> _Tok | None:
    return tokens[i] if 0 <= i < len(tokens) else None


#: The spelled operators by their first word, longest first (a lookup runs for every word of a text).
_SPELLED_BY_FIRST: dict[str, tuple[tuple[tuple[str, ...], str], ...]] = {
    first: tuple(entry for entry in _SPELLED_BINARY if entry[0][0] == first)
    for first in {phrase[0] for phrase, _ in _SPELLED_BINARY}
}


def _spelled(tokens: list[_Tok], i: int) -> tuple[str, int] | None:
    """The operator spelled in words at ``tokens[i]`` and how many words it takes, if any."""
    for phrase, symbol in _SPELLED_BY_FIRST.get(tokens[i].text.lower(), ()):
        n = len(phrase)
        window = tokens[i : i + n]
        if len(window) == n and all(
            t.kind == "word" and t.text.lower() == w for t, w in zip(window, phrase, strict=True)
        ):
            return symbol, n
    return None


def _tight(left: _Tok | None, right: _Tok | None) -> bool:
    """Whether two neighbouring tokens are written together (no space between)."""
    return left is not None and right is not None and not left.space_after and not right.space_before


_Mark = tuple[str, str, str]


def _read_operators(tokens: list[_Tok]) -> tuple[list[_Mark], list[_Mark]]:
    """The operators (with their operands) and the word pairs joined by a hyphen or slash."""
    operators: list[_Mark] = []
    joined: list[_Mark] = []
    i = 0
    while i < len(tokens):
        if tokens[i].kind == "word":
            mark, width = _word_operator(tokens, i)
        elif tokens[i].kind == "sym":
            mark, width = _symbol_operator(tokens, i, joined)
        else:
            mark, width = None, 1
        if mark is not None:
            operators.append(mark)
        i += width
    return operators, joined


def _word_operator(tokens: list[_Tok], i: int) -> tuple[_Mark | None, int]:
    """An operator spelled in words at ``tokens[i]`` ("15 plus 27", "minus 40"), and its width."""
    word = tokens[i].text.lower()
    if word not in _SPELLED_BY_FIRST and word not in _SPELLED_SIGNS:
        return None, 1  # most words: checked once here, since this runs for every word of a text
    left, right = _at(tokens, i - 1), _at(tokens, i + 1)
    spelled = _spelled(tokens, i)
    if spelled is not None:
        symbol, width = spelled
        after = _at(tokens, i + width)
        a, b = _operand(left, words=False), _operand(after, words=False)
        # Between two numbers or two variables: "3 times a day" operates on nothing.
        same_kind = (left is not None and left.kind == "num") == (after is not None and after.kind == "num")
        if a is not None and b is not None and same_kind:
            return _canonical(symbol, a, b), width
    if (
        tokens[i].text.lower() in _SPELLED_SIGNS
        and right is not None
        and right.kind == "num"
        and _operand(left, words=False) is None
    ):
        return ("-", "", _operand(right, words=False) or ""), 1
    return None, 1


def _symbol_operator(tokens: list[_Tok], i: int, joined: list[_Mark]) -> tuple[_Mark | None, int]:
    """The operator a symbol run at ``tokens[i]`` is, with its operands; a word pair it joins goes to
    ``joined``."""
    token, left, right = tokens[i], _at(tokens, i - 1), _at(tokens, i + 1)
    op = token.text
    if op in _PROSE_RUNS or (set(op) == {"*"} and _emphasis(left, token, right)):
        return None, 1
    if op in ("-", "/") and left is not None and right is not None and left.kind == right.kind == "word":
        if _tight(left, token) and _tight(token, right):
            joined.append((left.text.lower(), op, right.text.lower()))
        return None, 1  # a spaced dash between words is prose; a joined pair only refuses a swap
    if op == "-" and left is not None and left.kind == "num" and right is not None and right.kind == "word":
        return None, 1  # "2-day": a compound; the number is the numbers guard's
    if (
        op == "%"
        and left is not None
        and left.kind == "num"
        and (
            (_tight(left, token) and not _tight(token, right))
            or right is None
            or right.kind not in ("num", "code")
        )
    ):
        return None, 1  # "40%": a unit, the numbers guard's ("10 % 3" is an operator)
    binary = op not in _SIGNS
    a = _operand(left, words=binary and _tight(left, token))
    b = _operand(right, words=binary and _tight(token, right))
    between_words = left is not None and right is not None and left.kind == right.kind == "word"
    if binary and between_words and op not in _COMMUTATIVE:
        joined.append((_text(left), op, _text(right)))  # "apples > oranges": a swap refuses
    if op in _SIGNS and a is None and right is not None and right.kind == "num" and _tight(token, right):
        compound = left is not None and left.kind in ("word", "code") and _tight(left, token)
        if op == "-" and not compound:  # "pre-1861" is a compound, not a sign
            return ("-", "", b or ""), 1  # a sign; "+5" is 5
        return None, 1
    lone_star = op == "*" and (a is None or b is None) and not _tight(left, token)
    if (a is None and b is None and not between_words) or lone_star:
        return None, 1  # a bullet, a footnote's star, a stray symbol: nothing to operate on
    return _canonical(op, a or "", b or ""), 1


def _emphasis(left: _Tok | None, token: _Tok, right: _Tok | None) -> bool:
    """Whether a run of ``*`` marks emphasis ("**bold**"): written against a word on one side only."""
    words = ("word", "num", "code")
    against_left = left is not None and left.kind in words and _tight(left, token)
    against_right = right is not None and right.kind in words and _tight(token, right)
    return against_left != against_right


def _canonical(op: str, a: str, b: str) -> tuple[str, str, str]:
    """One spelling of ``a op b``: ``y > x`` is ``x < y`` (with both operands known: ``cmd > file`` is
    a redirection); the operands of ``+ * == !=`` in order."""
    if op in _FLIPPED and a and b:
        op, a, b = _FLIPPED[op], b, a
    if op in _COMMUTATIVE and b < a:
        a, b = b, a
    return (op, a, b)


def _flag(text: str) -> str:
    """A command-line flag; bundled single-letter flags in one order ("-la" is "-al")."""
    if not text.startswith("--") and text[1:].isalpha():
        return "-" + "".join(sorted(text[1:]))
    return text


def _mixed_inside(word: str) -> bool:
    """Whether a code token mixes case past its first letter ("os.Path", "getElementById")."""
    rest = word[1:]
    return any(c.isupper() for c in rest) and any(c.islower() for c in word)


@lru_cache(maxsize=8192)
def marks(text: str) -> Marks:
    """The meaning-bearing tokens of ``text`` (cached per text; immutable)."""
    tokens = _tokens(text)
    operators, joined = _read_operators(tokens)
    code: list[tuple[str, str]] = []
    cased: list[tuple[str, str]] = []
    units: list[tuple[str, str]] = []
    for index, token in enumerate(tokens):
        if token.kind in ("escape", "cls"):
            code.append((token.kind, token.text))  # case kept: \s is not \S, [a-z] not [A-Z]
        elif token.kind == "flag":
            code.append(("flag", _flag(token.text)))  # case kept: -r is not -R
        elif token.kind == "code":
            code.append(("code", token.text.lower()))
            cased.append(("code", token.text))
        elif token.kind == "num":
            unit = token.suffix
            following = _at(tokens, index + 1)
            if not unit and following is not None and following.kind == "word":
                unit = following.text
            if unit and unit not in _NOT_UNITS and _SI_UNIT.fullmatch(unit):
                units.append((_number(token.text), unit))
    return Marks(
        operators=tuple(sorted(operators)),
        code=tuple(sorted(code)),
        cased=tuple(sorted(cased)),
        units=tuple(sorted(units)),
        joined=tuple(joined),
        cased_text=uses_case(text),
    )


def _swapped(a: tuple[_Mark, ...], b: tuple[_Mark, ...]) -> bool:
    """Whether a pair of words joined in ``a`` is joined the other way round in ``b`` only."""
    return any(x != y and (y, op, x) in b and (x, op, y) not in b for x, op, y in a)


def _recased(a: tuple[tuple[str, str], ...], b: tuple[tuple[str, str], ...], *, inside: bool) -> bool:
    """Whether an entry of ``a`` is in ``b`` only in another case (the same number with ``mV`` for
    ``MV``); with ``inside``, only where one of the two spellings mixes case past its first letter
    (``os.Path`` against ``os.path``, not ``Node.js`` against ``node.js``)."""
    exact = set(b)
    folded: dict[tuple[str, str], list[str]] = {}
    for n, u in b:
        folded.setdefault((n, u.lower()), []).append(u)
    for n, u in a:
        if (n, u) in exact or (n, u.lower()) not in folded:
            continue
        if not inside or _mixed_inside(u) or any(_mixed_inside(other) for other in folded[(n, u.lower())]):
            return True
    return False


def symbols_guard(query: str, stored: str) -> str | None:
    """Reject when the meaning-bearing tokens differ: operators with their operands, or signs
    (``operator``); escapes, character classes, flags or code identifiers (``code``); or, in two
    texts that both use case, the case of an SI/IEC-shaped unit of the same number or of a code
    identifier (``case``). Two words joined by a hyphen or slash reject only when the other text
    joins them the other way round (``operator``)."""
    a, b = marks(query), marks(stored)
    if (
        Counter(a.operators) != Counter(b.operators)
        or _swapped(a.joined, b.joined)
        or _swapped(b.joined, a.joined)
    ):
        return REASON_OPERATOR
    if Counter(a.code) != Counter(b.code):
        return REASON_CODE
    if a.cased_text and b.cased_text:
        for mine, theirs in ((a, b), (b, a)):
            if _recased(mine.units, theirs.units, inside=False) or _recased(
                mine.cased, theirs.cased, inside=True
            ):
                return REASON_CASE
    return None

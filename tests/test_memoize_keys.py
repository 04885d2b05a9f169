"""``@cached(memoize=True)``: two different arguments never share an entry, and a value that is not
JSON is refused before the function runs (docs/exact.md, "Call-site policy and memoization").

The oracle (:func:`plain`) is written from the documented rule, not from the key encoder: a JSON
argument is ``None``, a ``bool``, an ``int``, a finite ``float``, a ``str``, or a ``list``, ``tuple``
or ``dict`` (``str`` keys) of them, of exactly these types; two arguments are the same when they have
the same types all the way down and equal values (``0.0`` and ``-0.0`` differ; dict key order does
not matter). Everything else raises :class:`cachekit.MemoizeError`.

Every check goes through the real decorator and a real store: the memoized function returns a new
number each time it runs, so a shared key shows up as a call answered with another call's number.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import datetime
import decimal
import enum
import fractions
import itertools
import math
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cachekit
from cachekit.stores import MemoryStore

# -- values that JSON serializers write as something plainer ------------------------------------------


@dataclasses.dataclass(frozen=True)
class Refund:
    amount: int


@dataclasses.dataclass(frozen=True)
class Cancel:
    amount: int


class Kind(enum.Enum):
    REFUND = 55
    CANCEL = "55"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 55


class Color(str, enum.Enum):  # enum.StrEnum is Python 3.11's: the project runs on 3.10
    RED = "red"


class Point(NamedTuple):
    x: int
    y: int


class Label(str):
    pass


class Count(int):
    pass


class Bag(dict[str, Any]):
    pass


#: Pairs that a JSON serializer writes alike (or nearly), each of which the memo must keep apart.
CONFUSABLE: list[tuple[Any, Any]] = [
    (True, 1),
    (False, 0),
    (1, 1.0),
    (0.0, -0.0),
    ((1, 2), [1, 2]),
    ([], ()),
    ({"1": "a"}, {1: "a"}),
    (None, math.nan),
    (None, math.inf),
    (Refund(55), Cancel(55)),
    (Refund(55), {"amount": 55}),
    (Kind.REFUND, 55),
    (Level.HIGH, 55),
    (Color.RED, "red"),
    (Point(1, 2), (1, 2)),
    (Label("a"), "a"),
    (Count(5), 5),
    (Bag(a=1), {"a": 1}),
    (collections.OrderedDict(a=1), {"a": 1}),
    (datetime.datetime(2025, 1, 2, 3, 4, 5), "2025-01-02T03:04:05"),
    (datetime.date(2025, 1, 2), "2025-01-02"),
    (uuid.UUID(int=5), str(uuid.UUID(int=5))),
    (decimal.Decimal("1.5"), 1.5),
    (fractions.Fraction(1, 2), 0.5),
    (np.int64(5), 5),
    (np.float64(1.5), 1.5),
    (np.array([1, 2]), [1, 2]),
    (b"ab", "ab"),
    ({1, 2}, [1, 2]),
    (frozenset({"a"}), ["a"]),
    (1 + 0j, 1),
]

_NOT = object()


def plain(value: Any) -> Any:
    """The documented identity of a JSON argument (hashable), or ``_NOT`` for any other value."""
    kind = type(value)
    if value is None:
        return ("null",)
    if kind is bool or kind is int or kind is str:
        return (kind.__name__, value)
    if kind is float:
        return ("float", value, math.copysign(1.0, value)) if math.isfinite(value) else _NOT
    if kind is list or kind is tuple:
        items = tuple(plain(item) for item in value)
        return _NOT if any(item is _NOT for item in items) else (kind.__name__, items)
    if kind is dict:
        if any(type(name) is not str for name in value):
            return _NOT
        items = tuple(sorted((name, plain(item)) for name, item in value.items()))
        return _NOT if any(item is _NOT for _, item in items) else ("dict", frozenset(items))
    return _NOT


def memoized() -> tuple[Callable[..., Any], Callable[[], int]]:
    """A memoized function that returns a new number each time it runs, and how often it ran."""
    counter = itertools.count()
    ran = [0]

    @cachekit.cached(memoize=True, cache=MemoryStore(), name="probe")
    def probe(*args: Any, **kwargs: Any) -> int:
        ran[0] += 1
        return next(counter)

    return probe, lambda: ran[0]


def outcome(probe: Callable[..., Any], ran: Callable[[], int], *args: Any, **kwargs: Any) -> Any:
    """What a call returned, or ``_NOT`` when it was refused (the function then did not run)."""
    before = ran()
    try:
        return probe(*args, **kwargs)
    except cachekit.MemoizeError as exc:
        refused = str(exc)
    assert "not JSON" in refused
    assert ran() == before, "refused after the function ran"
    return _NOT


def check_pair(a: Any, b: Any, *, names: tuple[str | None, str | None] = (None, None)) -> None:
    """Call with ``a``, then ``b``, each positional (name ``None``) or as the keyword argument named."""
    probe, ran = memoized()

    def call(value: Any, name: str | None) -> Any:
        return outcome(probe, ran, value) if name is None else outcome(probe, ran, **{name: value})

    first, second = call(a, names[0]), call(b, names[1])
    identity_a, identity_b = plain(a), plain(b)
    assert (first is _NOT) == (identity_a is _NOT), a
    assert (second is _NOT) == (identity_b is _NOT), b
    if first is not _NOT and second is not _NOT:
        # The same call is a hit (the first call's number); a different one runs again.
        same = identity_a == identity_b and names[0] == names[1]
        assert (second == first) == same, (a, b, names)


@pytest.mark.parametrize(
    ("a", "b"), CONFUSABLE, ids=[f"{type(a).__name__}-{type(b).__name__}" for a, b in CONFUSABLE]
)
def test_values_json_would_write_alike_never_share_an_entry(a: Any, b: Any) -> None:
    check_pair(a, b)
    check_pair(b, a, names=("x", "x"))


def test_a_refused_argument_is_named_in_the_error() -> None:
    probe, _ = memoized()
    with pytest.raises(cachekit.MemoizeError, match=r"argument 'order'\['items'\]\[1\] is a .*Refund"):
        probe(order={"items": [1, Refund(5)]})
    with pytest.raises(cachekit.MemoizeError, match=r"argument 0 is nan \(JSON has no NaN"):
        probe(math.nan)
    looped: list[Any] = []
    looped.append(looped)
    with pytest.raises(cachekit.MemoizeError, match="nested too deeply"):
        probe(looped)


def test_call_shapes_are_told_apart() -> None:
    probe, _ = memoized()
    results = {
        probe(1, 2),
        probe(2, 1),
        probe(x=1),
        probe(y=1),
        probe(1),
        probe([1, 2]),
        probe(x=1, y=2),
        probe({"x": 1, "y": 2}),
        probe(10**40),
        probe(-(10**40)),
        probe("\ud800"),
        probe("\udc00"),
        probe(["a", "sb"]),
        probe(["as", "b"]),
        probe([12]),  # and [1, 2] above
    }
    assert len(results) == 15
    # What does not change the call is the same entry: keyword order, dict key order, an equal copy.
    assert probe(y=2, x=1) == probe(x=1, y=2)
    assert probe({"y": 2, "x": 1}) == probe({"x": 1, "y": 2})


# -- the property over many types -----------------------------------------------------------------------

_JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=()), max_size=6)  # lone surrogates too
    # Texts made of an encoding's own tags and digits: where an encoding that is not self-delimiting
    # would let ["a", "sb"] and ["as", "b"] meet.
    | st.text(alphabet="sil1:;", max_size=4)
)
_OTHER_LEAVES = (
    st.sampled_from([math.nan, math.inf, -math.inf])
    | st.builds(Refund, st.integers(0, 3))
    | st.builds(Cancel, st.integers(0, 3))
    | st.sampled_from([*Kind, *Level, *Color])
    | st.builds(Point, st.integers(0, 3), st.integers(0, 3))
    | st.text(max_size=3).map(Label)
    | st.integers(0, 3).map(Count)
    | st.datetimes()
    | st.dates()
    | st.timedeltas()
    | st.decimals(allow_nan=False)
    | st.fractions()
    | st.uuids()
    | st.complex_numbers(allow_nan=False)
    | st.binary(max_size=3)
    | st.frozensets(st.integers(0, 3), max_size=2)
    | st.integers(0, 3).map(np.int64)
    | st.lists(st.integers(0, 3), max_size=3).map(np.array)
)


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return (
        st.lists(children, max_size=3)
        | st.lists(children, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=3), children, max_size=3)
        | st.dictionaries(st.integers(0, 3) | st.booleans(), children, min_size=1, max_size=2)
        | st.dictionaries(st.text(max_size=3), children, max_size=2).map(Bag)
    )


#: Mostly JSON, with other types sprinkled in at every depth.
VALUES = st.recursive(_JSON_LEAVES | _OTHER_LEAVES, _containers, max_leaves=8)


def _reordered(value: Any) -> Any:
    """An equal copy with every dict's keys in reverse order (the same argument, written differently)."""
    if type(value) is dict:
        return {name: _reordered(value[name]) for name in reversed(list(value))}
    if type(value) in (list, tuple):
        return type(value)(_reordered(item) for item in value)
    return copy.copy(value)


def _shifted(value: Any) -> Any:
    """A different value whose parts, concatenated, read the same: one character moved across the
    boundary of two neighbouring strings (``["ab", "c"]`` -> ``["a", "bc"]``), where there are any."""
    if type(value) in (list, tuple):
        items = list(value)
        for i in range(len(items) - 1):
            left, right = items[i], items[i + 1]
            if type(left) is str and type(right) is str and left:
                items[i : i + 2] = [left[:-1], left[-1] + right]
                return type(value)(items)
        return type(value)(_shifted(item) for item in items)
    if type(value) is dict:
        return {name: _shifted(item) for name, item in value.items()}
    return value


@st.composite
def pairs(draw: st.DrawFn) -> tuple[Any, Any]:
    a = draw(VALUES)
    how = draw(st.sampled_from(["same", "shifted", "other"]))
    if how == "same":
        return a, _reordered(a)
    return (a, _shifted(a)) if how == "shifted" else (a, draw(VALUES))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pair=pairs(), names=st.tuples(st.sampled_from([None, "x", "y"]), st.sampled_from([None, "x", "y"])))
def test_no_two_different_arguments_share_an_entry(
    pair: tuple[Any, Any], names: tuple[str | None, str | None]
) -> None:
    check_pair(*pair, names=names)

"""Progress for the command line's long commands: ``replay``, ``semantic-eval`` and model conversion.

Library functions do no I/O: they take a :data:`Progress` callback, called as
``progress(stage, done, total)`` (``done`` from 0 to ``total`` within a stage), and the command
line passes a :class:`ProgressPrinter`. The printer draws a tqdm bar when its stream is a terminal
and tqdm is installed (the ``local`` extra); otherwise (a pipe, a CI log, a file) it writes a plain
line at the start of each stage and at each tenth of the way, with no ``\\r`` and no escape codes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Any, TextIO, TypeVar

__all__ = ["Progress", "ProgressPrinter", "routed_tqdm", "tracked", "transformers_bars_off"]

T = TypeVar("T")

Progress = Callable[[str, int, int], None]
"""``progress(stage, done, total)``: ``done`` of ``total`` units of ``stage`` are finished."""

_TENTHS = 10  # plain lines per stage, besides the first


class ProgressPrinter:
    """A :data:`Progress` callback that shows progress on ``stream`` (``None``: shows nothing).

    ``prefix`` starts every line (``"cachekit replay"``). Call :meth:`close` (or use it as a
    context manager) to finish the last bar.
    """

    def __init__(self, stream: TextIO | None, prefix: str = "") -> None:
        self._stream = stream
        self._prefix = f"{prefix}: " if prefix else ""
        self._stage: str | None = None
        self._tenth = -1
        self._bar: Any = None  # a tqdm bar while a stage is drawn on a terminal
        self._tqdm: Any = _tqdm_class() if stream is not None and _is_terminal(stream) else None

    def __call__(self, stage: str, done: int, total: int, detail: str = "") -> None:
        """Report that ``done`` of ``total`` units of ``stage`` are finished; ``detail`` names the
        step just finished (optional)."""
        if self._stream is None:
            return
        if stage != self._stage:
            self._finish_bar()
            self._stage, self._tenth = stage, -1
        if self._tqdm is not None:
            self._draw(stage, done, total, detail)
        else:
            self._line(stage, done, total, detail)

    def _draw(self, stage: str, done: int, total: int, detail: str) -> None:
        if self._bar is None:
            self._bar = self._tqdm(
                total=total, initial=done, desc=self._prefix + stage, file=self._stream, leave=True
            )
        if detail:
            self._bar.set_postfix_str(detail, refresh=False)
        self._bar.update(done - self._bar.n)

    def _line(self, stage: str, done: int, total: int, detail: str) -> None:
        # A line when a new tenth is reached: a few lines per stage, however many units it has.
        tenth = done * _TENTHS // total if total > 0 else _TENTHS
        if tenth <= self._tenth:
            return
        self._tenth = tenth
        percent = 100 * done // total if total > 0 else 100
        assert self._stream is not None
        self._stream.write(
            f"{self._prefix}{stage} {done}/{total} ({percent}%){' ' + detail if detail else ''}\n"
        )
        self._stream.flush()

    def _finish_bar(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def close(self) -> None:
        """Finish the bar being drawn (plain lines need no finishing). Idempotent."""
        self._finish_bar()

    def __enter__(self) -> ProgressPrinter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


def _is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty()) if callable(isatty) else False


def _tqdm_class() -> Any:
    """tqdm's bar class, or ``None`` without tqdm (then a terminal gets plain lines too)."""
    try:
        from tqdm import tqdm  # type: ignore[import-untyped]  # tqdm ships no type information
    except ImportError:
        return None
    return tqdm


def tracked(items: Sequence[T], progress: Progress | None, stage: str) -> Iterator[T]:
    """Yield ``items``, reporting ``stage`` to ``progress`` before the first and after each one."""
    total = len(items)
    if progress is not None:
        progress(stage, 0, total)
    for done, item in enumerate(items, start=1):
        yield item
        if progress is not None:
            progress(stage, done, total)


@contextmanager
def routed_tqdm(module_name: str, progress: Progress, stage: str) -> Iterator[None]:
    """While inside, ``tqdm(iterable, ...)`` loops of module ``module_name`` report to ``progress``
    as ``stage`` instead of drawing their own bar.

    For a library that draws a tqdm bar of its own on stderr and offers no way to turn it off (the
    GGUF conversion in transformers): its ``\\r`` redraws would land raw in a log file. A module
    without a module-level ``tqdm`` is left alone (and reports nothing).
    """
    module = importlib.import_module(module_name)
    original = getattr(module, "tqdm", None)
    if original is None:
        yield
        return

    def report(iterable: Iterable[T], *_args: Any, **_kwargs: Any) -> Iterator[T]:
        return tracked(list(iterable), progress, stage)

    module.tqdm = report  # type: ignore[attr-defined]  # the module's own global, restored below
    try:
        yield
    finally:
        module.tqdm = original  # type: ignore[attr-defined]


@contextmanager
def transformers_bars_off() -> Iterator[None]:
    """Hide the bars transformers draws behind its own switch ("Loading weights", "Writing model
    shards") while inside, then restore the switch; nothing to do without transformers."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        yield
        return
    was_enabled = hf_logging.is_progress_bar_enabled()
    if was_enabled:
        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # transformers ships it untyped
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]

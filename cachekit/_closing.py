"""Context-manager support for objects with ``close()`` (and ``aclose()``), written once."""

from __future__ import annotations

from types import TracebackType
from typing import TypeVar

__all__ = ["AsyncClosing", "Closing"]

_C = TypeVar("_C", bound="Closing")
_A = TypeVar("_A", bound="AsyncClosing")


class Closing:
    """``with obj:`` closes ``obj`` on the way out (the subclass defines ``close``)."""

    __slots__ = ()

    def close(self) -> None:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncClosing:
    """``async with obj:`` awaits ``obj.aclose()`` on the way out (the subclass defines it)."""

    __slots__ = ()

    async def aclose(self) -> None:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    async def __aenter__(self: _A) -> _A:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

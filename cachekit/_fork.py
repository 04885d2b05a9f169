"""Fork safety, written once: what a forked child cannot inherit is rebuilt there.

``fork()`` (gunicorn ``--preload``, ``multiprocessing``'s "fork" start method, Celery's prefork pool)
copies the parent's memory but only the thread that called it. In the child:

* a background thread the parent started (the ledger's writer, the semantic layer's workers) does
  not run, though the object that started it still holds it and believes it does;
* a lock that another parent thread held at that instant stays held, by a thread that is not there;
* a connection (SQLite, a Redis socket, an HTTP keep-alive) is shared with the parent: used from both
  processes their traffic interleaves, and closing it in the child can act on the parent's state.

Every cachekit object that owns one of these registers here when it is made, and one
``os.register_at_fork(after_in_child=...)`` hook, installed once per process when this module is
first imported, repairs them in the child before any other Python code runs there: first every lock
made by :func:`lock` is re-initialized in place (unlocked, same object), then each object given to
:func:`register` drops what it inherited in its ``_after_fork_in_child()`` (a thread, a queue of the
parent's work, a connection), to be rebuilt on first use in the child. Nothing does I/O in the hook.
Objects are held through weak references: registering keeps nothing alive, and a registry entry goes
with its object. What a child inherits but must neither use nor close (a SQLite connection, the
parent's Redis or HTTP connections) is handed to :func:`keep`.

Exit. What a child recorded is written when it exits: the objects given to :func:`at_exit` (ledgers)
are closed by one ``atexit`` hook, which a child made by ``os.fork()`` inherits and runs when it exits
normally, and in a ``multiprocessing`` child, which ends with ``os._exit`` and so never runs
``atexit``, by a ``multiprocessing`` finalizer that runs when the child's target returns (a ``Pool``
worker: after ``pool.close()``; ``pool.join()``). A child that is killed (``Pool.terminate()``, also
what leaving a ``with Pool()`` block does) or that calls ``os._exit`` itself runs neither: it flushes
first (``docs/operations.md``).

Not covered: state of other libraries. redis-py rebuilds its own connection pools in a child (its
``ConnectionPool`` checks the process id), httpx does not: an SDK client's keep-alive connections
made before the fork are the SDK's (``docs/operations.md``).
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import sys
import threading
import weakref
from typing import Any, Protocol

__all__ = ["AfterFork", "Closes", "at_exit", "keep", "lock", "register", "run_exit_hooks"]

logger = logging.getLogger("cachekit.fork")


class AfterFork(Protocol):
    """An object that drops what it inherited across ``fork()`` (see :func:`register`)."""

    def _after_fork_in_child(self) -> None:
        """Runs in a forked child before anything else uses the object: forget the parent's threads,
        queued work and connections (no I/O here: rebuild them on first use)."""


class Closes(Protocol):
    """An object closed when its process exits (see :func:`at_exit`)."""

    def close(self) -> None:
        """Finish: write what is pending, release what is held. Idempotent."""


_ids = itertools.count()
#: Locks to re-initialize in a child: id -> (a weak reference to the owner, or None for a lock that
#: lives as long as the process, and the lock).
_locks: dict[int, tuple[weakref.ref[Any] | None, threading.Lock]] = {}
#: Objects whose ``_after_fork_in_child`` runs in a child, in the order they registered.
_objects: dict[int, weakref.ref[AfterFork]] = {}
#: Objects closed when this process exits.
_closers: dict[int, weakref.ref[Closes]] = {}
#: Resources inherited from a parent that the child must not close (see keep()).
_kept: list[object] = []


def _add(table: dict[int, Any], obj: object, value: Any) -> None:
    key = next(_ids)

    def gone(_ref: object, key: int = key) -> None:
        table.pop(key, None)

    table[key] = value(weakref.ref(obj, gone))


def lock(owner: object | None = None) -> threading.Lock:
    """A new :class:`threading.Lock` that a forked child finds unlocked, whoever held it at the fork.

    ``owner``: the object that keeps the lock; the registration goes when it does. ``None`` for a
    module-level lock (it lives as long as the process).
    """
    new = threading.Lock()
    if owner is None:
        _locks[next(_ids)] = (None, new)
    else:
        _add(_locks, owner, lambda ref: (ref, new))
    return new


def register(obj: AfterFork) -> None:
    """Run ``obj._after_fork_in_child()`` in every child forked from now on, while ``obj`` lives.

    It runs after every lock of :func:`lock` is free again, so it may take its own.
    """
    _add(_objects, obj, lambda ref: ref)


def at_exit(obj: Closes) -> None:
    """Close ``obj`` when this process exits (or a child forked from it, see the module docstring)."""
    _add(_closers, obj, lambda ref: ref)


def keep(resource: object) -> None:
    """Keep an inherited ``resource`` (the parent's connection) referenced for the child's lifetime.

    Dropping it would let the garbage collector finalize it in the child: SQLite's close acts on lock
    state the child only believes it holds, and an asyncio client's finalizer would wake the parent's
    event loop. Abandoned, it costs one object per fork.
    """
    _kept.append(resource)


def run_exit_hooks() -> None:
    """Close every live :func:`at_exit` object, newest first (what exit does; safe to call twice)."""
    for ref in reversed(list(_closers.values())):
        obj = ref()
        if obj is None:
            continue
        try:
            obj.close()
        except Exception:  # one failure must not keep the others from flushing
            logger.warning("cachekit: closing %s at exit failed", type(obj).__name__, exc_info=True)


def _after_fork_in_child() -> None:
    # The child runs one thread now, so nothing races with this. Locks first: a reset may take them.
    for ref, held in list(_locks.values()):
        if ref is None or ref() is not None:
            # In place, so every holder of the lock sees the new state (the stdlib's own at-fork
            # handlers do the same for logging and threading).
            held._at_fork_reinit()  # type: ignore[attr-defined]
    for ref in list(_objects.values()):
        obj = ref()
        if obj is None:
            continue
        try:
            obj._after_fork_in_child()
        except Exception:  # the child must start anyway; the object then fails on use, visibly
            logger.warning("cachekit: rebuilding %s after fork() failed", type(obj).__name__, exc_info=True)
    _arm_multiprocessing_exit()


class _Token:
    """What multiprocessing's after-fork registry holds (it keeps its entries weakly)."""


_MP_TOKEN = _Token()
_mp_armed = False


def _arm_multiprocessing_exit() -> None:
    """Have a ``multiprocessing`` child run the exit hooks when its target returns.

    Such a child ends with ``os._exit``: no ``atexit``, only ``multiprocessing``'s own finalizers.
    They are cleared when the child starts, after this fork hook, so the finalizer is added by
    ``multiprocessing``'s after-fork callbacks, which run just after that. The callback stays in the
    registry that grandchildren inherit, so it is added once per line of descent.
    """
    global _mp_armed  # noqa: PLW0603 - one flag per process, inherited by its children
    util = sys.modules.get("multiprocessing.util")
    if util is None or _mp_armed:
        return
    _mp_armed = True
    util.register_after_fork(_MP_TOKEN, _add_finalizer)


def _add_finalizer(_token: _Token) -> None:
    import multiprocessing.util

    # exitpriority >= 0: run in the first round, before the child waits for its own children.
    multiprocessing.util.Finalize(None, run_exit_hooks, exitpriority=0)


atexit.register(run_exit_hooks)
if hasattr(os, "register_at_fork"):  # POSIX; elsewhere there is no fork()
    os.register_at_fork(after_in_child=_after_fork_in_child)

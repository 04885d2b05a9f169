"""The exceptions cachekit raises, as one tree.

::

    CachekitError
    ├── ConfigError            bad option, store URL or environment setting (also a ValueError)
    │   ├── CacheRulesError    a cache-rules file is malformed (cachekit.providers.cache_rules)
    │   │   └── UnknownProviderError  no cache rules for that provider (also a LookupError)
    │   ├── PriceTableError    a price file or override is malformed (cachekit.cost.prices)
    │   └── ScriptError        a script file of the local backend is malformed (cachekit serve --script)
    ├── MissingExtraError      an optional extra is not installed (also an ImportError)
    ├── MemoizeError           a memoized function's arguments are not JSON, or it needs name= (a TypeError)
    ├── PrefixLintError        lint="raise": volatile content in the cached prefix (cachekit.shape.lint)
    ├── PlanError              a request's own cache_control markers the provider would refuse (a ValueError)
    ├── RequestRefusedError    the local backend refuses a request as its provider would (a ValueError)
    ├── ScriptedError          a scripted engine's answer that is an error: the backend answers its status
    ├── StreamError            an SSE stream that is incomplete or invalid (a ValueError)
    ├── TraceError             a trace line cachekit replay cannot read (a ValueError)
    ├── SemanticError          the semantic layer failed (embedder, index); a miss on the request path
    │   └── DimensionMismatchError  a vector of another length than its partition's (also a ValueError)
    └── StoreError             a cache store failed; caught on the request path (on_cache_error="bypass")
        ├── StoreUnavailableError  the backend did not answer (refused, timed out): trips the breaker
        ├── CorruptEntryError  a stored entry could not be decoded; treated as a miss and overwritten
        └── CacheUnavailableError  raised to the caller only with on_cache_error="raise"

Each keeps the builtin base it had before it joined the tree (``except ValueError`` still catches a
:class:`PlanError`). The modules that raise them re-export them (``cachekit.shape.planner.PlanError``
is this class), and so does the top-level package. :class:`PrefixLintError` carries :class:`Finding`
records, defined here with it (and re-exported by :mod:`cachekit.shape.lint`): this module sits below
every other, so it imports none of them.

One warning: :class:`MemoizeWarning` (a ``UserWarning``), when a memoized function's result cannot be
memoized because it is not JSON; the result is returned all the same.

Provider errors are never wrapped: an HTTP error from upstream reaches the SDK untouched, so the SDK
raises its own typed exception (``anthropic.RateLimitError`` and so on).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from cachekit._version import DISTRIBUTION

__all__ = [
    "CacheRulesError",
    "CacheUnavailableError",
    "CachekitError",
    "ConfigError",
    "CorruptEntryError",
    "DimensionMismatchError",
    "Finding",
    "MemoizeError",
    "MemoizeWarning",
    "MissingExtraError",
    "PlanError",
    "PrefixLintError",
    "PriceTableError",
    "RequestRefusedError",
    "ScriptError",
    "ScriptedError",
    "SemanticError",
    "StoreError",
    "StoreUnavailableError",
    "StreamError",
    "TraceError",
    "UnknownProviderError",
    "install_command",
]


class CachekitError(Exception):
    """Base class of every exception cachekit raises."""


class ConfigError(CachekitError, ValueError):
    """An option, store URL or environment variable has a value cachekit cannot use."""


class CacheRulesError(ConfigError):
    """The cache-rules file is malformed; the message names the row (index, provider, prefix) and field."""


class UnknownProviderError(CacheRulesError, LookupError):
    """No cache rules exist for the provider asked about."""


class PriceTableError(ConfigError):
    """A price file or override is malformed. The message names the row (index and model) and the field."""


def install_command(*extras: str) -> str:
    """The ``pip install`` line for cachekit with ``extras``, under its name on the package index.

    That name is :data:`cachekit._version.DISTRIBUTION` (``cachekit-llm``), not ``cachekit``: an
    unrelated project is published as ``cachekit``, so ``pip install 'cachekit[...]'`` would install it.
    """
    return f"pip install '{DISTRIBUTION}[{','.join(extras)}]'"


class MissingExtraError(CachekitError, ImportError):
    """An optional dependency is missing; the message names the extra that installs it."""

    def __init__(self, package: str, extra: str, purpose: str) -> None:
        super().__init__(
            f"{purpose} needs the '{package}' package, which is not installed; "
            f"install it with: {install_command(extra)}"
        )
        self.package = package
        self.extra = extra


class MemoizeError(CachekitError, TypeError):
    """A memoized function was called with arguments that are not JSON-serializable.

    Raised before the function runs, so no work is lost. A result that is not JSON is never raised:
    it is returned, with a :class:`MemoizeWarning`.
    """


class MemoizeWarning(UserWarning):
    """A memoized function's result was returned but not memoized: it is not JSON-serializable.

    The function already ran (and its LLM calls were paid for), so the result is never thrown away;
    the warning says why the next call with the same arguments will run it again.
    """


@dataclass(frozen=True, slots=True)
class Finding:
    """One reason a prompt's prefix will not be reused, with where it is and how to fix it.

    Attributes:
        code: ``timestamp``, ``date``, ``uuid``, ``request_id``, ``hex_digest``, ``temp_path``,
            ``custom`` (volatile text), or ``tools_reordered``, ``tools_changed``,
            ``tool_choice_changed``, ``thinking_changed``, ``effort_changed``, ``model_changed``,
            ``system_changed``, ``messages_changed`` (a change since the conversation's previous call).
        message: one human line; it names positions, never prompt text.
        where: the block's path (``system.0``, ``tools.3``, ``messages.4.content.1``, as
            :attr:`cachekit.shape.blocks.Block.where`), or a top-level field (``tool_choice``, ``model``).
        block: the block's index in prefix order, ``None`` for a top-level field.
        offset: the character offset of ``match`` in the block's text (for a tool, its canonical JSON),
            ``None`` when the finding is about a whole block or field.
        match: the volatile text, or the tool's name for tool findings; ``None`` otherwise. This is
            prompt text: it is handed to the callback and never logged (nor shown by ``repr``).
        fix: a suggested fix, one line.
    """

    code: str
    message: str
    where: str
    block: int | None
    offset: int | None
    match: str | None = field(repr=False)
    fix: str

    @property
    def place(self) -> str:
        """``code at where (block b, char c)``: what and where, without prompt text (as logged)."""
        parts = [f"block {self.block}"] if self.block is not None else []
        if self.offset is not None:
            parts.append(f"char {self.offset}")
        suffix = f" ({', '.join(parts)})" if parts else ""
        return f"{self.code} at {self.where}{suffix}"


class PrefixLintError(CachekitError):
    """Raised by :meth:`cachekit.shape.lint.PrefixLinter.check` with ``raise_on=True`` when a request
    has findings.

    The message lists codes and locations only (no prompt text); :attr:`findings` holds them all.
    """

    def __init__(self, findings: Sequence[Finding]) -> None:
        self.findings: tuple[Finding, ...] = tuple(findings)
        places = "; ".join(finding.place for finding in self.findings)
        count = len(self.findings)
        super().__init__(f"prefix lint: {count} finding{'s' if count != 1 else ''}: {places}")


class PlanError(CachekitError, ValueError):
    """A request the provider would refuse for its ``cache_control`` markers; the message names the blocks."""


class RequestRefusedError(CachekitError, ValueError):
    """A request the provider would refuse; the local backend answers it with the provider's error.

    ``str()`` and :attr:`message` are the API's message; :attr:`status` its HTTP status (400, an
    ``invalid_request_error``, unless said otherwise); :attr:`param` and :attr:`code` OpenAI's fields
    of the same name. Raised while the local backend validates a request (:mod:`cachekit.local.parse`)
    and bills it (:mod:`cachekit.local.accounting`), before any state changes.
    """

    def __init__(
        self, message: str, *, status: int = 400, param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
        self.code = code


class ScriptedError(CachekitError):
    """An answer that is an error: a script of the local backend's scripted engine raises it (or a
    script file asks for it) and the backend answers ``status`` with the provider's error body and
    ``message`` (a rate limit, an overload, a refusal), as the provider would."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ScriptError(ConfigError):
    """A script file of the local backend (``cachekit serve --script``) is malformed; the message names
    the file and the line, or the turn and the field."""


class StreamError(CachekitError, ValueError):
    """A stream that is incomplete or invalid: no terminator, an error event, junk, malformed data."""


class TraceError(CachekitError, ValueError):
    """A trace line that cannot be replayed; the message names the line (and conversation)."""


class SemanticError(CachekitError):
    """The semantic layer failed (embedder, index). On the request path it is a logged, counted miss."""


class DimensionMismatchError(SemanticError, ValueError):
    """A vector's dimension differs from the one its partition holds (the embedding model changed).

    Vectors of different models are never mixed: the add or search is refused.
    """


class StoreError(CachekitError):
    """A cache store failed to read or write. The transport logs it and goes upstream."""


class StoreUnavailableError(StoreError):
    """The store's backend did not answer: connection refused or reset, a timeout, a cluster down.

    Only these open the circuit breaker; a backend that answers with an error (out of memory under
    ``noeviction``, a refused command) is up, so its reads keep being used.
    """


class CacheUnavailableError(StoreError):
    """The cache path failed (or its circuit breaker is open) and ``on_cache_error="raise"`` is set.

    Only raised for callers who asked for it; by default a cache failure sends the request upstream.
    """


class CorruptEntryError(StoreError):
    """A stored entry is not a valid cachekit record (truncated, tampered with, or another format)."""

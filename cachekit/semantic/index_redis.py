"""The shared vector index: Redis 8 vector sets, on one server or a Redis Cluster, sync and async.

URLs are the exact store's (:class:`cachekit.stores.redis.RedisStore`): ``redis://``, ``rediss://``,
``redis+cluster://``, ``rediss+cluster://``, with the same query parameters (``prefix``,
``timeout``, ``connect_timeout``, ...). The server must have vector sets: Redis 8.0 or later (or an
older one with the vector-sets module loaded); on another, the first call raises
:class:`~cachekit.semantic.base.SemanticError` saying so.

Layout. A partition is three keys that share one Cluster hash tag, so a Cluster keeps the partition in
one slot, where one script covers all three::

    <prefix>{sem:<first 32 hex of sha256(partition)>}:vs    the vector set
    <prefix>{sem:...}:ex                                   sorted set: element -> expiry (epoch ms)
    <prefix>{sem:...}:ord                                  sorted set: element -> insertion sequence

An element of the vector set is the first 24 hex digits of sha256(entry key); its attributes are the
JSON ``{"k": entry key, "t": question text, "m": MAC}`` (the semantic layer checks the MAC before an
entry is served: :mod:`cachekit.semantic.binding`; an entry without one is never served). Expiry times
come from this process's ``clock`` (epoch seconds, as the memory index); an entry without TTL expires at
2**53 ms.

Atomicity. Every add, removal and search is one Lua script over the partition's three keys (sent as
``EVALSHA``, then ``EVAL`` once if the server does not know it yet), so Redis runs it with nothing in
between and a Cluster routes it to the partition's slot. An add checks the set's dimension (``VDIM``),
``VADD``s the vector with its attributes (replacing an element that exists), records its expiry and
sequence, drops expired entries and then, past ``max_entries_per_partition``, the oldest-added ones,
and sets the keys' ``PEXPIRE`` to the expiry of the partition's longest-lived entry (``PERSIST`` if one
has no TTL; a removal recomputes it too), so an abandoned partition vanishes once its last entry has
expired. A search drops up to 256 expired entries, then asks ``VSIM ... FP32 <blob> WITHSCORES COUNT k
EPSILON <1 - min_similarity> EF <ef>``, with ``FILTER '.e > <now>'`` when expired entries remain (the
attributes carry each entry's expiry as ``"e"``, so the server skips them as it searches), and with
``WITHATTRIBS`` where the server has it (Redis 8.2; on 8.0 the script reads the results' attributes
with ``VGETATTR``): one round trip, and no read after ``VSIM`` to check expiry. Processes sharing a
partition should have clocks in step (NTP); a skew of a few seconds only moves expiry by as much.

Purging. A partition's name is a digest, so nobody can tell a tenant's partitions by name (and
nobody needs the prompt to purge them): :meth:`RedisVectorIndex.remove_where` reads every element's
attributes, whose entry key (a store key) holds the namespace and partition in the clear, and removes
the matching elements with a script like a removal's (``cachekit purge``).

Similarity. ``VSIM`` scores are ``(1 + cos) / 2``; this index returns the cosine, ``2 * score - 1``, in
[-1, 1]. Quantization (fixed per partition by its first ``VADD``):

* ``NOQUANT`` (the default): 4 bytes per dimension; similarities exact to float32 rounding (about
  1e-7), so a threshold means the same here as in the memory index.
* ``Q8``: 1 byte per dimension, 4x less memory and faster; similarities off by about 1e-3 (measured
  on 384-d vectors: mean 4e-4, max 1.3e-3), so entries within that of the threshold may hit or miss
  differently than with exact vectors.
* ``BIN``: 1 bit per dimension, much faster still, but similarities are coarse (a Hamming estimate,
  off by 0.1-0.25 on the same vectors): no threshold near 0.9 means anything; not for a cache that
  must not serve wrong answers.

``VSIM`` is an HNSW search: approximate. ``ef`` (the search's exploration factor, default
:data:`DEFAULT_EF`) trades latency for recall: at 100k entries, 64 found the exact best match for 98%
of real questions (``benchmarks/semantic.py`` measures it).

Failures. Bounded timeouts and no retries, as the exact store (whose connection handling this index
reuses). A Redis error raises :class:`~cachekit.errors.StoreError` naming the operation and server,
never a credential; a vector of another dimension than its partition's raises
:class:`~cachekit.semantic.base.DimensionMismatchError`.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import orjson

from cachekit._closing import AsyncClosing, Closing
from cachekit.errors import ConfigError
from cachekit.semantic.base import Candidate, DimensionMismatchError, SemanticError, Vector
from cachekit.semantic.index_memory import check_search_args, positive_int, require_numpy, unit_vector
from cachekit.stores.memory import _check_ttl
from cachekit.stores.redis import RedisStore, _escape_glob, _scan_batches, _unlink_each

__all__ = ["DEFAULT_EF", "QUANTIZATIONS", "RedisVectorIndex"]

#: The vector-set quantizations (``VADD`` options).
QUANTIZATIONS = ("NOQUANT", "Q8", "BIN")
#: The expiry (epoch ms) of an entry without TTL.
_NEVER_MS = float(2**53)
#: Expired entries a search drops before searching (the rest go on later calls).
_SEARCH_CLEANUP = 256
#: VSIM's exploration factor: measured with benchmarks/semantic.py on real questions at 100k entries.
DEFAULT_EF = 64

# Shared by the scripts: drop(elements) removes elements from the set and both sorted sets (ZREM in
# chunks: Lua's unpack() fails beyond a few thousand values); refresh_ttl(now) sets the keys' TTL;
# check_dim(card, dim) refuses a vector of another dimension than the set's.
_DROP = (
    """
local function drop(elements)
  for _, e in ipairs(elements) do redis.call('VREM', KEYS[1], e) end
  for i = 1, #elements, 1000 do
    local chunk = {unpack(elements, i, math.min(i + 999, #elements))}
    redis.call('ZREM', KEYS[2], unpack(chunk))
    redis.call('ZREM', KEYS[3], unpack(chunk))
  end
end
local function refresh_ttl(now)
  -- The keys live as long as the longest-lived entry (its expiry is the highest score of :ex).
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  if #last == 0 then return end
  local expires = tonumber(last[2])
  for i = 1, 3 do
    if expires >= """
    + str(2**53)
    + """ then
      redis.call('PERSIST', KEYS[i])
    else
      redis.call('PEXPIRE', KEYS[i], math.max(1, math.ceil(expires - tonumber(now))))
    end
  end
end
local function check_dim(card, want)
  if card > 0 then
    local dim = redis.call('VDIM', KEYS[1])
    if dim ~= tonumber(want) then return redis.error_reply('CACHEKIT_DIM ' .. dim) end
  end
  return nil
end
"""
)

# KEYS: vs, ex, ord. ARGV: fp32 blob, element, attributes, expires_ms, cap, quantization, dimension,
# now_ms. Returns the partition's size.
_ADD = (
    _DROP
    + """
local card = redis.call('VCARD', KEYS[1])
local bad = check_dim(card, ARGV[7])
if bad then return bad end
if card == 0 then redis.call('DEL', KEYS[2], KEYS[3]) end
redis.call('VADD', KEYS[1], 'FP32', ARGV[1], ARGV[2], ARGV[6], 'SETATTR', ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[2])
local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
local seq = 1
if #last > 0 then seq = tonumber(last[2]) + 1 end
redis.call('ZADD', KEYS[3], seq, ARGV[2])
local size = redis.call('VCARD', KEYS[1])
local cap = tonumber(ARGV[5])
drop(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[8], 'LIMIT', 0, math.max(16, size - cap)))
size = redis.call('VCARD', KEYS[1])
if size > cap then
  drop(redis.call('ZRANGE', KEYS[3], 0, size - cap - 1))
  size = redis.call('VCARD', KEYS[1])
end
refresh_ttl(ARGV[8])
return size
"""
)

# KEYS: vs, ex, ord. ARGV: fp32 blob, count, epsilon ('' = none), ef ('' = default), dimension,
# now_ms (an integer), withattribs ('1': try VSIM's WITHATTRIBS, '0': do not).
# Returns the mode used ('1' or '0'), then attributes, score, attributes, score, ... best first.
# Expired entries are dropped first (up to _SEARCH_CLEANUP); if some remain, VSIM's FILTER over the
# "e" attribute (expiry, epoch ms) skips them as the graph is searched. Either way the reply holds
# live entries only and nothing is read after VSIM to check expiry. FILTER only when needed: it
# costs about three times the plain search at 100k entries (it explores up to 100 x COUNT nodes and
# parses each one's attributes). With WITHATTRIBS (Redis 8.2) the attributes come in VSIM's reply,
# else from VGETATTR of each of the (at most k) results.
_SEARCH = (
    _DROP
    + """
local card = redis.call('VCARD', KEYS[1])
if card == 0 then return {'0'} end
local bad = check_dim(card, ARGV[5])
if bad then return bad end
drop(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[6], 'LIMIT', 0, """
    + str(_SEARCH_CLEANUP)
    + """))
local args = {'VSIM', KEYS[1], 'FP32', ARGV[1], 'WITHSCORES', 'COUNT', ARGV[2]}
local oldest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if #oldest > 0 and tonumber(oldest[2]) <= tonumber(ARGV[6]) then
  args[#args + 1] = 'FILTER'; args[#args + 1] = '.e > ' .. ARGV[6]
end
if ARGV[3] ~= '' then args[#args + 1] = 'EPSILON'; args[#args + 1] = ARGV[3] end
if ARGV[4] ~= '' then args[#args + 1] = 'EF'; args[#args + 1] = ARGV[4] end
local out = {'0'}
if ARGV[7] == '1' then
  args[#args + 1] = 'WITHATTRIBS'
  local found = redis.pcall(unpack(args))
  if type(found) == 'table' and found.err == nil then
    out[1] = '1'
    for i = 1, #found, 3 do
      out[#out + 1] = found[i + 2] or ''
      out[#out + 1] = found[i + 1]
    end
    return out
  end
  -- A server without WITHATTRIBS (Redis 8.0) rejects the option: search without it.
  if not string.find(tostring(found.err), 'syntax') then return found end
  args[#args] = nil
end
local found = redis.call(unpack(args))
for i = 1, #found, 2 do
  out[#out + 1] = redis.call('VGETATTR', KEYS[1], found[i]) or ''
  out[#out + 1] = found[i + 1]
end
return out
"""
)

# KEYS: vs, ex, ord. ARGV: element, now_ms.
_REMOVE = (
    _DROP
    + """
redis.call('VCARD', KEYS[1])
drop({ARGV[1]})
refresh_ttl(ARGV[2])
return 1
"""
)


# KEYS: vs, ex, ord. ARGV: now_ms, element, element, ... (up to _PURGE_BATCH elements).
_PURGE = (
    _DROP
    + """
local elements = {}
for i = 2, #ARGV do elements[#elements + 1] = ARGV[i] end
drop(elements)
refresh_ttl(ARGV[1])
return 1
"""
)
#: Elements per purge script call (Lua's unpack() and the argument list stay small).
_PURGE_BATCH = 500


@dataclass(frozen=True, slots=True)
class _Script:
    text: str
    sha: str

    @classmethod
    def of(cls, text: str) -> _Script:
        return cls(text, hashlib.sha1(text.encode()).hexdigest())  # the name Redis gives a script


_ADD_SCRIPT = _Script.of(_ADD)
_SEARCH_SCRIPT = _Script.of(_SEARCH)
_REMOVE_SCRIPT = _Script.of(_REMOVE)


class RedisVectorIndex(Closing, AsyncClosing):
    """Semantic entries in Redis 8 vector sets, for sync and async callers alike.

    Args:
        url: a Redis URL, as for :class:`~cachekit.stores.redis.RedisStore` (query parameters
            override the keyword arguments).
        prefix: what every key starts with (no braces). An exact store with the same prefix lives
            beside it without clashes; its ``clear()`` removes these keys too.
        timeout: seconds to wait on any one socket read or write (default 50 ms).
        connect_timeout: seconds to wait for a connection; defaults to ``timeout``.
        max_entries_per_partition: a partition's cap; the oldest-added entries go first.
        quantization: ``"NOQUANT"`` (exact similarities; the default), ``"Q8"`` or ``"BIN"``: see the
            module docstring for the trade-off.
        ef: ``VSIM``'s exploration factor (``None``: the server's default).
        clock: the time source for expiry times (epoch seconds).

    Implements :class:`~cachekit.semantic.base.VectorIndex` and
    :class:`~cachekit.semantic.base.AsyncVectorIndex`. Nothing connects until first use; the sync
    client and one async client per event loop are made then (as :class:`RedisStore` does).
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "cachekit:",
        timeout: float = 0.05,
        connect_timeout: float | None = None,
        max_entries_per_partition: int = 10_000,
        quantization: str = "NOQUANT",
        ef: int | None = DEFAULT_EF,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._cap = positive_int(max_entries_per_partition, "max_entries_per_partition")
        require_numpy()
        if not isinstance(quantization, str) or quantization.upper() not in QUANTIZATIONS:
            raise ConfigError(f"quantization must be one of {', '.join(QUANTIZATIONS)}, not {quantization!r}")
        self._quantization = quantization.upper()
        self._ef = None if ef is None else positive_int(ef, "ef")
        #: Whether the server's VSIM has WITHATTRIBS (Redis 8.2+): None until a search tells.
        self._withattribs: bool | None = None
        # The connection handling (URL, timeouts, no retries, per-loop async clients, redaction) is
        # the exact store's: this index drives its clients with its own commands.
        self._redis = RedisStore(
            url, prefix=prefix, timeout=timeout, connect_timeout=connect_timeout, clock=clock
        )
        import redis.exceptions

        self._response_error = redis.exceptions.ResponseError
        self._noscript_error = redis.exceptions.NoScriptError
        self._errors = self._redis._errors
        self._clock = clock

    # -- properties --------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The URL without credentials, safe to log."""
        return self._redis.url

    @property
    def prefix(self) -> str:
        """What every key of this index starts with."""
        return self._redis.prefix

    @property
    def is_cluster(self) -> bool:
        """Whether this index talks to a Redis Cluster."""
        return self._redis.is_cluster

    @property
    def quantization(self) -> str:
        """How new partitions store vectors: ``NOQUANT``, ``Q8`` or ``BIN``."""
        return self._quantization

    @property
    def max_entries_per_partition(self) -> int:
        """The size cap of each partition."""
        return self._cap

    @property
    def withattribs(self) -> bool | None:
        """Whether the server returns attributes in ``VSIM``'s reply (``WITHATTRIBS``, Redis 8.2+);
        ``None`` until a search of a non-empty partition has found out. Either way a search is one
        round trip; without it the script reads each result's attributes itself."""
        return self._withattribs

    def keys(self, partition: str) -> tuple[str, str, str]:
        """The names of ``partition``'s keys: the vector set, the expiry and the insertion order."""
        digest = hashlib.sha256(partition.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        base = f"{self._redis.prefix}{{sem:{digest}}}"
        return f"{base}:vs", f"{base}:ex", f"{base}:ord"

    # -- the sync VectorIndex ----------------------------------------------------------------------

    def search(self, partition: str, vector: Vector, *, k: int, min_similarity: float) -> list[Candidate]:
        """Up to ``k`` live entries of ``partition`` with cosine >= ``min_similarity``, best first."""
        args, dim = self._plan_search(vector, k, min_similarity)
        if args is None:
            return []
        reply = self._run("search", _SEARCH_SCRIPT, partition, args, dim)
        return self._found(reply, k, min_similarity)

    def add(
        self, partition: str, entry_key: str, vector: Vector, text: str, *, ttl: float | None, mac: str = ""
    ) -> None:
        """Add or replace ``entry_key``'s entry (with its ``mac``); ``ttl`` ``None`` never expires,
        ``<= 0`` stores nothing.

        Raises :class:`DimensionMismatchError` when the partition holds vectors of another length.
        """
        args, dim = self._plan_add(entry_key, vector, text, ttl, mac)
        if args is None:
            self.remove(partition, entry_key)
            return
        self._run("add", _ADD_SCRIPT, partition, args, dim)

    def remove(self, partition: str, entry_key: str) -> None:
        """Remove ``entry_key``'s entry from ``partition``; nothing happens if there is none."""
        self._run("remove", _REMOVE_SCRIPT, partition, self._plan_remove(entry_key), 0)

    def clear(self) -> None:
        """Delete every partition of this prefix (``SCAN`` on every primary of a Cluster)."""
        pattern = _escape_glob(self._redis.prefix) + "{sem:*"
        try:
            for node in self._redis._nodes():
                for batch in _scan_batches(node, pattern):
                    _unlink_each(node, batch)
        except self._errors as exc:
            self._fail("clear", exc)

    def close(self) -> None:
        """Close every connection; later calls raise :class:`~cachekit.errors.StoreError`. Idempotent."""
        self._redis.close()

    # -- operator calls ----------------------------------------------------------------------------

    def remove_where(self, match: Callable[[str], bool], *, dry_run: bool = False) -> int:
        """Remove every entry, of every partition, whose entry key satisfies ``match``; return how
        many matched (see :class:`~cachekit.semantic.base.PurgeableIndex`).

        For ``cachekit purge``, never on a request's path: a ``SCAN`` for the vector sets on every
        primary, then each set's elements and attributes (``VRANDMEMBER`` with the set's size returns
        them all), and one removal script per batch of matching elements, which also keeps the
        partition's expiry and order sets and its TTL in step. Elements whose attributes cachekit
        did not write are kept.
        """
        pattern = _escape_glob(self._redis.prefix) + "{sem:*}:vs"
        count = 0
        try:
            for node in self._redis._nodes():
                for batch in _scan_batches(node, pattern):
                    for name in batch:
                        doomed = self._matching_elements(node, name, match)
                        count += len(doomed)
                        if doomed and not dry_run:
                            self._drop_elements(node, name, doomed)
        except self._errors as exc:
            self._fail("remove_where", exc)
        return count

    def _matching_elements(self, node: Any, name: bytes, match: Callable[[str], bool]) -> list[bytes]:
        """The elements of the vector set ``name`` whose entry key satisfies ``match``."""
        try:
            size = int(node.execute_command("VCARD", name))
        except self._response_error as exc:
            if "WRONGTYPE" in str(exc):
                return []  # a key of this layout that is not a vector set: not ours
            raise
        if size == 0:
            return []
        elements = node.execute_command("VRANDMEMBER", name, size)
        pipe = node.pipeline(transaction=False)
        for element in elements:
            pipe.execute_command("VGETATTR", name, element)
        found = []
        for element, raw in zip(elements, pipe.execute(), strict=True):
            entry_key = _entry_key(raw)
            if entry_key is not None and match(entry_key):
                found.append(element)
        return found

    def _drop_elements(self, node: Any, name: bytes, elements: list[bytes]) -> None:
        """Remove ``elements`` from the partition whose vector set is ``name`` (all three keys)."""
        base = name[: -len(b":vs")]
        keys = (name, base + b":ex", base + b":ord")
        now_ms = repr(self._clock() * 1000).encode()
        for i in range(0, len(elements), _PURGE_BATCH):
            node.eval(_PURGE, 3, *keys, now_ms, *elements[i : i + _PURGE_BATCH])

    # -- the AsyncVectorIndex ----------------------------------------------------------------------

    async def asearch(
        self, partition: str, vector: Vector, *, k: int, min_similarity: float
    ) -> list[Candidate]:
        """See :meth:`search`."""
        args, dim = self._plan_search(vector, k, min_similarity)
        if args is None:
            return []
        reply = await self._arun("search", _SEARCH_SCRIPT, partition, args, dim)
        return self._found(reply, k, min_similarity)

    async def aadd(
        self, partition: str, entry_key: str, vector: Vector, text: str, *, ttl: float | None, mac: str = ""
    ) -> None:
        """See :meth:`add`."""
        args, dim = self._plan_add(entry_key, vector, text, ttl, mac)
        if args is None:
            await self.aremove(partition, entry_key)
            return
        await self._arun("add", _ADD_SCRIPT, partition, args, dim)

    async def aremove(self, partition: str, entry_key: str) -> None:
        """See :meth:`remove`."""
        await self._arun("remove", _REMOVE_SCRIPT, partition, self._plan_remove(entry_key), 0)

    async def aclose(self) -> None:
        """Close this loop's connections now, and everything else as :meth:`close` does. Idempotent."""
        await self._redis.aclose()

    # -- dunder ------------------------------------------------------------------------------------

    def __repr__(self) -> str:
        return (
            f"RedisVectorIndex({self._redis.url!r}, prefix={self._redis.prefix!r}, "
            f"quantization={self._quantization!r})"
        )

    # -- internals: pure planning and parsing, shared by sync and async ----------------------------

    def _plan_search(self, vector: Vector, k: int, min_similarity: float) -> tuple[list[bytes] | None, int]:
        """The search script's ARGV and the vector's dimension; ARGV None when nothing can match."""
        check_search_args(k, min_similarity)
        query = unit_vector(vector)
        dim = int(query.shape[0])
        if k <= 0:
            return None, dim
        # EPSILON bounds the distance 1 - cos (Redis 8.0); with a little slack, as the exact test is
        # ours (and a server reading EPSILON as 1 - score would only return more).
        epsilon = b"" if min_similarity <= -1 else repr(max(0.0, 1.0 - min_similarity) + 1e-6).encode()
        ef = b"" if self._ef is None else b"%d" % self._ef
        # Whole milliseconds, as the expiry times are: FILTER compares them in the server.
        now_ms = b"%d" % math.floor(self._clock() * 1000)
        withattribs = b"0" if self._withattribs is False else b"1"
        return [_fp32(query), b"%d" % k, epsilon, ef, b"%d" % dim, now_ms, withattribs], dim

    def _found(self, reply: Any, k: int, min_similarity: float) -> list[Candidate]:
        """The candidates of a search script's reply; notes whether the server has WITHATTRIBS."""
        if not isinstance(reply, list) or not reply:
            raise SemanticError(f"unexpected reply from the search script: {type(reply).__name__}")
        if len(reply) > 1:  # an empty partition tells nothing about the server
            self._withattribs = reply[0] in (b"1", "1")
        return _candidates(reply[1:], k, min_similarity)

    def _plan_remove(self, entry_key: str) -> list[bytes]:
        return [_element(entry_key), repr(self._clock() * 1000).encode()]

    def _plan_add(
        self, entry_key: str, vector: Vector, text: str, ttl: float | None, mac: str
    ) -> tuple[list[bytes] | None, int]:
        """The add script's ARGV and the vector's dimension; ARGV None when only a removal is due."""
        ttl = _check_ttl(ttl)
        row = unit_vector(vector)
        dim = int(row.shape[0])
        if ttl is not None and ttl <= 0:
            return None, dim
        now = self._clock()
        expires_ms = _NEVER_MS if ttl is None else min(_NEVER_MS, (now + ttl) * 1000)
        expires_ms = float(math.floor(expires_ms))  # whole ms, as a search's FILTER compares them
        # "e" (the expiry, whole epoch ms) is what a search's FILTER reads.
        attributes = orjson.dumps({"k": entry_key, "t": text, "m": mac, "e": int(expires_ms)})
        args = [
            _fp32(row),
            _element(entry_key),
            attributes,
            repr(expires_ms).encode(),
            b"%d" % self._cap,
            self._quantization.encode(),
            b"%d" % dim,
            repr(now * 1000).encode(),
        ]
        return args, dim

    def _run(self, operation: str, script: _Script, partition: str, args: Sequence[bytes], dim: int) -> Any:
        client = self._redis._client()
        call: list[bytes | str] = [*self.keys(partition), *args]
        try:
            try:
                return client.evalsha(script.sha, 3, *call)
            except self._noscript_error:
                return client.eval(script.text, 3, *call)
        except self._errors as exc:
            self._fail(operation, exc, dim)

    async def _arun(
        self, operation: str, script: _Script, partition: str, args: Sequence[bytes], dim: int
    ) -> Any:
        client = self._redis._aclient()
        call: list[bytes | str] = [*self.keys(partition), *args]
        try:
            try:
                return await client.evalsha(script.sha, 3, *call)
            except self._noscript_error:
                return await client.eval(script.text, 3, *call)
        except self._errors as exc:
            self._fail(operation, exc, dim)

    def _fail(self, operation: str, exc: BaseException, dim: int = 0) -> NoReturn:
        if isinstance(exc, self._response_error):
            text = str(exc)
            lowered = text.lower()
            if "CACHEKIT_DIM" in text or "dimension mismatch" in lowered:
                held = re.search(r"(?:CACHEKIT_DIM|set has) (\d+)", text)
                raise DimensionMismatchError(
                    f"a vector of {dim} dimensions for a partition of "
                    f"{held[1] + '-dimensional' if held else 'other'} vectors in Redis "
                    f"{self._redis._target.where} (the embedding model changed?); vectors of different "
                    "models are never mixed"
                ) from exc
            if "unknown" in lowered and "command" in lowered:
                raise SemanticError(
                    f"Redis {self._redis._target.where} has no vector sets (VADD/VSIM): the Redis "
                    "semantic index needs Redis 8.0 or later (or the vector-sets module loaded)"
                ) from exc
            if "quantization mismatch" in lowered:
                raise SemanticError(
                    f"Redis {self._redis._target.where}: a partition was made with another "
                    f"quantization than {self._quantization}; use the same one everywhere or clear() it"
                ) from exc
        self._redis._fail(operation, exc)


def _fp32(vector: Vector) -> bytes:
    """The vector as VADD/VSIM's FP32 blob: little-endian float32."""
    return vector.astype("<f4", copy=False).tobytes()


def _element(entry_key: str) -> bytes:
    """The vector-set element of an entry: a short digest of its key (the key is in the attributes)."""
    return hashlib.sha256(entry_key.encode("utf-8", "surrogatepass")).hexdigest()[:24].encode()


def _entry_key(raw: Any) -> str | None:
    """The entry key in an element's attributes; ``None`` for attributes cachekit did not write."""
    try:
        entry_key = orjson.loads(raw)["k"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None
    return entry_key if isinstance(entry_key, str) else None


def _candidates(reply: Any, k: int, min_similarity: float) -> list[Candidate]:
    """Candidates from the search script's reply (attributes, score, ...), best first."""
    found: list[Candidate] = []
    if not isinstance(reply, list):
        raise SemanticError(f"unexpected reply from the search script: {type(reply).__name__}")
    for i in range(0, len(reply) - 1, 2):
        raw, score = reply[i], reply[i + 1]
        try:
            attributes = orjson.loads(raw)
            similarity = 2.0 * float(score) - 1.0
            entry_key, text = attributes["k"], attributes["t"]
            mac = attributes.get("m", "")  # absent: an entry of a cachekit from before binding
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
            continue  # an element cachekit did not write: never a hit
        if not (isinstance(entry_key, str) and isinstance(text, str) and isinstance(mac, str)):
            continue
        similarity = min(1.0, max(-1.0, similarity))
        if similarity >= min_similarity:
            found.append(Candidate(entry_key=entry_key, similarity=similarity, text=text, mac=mac))
    found.sort(key=lambda c: c.similarity, reverse=True)
    return found[:k]

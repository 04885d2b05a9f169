"""Moving time forward for keys in a real Redis, without waiting.

Redis expires keys by its own clock, which a test cannot set. Letting ``seconds`` pass is, for every key,
the same as taking ``seconds`` off its remaining TTL (a key whose TTL runs out is gone; a key without
one stays), so :func:`age_keys` does exactly that with ``PTTL`` and ``PEXPIRE``. Tests pair it with a
fake clock injected into the code under test, advanced by as much, so both sides agree on the time.
"""

from __future__ import annotations

from tests.redis_servers import RedisCluster3, RedisServer, escape_glob


def age_keys(target: RedisServer | RedisCluster3, prefix: str, seconds: float) -> int:
    """Take ``seconds`` off the TTL of every key under ``prefix``; return how many keys expired.

    ``PEXPIRE`` with a TTL of zero or less deletes the key, as Redis's own expiry would. A key read
    with ``PTTL`` just before Redis expired it on its own is skipped (``-2``): it is gone either way.
    """
    nodes = target.nodes if isinstance(target, RedisCluster3) else [target]
    expired = 0
    for node in nodes:
        client = node.client(socket_timeout=10)
        try:
            for name in list(client.scan_iter(match=escape_glob(prefix) + "*", count=1000)):
                left = int(client.pttl(name))
                if left < 0:  # -1: no TTL, never expires; -2: already gone
                    continue
                remaining = left - round(seconds * 1000)
                client.pexpire(name, remaining)
                expired += remaining <= 0
        finally:
            client.close()
    return expired

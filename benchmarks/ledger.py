"""What recording a call in the cost ledger costs on the request path, and how fast SQLite keeps up.

Times, per call, on the caller's thread (the SQLite writes happen on the ledger's background thread):

* ``record_body``: pick the usage out of a response body, normalize it, price it, enqueue the record;
* ``record_call``: price an already-normalized usage and enqueue the record;
* ``record``: enqueue a ready-made record;

then how long the background writer takes to persist them all. Prints medians and p99s.

    python benchmarks/ledger.py [--calls 20000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from cachekit.cost import Ledger, SQLiteSink, normalize
from cachekit.cost.report import load_records

BODY = {
    "id": "msg_bench",
    "type": "message",
    "usage": {
        "input_tokens": 1_000,
        "cache_creation_input_tokens": 10_000,
        "cache_read_input_tokens": 50_000,
        "cache_creation": {"ephemeral_5m_input_tokens": 10_000, "ephemeral_1h_input_tokens": 0},
        "output_tokens": 500,
    },
}
MODEL = "claude-sonnet-4-5-20250929"


def measure(calls: int, fn: Callable[[], object]) -> list[float]:
    samples = []
    clock = time.perf_counter_ns
    for _ in range(calls):
        start = clock()
        fn()
        samples.append((clock() - start) / 1000.0)
    return samples


def summary(name: str, samples: list[float]) -> str:
    samples = sorted(samples)
    p50 = statistics.median(samples)
    p99 = samples[int(len(samples) * 0.99) - 1]
    return f"{name:<13} median {p50:6.2f} us   p99 {p99:7.2f} us   mean {statistics.fmean(samples):6.2f} us"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=20_000)
    args = parser.parse_args()
    usage = normalize("anthropic", "anthropic_messages", BODY["usage"])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ledger.sqlite3"
        ledger = Ledger([SQLiteSink(path)])
        ledger.record_call("anthropic", MODEL, usage)  # warm the price lookup
        record = ledger.record_call("anthropic", MODEL, usage, tenant="t", site="bench")
        body = measure(
            args.calls,
            lambda: ledger.record_body(
                "anthropic", "anthropic_messages", MODEL, BODY, tenant="t", site="bench"
            ),
        )
        call = measure(
            args.calls, lambda: ledger.record_call("anthropic", MODEL, usage, tenant="t", site="bench")
        )
        plain = measure(args.calls, lambda: ledger.record(record))
        start = time.perf_counter()
        ledger.close()
        drain = time.perf_counter() - start
        stored = len(load_records(path))
    total = 3 * args.calls + 2
    print(f"cost ledger hot path, {args.calls} calls each, SQLite sink (batched on a background thread)")
    print(summary("record_body", body))
    print(summary("record_call", call))
    print(summary("record", plain))
    print(f"close() drained the rest in {drain * 1000:.1f} ms; {stored}/{total} records stored")


if __name__ == "__main__":
    main()

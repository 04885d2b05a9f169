"""Tests of cachekit/pipeline/: each stage, the driver, the breaker, single-flight, keys and partitions."""

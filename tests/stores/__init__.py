"""Tests of cachekit/stores/: the store contract, SQLite, Redis and Redis Cluster, encryption, faults,
load."""

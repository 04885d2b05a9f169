"""Tests of cachekit/local/: the local backend, its billing by the providers' caching rules, engines,
the prefix KV cache."""

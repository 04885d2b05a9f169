"""Tests of cachekit/semantic/: embedders, indexes, guards, the verifier, evaluation, the cache end to end."""

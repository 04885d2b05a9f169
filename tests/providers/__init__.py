"""Tests of cachekit/providers/: the classification table, echo, SSE streams, the announced caching rules."""

"""Tests of cachekit/replay/: breakpoint policies replayed on recorded traces."""

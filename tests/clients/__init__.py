"""Tests of cachekit/clients/: the drop-in clients, wrap() and the repeated-call memo."""

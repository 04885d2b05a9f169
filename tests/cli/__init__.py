"""Tests of the `cachekit` command line."""

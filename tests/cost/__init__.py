"""Tests of cachekit/cost/: usage normalization, prices, the ledger, reports, exporters, and their wiring."""

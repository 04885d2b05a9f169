"""Tests of cachekit/shape/: canonical form, lint and diff, token counts, the breakpoint planner,
markers, lifetimes."""

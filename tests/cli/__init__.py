"""Tests of cachekit/cli/: the commands as a user meets them, their help text, the demo."""

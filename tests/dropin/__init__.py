"""End to end through the real SDK clients: drop-in behaviour, streaming, frameworks, many threads."""

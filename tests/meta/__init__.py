"""The project itself: docs, README, examples, release, import layers, public API, skip policy, fuzz
budget, self-containment."""

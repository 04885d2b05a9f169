"""``cachekit replay``: what each breakpoint policy would have cost on recorded agent traffic.

A trace file holds one conversation per line, in the Anthropic Messages layout
(``{"id", "system", "tools", "messages", ...}``, as in ``traces-dev.jsonl``). Request ``k`` of a
conversation is what the client sent before assistant turn ``k``: the system prompt, the tools and
every message before that turn. Each policy replays every conversation in order through a cachekit
client (the real ``anthropic`` SDK) to the local backend with the scripted engine, whose accounting
bills prompts by the provider's caching rules. Each request waits a think time of simulated seconds
after the one before it (:class:`Gaps`: fixed, uniform, log-normal, or per conversation from the
trace file), drawn once with a seed, so every policy sees the same timeline:

* ``none``: no markers; ``system``: one marker after the system prompt; ``last``: one marker on the
  last message; ``auto``: Anthropic's top-level automatic caching;
* what users run: ``system+last`` (LiteLLM's and LangChain's Anthropic prompt-caching defaults: the
  system prompt and the last message), ``system+last-1h`` (the same with 1-hour lifetimes) and
  ``auto-1h`` (automatic caching with a 1-hour lifetime);
* ``cachekit``: cachekit's planner, lifetimes learned from the traffic as it goes;
* ``oracle-ttl``: cachekit's placement with each write's lifetime chosen knowing when the next
  request of its conversation comes (1 hour for a gap between 5 minutes and an hour, else 5 minutes):
  how far the choice of lifetime can go.

Costs are input-side only, from the price table. The lower bound prices each request as if every
token of its longest prefix shared with any earlier request (of any conversation) were a cache read,
and the rest plain input, with no write premium and no minimum length: no placement can beat it.
``savings_efficiency`` is the share of that ideal saving a policy achieved.

Only the prompt's blocks and usage counts are handled; nothing here logs prompt text.
"""

from __future__ import annotations

from cachekit.replay.run import (
    POLICIES,
    Conversation,
    Gaps,
    PolicyResult,
    TraceError,
    apply_policy,
    read_traces,
    replay,
    requests_of,
)

__all__ = [
    "POLICIES",
    "Conversation",
    "Gaps",
    "PolicyResult",
    "TraceError",
    "apply_policy",
    "read_traces",
    "replay",
    "requests_of",
]

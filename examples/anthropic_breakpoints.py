"""Automatic prompt-cache breakpoints: an agent's later turns read its prompt from the provider's cache.

`cachekit.Anthropic` places the `cache_control` markers itself (the end of the system prompt and of
the conversation so far) and says where in `x-cachekit-breakpoints`. Offline: the local backend bills
usage by Anthropic's caching rules. With a real key, drop `base_url` and `http_client`.
"""

from itertools import pairwise

import httpx2

import cachekit
from cachekit.cost import Ledger, MemorySink
from cachekit.local import LocalBackend, LocalTransport

# Anthropic caches no prefix under 1024 tokens for this model: this system prompt has about 1900.
RULES = "\n".join(f"Rule {i}: quote fares in euros and cite rule {i} when it applies." for i in range(110))
SYSTEM = "You are the travel desk of Example Air.\n" + RULES
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"name": "get_weather", "description": "The forecast for a city.", "input_schema": CITY}]
QUESTIONS = ["Paris weather today?", "Which fare suits a family of four?", "And the weather in Rome?"]

ledger = Ledger([MemorySink()])  # what each call cost, priced as Anthropic's model (price_as)
client = cachekit.Anthropic(
    api_key="sk-local",
    base_url="http://local.test",
    http_client=httpx2.Client(transport=LocalTransport(LocalBackend())),
    cache=cachekit.CacheConfig(store="memory://", price_as="anthropic", ledger=ledger),
)

messages: list = []
for turn, question in enumerate(QUESTIONS, 1):
    messages.append({"role": "user", "content": question})
    while True:  # one agent turn: call the model until it stops asking for tools
        raw = client.messages.with_raw_response.create(
            model="claude-sonnet-4-5", max_tokens=300, system=SYSTEM, tools=TOOLS, messages=messages
        )
        reply = raw.parse()
        usage = reply.usage
        print(f"turn {turn}: x-cachekit-breakpoints: {raw.headers['x-cachekit-breakpoints']}")
        print(f"  cache write {usage.cache_creation_input_tokens}, read {usage.cache_read_input_tokens}")
        messages.append({"role": "assistant", "content": reply.content})
        if reply.stop_reason != "tool_use":
            break
        calls = [block for block in reply.content if block.type == "tool_use"]
        results = [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"} for call in calls]
        messages.append({"role": "user", "content": results})

records = ledger.records()
reads = [record.usage.cache_read for record in records]
assert len(records) == 5, reads  # each weather question took a tool round trip
assert reads[0] == 0, reads  # the first call writes the prompt (above the 1024-token minimum)...
assert records[0].usage.cache_write_5m > 1024, records[0].usage
assert all(0 < a < b for a, b in pairwise(reads[1:])), reads  # ...every later one reads more of it back
cost, full = sum(r.cost or 0 for r in records), sum(r.cost_without_caching or 0 for r in records)
assert cost < full, (cost, full)
print(f"{sum(reads)} tokens read from the cache: ${cost:.4f} instead of ${full:.4f} without caching")

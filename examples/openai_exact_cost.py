"""The exact cache with a cost report: repeated calls are answered locally, and what they saved is recorded.

Every call's usage is priced from cachekit's dated price table and written to a ledger; a cache hit
records the cost it avoided. Offline: the local backend stands in for the OpenAI API (`price_as`
prices its answers as OpenAI's). With a real key, drop `base_url`, `http_client` and `price_as`.
"""

import httpx2

import cachekit
from cachekit.cost import Ledger, MemorySink, render_report
from cachekit.local import LocalBackend, LocalTransport

POLICY = " ".join(f"Clause {i}: refunds of plan {i} are prorated by the day." for i in range(150))

backend = LocalBackend()
# A ledger in memory for this script; the default one is SQLite under $CACHEKIT_HOME (`cachekit report`).
ledger = Ledger([MemorySink()])
client = cachekit.OpenAI(
    api_key="sk-local",
    base_url="http://local.test/v1",
    http_client=httpx2.Client(transport=LocalTransport(backend)),
    cache=cachekit.CacheConfig(store="memory://", ledger=ledger, price_as="openai"),
)

for attempt in range(1, 4):  # the same question, as a support bot gets it again and again
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4.1",
        messages=[
            {"role": "system", "content": "Answer from Example Corp's refund policy:\n" + POLICY},
            {"role": "user", "content": "Can I get a refund after 30 days?"},
        ],
    )
    answer = raw.parse().choices[0].message.content
    print(f"call {attempt}: x-cachekit-cache: {raw.headers['x-cachekit-cache']:4}  {answer[:50]}...")

assert backend.stats.requests == 1  # only the first call reached the provider

paid, *hits = ledger.records()
assert paid.outcome == "miss"
assert paid.cost is not None
assert paid.cost > 0  # the upstream call was priced...
assert [hit.outcome for hit in hits] == ["exact_hit", "exact_hit"]
assert all(hit.cost == 0 and hit.saving == paid.cost for hit in hits)  # ...each hit saved that much
print(f"\nthe first call cost ${paid.cost:.4f}; each hit cost $0 and saved as much\n")
print(render_report(ledger, by="outcome"))  # what `cachekit report --by outcome` prints

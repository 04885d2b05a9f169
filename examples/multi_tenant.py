"""A multi-tenant service: each tenant has its own cache partition, so no tenant gets another's answer.

The service calls the provider with one API key for everyone, so the partition cannot come from the
key (cachekit's default): it names the tenant per call with `cachekit.policy(tenant=...)`, or per
request with the `x-cachekit-tenant` header (`@cachekit.cached(tenant=...)` fixes one per function).
"""

import httpx2

import cachekit
from cachekit.cost import Ledger, MemorySink
from cachekit.local import LocalBackend, LocalTransport

QUESTION = "Summarize our open support tickets."  # the same words, each tenant's own data behind them
backend = LocalBackend()  # plays Anthropic, offline
ledger = Ledger([MemorySink()])  # records each call's tenant, as `cachekit report --by tenant` shows
client = cachekit.Anthropic(
    api_key="sk-service-key",  # one key for the whole service
    base_url="http://local.test",
    http_client=httpx2.Client(transport=LocalTransport(backend)),
    cache=cachekit.CacheConfig(store="memory://", ledger=ledger, price_as="anthropic"),
)


def ask(question: str, **options: object) -> tuple[str, str]:
    """The answer's message id (new for every provider call) and how the cache served it."""
    raw = client.messages.with_raw_response.create(
        model="claude-haiku-4-5", max_tokens=200, messages=[{"role": "user", "content": question}], **options
    )
    return raw.parse().id, raw.headers["x-cachekit-cache"]


def service(tenant: str, question: str) -> tuple[str, str]:
    """The service's endpoint: every LLM call inside the block is cached under the tenant."""
    with cachekit.policy(tenant=tenant):
        return ask(question)


runs = [
    ("acme", service("acme", QUESTION)),
    ("acme again", service("acme", QUESTION)),
    ("globex", service("globex", QUESTION)),
    # The header names the same partition as the policy: globex's stored answer comes back.
    ("globex by header", ask(QUESTION, extra_headers={"x-cachekit-tenant": "globex"})),
]
for who, (message_id, how) in runs:
    print(f"{who:16} x-cachekit-cache: {how:5} message {message_id}")
acme, acme_again, globex, globex_by_header = (result for _, result in runs)

assert acme[1] == "miss"
assert acme_again == (acme[0], "hit")  # a tenant's repeat is answered from its own partition...
assert globex[1] == "miss"
assert globex[0] != acme[0]  # ...but the same question from another tenant never gets acme's answer
assert globex_by_header == (globex[0], "hit")
assert backend.stats.requests == 2  # one provider call per tenant
calls = {row.group["tenant"]: row.calls for row in ledger.totals(group_by=["tenant"])}
print("calls by tenant:", calls)
assert calls == {"acme": 2, "globex": 2}

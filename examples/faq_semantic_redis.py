"""A FAQ bot with `@cachekit.cached(semantic=True)`: a paraphrase is answered from the cache, safely.

Guards refuse what embeddings miss (another number, a negation). Answers and vectors live in Redis 8 if
CACHEKIT_EXAMPLE_REDIS_URL is set (redis://host:port/0), else in memory. The local backend plays OpenAI.
"""

import os
import uuid

import httpx2

import cachekit
from cachekit.local import LocalBackend, LocalTransport

url = os.environ.get("CACHEKIT_EXAMPLE_REDIS_URL") or "memory://"
print("cache and vector index:", "Redis" if url != "memory://" else "memory (no CACHEKIT_EXAMPLE_REDIS_URL)")
backend = LocalBackend()
client = cachekit.OpenAI(
    api_key="sk-local",
    base_url="http://local.test/v1",
    http_client=httpx2.Client(transport=LocalTransport(backend)),
    cache=cachekit.CacheConfig(
        store=url,
        price_as="openai",  # the local backend plays OpenAI (its caching rules and prices)
        ledger=False,  # keep this script out of your cost ledger ($CACHEKIT_HOME/ledger.sqlite3)
        semantic=cachekit.SemanticConfig(index=url, enabled=False),  # on where a call site opts in
        namespace=f"faq-{uuid.uuid4().hex[:8]}",  # an empty cache on every run, even on a shared Redis
    ),
)


@cachekit.cached(semantic=True)
def faq(question: str) -> tuple[str, httpx2.Headers]:  # the bot's answer, and how cachekit served it
    system = {"role": "system", "content": "You are the help desk of Example Corp. Answer briefly."}
    raw = client.chat.completions.with_raw_response.create(  # temperature=0: only such calls are served
        model="gpt-4.1-mini", temperature=0, messages=[system, {"role": "user", "content": question}]
    )
    return raw.parse().choices[0].message.content, raw.headers


CASES = [  # the question, how the cache must answer it, the guard that must refuse a close question
    ("How do I reset my account password?", "miss", set()),
    ("How can I reset the password of my account?", "semantic", set()),  # a paraphrase: a hit
    ("Can I get a refund within 30 days?", "miss", set()),
    ("Can I get a refund within 60 days?", "miss", {"numbers"}),  # close, but another number
    ("Is the API rate limited?", "miss", set()),
    ("Is the API not rate limited?", "miss", {"negation"}),  # close, but the opposite question
]
answers = []
for question, expected, expected_refusals in CASES:
    answer, headers = faq(question)
    how = headers["x-cachekit-cache"]  # and on a near-miss, the guards that refused the stored question:
    refused = set(filter(None, headers.get("x-cachekit-semantic-refused", "").split(", ")))
    print(f"{how:8} {question:45} {'refused by guard: ' + ', '.join(refused) if refused else ''}")
    assert (how, refused) == (expected, expected_refusals), (question, how, refused)
    answers.append(answer)
assert answers[1] == answers[0]  # the paraphrase got the stored answer...
assert backend.stats.requests == len(CASES) - 1  # ...without a provider call

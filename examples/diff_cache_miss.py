"""Why did a call miss the provider's prompt cache? `cachekit diff` shows where two prompts part.

The app stamps the time into its system prompt, so each call's prefix differs from the last and is
billed as a new cache write, not a 0.1x read. `diff_requests` and `cachekit diff A.json B.json` name
the first difference (section, block, token, character); cachekit's prefix lint warns on stderr.
"""

import json
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

import httpx2

import cachekit
from cachekit.local import LocalBackend, LocalTransport
from cachekit.shape.diff import diff_requests

RULES = "\n".join(f"Policy {i}: orders ship in {i % 5 + 1} days; cite policy {i}." for i in range(150))
client = cachekit.Anthropic(
    api_key="sk-local",
    base_url="http://local.test",  # the local backend bills by Anthropic's caching rules
    http_client=httpx2.Client(transport=LocalTransport(LocalBackend())),
    cache=cachekit.CacheConfig(store="memory://", price_as="anthropic", ledger=False),
)


def request(now: datetime) -> dict:  # the time first, then a long stable part (fixed times: repeatable)
    system = f"Now: {now:%Y-%m-%d %H:%M:%S}. You are the support bot of Example Corp.\n{RULES}"
    messages = [{"role": "user", "content": "Where is my order?"}]
    return {"model": "claude-sonnet-4-5", "max_tokens": 200, "system": system, "messages": messages}


a, b = request(datetime(2025, 6, 1, 9, 30, 0)), request(datetime(2025, 6, 1, 9, 31, 5))
for name, body in (("A", a), ("B", b)):
    raw = client.messages.with_raw_response.create(**body)
    usage = raw.parse().usage
    print(
        f"call {name}: cache write {usage.cache_creation_input_tokens}, read {usage.cache_read_input_tokens}"
    )
assert raw.headers["x-cachekit-cache"] == "miss"  # B went to the provider...
assert usage.cache_read_input_tokens == 0  # ...and read none of A's prefix: it was all written again

divergence = diff_requests(a, b)
print(f"diff_requests: {divergence.reason} at {divergence.where_b}, char {divergence.char}")
assert divergence.reason == "system_changed"
assert divergence.char == a["system"].index("09:30:00") + 4  # the minute: 09:30 -> 09:31

with tempfile.TemporaryDirectory() as folder:  # the same from the command line, on saved requests
    Path(folder, "a.json").write_text(json.dumps(a))
    Path(folder, "b.json").write_text(json.dumps(b))
    command = [sys.executable, "-m", "cachekit", "diff", "a.json", "b.json"]
    cli = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False)
print("$ cachekit diff a.json b.json\n" + cli.stdout)
assert cli.returncode == 1  # 1: the prefixes diverge (0: B reads all of A's prefix)
assert "reason:  system_changed" in cli.stdout

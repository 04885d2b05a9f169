"""The official Node SDKs (``@anthropic-ai/sdk``, ``openai``, pinned in tests/node/package.json and
installed by scripts/test) through the proxy to ``cachekit serve``, streaming and not: a program in
another language gets the cache by changing its base URL. The second identical call is an exact hit
with the first one's answer and usage; only the first reached the upstream, which accepted it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.proxy.conftest import CHAT_MODEL, MODEL, Stack

NODE_DIR = Path(__file__).resolve().parents[1] / "node"


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (scripts/test installs Debian's nodejs)")
    if (
        not (NODE_DIR / "node_modules" / "@anthropic-ai" / "sdk").is_dir()
        or not (NODE_DIR / "node_modules" / "openai").is_dir()
    ):
        pytest.skip("the Node SDKs are not installed (npm ci --prefix tests/node; scripts/test does it)")
    return node


def run_node(sdk: str, mode: str, base_url: str, prompt: str) -> dict[str, Any]:
    model = MODEL if sdk == "anthropic" else CHAT_MODEL
    done = subprocess.run(
        [_node(), str(NODE_DIR / "client.mjs"), sdk, mode, base_url, "sk-node", model, prompt],
        capture_output=True,
        check=False,
        cwd=NODE_DIR,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    result: dict[str, Any] = orjson.loads(done.stdout)
    return result


@pytest.mark.parametrize("mode", ["plain", "stream"])
@pytest.mark.parametrize("sdk", ["anthropic", "openai"])
def test_node_sdk_miss_then_hit(stack: Stack, sdk: str, mode: str) -> None:
    base = stack.anthropic_url if sdk == "anthropic" else stack.openai_url
    prompt = f"node {sdk} {mode}"
    first = run_node(sdk, mode, base, prompt)
    second = run_node(sdk, mode, base, prompt)
    assert (first["cache"], second["cache"]) == ("miss", "hit")
    assert first["text"]
    assert second["text"] == first["text"]
    assert second["usage"] == first["usage"]
    reached = [r for r in stack.backend.received if r.method == "POST"]
    assert len(reached) == 1
    assert reached[0].status == 200
    assert [r.outcome for r in stack.ledger.read()][1:] == ["exact_hit"]

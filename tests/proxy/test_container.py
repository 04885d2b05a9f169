"""The container recipe (Dockerfile) agrees with the code it packages. Docker cannot run here, so
what can be checked without it is: the command it starts parses as ``cachekit proxy`` and listens on
every interface at the port it exposes and health-checks, the extras it installs exist, and what it
copies is what .dockerignore lets into the build context."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from cachekit.cli import _build_parser

ROOT = Path(__file__).resolve().parents[2]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")


def _instructions() -> dict[str, list[str]]:
    """Each instruction's arguments, continuation lines joined, comments dropped."""
    text = (ROOT / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    found: dict[str, list[str]] = {}
    for line in joined.splitlines():
        if line.strip():
            name, _, rest = line.strip().partition(" ")
            found.setdefault(name.upper(), []).append(rest.strip())
    return found


def test_the_entrypoint_is_cachekit_proxy_on_the_exposed_and_checked_port() -> None:
    found = _instructions()
    entrypoint = json.loads(found["ENTRYPOINT"][-1])
    assert entrypoint[:2] == ["cachekit", "proxy"]
    # What `docker run IMAGE --store ... --workers 4` makes of it.
    args = _build_parser().parse_args([*entrypoint[1:], "--store", "redis://redis:6379/0", "--workers", "4"])
    assert (args.host, args.workers) == ("0.0.0.0", 4)
    assert found["EXPOSE"] == [str(args.port)]
    (healthcheck,) = found["HEALTHCHECK"]
    assert f"http://127.0.0.1:{args.port}/healthz" in healthcheck


def test_the_extras_it_installs_exist() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    installs = [line for line in _instructions()["RUN"] if "pip " in line]
    named = {
        name for line in installs for group in re.findall(r"\[([a-z,]+)\]", line) for name in group.split(",")
    }
    assert "proxy" in named
    assert named <= set(extras)


def test_it_copies_only_what_the_build_context_holds() -> None:
    admitted = {
        line[1:].rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    copied = {
        source
        for line in _instructions()["COPY"]
        if not line.startswith("--from")
        for source in line.split()[:-1]
    }
    assert copied == admitted
    assert all((ROOT / path).exists() for path in copied)

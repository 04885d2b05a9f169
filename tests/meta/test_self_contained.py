"""The repository is self-contained: a fresh clone with nothing beside it runs every test.

No test, example, script or module of the package names a place outside the repository (such as
development data beside a checkout); what the tests read is committed under ``tests/fixtures/``,
small, with its source and licence; a benchmark may default to data beside the checkout, but takes
the path as an argument. ``scripts/clone-check`` runs the tests that read those files in a clone
with nothing beside it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
#: Places outside any checkout: a ``shared/`` folder beside it, an absolute workplace path, the
#: parent of the repository's root.
OUTSIDE = re.compile(r"\.\./shared|\.parent\s*/\s*[\"']shared[\"']|/work/|ROOT\.parent\b")


def _sources() -> list[Path]:
    found = [
        *ROOT.glob("tests/**/*.py"),
        *ROOT.glob("examples/**/*.py"),
        *ROOT.glob("cachekit/**/*.py"),
        *(p for p in ROOT.glob("scripts/*") if p.is_file()),
        ROOT / ".ci" / "run",
    ]
    return sorted(p for p in found if p.is_file() and p != Path(__file__).resolve())


def _outside(path: Path) -> list[str]:
    """What the source of ``path`` names outside the repository."""
    text = path.read_text(encoding="utf-8")
    # Path(__file__).resolve().parents[n] leaves the repository once n reaches the file's depth.
    depth = len(path.relative_to(ROOT).parts)
    found = [m[0] for m in re.finditer(r"parents\[(\d+)\]", text) if int(m[1]) >= depth]
    return found + OUTSIDE.findall(text)


def test_nothing_but_a_benchmark_names_a_path_outside_the_repository() -> None:
    sources = _sources()
    assert any(p.name == "test_replay.py" for p in sources)
    named = {p.relative_to(ROOT).as_posix(): _outside(p) for p in sources}
    assert {name: found for name, found in named.items() if found} == {}


@pytest.mark.parametrize("path", sorted(ROOT.glob("benchmarks/*.py")), ids=lambda p: p.name)
def test_a_benchmark_reads_outside_only_by_default_and_takes_the_path(path: Path) -> None:
    if not _outside(path):
        return
    assert re.search(r"add_argument\(\s*\"--[\w-]+\",\s*type=Path,\s*default=", path.read_text())


def test_the_fixtures_are_small_and_each_has_its_source_and_licence() -> None:
    readme = (FIXTURES / "README.md").read_text(encoding="utf-8")
    files = [p for p in FIXTURES.rglob("*") if p.is_file() and p.name != "README.md"]
    assert len(files) >= 3
    for path in files:
        assert path.stat().st_size < 200_000, path
        entry = path.relative_to(FIXTURES).parts[0]  # a file, or the folder it is in
        section = readme.split(f"## `{entry}", 1)
        assert len(section) == 2, f"{entry} has no section in tests/fixtures/README.md"
        body = section[1].split("\n## ", 1)[0]
        assert "source" in body, f"{entry}: no source"
        if path.suffix == ".jsonl":  # data copied from a published data set: its licence goes with it
            assert re.search(r"\b(?:MIT|CC BY(?:-SA)? \d\.\d)\b", body), f"{entry}: no licence"
        else:  # the files of a folder name their own sources
            assert path.read_text(encoding="utf-8").startswith(": source: "), path


def test_the_trace_sample_holds_what_the_tests_and_benchmarks_need() -> None:
    conversations = [json.loads(line) for line in (FIXTURES / "traces-sample.jsonl").read_text().splitlines()]
    sources = [c["source"] for c in conversations]
    # test_replay: two airline conversations first, and two coding-agent ones.
    assert sources[:2] == ["tau-bench", "tau-bench"]
    assert sources.count("swe-agent") >= 2
    # test_lint's stable trace.
    assert "swe-agent:trajectories/demonstrations/ctf/web/i_got_id_demo.traj" in [
        c["id"] for c in conversations
    ]
    # benchmarks/overhead.py takes 60 messages of the longest conversation.
    assert max(len(c["messages"]) for c in conversations) >= 60

"""Every command of ``cachekit`` on the inputs a newcomer gets wrong: never a traceback, one line on
stderr that names the thing and the fix, and the documented exit status (docs/cli.md: 2 when the
command line cannot be used as given, 1 when the command ran and failed, 0 on success).

The commands are found by walking the parser, so a new command or a new file option is covered or
fails here: each command needs a valid baseline (:data:`GOOD`) and a case of its own, and every
file argument (a positional ``*.json``/``*.jsonl``, an option ``PATH``, ``JSON`` or ``PNG``) gets
the bad files of its kind generated: missing, empty, garbage, of another kind, a directory,
unreadable; an output: the wrong suffix, a folder that is a file.

Missing extras run in a subprocess whose imports of those modules fail (``sys.modules[name] =
None``), as they do where the extra is not installed; a closed stdout (``cachekit ... | head -1``)
runs every command in a subprocess whose stdout is a pipe nobody reads.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cachekit import cli
from tests.redis_servers import free_port

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"

#: File arguments by metavar: what the argument reads, or the suffix it writes.
INPUTS = {"A.json", "B.json", "REQUEST.json", "TRACES.jsonl", "PAIRS.jsonl", "PATH", "JSON", "CAL.json"}
OUTPUTS = {"PNG": ".png", "OUT.json": ".json"}


def commands() -> dict[str, argparse.ArgumentParser]:
    """The subcommands of ``cachekit``, from its parser."""
    parser = cli._build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


# -- the workspace: good files, and bad ones of every kind -------------------------------------------

REQUEST = (
    '{"model": "claude-sonnet-4-5", "max_tokens": 16, "system": "%s", '
    '"messages": [{"role": "user", "content": "Hi"}]}'
)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Good inputs for every command, and the bad files the cases name."""
    from cachekit.stores.sqlite import SQLiteStore

    root = tmp_path_factory.mktemp("bad-input")
    (root / "request.json").write_text(REQUEST % "You are terse.")
    (root / "request-other.json").write_text(REQUEST % "You are verbose.")
    (root / "chat.json").write_text('{"model": "gpt-4o", "messages": [{"role": "system", "content": "Hi"}]}')
    (root / "traces.jsonl").write_bytes((FIXTURES / "traces-sample.jsonl").read_bytes())
    lines = (FIXTURES / "pairs-sample.jsonl").read_text().splitlines(keepends=True)
    (root / "pairs.jsonl").write_text("".join(lines[:5]))
    (root / "ledger.jsonl").write_bytes(b"")  # a ledger no call was recorded into yet
    with SQLiteStore(root / "store.db"):
        pass
    (root / "unknown.toml").write_text('colour = "blue"\n')  # not a proxy setting
    (root / "adir").mkdir()
    (root / "a-file").write_text("a file, where a folder should be")
    for suffix in (".json", ".jsonl", ".sqlite3"):
        (root / f"empty{suffix}").write_bytes(b"")
        (root / f"garbage{suffix}").write_bytes(b"\x00\x01not json, not sqlite\xff\n")
        unreadable = root / f"unreadable{suffix}"
        unreadable.write_bytes(b"\x00\x01garbage either way: root reads what chmod 0 hides\n")
        unreadable.chmod(0)
    return root


#: A valid command line for each command (``{work}`` is the workspace): the generated cases change
#: one argument of it. None of them is run as it is but under a closed stdout (below).
GOOD: dict[str, list[str]] = {
    "demo": ["--engine", "scripted", "--no-semantic", "--chart", "{work}/demo.png"],
    "report": ["--ledger", "{work}/ledger.jsonl"],
    "stats": ["--store", "sqlite://{work}/store.db", "--ledger", "{work}/ledger.jsonl"],
    "purge": ["--store", "sqlite://{work}/store.db", "--tenant", "acme", "--dry-run"],
    "health": ["--store", "sqlite://{work}/store.db", "--budget-ms", "60000"],
    "semantic-eval": ["{work}/pairs.jsonl"],
    "serve": ["--port", "0"],
    "proxy": ["--port", "0"],
    "prices": ["claude-sonnet-4-5"],
    "replay": ["{work}/traces.jsonl", "--limit", "1", "--policy", "none"],
    "diff": ["{work}/request.json", "{work}/request.json"],
    "lint": ["{work}/request.json"],
}


@dataclass(frozen=True)
class Case:
    """A command line, the status it must end with, and what the one line on stderr must say."""

    argv: tuple[str, ...]
    status: int
    says: tuple[str, ...]
    blocked: tuple[str, ...] = ()  # modules whose import fails: run in a subprocess
    env: tuple[tuple[str, str], ...] = ()  # set for a subprocess
    stdout: str | None = ""  # what must be on stdout (None: anything, as health's JSON)
    before: tuple[str, ...] = ()  # the lines of a slow step begun before the error ("loading ...")

    @property
    def command(self) -> str:
        return self.argv[0]

    def id(self) -> str:
        return " ".join(self.argv).replace("{work}/", "")[:90]


def case(*argv: str, status: int, says: tuple[str, ...], **more: object) -> Case:
    return Case(tuple(argv), status, says, **more)  # type: ignore[arg-type]


_BUSY = free_port()
LOADING = ("cachekit serve: loading the smollm2 model ...",)  # said before the model is looked at

#: What a newcomer types: out-of-range numbers, options that do not fit, missing extras, the network.
CASES: list[Case] = [
    # demo: outputs are checked before the work (stdout stays empty: nothing ran)
    case("demo", "--engine", "scripted", "--chart", "out.txt", status=2, says=("--chart out.txt", ".png")),
    case("demo", "--engine", "scripted", "--chart", "/proc/demo.png", status=2, says=("--chart", "/proc")),
    case("demo", "--engine", "sparkly", status=2, says=("--engine", "sparkly", "--help")),
    case(
        "demo",
        "--no-chart",
        status=1,
        says=("cachekit-llm[anthropic]", "./scripts/demo"),
        blocked=("anthropic",),
    ),
    case(
        "demo",
        "--engine",
        "scripted",
        "--no-chart",
        status=1,
        says=("cachekit-llm[semantic]", "--no-semantic"),
        blocked=("torch", "sentence_transformers"),
    ),
    # report and stats
    case("report", "--ledger", "{work}/nowhere.sqlite3", status=1, says=("nowhere.sqlite3", "--ledger")),
    case("report", "--ledger", "{work}/store.db", status=2, says=("store.db", "cache store", "ledger")),
    case("report", "--ledger", "{work}/ledger.jsonl", "--since", "someday", status=2, says=("--since", "7d")),
    case("report", "--ledger", "{work}/ledger.jsonl", "--by", "planet", status=2, says=("planet", "model")),
    case(
        "report",
        "--ledger",
        "{work}/ledger.jsonl",
        "--plot",
        "{work}/cost.png",
        status=1,
        says=("matplotlib", "cachekit-llm[report]"),
        blocked=("matplotlib",),
    ),
    case("stats", "--store", "bogus://x", status=2, says=("bogus://", "supported store URLs")),
    case("stats", "--store", "sqlite://{work}/typo/store.db", status=1, says=("no store at", "--store")),
    case(
        "stats", "--store", "memory://", "--semantic-index", "memory://", status=2, says=("--semantic-index",)
    ),
    case(
        "stats",
        "--store",
        "redis://127.0.0.1:1/0",
        status=1,
        says=("redis", "cachekit-llm[redis]"),
        blocked=("redis",),
    ),
    # purge and health
    case("purge", "--store", "sqlite://{work}/store.db", status=2, says=("--tenant", "--all --yes")),
    case(
        "purge",
        "--store",
        "sqlite://{work}/store.db",
        "--older-than",
        "soon",
        status=2,
        says=("--older-than", "30m"),
    ),
    case(
        "purge",
        "--store",
        "sqlite://{work}/typo.db",
        "--all",
        "--yes",
        status=1,
        says=("no store at", "typo.db"),
    ),
    case("health", "--budget-ms", "-5", status=2, says=("--budget-ms", "above 0")),
    case(
        "health",
        "--store",
        "sqlite://{work}/typo/cache.db",
        status=1,
        says=("no store at", "typo/cache.db", "--store"),
        stdout=None,  # and the JSON a probe reads
    ),
    # semantic-eval: every option is checked before the embedding model loads
    case(
        "semantic-eval", "{work}/pairs.jsonl", "--threshold", "2", status=2, says=("--threshold", "[-1, 1]")
    ),
    case(
        "semantic-eval",
        "{work}/pairs.jsonl",
        "--target-precision",
        "0",
        status=2,
        says=("--target-precision", "(0, 1]"),
    ),
    case(
        "semantic-eval",
        "{work}/pairs.jsonl",
        "--target-precision",
        "1.5",
        status=2,
        says=("--target-precision",),
    ),
    case(
        "semantic-eval",
        "{work}/pairs.jsonl",
        "--max-false-hit-rate",
        "-0.1",
        status=2,
        says=("--max-false-hit-rate",),
    ),
    case(
        "semantic-eval",
        "{work}/pairs.jsonl",
        "--index-size",
        "0",
        status=2,
        says=("--index-size", "1 or more"),
    ),
    case("semantic-eval", "{work}/pairs.jsonl", "--index", "redis", status=2, says=("--redis-url",)),
    case(
        "semantic-eval",
        "{work}/pairs.jsonl",
        "--compare",
        "threshold=9",
        status=2,
        says=("--compare", "threshold=9"),
    ),
    case(
        "semantic-eval",
        "{work}/pairs.jsonl",
        status=1,
        says=("onnxruntime", "cachekit-llm[semantic]"),
        blocked=("sentence_transformers", "onnxruntime"),
    ),
    case(
        "semantic-eval",
        "{work}/pairs.jsonl",
        "--embedder",
        "sentence-transformers",
        status=1,
        says=("sentence-transformers", "cachekit-llm[semantic-torch]"),
        blocked=("sentence_transformers",),
    ),
    # serve: a port out of range, a device that is not there, the extra, a port in use
    case("serve", "--port", "99999", status=2, says=("--port", "0 to 65535")),
    case("serve", "--port", "-1", status=2, says=("--port",)),
    case(
        "serve",
        "--engine",
        "transformers",
        "--device",
        "tpu9",
        status=2,
        says=("tpu9", "cpu,"),
        before=LOADING,
    ),
    case(
        "serve",
        "--engine",
        "transformers",
        "--device",
        "cuda:99",
        status=2,
        says=("cuda:99",),
        before=LOADING,
    ),
    case(
        "serve",
        "--engine",
        "transformers",
        "--model",
        "{work}/adir",
        status=2,
        says=("--model", "config.json"),
        before=("cachekit serve: loading the {work}/adir model ...",),
    ),
    case("serve", "--model", "tiny", status=2, says=("scripted engine", "--engine transformers")),
    case("serve", "--port", str(_BUSY), status=1, says=(f"127.0.0.1:{_BUSY}", "--port")),
    case(
        "serve",
        "--engine",
        "transformers",
        status=1,
        says=("transformers engine", "cachekit-llm[local]"),
        blocked=("torch",),
        before=LOADING,
    ),
    # proxy: a port out of range, a port in use, a missing settings file, a setting it does not know,
    # too few workers, the extra
    case("proxy", "--port", "99999", status=2, says=("--port", "0 to 65535")),
    case("proxy", "--port", str(_BUSY), status=1, says=(f"127.0.0.1:{_BUSY}", "--port")),
    case("proxy", "--config", "{work}/missing.toml", status=2, says=("missing.toml", "no such file")),
    case("proxy", "--config", "{work}/unknown.toml", status=2, says=("unknown proxy setting", "colour")),
    case("proxy", "--workers", "0", status=2, says=("--workers", "1 or more")),
    case("proxy", "--port", "0", status=1, says=("uvicorn", "cachekit-llm[proxy]"), blocked=("uvicorn",)),
    # prices
    case(
        "prices",
        "claude-sonnet-4-5",
        "--provider",
        "nope",
        status=2,
        says=("unknown provider 'nope'", "anthropic"),
    ),
    case("prices", "claude-sonnet-4-5", "--at", "someday", status=2, says=("--at", "7d")),
    case("prices", "claude-sonnet-4-5", "--option", "flex", status=2, says=("--option", "KEY=VALUE")),
    case(
        "prices", "claude-sonet-4-5", status=1, says=("no price for 'claude-sonet-4-5'", "claude-sonnet-4-5")
    ),
    case(
        "prices", "claude-sonnet-4-5", "--at", "2020-01-01", status=1, says=("released on 2025-09-29", "--at")
    ),
    case(
        "prices",
        "claude-sonnet-4-5",
        "--update",
        status=1,
        says=("--update", "genai-prices"),
        blocked=("genai_prices",),
    ),
    case(
        "prices",
        "claude-sonnet-4-5",
        "--update",
        status=1,
        says=("--update could not fetch", "without --update"),
        before=("cachekit prices: fetching the newest genai-prices data (up to 30 s) ...",),
        # Offline: the fetch goes through a proxy that refuses the connection, as a machine without a
        # network refuses it (the proxy variables are honoured by the HTTP client genai-prices uses).
        env=(
            ("HTTPS_PROXY", f"http://127.0.0.1:{free_port()}"),
            ("HTTP_PROXY", f"http://127.0.0.1:{free_port()}"),
            ("ALL_PROXY", ""),
            ("NO_PROXY", ""),
        ),
        stdout=None,
    ),
    # replay
    case("replay", "{work}/traces.jsonl", "--limit", "-1", status=2, says=("--limit", "1 or more")),
    case("replay", "{work}/traces.jsonl", "--limit", "0", status=2, says=("--limit",)),
    case("replay", "{work}/traces.jsonl", "--gap-seconds", "-1", status=2, says=("--gap-seconds",)),
    case("replay", "{work}/traces.jsonl", "--gaps", "sometimes", status=2, says=("sometimes",)),
    case(
        "replay", "{work}/traces.jsonl", "--policy", "everything", status=2, says=("--policy", "everything")
    ),
    # diff and lint: a forced dialect that does not fit the bodies is an error, not "no divergence"
    case(
        "diff",
        "--dialect",
        "openai_chat",
        "{work}/request.json",
        "{work}/request-other.json",
        status=2,
        says=("openai_chat", "top-level 'system'"),
    ),
    case(
        "lint", "--dialect", "openai_responses", "{work}/chat.json", status=2, says=("chat.json", "'input'")
    ),
    case("lint", "--pattern", "(unclosed", "{work}/request.json", status=2, says=("(unclosed",)),
]


def file_cases() -> Iterator[Case]:
    """For each file argument of each command (found in the parser), its bad files, in the baseline."""
    for name, parser in commands().items():
        positionals = 0
        for action in parser._actions:
            metavar = action.metavar if isinstance(action.metavar, str) else None
            if action.option_strings == [] and action.dest != "help":
                index = positionals
                positionals += 1
            else:
                index = None
            if metavar is None or not (metavar in INPUTS or metavar in OUTPUTS or "." in metavar):
                continue
            assert metavar in INPUTS or metavar in OUTPUTS, f"{name} {metavar}: add it to INPUTS or OUTPUTS"

            def with_value(
                value: str, index: int | None = index, action: argparse.Action = action, name: str = name
            ) -> tuple[str, ...]:
                argv = list(GOOD[name])
                if index is not None:
                    slots = [
                        i for i, arg in enumerate(argv) if "{work}" in arg and not arg.startswith("sqlite")
                    ]
                    argv[slots[index]] = value
                elif action.option_strings[0] in argv:
                    argv[argv.index(action.option_strings[0]) + 1] = value
                else:
                    argv += [action.option_strings[0], value]
                return (name, *argv)

            if metavar in OUTPUTS:
                option = action.option_strings[0]
                yield Case(with_value("{work}/out.txt"), 2, (option, "out.txt", OUTPUTS[metavar]))
                yield Case(
                    with_value(f"{{work}}/a-file/out{OUTPUTS[metavar]}"),
                    2,
                    (option, "a-file", "not a folder"),
                )
                continue
            suffix = ".sqlite3" if metavar == "PATH" else ".jsonl" if metavar.endswith(".jsonl") else ".json"
            other = {
                ".jsonl": "{work}/request.json",
                ".json": "{work}/pairs.jsonl",
                ".sqlite3": "{work}/store.db",
            }
            missing_status = 1 if metavar == "PATH" else 2  # no ledger there: nothing was recorded
            yield Case(with_value(f"{{work}}/missing{suffix}"), missing_status, (f"missing{suffix}",))
            yield Case(with_value(f"{{work}}/empty{suffix}"), 2, (f"empty{suffix}",))
            yield Case(with_value(f"{{work}}/garbage{suffix}"), 2, (f"garbage{suffix}",))
            yield Case(with_value(f"{{work}}/unreadable{suffix}"), 2, (f"unreadable{suffix}",))
            yield Case(with_value("{work}/adir"), 2, ("adir",))
            yield Case(with_value(other[suffix]), 2, (Path(other[suffix]).name,))


ALL = [*CASES, *file_cases()]


def test_every_command_has_a_baseline_and_cases_of_its_own() -> None:
    names = set(commands())
    assert set(GOOD) == names, "a new command needs a valid baseline in GOOD and cases in CASES"
    assert {c.command for c in CASES} == names
    # Every kind of bad input appears somewhere (the generated ones need file arguments to exist).
    assert any(c.blocked for c in CASES)
    assert any(c.env for c in CASES)
    assert len([c for c in ALL if c not in CASES]) >= 40


@dataclass
class Run:
    status: int
    out: str
    err: str


def run_in_process(argv: list[str]) -> Run:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            status = cli.main(argv, out=out)
        except SystemExit as exit_:  # argparse's usage errors
            status = int(exit_.code or 0)
    return Run(status, out.getvalue(), err.getvalue())


#: A ``-c`` wrapper: the modules named in argv[1] cannot be imported (as where their extra is not
#: installed), then ``cachekit ARGV[2:]`` runs as the console script does.
WRAPPER = (
    "import sys\n"
    "for name in filter(None, sys.argv[1].split(',')):\n"
    "    sys.modules[name] = None\n"
    "from cachekit.cli import main\n"
    "sys.exit(main(sys.argv[2:]))\n"
)


def run_in_subprocess(argv: list[str], blocked: tuple[str, ...], env: dict[str, str], work: Path) -> Run:
    result = subprocess.run(
        [sys.executable, "-c", WRAPPER, ",".join(blocked), *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "CACHEKIT_HOME": str(work / "home"), **env},
        check=False,
    )
    return Run(result.returncode, result.stdout, result.stderr)


@contextlib.contextmanager
def busy_port() -> Iterator[None]:
    """:data:`_BUSY` taken by a listening socket while inside: a second server cannot bind it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", _BUSY))
        sock.listen()
        yield


@pytest.mark.parametrize("bad", ALL, ids=Case.id)
def test_a_bad_input_is_one_line_naming_it_and_the_documented_status(
    bad: Case, work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CACHEKIT_HOME", str(work / "home"))
    argv = [arg.replace("{work}", str(work)) for arg in bad.argv]
    with busy_port():
        if bad.blocked or bad.env:
            ran = run_in_subprocess(argv, bad.blocked, dict(bad.env), work)
        else:
            ran = run_in_process(argv)
    assert "Traceback" not in ran.err, ran.err
    assert ran.err.endswith("\n"), f"not whole lines: {ran.err!r}"
    # A step that takes seconds says so as it starts ("cachekit serve: loading the tiny model ...");
    # besides those, one line: the error.
    before = [line.replace("{work}", str(work)) for line in bad.before]
    assert [line for line in ran.err.splitlines() if line.endswith(" ...")] == before
    (line,) = [line for line in ran.err.splitlines() if not line.endswith(" ...")]
    prefix = f"cachekit {bad.command}:" if not line.startswith("cachekit:") else "cachekit:"
    assert line.startswith(prefix), ran.err
    for fragment in bad.says:
        assert fragment.replace("{work}/", "") in line, (fragment, ran.err)
    assert ran.status == bad.status, (ran.status, ran.err)
    if bad.stdout is not None:
        assert ran.out == bad.stdout, ran.out  # nothing printed as if it had worked


def test_cuda_where_torch_sees_no_gpu_is_refused_with_the_fix() -> None:
    """``serve --engine transformers --device cuda`` without a GPU: one line, status 2, before any model
    is looked at. (On a machine with one, the same check lets ``cuda`` through.)"""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        from cachekit.local.transformers_engine import _device

        assert _device("cuda").type == "cuda"
        return
    ran = run_in_process(["serve", "--engine", "transformers", "--device", "cuda"])
    assert ran.status == 2
    *_, line = ran.err.splitlines()
    assert line == f"cachekit serve: device 'cuda': torch {torch.__version__} finds no CUDA GPU here; use cpu"


def test_a_mistyped_store_is_never_created(work: Path) -> None:
    """``health``, ``stats`` and ``purge`` at a path that does not exist create neither the folder
    nor the database: a readiness probe that passes on a typo is wrong."""
    typo = work / "typo-folder"
    for argv in (
        ["health", "--store", f"sqlite://{typo}/cache.db"],
        ["stats", "--store", f"sqlite://{typo}/cache.db"],
        ["purge", "--store", f"sqlite://{typo}/cache.db", "--all", "--yes"],
    ):
        assert run_in_process(argv).status == 1
        assert not typo.exists()


# -- a closed stdout: `cachekit ... | head -1` --------------------------------------------------------

#: Commands whose baseline loads a model or an embedding model: slow, still run in CI.
_SLOW = {"semantic-eval"}


@pytest.mark.parametrize(
    "command",
    [pytest.param(c, marks=pytest.mark.slow) if c in _SLOW else c for c in GOOD],
)
def test_a_reader_that_closes_the_pipe_gets_no_traceback(command: str, work: Path) -> None:
    """The command's output goes to a pipe whose reader has gone (what ``| head -1`` leaves after its
    line): it stops at its first write without a word, status 1 (its output did not all arrive)."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first byte
    argv = [arg.replace("{work}", str(work)) for arg in [command, *GOOD[command]]]
    try:
        result = subprocess.run(
            [sys.executable, "-c", WRAPPER, "", *argv],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, "CACHEKIT_HOME": str(work / "home")},
            check=False,
        )
    finally:
        os.close(write)
    # Nothing but progress lines (replay and semantic-eval report on stderr as they go).
    others = [line for line in result.stderr.splitlines() if not re.search(r" \d+/\d+ \(\d+%\)$", line)]
    assert others == [], result.stderr
    assert result.returncode == 1

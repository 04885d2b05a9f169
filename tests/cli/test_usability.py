"""The command line as a new user meets it: progress on long commands (plain lines off a terminal),
``purge --all --yes``, a refusal that says how to clear everything, ``purge --older-than 0s``,
``report`` on a missing ledger, and a help line with its default for every option.

Real parts: the real ``anthropic`` / ``openai`` SDKs through cachekit to the in-process upstream, real
SQLite stores, a real Redis 8 semantic index, the real embedding model and the recorded traces.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import cachekit
from cachekit import cli
from cachekit._progress import ProgressPrinter, routed_tqdm
from tests.cli.test_semantic import PAIRS
from tests.conftest import Harness
from tests.redis_servers import RedisServer, redis8_server  # noqa: F401  (fixture)
from tests.semantic.test_purge import QUESTIONS, _ask, _client, _holds, _raw_values

TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces-sample.jsonl"  # see fixtures/README.md


class Terminal(io.StringIO):
    """A stream that says it is a terminal (as a real one does), so progress draws a bar on it."""

    def isatty(self) -> bool:
        return True


def run(*argv: str, err: io.StringIO | None = None) -> tuple[int, str, str]:
    """``cachekit ARGV``: exit status, standard output, standard error (progress goes there)."""
    out, err = io.StringIO(), err if err is not None else io.StringIO()
    with contextlib.redirect_stderr(err):
        code = cli.main(list(argv), out=out)
    return code, out.getvalue(), err.getvalue()


def assert_plain(text: str) -> None:
    """What lands in a log file: whole lines, no carriage returns, no escape sequences."""
    assert "\r" not in text
    assert "\x1b" not in text


# --- progress --------------------------------------------------------------------------------------


def test_replay_progress_is_a_few_plain_lines_off_a_terminal() -> None:
    argv = ["replay", str(TRACES), "--limit", "2", "--policy", "none", "--policy", "cachekit", "--json"]
    code, out, err = run(*argv)
    assert code == 0
    assert len(out.splitlines()) == 2  # the JSON on stdout stays clean: one object per policy
    assert_plain(err)
    # 2 conversations x 2 policies: a line at the start and at each new tenth.
    assert err.splitlines() == [
        "cachekit replay: replaying 0/4 (0%)",
        "cachekit replay: replaying 1/4 (25%)",
        "cachekit replay: replaying 2/4 (50%)",
        "cachekit replay: replaying 3/4 (75%)",
        "cachekit replay: replaying 4/4 (100%)",
    ]


def test_replay_draws_a_bar_on_a_terminal() -> None:
    terminal = Terminal()
    code, _, err = run("replay", str(TRACES), "--limit", "1", "--policy", "cachekit", "--json", err=terminal)
    assert code == 0
    assert "\r" in err  # redrawn in place, as a terminal shows it
    assert "cachekit replay: replaying" in err
    assert "1/1" in err


def test_plain_lines_stay_few_however_many_units() -> None:
    stream = io.StringIO()
    with ProgressPrinter(stream, "cachekit test") as progress:
        for done in range(1001):
            progress("counting", done, 1000)
        progress("empty", 0, 0)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "cachekit test: counting 0/1000 (0%)"
    assert lines[1] == "cachekit test: counting 100/1000 (10%)"
    assert lines[10] == "cachekit test: counting 1000/1000 (100%)"
    assert lines[11:] == ["cachekit test: empty 0/0 (100%)"]
    assert ProgressPrinter(None, "silent") is not None  # no stream: reports go nowhere, no error


@pytest.mark.slow
def test_semantic_eval_progress_is_plain_off_a_terminal(tmp_path: Path) -> None:
    import json

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
    code, out, err = run("semantic-eval", str(pairs), "--json")
    assert code == 0
    assert json.loads(out)["pairs"] == 5
    assert_plain(err)
    assert err.splitlines() == [
        "cachekit semantic-eval: loading the embedding model 0/1 (0%)",
        "cachekit semantic-eval: loading the embedding model 1/1 (100%)",
        "cachekit semantic-eval: embedding questions 0/10 (0%)",
        "cachekit semantic-eval: embedding questions 10/10 (100%)",
        "cachekit semantic-eval: looking up pairs 0/5 (0%)",
        "cachekit semantic-eval: looking up pairs 1/5 (20%)",
        "cachekit semantic-eval: looking up pairs 2/5 (40%)",
        "cachekit semantic-eval: looking up pairs 3/5 (60%)",
        "cachekit semantic-eval: looking up pairs 4/5 (80%)",
        "cachekit semantic-eval: looking up pairs 5/5 (100%)",
    ]


def test_building_a_model_reports_plain_lines_off_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cachekit.local.models import resolve_model

    stderr = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    resolve_model("tiny", home=tmp_path, progress=True)
    text = stderr.getvalue()
    assert_plain(text)
    assert "cachekit: building the tiny model (once) 0/2 (0%)\n" in text
    assert "cachekit: building the tiny model (once) 2/2 (100%) saved\n" in text


def test_a_library_s_own_tqdm_loop_reports_through_the_callback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """transformers' GGUF conversion loops over the tensors with a tqdm bar of its own; while routed,
    that loop reports to cachekit's progress instead (a stand-in module of the same shape here: the
    real loop runs only when SmolLM2 is converted, once, in the demo)."""
    from transformers import modeling_gguf_pytorch_utils

    assert callable(vars(modeling_gguf_pytorch_utils)["tqdm"])  # the global that the conversion routes

    (tmp_path / "ck_test_library.py").write_text(
        "from tqdm import tqdm\n\n\n"
        "def convert(items):\n"
        "    return [item * 2 for item in tqdm(items, desc='Converting and de-quantizing...')]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import ck_test_library  # type: ignore[import-not-found]

    own_bar = ck_test_library.tqdm
    reports: list[tuple[str, int, int]] = []
    stderr = io.StringIO()
    route = routed_tqdm("ck_test_library", lambda *report: reports.append(report), "dequantizing")
    try:
        with contextlib.redirect_stderr(stderr), route:
            assert ck_test_library.convert([1, 2, 3]) == [2, 4, 6]
    finally:
        sys.modules.pop("ck_test_library", None)
    assert stderr.getvalue() == ""  # the library's own bar drew nothing
    assert reports == [
        ("dequantizing", 0, 3),
        ("dequantizing", 1, 3),
        ("dequantizing", 2, 3),
        ("dequantizing", 3, 3),
    ]
    assert ck_test_library.tqdm is own_bar  # restored


# --- purge ------------------------------------------------------------------------------------------


def _fill(harness: Harness, url: str) -> None:
    """One cached answer for each of two tenants, written through the real SDK."""
    for tenant in QUESTIONS:
        config = cachekit.CacheConfig(store=url, tenant=tenant, ledger=False)
        assert _ask(harness.sdk("openai", cache=config), QUESTIONS[tenant][0]) == "miss"


def _entries(url: str) -> int:
    """The entries of the SQLite store at ``url``, as ``cachekit stats`` counts them (with a ledger of
    no calls beside it: the default one is not this test's)."""
    ledger = Path(url.removeprefix("sqlite://")).with_name("ledger.jsonl")
    ledger.touch()
    code, out, _ = run("stats", "--store", url, "--json", "--ledger", str(ledger))
    assert code == 0
    import json

    return int(json.loads(out)["store"]["entries"])


def test_purge_without_a_filter_says_how_to_clear_everything(tmp_path: Path) -> None:
    code, _, err = run("purge", "--store", f"sqlite:///{tmp_path / 'cache.db'}")
    assert code == 2
    assert "--all --yes" in err


def test_purge_all_needs_yes_then_clears_the_store(harness: Harness, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cache.db'}"
    _fill(harness, url)
    code, _, err = run("purge", "--store", url, "--all")
    assert code == 2
    assert "--yes" in err
    assert _entries(url) == 2  # refused: nothing deleted
    assert run("purge", "--store", url, "--all", "--dry-run")[:2] == (0, "would delete 2 entries\n")
    assert _entries(url) == 2
    code, _, err = run("purge", "--store", url, "--all", "--yes", "--tenant", "acme")
    assert code == 2
    assert "--tenant" in err
    assert _entries(url) == 2
    assert run("purge", "--store", url, "--all", "--yes")[:2] == (0, "deleted 2 entries\n")
    assert _entries(url) == 0


def test_purge_older_than_0s_deletes_everything_written_before(harness: Harness, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cache.db'}"
    _fill(harness, url)
    assert run("purge", "--store", url, "--older-than", "0s", "--dry-run")[:2] == (
        0,
        "would delete 2 entries\n",
    )
    assert run("purge", "--store", url, "--older-than", "0s")[:2] == (0, "deleted 2 entries\n")
    assert _entries(url) == 0
    code, _, err = run("purge", "--store", url, "--older-than", "soon")
    assert code == 2
    assert "--older-than" in err  # the message names the option that was given


@pytest.mark.slow
def test_purge_all_clears_the_store_and_the_semantic_index(
    harness: Harness,
    redis8_server: RedisServer,  # noqa: F811
) -> None:
    """The usual layout: store and semantic index on one Redis 8, one prefix."""
    prefix = f"purge-all-{uuid.uuid4().hex[:8]}:"
    url = f"{redis8_server.url}?prefix={prefix}&timeout=1"
    clients = {tenant: _client(harness, tenant, url, url) for tenant in QUESTIONS}
    for tenant, (question, _) in QUESTIONS.items():
        assert _ask(clients[tenant], question) == "miss"
    before = _raw_values([redis8_server], prefix)
    assert _holds(before, QUESTIONS["acme"][0])

    assert run("purge", "--store", url, "--all")[0] == 2
    code, out, _ = run("purge", "--store", url, "--all", "--dry-run")
    assert code == 0
    assert out == "would delete 2 entries\nwould delete 2 semantic index entries\n"
    assert _raw_values([redis8_server], prefix) == before
    code, out, _ = run("purge", "--store", url, "--all", "--yes")
    assert code == 0
    assert out == "deleted 2 entries\ndeleted 2 semantic index entries\n"

    after = _raw_values([redis8_server], prefix)
    for question, _ in QUESTIONS.values():
        assert not _holds(after, question)  # vectors and question texts gone
    assert not any(value.endswith(b"}:vs") for value in after)
    for tenant, (_, paraphrase) in QUESTIONS.items():
        assert _ask(clients[tenant], paraphrase) == "miss"


# --- report -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ledger.sqlite3", "calls.jsonl"])
def test_report_on_a_missing_ledger_says_so_and_exits_1(tmp_path: Path, name: str) -> None:
    missing = tmp_path / name
    code, out, err = run("report", "--ledger", str(missing))
    assert code == 1
    assert out == ""
    assert str(missing) in err
    assert "no ledger" in err
    assert not missing.exists()  # reading does not create it


def test_report_on_the_missing_default_ledger_names_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CACHEKIT_HOME", str(tmp_path))
    code, _, err = run("report")
    assert code == 1
    assert str(tmp_path / "ledger.sqlite3") in err


# --- help -------------------------------------------------------------------------------------------


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from _parsers(sub)


def test_every_subcommand_and_option_has_help_with_its_default() -> None:
    parsers = list(_parsers(cli._build_parser()))
    assert len(parsers) > 10  # the walk reached the subcommands
    for parser in parsers:
        formatter = parser._get_formatter()
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                continue
            where = f"{parser.prog} {'/'.join(action.option_strings) or action.dest}"
            assert action.help, f"{where} has no help"
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    assert choice.help, f"{parser.prog} {choice.dest} has no help"
                continue
            text = formatter._expand_help(action)
            takes_value = action.nargs != 0
            if not action.option_strings or not takes_value:
                continue  # positionals are required; a flag is off unless given
            if action.default is None:
                assert "default" in text, f"{where}: what happens without it? {text!r}"
            else:
                shown = {
                    str(action.default),
                    f"{action.default:g}" if isinstance(action.default, float) else "",
                }
                assert any(value and value in text for value in shown), f"{where} omits its default: {text!r}"


def test_semantic_eval_states_the_threshold_it_uses() -> None:
    from cachekit.semantic.matcher import DEFAULT_THRESHOLD

    (evaluation,) = [p for p in _parsers(cli._build_parser()) if p.prog.endswith(" semantic-eval")]
    (threshold,) = [a for a in evaluation._actions if "--threshold" in a.option_strings]
    assert f"default: the semantic cache's, {DEFAULT_THRESHOLD:g})" in str(threshold.help)


def test_the_commands_load_what_they_run_only_when_they_run() -> None:
    """Building the parser (every command group's ``register``) loads neither the local backend nor
    the demo: ``cachekit health`` as a readiness probe does not pay for them (docs/architecture.md)."""
    import subprocess

    code = (
        "import sys\n"
        "from cachekit.cli import _build_parser\n"
        "_build_parser()\n"
        "print(sorted(m for m in ('cachekit.local', 'cachekit.cli.demo_run', 'cachekit.semantic.evaluate')"
        " if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]", result.stderr


def test_every_command_group_module_is_registered() -> None:
    """Each module of cachekit/cli/ but the demo's machinery and the private one every command shares
    (``_common``) is a command group whose ``register`` the parser calls (docs/architecture.md): a new
    module cannot be left out of ``cachekit --help``."""
    import importlib
    import pkgutil

    names = {info.name for info in pkgutil.iter_modules(cli.__path__) if not info.name.startswith("_")}
    names -= {"demo_run"}
    groups = {module.__name__.rpartition(".")[2] for module in cli._GROUPS}
    assert names == groups
    for name in names:
        assert callable(importlib.import_module(f"cachekit.cli.{name}").register)

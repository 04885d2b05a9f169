"""docs/cli.md holds the command line's real help text, readable in the repository, never stale.

The text is generated (``python docs/hooks/generated.py`` rewrites the committed blocks of the docs
pages); these tests fail when the committed text differs from what the generator prints now, so a new
option or help line shows up in the file as soon as someone regenerates it, and CI says when nobody did.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from cachekit.cli import main
from tests.meta.test_docs import generated  # the docs hook, loaded from its file

ROOT = Path(__file__).resolve().parents[2]
CLI_MD = ROOT / "docs" / "cli.md"


def test_cli_md_holds_the_help_of_every_command_as_committed_text() -> None:
    text = CLI_MD.read_text()
    commands = generated.cli_commands()
    assert {"demo", "report", "serve", "purge"} <= set(commands)
    for command in commands:
        assert f"## {command}\n" in text
        assert f"usage: cachekit {command} [-h]" in text
    # Each subcommand's options are there in words, not only on the built site.
    assert "--engine {transformers,scripted}" in text
    assert "--older-than AGE" in text


def test_cli_md_is_what_the_generator_prints_now(caplog: pytest.LogCaptureFixture) -> None:
    committed = CLI_MD.read_text()
    with caplog.at_level(logging.WARNING, logger="mkdocs.hooks.cachekit"):
        fresh = generated.refresh(committed, "docs/cli.md")
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    assert fresh == committed, "docs/cli.md is stale: run `python docs/hooks/generated.py` and commit it"


def test_the_help_in_cli_md_is_what_the_command_prints(capsys: pytest.CaptureFixture[str]) -> None:
    # The generator's layout is the command's own (argparse, 100 columns): compare with a real run.
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    printed = capsys.readouterr().out
    text = CLI_MD.read_text()
    section = text[text.index("$ cachekit demo --help") :]
    section = section[section.index("\n") + 1 : section.index("```")]
    squash = lambda s: re.sub(r"\s+", " ", s).strip()  # noqa: E731 - terminal widths differ
    assert squash(section) == squash(printed)


def test_regenerating_rewrites_a_stale_block_and_check_reports_it(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("Intro.\n\n<!-- cachekit:cli report -->\nold text\n<!-- /cachekit:cli -->\n\nEnd.\n")
    assert generated.main(["--check", str(page)]) == 1
    assert "old text" in page.read_text()  # --check writes nothing
    assert generated.main([str(page)]) == 0
    text = page.read_text()
    assert "old text" not in text
    assert text.startswith("Intro.\n\n<!-- cachekit:cli report -->\n```text\n$ cachekit report --help\n")
    assert text.endswith("```\n<!-- /cachekit:cli -->\n\nEnd.\n")
    assert generated.main(["--check", str(page)]) == 0


def test_the_site_build_drops_the_block_markers() -> None:
    expanded = generated.expand(CLI_MD.read_text(), "docs/cli.md")
    assert "cachekit:cli" not in expanded
    assert expanded.count("usage: cachekit demo [-h]") == 1

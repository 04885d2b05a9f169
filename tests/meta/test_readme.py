"""The README's "Use" snippet runs as written and prints what the README shows."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def _blocks(section: str, language: str) -> list[str]:
    text = README.read_text(encoding="utf-8")
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", body, flags=re.DOTALL)


def test_the_use_snippet_runs_offline_and_prints_what_the_readme_shows(tmp_path: Path) -> None:
    (code,) = _blocks("Use", "python")
    (shown,) = _blocks("Use", "text")
    script = tmp_path / "use.py"
    script.write_text(code, encoding="utf-8")
    # A fresh interpreter, as a reader runs it; no API key in its environment is needed.
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={"PATH": "", "HOME": str(tmp_path), "CACHEKIT_HOME": str(tmp_path / "ck")},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == shown

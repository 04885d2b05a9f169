"""A scripting hook (issue 29 item 8): ``cachekit serve --script FILE`` and ``load_script``."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, cast

import anthropic
import openai
import pytest

from cachekit import ScriptError
from cachekit.cli import main
from cachekit.local import LocalBackend, LocalServer, ScriptedEngine, load_script
from tests.local.conftest import CLAUDE, GPT, claude_client, gpt_client, typed

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city"],
}
SCRIPT = {
    "turns": [
        {
            "turn": 0,
            "user": "(?i)weather",
            "text": "Checking.",
            "tool_calls": [
                {"name": "get_weather", "arguments": {"city": "Oslo"}},
                {"name": "get_weather", "optional": ["days"]},
            ],
        },
        {"turn": 1, "text": "Sunny in Oslo."},
        {"user": "overload", "error": {"status": 529, "message": "Overloaded"}},
        {"user": "^rate", "error": {"status": 429, "message": "Slow down"}},
    ]
}


def _write(tmp_path: Path, document: Any, name: str = "turns.json") -> Path:
    path = tmp_path / name
    path.write_text(document if isinstance(document, str) else json.dumps(document, indent=2))
    return path


@pytest.fixture
def scripted(tmp_path: Path) -> Any:
    engine = ScriptedEngine(script=load_script(_write(tmp_path, SCRIPT)))
    with LocalServer(LocalBackend(engine)) as server:
        yield server


def test_turns_are_matched_by_index_and_pattern(scripted: LocalServer) -> None:
    tools: Any = [{"name": "get_weather", "input_schema": WEATHER}]
    with claude_client(scripted) as claude:
        first = claude.messages.create(
            model=CLAUDE, max_tokens=64, tools=tools, messages=[{"role": "user", "content": "Weather please"}]
        )
        typed(first)
        assert [block.type for block in first.content] == ["text", "tool_use", "tool_use"]
        given, built = first.content[1], first.content[2]
        assert given.input == {"city": "Oslo"}  # type: ignore[union-attr]
        assert built.input == {"city": "example city", "days": 1}  # type: ignore[union-attr]
        results: Any = [
            {"type": "tool_result", "tool_use_id": block.id, "content": "sunny"}  # type: ignore[union-attr]
            for block in first.content[1:]
        ]
        second = claude.messages.create(
            model=CLAUDE,
            max_tokens=64,
            tools=tools,
            messages=cast(
                Any,
                [
                    {"role": "user", "content": "Weather please"},
                    {
                        "role": "assistant",
                        "content": [block.model_dump(exclude_none=True) for block in first.content],
                    },
                    {"role": "user", "content": results},
                ],
            ),
        )
        assert second.content[0].text == "Sunny in Oslo."  # type: ignore[union-attr]
        # No entry matches: the engine's own rules answer.
        other = claude.messages.create(
            model=CLAUDE, max_tokens=64, messages=[{"role": "user", "content": "Hi"}]
        )
        assert other.content[0].text.startswith("Scripted reply")  # type: ignore[union-attr]


def test_an_error_turn_is_the_providers_error(scripted: LocalServer) -> None:
    with claude_client(scripted) as claude, pytest.raises(anthropic.InternalServerError) as overloaded:
        claude.messages.create(model=CLAUDE, max_tokens=8, messages=[{"role": "user", "content": "overload"}])
    assert overloaded.value.status_code == 529
    assert overloaded.value.body["error"] == {"type": "overloaded_error", "message": "Overloaded"}  # type: ignore[index]
    with gpt_client(scripted) as gpt, pytest.raises(openai.RateLimitError) as limited:
        gpt.responses.create(model=GPT, input="rate me")
    assert limited.value.body["message"] == "Slow down"  # type: ignore[index]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ('{"turns": [\n  {"text": "a"},\n  {"text": "b",}\n]}', "line 3 column"),
        ({"turns": [{"text": "a"}, {"turn": -1, "text": "b"}]}, "turns[1]: 'turn' must be a number"),
        ({"turns": [{"user": "(", "text": "b"}]}, "turns[0]: 'user' is not a valid regular expression"),
        ({"turns": [{"turn": 0}]}, "turns[0]: says no answer"),
        (
            {"turns": [{"text": "a", "tool_calls": [{"arguments": {}}]}]},
            "turns[0].tool_calls[0]: must be an object with a 'name'",
        ),
        (
            {"turns": [{"error": {"status": 200}}]},
            "turns[0]: 'error' must be an object with a 'status' from 400",
        ),
        ({"turns": [{"txt": "a"}]}, "turns[0]: unknown key 'txt'"),
        ({"steps": []}, 'must be an object with a "turns" list'),
    ],
)
def test_a_bad_script_is_a_clear_error_naming_the_line_or_turn(
    tmp_path: Path, document: Any, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, document)
    with pytest.raises(ScriptError, match=message.replace("[", r"\[").replace("(", r"\(")) as refused:
        load_script(path)
    assert str(path) in str(refused.value)
    assert main(["serve", "--script", str(path), "--port", "0"], io.StringIO()) == 2
    said = capsys.readouterr().err
    assert said == f"cachekit serve: {refused.value}\n"  # one line, no traceback
    assert message in said


def test_serve_refuses_a_script_for_the_transformers_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["serve", "--engine", "transformers", "--script", str(_write(tmp_path, SCRIPT))], io.StringIO()
    )
    assert code == 2
    assert "--script needs the scripted engine" in capsys.readouterr().err

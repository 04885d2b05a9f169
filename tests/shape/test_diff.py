"""``diff_requests`` and the ``cachekit diff`` / ``cachekit lint`` commands."""

from __future__ import annotations

import contextlib
import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest

from cachekit.shape.diff import Divergence, diff_requests, guess_dialect, load_request
from cachekit.shape.tokens import encoding

TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces-sample.jsonl"  # see fixtures/README.md

TOOLS = [
    {"name": "get_weather", "description": "Weather for a city.", "input_schema": {"type": "object"}},
    {"name": "get_time", "description": "Local time in a city.", "input_schema": {"type": "object"}},
    {"name": "search", "description": "Search the web.", "input_schema": {"type": "object"}},
]


def _tau_requests() -> list[dict[str, Any]]:
    trace = json.loads(TRACES.read_text(encoding="utf-8").splitlines()[0])
    return [
        {
            "model": "claude-sonnet-4-5",
            "system": trace["system"],
            "tools": trace["tools"],
            "messages": trace["messages"][:k],
        }
        for k, message in enumerate(trace["messages"])
        if message["role"] == "assistant"
    ]


def _body(**extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "claude-sonnet-4-5",
        "tools": copy.deepcopy(TOOLS),
        "system": "You are a weather assistant. Answer in one sentence.",
        "messages": [
            {"role": "user", "content": "What is the weather in Paris today?"},
            {"role": "assistant", "content": "It is sunny in Paris."},
            {"role": "user", "content": "And tomorrow in Lyon?"},
        ],
    }
    body.update(extra)
    return body


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _texts(body: dict[str, Any]) -> list[str]:
    """The block texts of an Anthropic body with string contents, in prefix order, computed here."""
    return (
        [_canonical(tool) for tool in body["tools"]]
        + [body["system"]]
        + [m["content"] for m in body["messages"]]
    )


def _tokens(texts: list[str]) -> list[int]:
    enc = encoding("o200k_base")
    return [token for text in texts for token in enc.encode(text)]


def _common(a: list[Any] | str, b: list[Any] | str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


# --- no divergence ------------------------------------------------------------------------------------


def test_none_when_b_extends_or_equals_a() -> None:
    requests = _tau_requests()
    assert diff_requests(requests[0], requests[1]) is None
    assert diff_requests(requests[3], requests[3]) is None
    assert diff_requests(requests[0], requests[-1]) is None


def test_settings_that_do_not_touch_the_prompt_are_not_a_divergence() -> None:
    assert diff_requests(_body(max_tokens=10, temperature=0), _body(max_tokens=999, temperature=1)) is None


# --- each reason --------------------------------------------------------------------------------------


def test_model_changed_comes_first() -> None:
    b = _body(model="claude-haiku-4-5", system="Something else entirely.")
    divergence = diff_requests(_body(), b)
    assert divergence == Divergence(
        reason="model_changed",
        block=None,
        where_a="model",
        where_b="model",
        char=None,
        token=0,
        text_a="claude-sonnet-4-5",
        text_b="claude-haiku-4-5",
        detail="model claude-sonnet-4-5 -> claude-haiku-4-5",
        common_tokens=0,
    )


def test_a_changed_timestamp_in_a_real_system_prompt_against_an_independent_count() -> None:
    a = _tau_requests()[2]
    b = copy.deepcopy(a)
    b["system"] = b["system"].replace("2024-05-15 15:00:00", "2024-05-15 16:00:00")
    divergence = diff_requests(a, b)
    assert divergence is not None
    assert divergence.char is not None
    n_tools = len(a["tools"])
    assert (divergence.reason, divergence.block, divergence.where_a, divergence.where_b) == (
        "system_changed",
        n_tools,
        "system",
        "system",
    )
    assert divergence.char == a["system"].index("15:00:00") + 1  # "15" and "16" share the "1"
    # Token index: the common prefix of the two prompts' o200k tokens, block texts in prefix order.
    texts_a = [_canonical(tool) for tool in a["tools"]] + [a["system"]]
    texts_b = [_canonical(tool) for tool in b["tools"]] + [b["system"]]
    assert divergence.token == _common(_tokens(texts_a), _tokens(texts_b))
    assert divergence.common_tokens == len(_tokens(texts_a[:n_tools]))
    assert divergence.text_a == a["system"][divergence.char - 40 : divergence.char + 80]
    assert divergence.text_b == b["system"][divergence.char - 40 : divergence.char + 80]
    assert "16:00:00" in divergence.text_b


def test_text_windows_are_40_characters_before_and_80_after() -> None:
    a = _body(system="x" * 100 + "A" + "y" * 200)
    b = _body(system="x" * 100 + "B" + "y" * 200)
    divergence = diff_requests(a, b)
    assert divergence is not None
    assert divergence.char == 100
    assert divergence.text_a == "x" * 40 + "A" + "y" * 79
    assert divergence.text_b == "x" * 40 + "B" + "y" * 79
    near_start = diff_requests(_body(system="Hi A and more"), _body(system="Hi B and more"))
    assert near_start is not None
    assert (near_start.char, near_start.text_a, near_start.text_b) == (3, "Hi A and more", "Hi B and more")


def test_an_edited_message_is_messages_changed_with_token_and_char_from_an_independent_count() -> None:
    a = _body()
    b = _body()
    b["messages"][1]["content"] = "It is raining in Paris."
    divergence = diff_requests(a, b)
    assert divergence is not None
    first_differing = len(TOOLS) + 1 + 1  # tools, system, the first user message
    assert (divergence.reason, divergence.block, divergence.where_a, divergence.where_b) == (
        "messages_changed",
        first_differing,
        "messages.1.content",
        "messages.1.content",
    )
    assert divergence.char == _common("It is sunny in Paris.", "It is raining in Paris.") == 6
    assert divergence.token == _common(_tokens(_texts(a)), _tokens(_texts(b)))
    assert divergence.common_tokens == len(_tokens(_texts(a)[:first_differing]))
    assert divergence.detail == "text differs at char 6"


@pytest.mark.parametrize(
    ("tools_b", "detail", "block"),
    [
        ([TOOLS[2], TOOLS[0], TOOLS[1]], "tool 'search' moved from 2 to 0", 0),
        ([TOOLS[0], TOOLS[2]], "tool 'get_time' removed (was 1)", 1),
        (
            [
                TOOLS[0],
                {"name": "book", "description": "Book.", "input_schema": {"type": "object"}},
                *TOOLS[1:],
            ],
            "tool 'book' added at 1",
            1,
        ),
        (
            [TOOLS[0], TOOLS[1], {**TOOLS[2], "description": "Search the web, fast."}],
            "tool 'search' changed: description",
            2,
        ),
    ],
)
def test_tool_changes_are_tools_changed_with_what_happened(
    tools_b: list[dict[str, Any]], detail: str, block: int
) -> None:
    divergence = diff_requests(_body(), _body(tools=copy.deepcopy(tools_b)))
    assert divergence is not None
    assert (divergence.reason, divergence.block, divergence.detail) == ("tools_changed", block, detail)
    assert divergence.where_a == f"tools.{block}"
    assert divergence.common_tokens == len(_tokens([_canonical(tool) for tool in TOOLS[:block]]))


@pytest.mark.parametrize(
    ("field", "a_value", "b_value"),
    [
        ("tool_choice", {"type": "auto"}, {"type": "tool", "name": "get_weather"}),
        ("thinking", None, {"type": "enabled", "budget_tokens": 2048}),
    ],
)
def test_a_changed_setting_is_messages_changed_at_the_first_message(
    field: str, a_value: Any, b_value: Any
) -> None:
    a = _body() if a_value is None else _body(**{field: a_value})
    b = _body(**{field: b_value})
    b["messages"].append({"role": "assistant", "content": "More."})  # even when B also extends A
    divergence = diff_requests(a, b)
    assert divergence is not None
    assert (divergence.reason, divergence.block, divergence.where_a, divergence.char) == (
        "messages_changed",
        len(TOOLS) + 1,
        field,
        None,
    )
    assert divergence.detail == f"{field} changed"
    assert divergence.text_b == _canonical(b_value)
    assert divergence.text_a == ("" if a_value is None else _canonical(a_value))
    assert divergence.token == divergence.common_tokens == len(_tokens(_texts(a)[: len(TOOLS) + 1]))


def test_an_earlier_block_change_comes_before_a_changed_setting() -> None:
    b = _body(tool_choice={"type": "any"}, system="Another system prompt.")
    divergence = diff_requests(_body(), b)
    assert divergence is not None
    assert divergence.reason == "system_changed"


def test_b_shorter_than_a_diverges_where_b_ends() -> None:
    a = _body()
    b = _body()
    b["messages"] = b["messages"][:1]
    divergence = diff_requests(a, b)
    assert divergence is not None
    assert (divergence.reason, divergence.block, divergence.where_a, divergence.where_b) == (
        "messages_changed",
        len(TOOLS) + 2,
        "messages.1.content",
        "",
    )
    assert divergence.text_b == ""
    assert divergence.text_a == "It is sunny in Paris."
    assert "B ends before A's messages.1.content" in divergence.detail


def test_another_role_or_block_type_is_named() -> None:
    b = _body()
    b["messages"][2]["role"] = "assistant"
    divergence = diff_requests(_body(), b)
    assert divergence is not None
    assert (divergence.block, divergence.char, divergence.detail) == (
        len(TOOLS) + 3,
        0,
        "same text, other fields differ: role",
    )
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    c = _body()
    c["messages"][2]["content"] = [image]
    divergence = diff_requests(_body(), c)
    assert divergence is not None
    assert divergence.detail == "block type text -> image"
    assert (divergence.where_a, divergence.where_b) == ("messages.2.content", "messages.2.content.0")


def test_openai_chat_system_messages_are_the_system_section() -> None:
    a: dict[str, Any] = {
        "model": "gpt-4o",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    }
    b = copy.deepcopy(a)
    b["messages"][0]["content"] = "Be very brief."
    divergence = diff_requests(a, b)
    assert divergence is not None
    assert (divergence.reason, divergence.block, divergence.where_b, divergence.char) == (
        "system_changed",
        0,
        "messages.0.content",
        3,
    )


def test_openai_responses_instructions_and_input() -> None:
    a = {"model": "gpt-4o", "instructions": "Be brief.", "input": [{"role": "user", "content": "Hi"}]}
    b = {**a, "instructions": "Be kind."}
    divergence = diff_requests(a, b)
    assert divergence is not None
    assert (divergence.reason, divergence.where_a) == ("system_changed", "instructions")
    c = {**a, "input": [{"role": "user", "content": "Hello"}]}
    divergence = diff_requests(a, c)
    assert divergence is not None
    assert (divergence.reason, divergence.where_a) == ("messages_changed", "input.0.content")


@pytest.mark.parametrize(
    ("body", "dialect"),
    [
        ({"model": "m", "input": "hi"}, "openai_responses"),
        ({"model": "m", "messages": [{"role": "system", "content": "s"}]}, "openai_chat"),
        ({"model": "m", "messages": [{"role": "developer", "content": "s"}]}, "openai_chat"),
        ({"model": "m", "messages": [{"role": "tool", "content": "s", "tool_call_id": "c"}]}, "openai_chat"),
        (
            {"model": "m", "messages": [], "tools": [{"type": "function", "function": {"name": "f"}}]},
            "openai_chat",
        ),
        (
            {"model": "m", "system": "s", "messages": [{"role": "user", "content": "hi"}]},
            "anthropic_messages",
        ),
        ({"model": "m", "messages": "not a list"}, "anthropic_messages"),
    ],
)
def test_guess_dialect(body: dict[str, Any], dialect: str) -> None:
    assert guess_dialect(body) == dialect


# --- load_request -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "wrap",
    [
        lambda body: body,
        lambda body: {"request": body, "response": {"id": "msg_1"}},
        lambda body: {"request_body": body},
        lambda body: {"body": json.dumps(body)},
        lambda body: {
            "request": {"method": "POST", "url": "https://api.anthropic.com/v1/messages", "body": body}
        },
        lambda body: {"request": {"method": "POST", "headers": {}, "content": json.dumps(body)}},
        lambda body: {"custom_id": "r1", "params": body},
    ],
)
def test_load_request_reads_a_body_or_a_recorded_call(tmp_path: Path, wrap: Any) -> None:
    path = tmp_path / "call.json"
    path.write_text(json.dumps(wrap(_body())), encoding="utf-8")
    assert load_request(path) == _body()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not a JSON document"),
        ('{"response": {"id": "msg_1"}}', "no request body"),
        ("[1, 2]", "no request body"),
        ('{"request": "not json either"}', "no request body"),
    ],
)
def test_load_request_errors_name_the_file(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "broken.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=message) as caught:
        load_request(path)
    assert str(path) in str(caught.value)


def test_load_request_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.json"
    with pytest.raises(ValueError, match="cannot read") as caught:
        load_request(path)
    assert str(path) in str(caught.value)


# --- the commands -------------------------------------------------------------------------------------


def _cli(argv: list[str]) -> tuple[int, str]:
    """``cachekit ARGV``: the exit status, and what it printed (stdout, then stderr, where an error goes)."""
    from cachekit.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        status = main(argv, out=out)
    return status, out.getvalue() + err.getvalue()


def _write(path: Path, value: Any) -> str:
    path.write_text(json.dumps(value), encoding="utf-8")
    return str(path)


def test_cli_diff_exit_codes_and_output(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.json", _body())
    b_body = _body()
    b_body["messages"][1]["content"] = "It is raining in Paris."
    b = _write(tmp_path / "b.json", {"request": b_body})
    longer = _body()
    longer["messages"].append({"role": "assistant", "content": "Cloudy."})
    c = _write(tmp_path / "c.json", longer)

    status, output = _cli(["diff", a, c])
    assert (status, output) == (0, "no divergence: B reads all of A's prefix\n")

    status, output = _cli(["diff", a, b])
    assert status == 1
    assert "reason:  messages_changed" in output
    assert f"block:   {len(TOOLS) + 2} (A: messages.1.content, B: messages.1.content)" in output
    assert "char:    6" in output
    assert 'A:       "It is sunny in Paris."' in output
    assert 'B:       "It is raining in Paris."' in output

    status, output = _cli(["diff", "--json", a, b])
    assert status == 1
    reported = json.loads(output)
    assert reported["reason"] == "messages_changed"
    assert reported["char"] == 6
    assert set(reported) == {f.name for f in Divergence.__dataclass_fields__.values()}
    assert _cli(["diff", "--json", a, c]) == (0, "null\n")


def test_cli_diff_bad_input_is_status_2_naming_the_file(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.json", _body())
    bad = tmp_path / "bad.json"
    bad.write_text("{oops", encoding="utf-8")
    status, output = _cli(["diff", a, str(bad)])
    assert status == 2
    assert str(bad) in output
    status, output = _cli(["diff", str(tmp_path / "missing.json"), a])
    assert status == 2
    assert "missing.json" in output


def test_cli_lint_reports_findings_across_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = _body(system="Now: 2026-12-03T10:00:00Z. Be brief.")
    second = copy.deepcopy(first)
    second["tools"] = list(reversed(second["tools"]))
    second["messages"][0]["content"] = "A first message of its own."  # still linted as the same conversation
    paths = [_write(tmp_path / "1.json", first), _write(tmp_path / "2.json", second)]
    status, output = _cli(["lint", *paths])
    assert status == 1
    assert f'{paths[0]}: timestamp at system (block 3, char 5) "2026-12-03T10:00:00Z"' in output
    assert f"{paths[1]}: tools_reordered at tools.0 (block 0)" in output
    assert f"{paths[1]}: messages_changed at messages.0.content" in output
    assert output.endswith("4 findings in 2 files\n")
    assert capsys.readouterr().err == ""  # the findings are printed once, not also logged to stderr

    status, output = _cli(["lint", "--json", *paths])
    rows = json.loads(output)
    assert [(row["file"], row["code"]) for row in rows] == [
        (paths[0], "timestamp"),
        (paths[1], "timestamp"),
        (paths[1], "tools_reordered"),
        (paths[1], "messages_changed"),
    ]
    assert rows[0]["offset"] == first["system"].index("2026")


def test_cli_lint_clean_files_custom_patterns_and_bad_input(tmp_path: Path) -> None:
    clean = _write(tmp_path / "clean.json", _body())
    grown = _body()
    grown["messages"].append({"role": "assistant", "content": "Cloudy."})
    assert _cli(["lint", clean, _write(tmp_path / "grown.json", grown)]) == (0, "0 findings in 2 files\n")

    status, output = _cli(["lint", "--pattern", r"weather\s+assistant", clean])
    assert status == 1
    assert "custom at system (block 3, char 10)" in output  # after "You are a "

    assert _cli(["lint", "--pattern", "(unclosed", clean])[0] == 2
    status, output = _cli(["lint", clean, str(tmp_path / "missing.json")])
    assert status == 2
    assert "missing.json" in output


def test_cachekit_main_knows_diff_and_lint(tmp_path: Path) -> None:
    from cachekit.cli import main

    a = _write(tmp_path / "a.json", _body())
    out = io.StringIO()
    assert main(["diff", a, a], out=out) == 0
    assert out.getvalue() == "no divergence: B reads all of A's prefix\n"
    out = io.StringIO()
    assert main(["lint", a], out=out) == 0
    assert out.getvalue() == "0 findings in 1 file\n"


def test_a_dialect_the_bodies_are_not_written_in_is_an_error_not_no_divergence() -> None:
    """Read as Chat Completions, two Anthropic bodies that differ in their top-level system prompt
    would show no divergence (that dialect has no such field): a wrong answer, so it is refused."""
    a, b = _body(), _body(system="You are a pirate. Answer in one sentence.")
    assert diff_requests(a, b, dialect="anthropic_messages") is not None  # the dialect that fits
    with pytest.raises(
        ValueError, match=r"^A: the request is not a openai_chat request: .*top-level 'system'"
    ):
        diff_requests(a, b, dialect="openai_chat")
    with pytest.raises(ValueError, match="no 'input'"):
        diff_requests(a, b, dialect="openai_responses")
    chat = {
        "model": "gpt-4o",
        "messages": [{"role": "system", "content": "Hi"}, {"role": "user", "content": "Yo"}],
    }
    assert diff_requests(chat, chat, dialect="openai_chat") is None
    with pytest.raises(ValueError, match="OpenAI Chat Completions"):
        diff_requests(chat, chat, dialect="anthropic_messages")

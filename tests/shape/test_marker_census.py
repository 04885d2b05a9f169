"""The caller's ``cache_control`` markers are counted wherever the API accepts one, at any depth.

A marker on a text block inside a document's ``source.content``, on a ``search_result`` inside a
``tool_result`` (or on that search result's own text), on a document inside a ``web_fetch_result``
... counts against the limit of 4 and takes part in the 1h-before-5m order exactly like one on a
message block. The planner must leave a request that already carries 4 of them as it is, and never
put a 1-hour marker after a 5-minute one of the caller's, however deep that one sits; the local
backend, which answers like the API, refuses a request that breaks either rule.

Where markers may sit is read from the ``anthropic`` SDK's own param types (tests/sdk_shapes.py),
not from a list kept here. The regression tests run the real SDK clients, sync and async, against
the local backend, and check the bodies that reached it with a marker count of their own.
"""

from __future__ import annotations

import typing
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import orjson
import pytest

import cachekit
from cachekit.cache import Cache
from cachekit.local import LocalBackend, LocalTransport, ManualClock
from cachekit.local.parse import parse
from cachekit.local.scripted import ByteTokenizer
from cachekit.providers.cache_rules import cache_rules
from cachekit.shape.blocks import prompt_blocks
from cachekit.shape.planner import PlanError, Recall, plan_breakpoints
from cachekit.testing import LocalAPI
from tests import sdk_shapes
from tests.conftest import SDK, Harness

MODEL = "claude-sonnet-4-5"
POLICY = " ".join(
    f"Rule {i}: answer from the booking system only, never guess clause {i}." for i in range(150)
)
TOOLS = [
    {
        "name": "lookup",
        "description": "Looks up a booking.",
        "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
    }
]


def _mark(ttl: str = "5m") -> dict[str, str]:
    return {"type": "ephemeral"} if ttl == "5m" else {"type": "ephemeral", "ttl": ttl}


def _text(text: str, ttl: str | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": text}
    if ttl is not None:
        block["cache_control"] = _mark(ttl)
    return block


def _doc(source: dict[str, Any]) -> dict[str, Any]:
    return {"type": "document", "title": "Terms", "source": source}


def _document(text: str, ttl: str) -> dict[str, Any]:
    """A document whose source is content blocks, the first marked."""
    return _doc({"type": "content", "content": [_text(text, ttl)]})


def _search_result(text: str, ttl: str | None) -> dict[str, Any]:
    """A search result whose text is marked (unless ``ttl`` is ``None``)."""
    return {"type": "search_result", "source": "kb://7", "title": "Booking 7", "content": [_text(text, ttl)]}


def _conversation(ttl: str = "5m") -> list[dict[str, Any]]:
    """Four markers of the caller's, every one nested inside a message block."""
    return [
        {
            "role": "user",
            "content": [
                _document("Bookings are refundable for 24 hours.", ttl),
                _search_result("Booking 7: paid, Paris, two nights.", ttl),
                _text("Can booking 7 still be refunded?"),
            ],
        },
        {
            "role": "assistant",
            "content": [
                _text("Let me look it up."),
                {"type": "tool_use", "id": "t1", "name": "lookup", "input": {"id": "7"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [
                        _search_result("Booked 30 hours ago.", ttl),
                        _document("Refunds after 24 hours need a manager.", ttl),
                    ],
                }
            ],
        },
    ]


def _ttls(body: dict[str, Any]) -> list[str]:
    return [str(control.get("ttl", "5m")) for _, control in sdk_shapes.markers(body)]


# -- the real SDKs against the local backend ------------------------------------------------------


class _Recording(LocalTransport):
    """The local backend's transport, keeping every request body that reaches it."""

    def __init__(self, backend: LocalBackend) -> None:
        super().__init__(backend)
        self.bodies: list[dict[str, Any]] = []

    def handle_request(self, request: Any) -> Any:
        self.bodies.append(orjson.loads(request.read()))
        return super().handle_request(request)

    async def handle_async_request(self, request: Any) -> Any:
        self.bodies.append(orjson.loads(await request.aread()))
        return await super().handle_async_request(request)


class _Setup(Harness):
    """A local backend on a manual clock, its recording transport, and SDK clients on it (the
    harness's event loop and client bookkeeping; its fake upstream is not used)."""

    def __init__(self, mode: str) -> None:
        super().__init__(mode)
        self.clock = ManualClock()
        self.local = LocalAPI(LocalBackend(clock=self.clock))
        self.transport = _Recording(self.local.backend)

    def client(self, *, planned: bool = True) -> SDK:
        """cachekit's drop-in on a cache planning breakpoints (on the same clock), or the plain SDK."""
        cache: Cache | bool = False
        if planned:
            config = cachekit.CacheConfig(
                store="memory://", enabled=False, ledger=False, price_as="anthropic"
            )
            cache = Cache(config, clock=self.clock)
        if self._loop is None:
            http: Any = httpx2.Client(transport=self.transport)
            client: Any = self.local.anthropic(cache=cache, http_client=http)
        else:
            http = httpx2.AsyncClient(transport=self.transport)
            client = self.local.async_anthropic(cache=cache, http_client=http)
        sdk = SDK(client, self._loop)
        self._clients.append(sdk)
        return sdk

    def close(self) -> None:
        super().close()
        self.local.close()
        self.local.backend.close()


@pytest.fixture(params=["sync", "async"])
def setup(request: pytest.FixtureRequest) -> Iterator[_Setup]:
    made = _Setup(request.param)
    yield made
    made.close()


def _create(sdk: SDK, messages: list[dict[str, Any]]) -> Any:
    return sdk.call(
        "messages.with_raw_response.create",
        model=MODEL,
        max_tokens=8,
        system=POLICY,
        tools=TOOLS,
        messages=messages,
    )


def test_four_markers_at_any_depth_leave_as_four(setup: _Setup) -> None:
    messages = _conversation()
    sent_by_caller = sdk_shapes.markers({"messages": messages})
    assert len(sent_by_caller) == 4  # the test's own count of what the caller wrote
    raw = _create(setup.client(), messages)
    assert raw.status_code == 200
    assert raw.headers["x-cachekit-breakpoints"] == "none"
    (sent,) = setup.transport.bodies
    assert sdk_shapes.markers(sent) == sent_by_caller  # 4 left, the caller's, unchanged


def test_after_a_gap_no_one_hour_marker_follows_the_callers_five_minute_one(setup: _Setup) -> None:
    client = setup.client()
    # One marker of the caller's (5 minutes), inside a document's content source.
    first: list[dict[str, Any]] = [
        {"role": "user", "content": [_document("Bookings are refundable for 24 hours.", "5m"), _text("Hi")]}
    ]
    assert _create(client, first).status_code == 200
    setup.clock.advance(360)  # the same prefix comes back after more than 5 minutes: 1h is worth it
    second = [*first, {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Refund 7?"}]
    raw = _create(client, second)
    assert raw.status_code == 200
    # The gap was seen: the system prompt, before the caller's 5m marker, gets a 1-hour one; the end
    # of the conversation, after it, a 5-minute one.
    assert raw.headers["x-cachekit-breakpoints"] == "system=1h/system, messages.2.content=5m/conversation"
    assert _ttls(setup.transport.bodies[-1]) == ["1h", "5m", "5m"]  # the caller's in the middle


def test_the_backend_refuses_a_fifth_marker_at_any_depth(setup: _Setup) -> None:
    plain = setup.client(planned=False)
    messages = _conversation()
    messages[0]["content"][2] = _text("Can booking 7 still be refunded?", "5m")  # the fifth
    with pytest.raises(anthropic.BadRequestError, match=r"A maximum of 4 blocks .* Found 5"):
        _create(plain, messages)


def test_the_backend_refuses_one_hour_after_a_nested_five_minutes(setup: _Setup) -> None:
    plain = setup.client(planned=False)
    messages = [
        {
            "role": "user",
            "content": [_document("Bookings are refundable for 24 hours.", "5m"), _text("Hi", "1h")],
        }
    ]
    with pytest.raises(anthropic.BadRequestError, match="ttl='1h' cache_control block must not come after"):
        _create(plain, messages)


def test_a_marker_moved_inside_the_conversation_leaves_the_prefix_as_it_was(setup: _Setup) -> None:
    """An agent that marks the newest search result each turn: the earlier result, its marker gone,
    is the same prompt, so the second request reads what the first one wrote."""
    plain = setup.client(planned=False)
    first = [{"role": "user", "content": [_search_result("Booking 7: paid.", "5m"), _text("Refund?")]}]
    written = plain.run(_create(plain, first).parse()).usage.cache_creation_input_tokens
    assert written > 0
    second: list[dict[str, Any]] = [
        {"role": "user", "content": [_search_result("Booking 7: paid.", None), _text("Refund?")]},
        {"role": "assistant", "content": "Checking."},
        {"role": "user", "content": [_search_result("Booked 30 hours ago.", "5m")]},
    ]
    assert plain.run(_create(plain, second).parse()).usage.cache_read_input_tokens == written
    # The planner sees one prefix too.
    before = prompt_blocks("anthropic_messages", {"messages": first})
    after = prompt_blocks("anthropic_messages", {"messages": second})
    assert [b.content for b in after[: len(before)]] == [b.content for b in before]


# -- the census, over every shape the SDK's types allow ------------------------------------------

RULES = cache_rules("anthropic", MODEL)


def _all_examples() -> list[Any]:
    """(section, path inside the block, block) for every marker path of the SDK's types (stable and
    beta): each a parameter set named after the section, the block's type and the path."""
    found = []
    for section, kinds in (
        ("messages", sdk_shapes.content_types(beta=False) + sdk_shapes.content_types()),
        ("system", sdk_shapes.system_types()),
        ("tools", sdk_shapes.tool_types(named=True)),
    ):
        for kind in kinds:
            found += [
                pytest.param(
                    section, path, block, id=f"{section}-{block.get('type', kind.__name__)}-{path or 'own'}"
                )
                for path, block in sdk_shapes.marker_examples(kind)
            ]
    return found


EXAMPLES = _all_examples()


def _body(section: str, block: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}
    if section == "messages":
        body["messages"] = [{"role": "user", "content": [block]}]
    else:
        body[section] = [block]
    return body


def test_the_sdk_types_have_markers_below_the_top_level() -> None:
    paths = {example.values[1] for example in EXAMPLES}
    # What the census must reach (the SDK as installed): a guard that the type walk itself works.
    assert {"source.content.0", "content.0.content.0", "content.0.source.content.0"} <= paths
    assert len(EXAMPLES) > 60


@pytest.mark.parametrize(("section", "path", "block"), EXAMPLES)
def test_every_marker_the_sdk_allows_is_counted(section: str, path: str, block: Any) -> None:
    body = _body(section, block)
    where = {"messages": "messages.0.content.0", "system": "system.0", "tools": "tools.0"}[section]
    (found,) = [b for b in prompt_blocks("anthropic_messages", body) if b.where == where]
    if path:
        assert (found.marker, found.nested) == (None, ((path, sdk_shapes.MARKER),))
    else:
        assert (found.marker, found.nested) == (sdk_shapes.MARKER, ())
    # The local backend sees the same marker at the same place.
    (segment,) = [s for s in parse("anthropic_messages", body, ByteTokenizer()).segments if s.where == where]
    if path:
        assert (segment.marker, segment.nested) == (None, ((f"{where}.{path}", "5m"),))
    else:
        assert (segment.marker, segment.nested) == ("5m", ())


@pytest.mark.parametrize(
    "kind", sdk_shapes.content_types(beta=False) + sdk_shapes.content_types(), ids=lambda kind: kind.__name__
)
def test_blocks_may_carry_a_marker_exactly_when_the_sdk_gives_them_one(kind: Any) -> None:
    """The planner marks, and the backend accepts a marker on, the block types whose SDK param has a
    cache_control field: no others (a thinking block, an MCP tool listing, ...)."""
    has_field = "cache_control" in typing.get_type_hints(kind)
    body = _body("messages", sdk_shapes.minimal(kind))
    (found,) = [b for b in prompt_blocks("anthropic_messages", body) if b.where == "messages.0.content.0"]
    (segment,) = [
        s for s in parse("anthropic_messages", body, ByteTokenizer()).segments if s.where == found.where
    ]
    assert found.eligible is segment.eligible is has_field


@pytest.mark.parametrize("field", sorted(sdk_shapes.payload_fields()))
def test_a_cache_control_key_in_the_callers_own_json_is_not_a_marker(field: str) -> None:
    """A tool's input (or schema, examples) is the caller's data: a key named cache_control there is
    not a breakpoint, and the planner still places its own markers."""
    data = {"cache_control": {"type": "ephemeral"}, "rows": [{"cache_control": {"type": "ephemeral"}}]}
    block = {"type": "tool_use", "id": "t1", "name": "lookup", "input": {"id": "7"}, field: data}
    body = _body("messages", block)
    (found,) = [b for b in prompt_blocks("anthropic_messages", body) if b.where == "messages.0.content.0"]
    assert found.nested == ()
    assert [p.where for p in _plan(body).placements] == ["messages.0.content.0"]


def test_a_nesting_cachekit_does_not_know_is_counted_too() -> None:
    """The census walks the whole block, so a shape the API adds later needs no change here."""
    future = {
        "type": "text",
        "text": "Hi",
        "annotations": {"parts": [{"note": {"cache_control": _mark("1h")}}]},
    }
    (found,) = prompt_blocks("anthropic_messages", _body("messages", future))
    assert found.nested == (("annotations.parts.0.note", _mark("1h")),)


def _plan(body: dict[str, Any]) -> Any:
    blocks = prompt_blocks("anthropic_messages", body)
    return plan_breakpoints(body, blocks, [2_000] * len(blocks), rules=RULES)


def test_a_fifth_marker_at_any_depth_is_an_error_naming_it() -> None:
    messages = _conversation()
    messages[0]["content"][2] = _text("Can booking 7 still be refunded?", "5m")
    with pytest.raises(
        PlanError, match=r"5 cache_control markers.*messages\.2\.content\.0\.content\.1\.source"
    ):
        _plan({"model": MODEL, "max_tokens": 8, "messages": messages})


def test_a_marker_on_a_block_comes_after_the_markers_inside_it() -> None:
    """After a gap the conversation's end gets 1h; on a block that holds the caller's 5m marker
    (which comes first, inside it) it gets 5m."""

    def placed(ttl: str | None) -> list[tuple[str, str]]:
        source = {"type": "content", "content": [_text("Terms.", ttl), _text("More terms.")]}
        body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": [_doc(source)]}]}
        blocks = prompt_blocks("anthropic_messages", body)
        recall = Recall(conversation_long_gap=True)
        plan = plan_breakpoints(body, blocks, [2_000] * len(blocks), rules=RULES, recall=recall)
        return [(p.where, p.ttl) for p in plan.placements]

    assert placed(None) == [("messages.0.content.0", "1h")]
    assert placed("5m") == [("messages.0.content.0", "5m")]


def test_two_nested_markers_keep_their_own_order() -> None:
    """5m then 1h inside one block is out of order, however the TTLs sort as strings."""
    document = {
        "type": "document",
        "source": {"type": "content", "content": [_text("First.", "5m"), _text("Second.", "1h")]},
    }
    with pytest.raises(PlanError, match=r"messages\.0\.content\.0\.source\.content\.1: a ttl='1h' marker"):
        _plan({"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": [document]}]})

"""Property-based fuzzing of the gateway's parsers and validators.

- gateway/reply/sse.py `iter_events`: any event stream split at any chunk boundaries gives the same
  events, whatever the bytes (it never raises), and well-formed streams give back exactly what
  was encoded (multi-line data, CRLF, comments and other fields included).
- The upstream stream relay, through the real gateway process, with the fake upstream's
  broken-stream knobs (cut connection, no [DONE], error event, malformed JSON, invalid UTF-8,
  slow chunks): the client always gets a well-formed stream that is either complete or ends
  with an error event, never silently truncated.
- Tool-call validation (gateway/guard/tools.py `ToolCatalog`, `check_tool_choice`, and the
  argument rules of gateway/guard/rules.py) with hostile arguments: deep nesting, huge numbers,
  duplicate keys, non-JSON, unicode, NaN: problems are returned, nothing raises, and a call
  judged ok really satisfies its schema.

Deterministic by default (conftest.fuzz_settings); FUZZ_EXAMPLES=5000 for a long run.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import event, given, note
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from gateway.config.guard import ArgumentRule, ToolRule, UndeclaredPolicy
from gateway.guard.problems import Problem
from gateway.guard.schemas import ValidatorCache
from gateway.guard.tools import CheckedCall, ToolCatalog, check_tool_choice
from gateway.guard.undeclared import review_parameters
from gateway.reply import sse
from tests.reliability.fuzz_target import FuzzGateway
from tests.reliability.fuzzing import fuzz_settings
from tests.reliability.jsonfuzz import TEXT, deep_nesting, dumps, plain_value, unicode_value
from tests.reliability.rawhttp import KNOWN_SEEN, Sent
from tests.reliability.warmup import CHAT, JSON_TYPE, send, tenant_a


@pytest.fixture(scope="module")
def fuzz_gateway(shared_fuzz_gateway: FuzzGateway) -> FuzzGateway:
    return shared_fuzz_gateway.for_module()


# --- the SSE parser -----------------------------------------------------------------------


async def _pieces(data: bytes, cuts: list[int]) -> AsyncIterator[bytes]:
    start = 0
    for cut in sorted({c % (len(data) + 1) for c in cuts}):
        yield data[start:cut]
        start = cut
    yield data[start:]


def parse(data: bytes, cuts: list[int]) -> list[list[bytes]]:
    async def collect() -> list[list[bytes]]:
        return [group async for group in sse.iter_events(_pieces(data, cuts))]

    return asyncio.run(collect())


def flat(groups: list[list[bytes]]) -> list[bytes]:
    return [event for group in groups for event in group]


PAYLOAD = st.one_of(
    st.binary(max_size=40).filter(lambda b: b"\n" not in b and b"\r" not in b),
    TEXT.map(lambda s: s.encode()).filter(lambda b: b"\n" not in b and b"\r" not in b),
    st.sampled_from([b"[DONE]", b"{}", b'{"id": "x"}', b"", b" lead", b":colon", b"data: x"]),
)
NOISE = st.sampled_from([b": keep-alive", b":", b"event: message", b"id: 7", b"retry: 1000", b"x"])


@st.composite
def sse_stream(draw: st.DrawFn) -> tuple[bytes, list[bytes]]:
    """Bytes of a well-formed stream, and the data of its events."""
    eol = draw(st.sampled_from([b"\n", b"\r\n"]))
    expected: list[bytes] = []
    out = bytearray()
    for _ in range(draw(st.integers(0, 8))):
        lines = draw(st.lists(PAYLOAD, min_size=1, max_size=3))
        for line in lines:
            if draw(st.integers(0, 4)) == 0:
                out += draw(NOISE) + eol
            sep = draw(st.sampled_from([b"data: ", b"data:"]))
            if sep == b"data:" and line.startswith(b" "):
                sep = b"data: "  # "data: x" and "data:x" mean the same; " x" needs the space
            out += sep + line + eol
        out += eol * draw(st.integers(1, 2))
        expected.append(b"\n".join(lines))
    ending = draw(st.sampled_from(["blank", "line-end", "mid-line"])) if expected else "blank"
    if ending != "blank":  # the stream stops without the last blank line, or mid-line
        while out.endswith(eol * 2):
            del out[-len(eol) :]
        if ending == "mid-line":
            del out[-len(eol) :]
    return bytes(out), expected


CUTS = st.lists(st.integers(0, 10_000), max_size=12)


@fuzz_settings(400)
@given(stream=sse_stream(), cuts=CUTS)
def test_sse_events_survive_any_chunking(stream: tuple[bytes, list[bytes]], cuts: list[int]):
    data, expected = stream
    assert flat(parse(data, cuts)) == expected


@fuzz_settings(400)
@given(
    data=st.one_of(
        st.binary(max_size=300),
        st.lists(
            st.sampled_from([b"data: ", b"\n", b"\r\n", b"\r", b"x", b"{", b":", b"\xff"])
        ).map(b"".join),
    ),
    cuts=CUTS,
)
def test_sse_parser_is_total_and_independent_of_chunking(data: bytes, cuts: list[int]):
    """Any bytes: no exception, and the events do not depend on where the network cut them."""
    whole = flat(parse(data, []))
    assert flat(parse(data, cuts)) == whole
    assert all(isinstance(e, bytes) for e in whole)


# --- the upstream stream relay, through the gateway ------------------------------------------

STREAM_KNOBS = st.fixed_dictionaries(
    {},
    optional={
        "cut_after": st.integers(0, 8),
        "no_done": st.booleans(),
        "stream_error_after": st.integers(0, 6),
        "malformed": st.booleans(),
        "invalid_utf8": st.booleans(),
        "words_per_chunk": st.integers(1, 4),
        "chunk_delay_ms": st.sampled_from([0, 0, 1, 5]),
        "first_byte_ms": st.sampled_from([0, 0, 2]),
        "content": st.one_of(TEXT, st.sampled_from(["", "one", "a b c d e f g", "data: [DONE]"])),
        "reasoning_content": st.none() | TEXT,
    },
)


def _stream_chunks(knobs: dict[str, Any], text: str) -> int:
    """How many data events the fake upstream sends before [DONE] for this answer."""
    content = knobs.get("content")
    answer = f"Echo: {text}" if content is None else content
    words = answer.split(" ") if answer else []
    step = max(1, knobs.get("words_per_chunk", 1))
    reasoning = 1 if knobs.get("reasoning_content") else 0
    return 1 + reasoning + math.ceil(len(words) / step) + 1


@fuzz_settings(300)
@given(
    knobs=STREAM_KNOBS,
    text=TEXT,
    model=st.sampled_from(["fake-model", "auto"]),
    usage=st.booleans(),
)
def test_broken_upstream_streams_end_well_formed(
    fuzz_gateway: FuzzGateway, knobs: dict[str, Any], text: str, model: str, usage: bool
):
    """Whatever the upstream stream does, the client's stream is well-formed (every chunk valid,
    [DONE] last), and it is complete unless it ends with an error event: a cut, a missing
    [DONE], a broken chunk never pass for a finished answer."""
    text = f"stream {text}"
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "stream": True,
        "fake": knobs,
    }
    if usage:
        body["stream_options"] = {"include_usage": True}
    headers = [JSON_TYPE, tenant_a(), (b"Cache-Control", b"no-store")]
    reply, events = send(fuzz_gateway, Sent(b"POST", CHAT, headers, dumps(body)))
    event(f"status={reply.status}")
    if reply.status != 200:
        return  # an OpenAI error before the stream started (checked by send)
    assert isinstance(events, list), reply.describe()
    failed = bool(events) and "error" in events[-1]
    event(f"ended with {'an error event' if failed else 'the answer'}")
    if failed or reply.header("x-gateway-level") == "4":
        return
    chunks = _stream_chunks(knobs, text)
    faults = [
        knobs.get("cut_after") is not None and knobs["cut_after"] < chunks,
        knobs.get("stream_error_after") is not None and knobs["stream_error_after"] < chunks,
        knobs.get("malformed") and chunks > 1,
        knobs.get("invalid_utf8") and chunks > 1,
        knobs.get("no_done"),
    ]
    note(f"upstream chunks: {chunks}, faults: {faults}")
    assert not any(faults), f"a broken upstream stream passed for a complete answer: {events}"
    content = "".join(
        choice["delta"].get("content") or "" for e in events for choice in e.get("choices", [])
    )
    expected = knobs.get("content")
    assert content == (f"Echo: {text}" if expected is None else expected)


# --- tool-call validation --------------------------------------------------------------------

TOOL_SCHEMAS: list[Any] = [
    {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}},
    {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date-time"},
            "day": {"type": "string", "format": "date"},
            "amount": {"type": "number", "minimum": 0, "maximum": 100},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
            "flag": {"type": "boolean"},
            "nested": {"type": "object", "properties": {"a": {"$ref": "#"}}},
        },
        "required": ["amount"],
        "additionalProperties": False,
    },
    {"type": "object", "properties": {"mode": {"enum": ["a", "b", 1, None]}}, "required": ["mode"]},
    {"type": "object", "properties": {"x": {"anyOf": [{"type": "integer"}, {"type": "string"}]}}},
    {"type": "object", "properties": {"x": {"oneOf": [{"type": "number"}, {"type": "boolean"}]}}},
    {"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}},  # unresolvable
    {"type": "object", "properties": {"x": {"$ref": "https://example.invalid/schema"}}},
    {"$ref": "#"},  # a schema that is only a reference to itself
    {"type": "object", "properties": {"r": {"$ref": "#/properties/r"}}},  # a $ref loop
    {"type": "object", "patternProperties": {"^x_": {"type": "integer"}}},
    # undeclared parameters (gateway/guard/undeclared.py): nested, composed, partly open
    {
        "type": "object",
        "properties": {
            "user_id": {"type": "integer"},
            "addr": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
    {"allOf": [{"properties": {"a": {}}}, {"properties": {"b": {"type": "integer"}}}]},
    {
        "type": "object",
        "properties": {"q": {"type": "string"}},
        "patternProperties": {"^x_": {}},
        "additionalProperties": {"type": "object", "properties": {"k": {"type": "integer"}}},
    },
    {"type": "object", "properties": {"s": {"type": "string", "pattern": "^[a-z]{1,8}$"}}},
    {"type": "string"},  # not an object
    {"type": "nonsense"},  # not valid JSON Schema
    {"type": "object", "properties": {"x": {"type": "integer", "multipleOf": 1e-308}}},
    {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"},
    {"$schema": "https://example.invalid/unknown-draft", "type": "object"},
    True,
    False,
    None,
    [],
    "schema",
    {},
]
RULES = {
    "lookup": ToolRule(
        arguments={
            "q": ArgumentRule(pattern="^[a-z ]*$"),
            "n": ArgumentRule(minimum=0, maximum=10),
            "mode": ArgumentRule(enum=["a", "b"]),
            "when": ArgumentRule(not_in_past=True),
            "nested.a": ArgumentRule(minimum=1),
        }
    )
}
HOSTILE_ARGUMENTS = [
    "",
    "   ",
    "{",
    "}",
    "null",
    "[]",
    "0",
    '"{}"',
    "{}",
    '{"q": "a", "q": 5}',
    '{"q": "a", "q": "b"}',
    '{"amount": 1e400}',
    '{"amount": -1e400}',
    '{"amount": NaN}',
    '{"amount": Infinity}',
    '{"amount": 123456789012345678901234567890}',
    '{"amount": "12.5"}',
    '{"amount": " 7 "}',
    '{"amount": "1e999"}',
    '{"amount": "NaN"}',
    '{"amount": 5, "when": "yesterday"}',
    '{"amount": 5, "when": "2024-02-30T25:61:00Z"}',
    '{"amount": 5, "day": "31/12/2024"}',
    '{"q": "\\ud800"}',
    '{"q": "\\udfff\\ud800"}',
    '{"q": "\u0000"}',
    '{"q": "\\u0000"}',
    '{"\\ud800": 1}',
    "{'q': 'single quotes'}",
    '{"q": "a"} trailing',
    '{"q": "a"}{"q": "b"}',
    '```json\n{"q": "fenced"}\n```',
    '{"mode": "c"}',
    '{"mode": []}',
    '{"n": ' + "9" * 5000 + "}",
    '{"n": 1' + "0" * 400 + "}",
    '{"n": -0}',
    '{"n": 1.0}',
    '{"tags": ["a", "b", "c", "d"]}',
    '{"nested": ' + '{"a": ' * 60 + "1" + "}" * 60 + "}",
    '{"nested": ' + '{"a": ' * 400 + "1" + "}" * 400 + "}",
    '{"x": ' + "[" * 900 + "]" * 900 + "}",
    "[" * 5000 + "]" * 5000,
    '{"a":' * 5000 + "1" + "}" * 5000,
    '{"q": "' + "é" * 10_000 + '"}',
    '{"s": "' + "a" * 5000 + '"}',
    "\ufeff{}",
    '{"x_1": 1, "x_2": "two"}',
    '{"userId": "7", "addr": {"City": "x", "zip": 1}, "q": "a", "Q": "b"}',
    '{"a": 1, "b": "2", "c": 3, "other": {"k": "1", "j": 2}}',
]


@st.composite
def hostile_arguments(draw: st.DrawFn) -> Any:
    return draw(
        st.one_of(
            st.sampled_from(HOSTILE_ARGUMENTS),
            TEXT,
            st.dictionaries(TEXT, plain_value(), max_size=4).map(json.dumps),
            plain_value().map(lambda v: json.dumps(v)),
            deep_nesting([2, 50, 129, 1000, 5000]).map(lambda raw: bytes(raw).decode()),
            st.dictionaries(TEXT, unicode_value(), max_size=3).map(
                lambda v: dumps(v).decode("utf-8", "surrogateescape")
            ),
            plain_value(),  # not a string at all
            st.none(),
        )
    )


@st.composite
def tool_list(draw: st.DrawFn) -> list[Any]:
    names = ["lookup", "book", "get_weather"]
    tools: list[Any] = []
    for name in draw(st.lists(st.sampled_from(names), min_size=1, max_size=4)):
        function: dict[str, Any] = {"name": name}
        if draw(st.integers(0, 5)):
            function["parameters"] = draw(st.sampled_from(TOOL_SCHEMAS))
        tools.append({"type": "function", "function": function})
    if draw(st.integers(0, 4)) == 0:  # odd entries next to the real ones
        tools.append(
            draw(st.sampled_from([None, 5, "tool", {}, {"type": "custom"}, {"function": 3}]))
        )
    return tools


def _call(draw: st.DrawFn, names: list[str]) -> dict[str, Any]:
    odd = st.sampled_from(["undeclared", "LOOKUP", "look_up", "", None, 5])
    name = draw(st.sampled_from(names) if names and draw(st.integers(0, 4)) else odd)
    call: dict[str, Any] = {"id": "call_1", "type": "function", "function": {"name": name}}
    if draw(st.integers(0, 9)):
        call["function"]["arguments"] = draw(hostile_arguments())
    if draw(st.integers(0, 9)) == 0:
        call = draw(
            st.sampled_from([{}, {"type": "custom"}, {"function": None}, {"function": "f"}])
        )
    return call


def _catalog(tools: list[Any], clean: bool, undeclared: UndeclaredPolicy = "repair") -> ToolCatalog:
    return ToolCatalog.from_request(
        tools, RULES, clean, undeclared=undeclared, cache=ValidatorCache(64)
    )


@fuzz_settings(500)
@given(
    data=st.data(),
    tools=tool_list(),
    clean=st.booleans(),
    undeclared=st.sampled_from(["repair", "strip", "allow"]),
)
def test_tool_call_checks_return_problems_and_never_raise(
    data: st.DataObject, tools: list[Any], clean: bool, undeclared: UndeclaredPolicy
):
    catalog = _catalog(tools, clean, undeclared)
    call = _call(data.draw, catalog.names)
    try:
        checked = catalog.check(call)
    except RecursionError:  # test_deeply_nested_arguments_are_a_problem_not_an_exception
        KNOWN_SEEN["deep-tool-arguments-raise"] += 1
        event("known bug: RecursionError")
        return
    assert isinstance(checked, CheckedCall)
    assert all(isinstance(p, Problem) and isinstance(p.message, str) for p in checked.problems)
    event("ok" if checked.ok else f"problem: {checked.problems[0].kind}")
    function = checked.call.get("function") if isinstance(checked.call, dict) else None
    if (
        not checked.ok
        or not isinstance(function, dict)
        or call.get("type", "function") != "function"
    ):
        return
    # A call judged ok sends on arguments that are a JSON object satisfying the tool's schema.
    tool = catalog.tools[function["name"]]
    sent_on = json.loads(function["arguments"]) if function.get("arguments") else {}
    if not isinstance(sent_on, dict):  # test_arguments_must_be_an_object_whatever_the_schema
        KNOWN_SEEN["non-object-arguments-ok"] += 1
        event("known bug: non-object arguments judged ok")
        return
    if tool.schema.validator is not None and not checked.warnings:
        errors = list(Draft202012Validator(tool.schema.schema).iter_errors(sent_on))
        assert not errors, (function, [e.message for e in errors])
        if undeclared != "allow":  # and it takes only the parameters the schema declares
            left = review_parameters(sent_on, tool.schema.schema, "repair", rename=False)
            assert not left.undeclared, (function, left.undeclared)


@fuzz_settings(300)
@given(
    tool_choice=st.one_of(
        st.sampled_from(["none", "auto", "required", "", None, 5, [], {}]),
        st.fixed_dictionaries(
            {"type": st.sampled_from(["function", "allowed_tools", "custom", 1])},
            optional={
                "function": st.one_of(
                    st.none(), TEXT, st.fixed_dictionaries({"name": TEXT | st.none()})
                ),
                "name": TEXT,
                "allowed_tools": st.one_of(
                    st.none(),
                    TEXT,
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "mode": st.sampled_from(["auto", "required", 3]),
                            "tools": st.lists(
                                plain_value()
                                | st.just({"type": "function", "function": {"name": "lookup"}}),
                                max_size=3,
                            )
                            | TEXT,
                        },
                    ),
                ),
            },
        ),
    ),
    calls=st.lists(
        st.one_of(
            st.fixed_dictionaries(
                {
                    "function": st.one_of(
                        st.none(),
                        TEXT,
                        st.fixed_dictionaries({"name": TEXT | st.none() | st.integers()}),
                    )
                }
            ),
            st.just({}),
        ),
        max_size=3,
    ),
    content=st.none() | TEXT,
)
def test_tool_choice_checks_never_raise(tool_choice: Any, calls: list[Any], content: str | None):
    problems = check_tool_choice(tool_choice, calls, content)
    assert all(isinstance(p, Problem) for p in problems)


@fuzz_settings(200)
@given(tools=st.one_of(st.none(), plain_value(), st.lists(plain_value(), max_size=4)))
def test_catalogs_of_any_tools_value(tools: Any):
    """`tools` is checked loosely by the wire model: the catalog takes whatever comes."""
    if tools is not None and not isinstance(tools, list | tuple):
        tools = [tools]
    catalog = _catalog(tools, True)
    checked = catalog.check({"type": "function", "function": {"name": "lookup", "arguments": "{}"}})
    assert isinstance(checked, CheckedCall)


# --- found by the fuzzing: fail until fixed ---------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    ["[" * 5000 + "]" * 5000, '{"a":' * 5000 + "1" + "}" * 5000],
    ids=["arrays", "objects"],
)
def test_deeply_nested_arguments_are_a_problem_not_an_exception(arguments: str) -> None:
    """gateway/guard/tools.py ToolCatalog._parse reads arguments with cleaning.strict_loads
    (json.loads), which raises RecursionError past ~1000 levels; _parse catches only
    JSONDecodeError and ValueError, so check() raises instead of reporting invalid_json.
    Expected: a Problem (invalid_json), as for any other unreadable arguments."""
    catalog = _catalog([{"type": "function", "function": {"name": "lookup"}}], clean=True)
    checked = catalog.check(
        {"type": "function", "function": {"name": "lookup", "arguments": arguments}}
    )
    assert not checked.ok and checked.problems[0].kind == "invalid_json"


def test_deeply_nested_tool_arguments_through_the_gateway(fuzz_gateway: FuzzGateway) -> None:
    """The same through HTTP: the model's tool call carries 5000 nested arrays as arguments.
    Expected: the guard's usual handling of invalid arguments (repair, then strip), an answer
    or an upstream error, never a 500."""
    body = {
        "model": "fake-model",
        "messages": [{"role": "user", "content": f"deep {uuid.uuid4().hex[:6]}"}],
        "tools": [{"type": "function", "function": {"name": "lookup"}}],
        "fake": {
            "replies": [{"tool_calls": [{"name": "lookup", "arguments": "[" * 5000 + "]" * 5000}]}]
        },
    }
    from tests.reliability.rawhttp import exchange

    reply = exchange(fuzz_gateway.port, Sent(b"POST", CHAT, [JSON_TYPE, tenant_a()], dumps(body)))
    assert reply is not None and reply.status != 500, reply and reply.describe()


def test_a_catastrophic_pattern_in_a_tool_schema_does_not_stall() -> None:
    """A request's tool schema may carry any `pattern`; jsonschema checks it with Python's
    backtracking `re` on the event loop (gateway/guard/schemas.py CompiledSchema.errors), so
    "^(a+)+$" against 26 a's and a "!" takes ~2 s, 32 a's over a minute, and every request of
    every tenant waits meanwhile. Expected: patterns bounded (length/time, or a non-backtracking
    engine) or validation off the event loop: this check in well under half a second."""
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(a+)+$"}}}
    catalog = _catalog(
        [{"type": "function", "function": {"name": "lookup", "parameters": schema}}], True
    )
    call = {
        "type": "function",
        "function": {"name": "lookup", "arguments": '{"a": "' + "a" * 26 + '!"}'},
    }
    started = time.process_time()  # CPU, all threads: other processes cannot inflate it
    checked = catalog.check(call)
    took = time.process_time() - started
    assert not checked.ok
    assert took < 0.5, f"one tool-call check took {took:.1f} s of CPU"


NON_OBJECT_ARGUMENTS = {
    "string-any-schema": ({}, '"text"'),
    "number-any-schema": ({}, "5"),
    "array-any-schema": ({}, "[1, 2]"),
    "null-any-schema": ({}, "null"),
    "string-string-schema": ({"type": "string"}, '"text"'),
    "array-object-or-array-schema": ({"type": ["object", "array"]}, "[1, 2]"),
}


@pytest.mark.parametrize("case", list(NON_OBJECT_ARGUMENTS))
def test_arguments_must_be_an_object_whatever_the_schema(case: str) -> None:
    """ToolCatalog promises (gateway/guard/tools.py, module and check() docstrings) that
    `arguments` must be a JSON object; but only the tool's own schema is applied
    (ToolCatalog._judge), so with parameters that do not say "type": "object" ({} or a
    non-object type) a string, number, array or null is judged ok and sent on to a client that
    will parse it as an object. Expected: a Problem (invalid_json or schema) for any arguments
    that are not a JSON object."""
    parameters, arguments = NON_OBJECT_ARGUMENTS[case]
    catalog = _catalog(
        [{"type": "function", "function": {"name": "lookup", "parameters": parameters}}], True
    )
    checked = catalog.check(
        {"type": "function", "function": {"name": "lookup", "arguments": arguments}}
    )
    assert not checked.ok, f"{arguments} judged ok for parameters {parameters}"

"""Steering the fake upstream from a fuzzed request (its `"fake": {...}` knobs, which the
gateway forwards as an unknown field): declared tools with a scripted reply calling them with
hostile arguments, and faults (error statuses and bodies, broken and cut streams, odd content,
200s of the wrong shape or content type).
Shared by the chat, Responses and completions fuzz tests."""

from __future__ import annotations

from typing import Any, get_args

from hypothesis import strategies as st

from gateway.testing.fake_shapes import Shape
from tests.reliability.jsonfuzz import TEXT, plain_value

TOOL_SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}},
    {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date-time"},
            "amount": {"type": "number", "minimum": 0, "maximum": 100},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
            "nested": {"type": "object", "properties": {"a": {"type": "object"}}},
        },
        "required": ["amount"],
        "additionalProperties": False,
    },
    {"type": "object", "properties": {"mode": {"enum": ["a", "b"]}}, "required": ["mode"]},
    {"type": "object", "properties": {"x": {"$ref": "#/definitions/nowhere"}}},  # unusable
    {"type": "string"},  # not an object schema
]
HOSTILE_ARGUMENTS = [
    "",
    "{",
    "null",
    "[]",
    '"str"',
    "{}",
    '{"q": "a", "q": 5}',
    '{"amount": 1e400}',
    '{"amount": NaN}',
    '{"amount": -Infinity}',
    '{"amount": 123456789012345678901234567890}',
    '{"amount": "12.5"}',
    '{"amount": 5, "when": "yesterday"}',
    '{"q": "\\ud800"}',
    '{"q": "\u0000"}',
    "{'q': 'single'}",
    '{"q": "a"} trailing',
    '```json\n{"q": "fenced"}\n```',
    '{"mode": "c"}',
    '{"nested": {"a": ' + "[" * 200 + "]" * 200 + "}}",
    '{"n": ' + "9" * 5000 + "}",
    "[" * 5000 + "]" * 5000,
]


@st.composite
def tools_and_calls(draw: st.DrawFn) -> tuple[list[Any], dict[str, Any]]:
    """Declared tools, and a scripted upstream reply calling them with hostile arguments."""
    count = draw(st.integers(1, 3))
    names = [
        draw(st.sampled_from(["lookup", "book", "get_weather", "a.b", "x" * 64]))
        for _ in range(count)
    ]
    tools = [
        {
            "type": "function",
            "function": {"name": name, "parameters": draw(st.sampled_from(TOOL_SCHEMAS))},
        }
        for name in names
    ]
    calls = []
    for _ in range(draw(st.integers(1, 3))):
        arguments: Any = draw(
            st.sampled_from(HOSTILE_ARGUMENTS)
            | TEXT
            | st.dictionaries(TEXT, plain_value(), max_size=3)
        )
        name = draw(st.sampled_from([*names, "undeclared", "LOOKUP", ""]))
        calls.append({"name": name, "arguments": arguments})
    reply = {"tool_calls": calls, "content": draw(st.none() | TEXT)}
    return tools, {"replies": [reply]}


KNOBS = st.fixed_dictionaries(
    {},
    optional={
        "status": st.sampled_from([400, 401, 403, 404, 408, 409, 422, 429, 500, 502, 503, 504]),
        "error_body": st.sampled_from(["json", "html", "empty", "text"]),
        "retry_after": st.sampled_from(
            ["0", "1", "abc", "-5", "1e9", "Wed, 21 Oct 2015 07:28:00 GMT"]
        ),
        "malformed": st.booleans(),
        "invalid_utf8": st.booleans(),
        "cut_after": st.integers(0, 4),
        "no_done": st.booleans(),
        "stream_error_after": st.integers(0, 3),
        # 200s that only look valid (gateway/testing/fake_shapes.py): refused, never relayed
        "shape": st.sampled_from(get_args(Shape)),
        "content_type": st.sampled_from(["text/html", "text/plain", "", "application/json"]),
        "content": st.one_of(TEXT, st.sampled_from(["", " ", "\u0000", "data: [DONE]\n\n"])),
        "words_per_chunk": st.integers(1, 3),
        "reasoning_content": TEXT,
        "extra": st.dictionaries(st.sampled_from(["x_meta", "x_other"]), plain_value(), max_size=2),
    },
)

"""guard/limits.py: what a request's tools may declare; each limit refused, each bound kept."""

from __future__ import annotations

import time
from typing import Any

import pytest

from gateway.config.guard import ToolLimits
from gateway.guard.limits import ToolsOverLimit, light, measure

Json = dict[str, Any]
LIMITS = ToolLimits(max_tools=4, max_schema_bytes=2048, max_patterns=2, max_alternatives=3)


def tool(parameters: Any, name: str = "t") -> Json:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def test_within_every_limit_the_declarations_are_measured() -> None:
    tools = [
        tool({"type": "object", "properties": {"a": {"type": "string", "pattern": "^a$"}}}),
        tool({"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]}, "u"),
        {"type": "web_search"},
    ]
    declared = measure(tools, LIMITS)
    assert (declared.tools, declared.patterns, declared.widest_union) == (2, 1, 3)
    assert 0 < declared.schema_bytes < 2048


@pytest.mark.parametrize(
    ("tools", "says"),
    [
        ([tool({}, f"t{i}") for i in range(5)], "5 tools"),
        ([tool({"enum": ["x" * 100] * 30})], "bytes"),
        (
            [
                tool(
                    {"properties": {"a": {"pattern": "a"}}, "patternProperties": {"b": {}, "c": {}}}
                )
            ],
            "patterns",
        ),
        ([tool({"properties": {"a": {"oneOf": [{}, {}, {}, {}]}}})], "4 alternatives"),
    ],
    ids=["tools", "bytes", "patterns", "oneOf"],
)
def test_each_limit_is_refused_with_a_400_naming_it(tools: list[Json], says: str) -> None:
    with pytest.raises(ToolsOverLimit) as raised:
        measure(tools, LIMITS)
    assert raised.value.status == 400 and raised.value.param == "tools"
    assert raised.value.code == "tools_over_limit"
    assert says in raised.value.message


def test_a_property_named_pattern_is_not_a_pattern() -> None:
    tools = [tool({"properties": {"pattern": {"type": "string"}, "x": {"pattern": "^x$"}}})]
    assert measure(tools, LIMITS).patterns == 1


def test_a_flood_is_refused_before_it_is_walked() -> None:
    """10,000 tools: counted at once, not serialized or walked (and a huge schema is refused
    by its size before its nodes are counted)."""
    tools = [tool({"properties": {"a": {"pattern": "^a$"}}}, f"t{i}") for i in range(10_000)]
    started = time.perf_counter()
    with pytest.raises(ToolsOverLimit):
        measure(tools, LIMITS)
    assert time.perf_counter() - started < 0.01
    wide = [tool({"anyOf": [{"type": "string"}] * 200_000})]
    started = time.perf_counter()
    with pytest.raises(ToolsOverLimit, match="bytes"):
        measure(wide, LIMITS)
    assert time.perf_counter() - started < 0.5


def test_measuring_is_linear_in_the_size_of_the_tools() -> None:
    roomy = ToolLimits(max_schema_bytes=64 * 1024 * 1024, max_patterns=1_000_000)

    def seconds(n: int) -> float:
        tools = [tool({"properties": {f"p{i}": {"pattern": "^a$"} for i in range(n)}})]
        started = time.perf_counter()
        measure(tools, roomy)
        return time.perf_counter() - started

    small, large = min(seconds(5_000) for _ in range(3)), min(seconds(50_000) for _ in range(3))
    assert large < small * 40, (small, large)  # 10x the size: about 10x (quadratic: 100x)


def test_only_small_tools_without_patterns_stay_on_the_loop() -> None:
    plain = [tool({"type": "object", "properties": {"a": {"type": "string"}}})]
    assert light(plain, 2_000)
    assert not light(plain, 100_000)  # a large body: not even serialized here
    assert not light([tool({"properties": {"a": {"pattern": "^a$"}}})], 2_000)
    assert not light([tool({"patternProperties": {"^a": {}}})], 2_000)
    assert not light([tool({"enum": ["x" * 100] * 200})], None)

"""settle() under the undeclared-parameter policies: the model is a scripted list of answers."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from gateway.config.guard import ToolGuardConfig
from gateway.guard.repair import STRIPPED_TEXT, Settled, settle
from gateway.guard.tools import ToolCatalog

Json = dict[str, Any]
WEATHER = {
    "type": "object",
    "properties": {
        "location": {"type": "string"},
        "unit": {"type": "string", "enum": ["Celsius", "Fahrenheit"]},
    },
    "required": ["location"],
}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]


def answer(*arguments: Json) -> Json:
    calls = [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps(a)},
        }
        for i, a in enumerate(arguments)
    ]
    return {"role": "assistant", "content": None, "tool_calls": calls}


def run(first: Json, later: list[Json], **config: Any) -> tuple[Settled, list[list[Json]]]:
    """settle() with a model that answers `later` in turn (its last answer again after that);
    also what it was asked each time."""
    guard = ToolGuardConfig(**config)
    catalog = ToolCatalog.from_request(
        TOOLS, {}, guard.clean, undeclared=guard.undeclared_parameters
    )
    asked: list[list[Json]] = []

    async def ask_again(extra: list[Json]) -> Json:
        asked.append(extra)
        return later[min(len(asked), len(later)) - 1]

    settled = asyncio.run(settle(first, catalog, None, guard, ask_again))
    return settled, asked


def sent(settled: Settled) -> list[Json]:
    return [json.loads(c["function"]["arguments"]) for c in settled.message.get("tool_calls", [])]


EXTRA = answer({"location": "Oslo", "days": 3})
GOOD = answer({"location": "Oslo"})


def test_repair_sends_an_undeclared_parameter_back_to_the_model() -> None:
    settled, asked = run(EXTRA, [GOOD])
    assert settled.outcome == "repaired" and settled.repairs == 1
    assert sent(settled) == [{"location": "Oslo"}]
    feedback = asked[0][-1]["content"]
    assert "'days' is not a parameter of tool 'get_weather'" in feedback
    assert "location, unit" in feedback


def test_when_repair_fails_strip_drops_the_parameter_not_the_call() -> None:
    settled, asked = run(EXTRA, [EXTRA])
    assert len(asked) == 2  # repair_attempts
    assert settled.outcome == "stripped"
    assert sent(settled) == [{"location": "Oslo"}]
    assert [p.kind for p in settled.problems] == ["undeclared_parameter"]
    assert settled.cleanings == ["undeclared_stripped"]
    assert settled.finish_reason == "tool_calls"


def test_when_what_remains_is_invalid_the_call_is_stripped_whole() -> None:
    bad = answer({"place": "Oslo"}, {"location": "Bergen"})  # `location` is required
    settled, _ = run(bad, [bad])
    assert settled.outcome == "stripped"
    assert sent(settled) == [{"location": "Bergen"}]
    only_bad = answer({"place": "Oslo"})
    settled, _ = run(only_bad, [only_bad])
    assert sent(settled) == [] and settled.message["content"] == STRIPPED_TEXT


def test_on_failure_pass_and_error_apply_as_for_any_invalid_call() -> None:
    settled, _ = run(EXTRA, [EXTRA], on_failure="pass")
    assert settled.outcome == "passed" and sent(settled) == [{"location": "Oslo", "days": 3}]
    settled, _ = run(EXTRA, [EXTRA], on_failure="error", repair_attempts=0)
    assert settled.outcome == "failed"


def test_strip_removes_at_once_without_asking() -> None:
    settled, asked = run(EXTRA, [], undeclared_parameters="strip")
    assert asked == [] and settled.outcome == "cleaned"
    assert sent(settled) == [{"location": "Oslo"}]
    assert settled.cleanings == ["undeclared_stripped"]


def test_allow_passes_them_as_before() -> None:
    settled, asked = run(EXTRA, [], undeclared_parameters="allow")
    assert asked == [] and settled.outcome == "ok"
    assert sent(settled) == [{"location": "Oslo", "days": 3}]


def test_renames_and_enum_case_are_cleanings_under_every_policy_but_allow() -> None:
    sloppy = answer({"Location": "Oslo", "unit": "celsius"})
    for policy in ("repair", "strip"):
        settled, asked = run(sloppy, [], undeclared_parameters=policy)
        assert asked == [] and settled.outcome == "cleaned"
        assert sent(settled) == [{"location": "Oslo", "unit": "Celsius"}]
        assert sorted(settled.cleanings) == ["enum_case", "renamed"]
    settled, _ = run(sloppy, [GOOD], undeclared_parameters="allow")
    # allow: `Location` is taken as it is, so `location` is missing and the model repairs it
    assert settled.outcome == "repaired" and sent(settled) == [{"location": "Oslo"}]


def test_a_repair_without_calls_fails_but_under_tool_choice_none_it_is_the_fix() -> None:
    prose = {"role": "assistant", "content": "Oslo is sunny today."}
    settled, asked = run(EXTRA, [prose])
    assert settled.outcome == "stripped" and len(asked) == 1
    assert settled.message["content"] is None, "the repair's prose is not sent"
    assert sent(settled) == [{"location": "Oslo"}], "strip applies to the last call made"
    guard = ToolGuardConfig()
    catalog = ToolCatalog.from_request(TOOLS, {}, guard.clean)

    async def reply_with(answer: Json) -> Settled:
        async def ask_again(extra: list[Json]) -> Json:
            return answer

        return await settle(GOOD, catalog, "none", guard, ask_again)

    fixed = asyncio.run(reply_with(prose))
    assert fixed.outcome == "repaired" and fixed.message == prose
    echo = {"role": "assistant", "content": "Your answer does not follow the rules: tool_choice"}
    parrot = asyncio.run(reply_with(echo))
    assert parrot.outcome == "stripped" and parrot.message["content"] == STRIPPED_TEXT

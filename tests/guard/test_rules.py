from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gateway.config.guard import ArgumentRule, ToolRule
from gateway.guard.rules import HookError, check_rules, load_hook, run_hook

NOW = datetime(2024, 6, 1, 11, 0, tzinfo=UTC)
SEEN: list[tuple[str, Any]] = []


def limit_hook(tool: str, arguments: Any) -> list[str]:
    SEEN.append((tool, arguments))
    if arguments.get("to") == arguments.get("from"):
        return ["$.to: an account cannot transfer to itself"]
    return []


def mutating_hook(tool: str, arguments: Any) -> list[str]:
    arguments.clear()
    return []


def raising_hook(tool: str, arguments: Any) -> list[str]:
    raise RuntimeError("database down")


def none_hook(tool: str, arguments: Any) -> None:
    return None


def wrong_hook(tool: str, arguments: Any) -> int:
    return 3


async def async_hook(tool: str, arguments: Any) -> list[str]:
    return []


NOT_CALLABLE = 5


def messages(rule: ArgumentRule, arguments: Any, path: str = "x", **kw: Any) -> list[str]:
    problems = check_rules("t", ToolRule(arguments={path: rule}), arguments, now=NOW, **kw)
    assert all(p.tool == "t" for p in problems)
    return [p.message for p in problems]


def test_pattern() -> None:
    rule = ArgumentRule(pattern=r"^[A-Z]{3}$")
    assert messages(rule, {"x": "EUR"}) == []
    assert messages(rule, {"x": "euro"}) == [
        "$.x: 'euro' does not match the policy's pattern '^[A-Z]{3}$'"
    ]
    assert messages(rule, {"x": 5}) == ["$.x: 5 is not a string (the policy requires one)"]


def test_minimum_and_maximum() -> None:
    rule = ArgumentRule(minimum=1, maximum=1000.5)
    assert messages(rule, {"x": 1}) == []
    assert messages(rule, {"x": 1000.5}) == []
    assert messages(rule, {"x": 0}) == ["$.x: 0 is less than the minimum of 1"]
    assert messages(rule, {"x": 5000}) == ["$.x: 5000 is greater than the maximum of 1000.5"]
    assert messages(rule, {"x": True}) == ["$.x: true is not a number (the policy requires one)"]


def test_enum_narrower_than_the_schema() -> None:
    rule = ArgumentRule(enum=["EUR", "USD", 1])
    assert messages(rule, {"x": "USD"}) == []
    assert messages(rule, {"x": 1.0}) == []
    assert messages(rule, {"x": True}) == [
        "$.x: true is not one of ['EUR', 'USD', 1] (allowed by policy)"
    ]


@pytest.mark.parametrize(
    ("value", "past"),
    [
        ("2024-06-01", False),
        ("2024-05-31", False),  # still today in the earliest time zone (UTC-12)
        ("2024-05-30", True),
        ("2024-06-01T11:00:01Z", False),
        ("2024-06-01T10:59:59Z", True),
        ("2024-06-01T12:00:00+02:00", True),
    ],
)
def test_not_in_past(value: str, past: bool) -> None:
    found = messages(ArgumentRule(not_in_past=True), {"x": value})
    assert bool(found) is past
    if past:
        assert "is in the past" in found[0]


def test_not_in_past_needs_a_date() -> None:
    assert messages(ArgumentRule(not_in_past=True), {"x": "next friday"}) == [
        "$.x: 'next friday' is not a date (YYYY-MM-DD) or an RFC 3339 date-time"
    ]


def test_values_of_the_wrong_type_are_not_reported_twice() -> None:
    rule = ArgumentRule(maximum=10, pattern="a", not_in_past=True)
    assert messages(rule, {"x": []}, judge_types=False) == []


def test_dotted_paths_and_lists() -> None:
    rule = ArgumentRule(enum=["FR", "DE"])
    args = {
        "address": {"country": "US"},
        "items": [{"sku": "FR"}, {"sku": "IT"}],
        "tags": ["DE", "X"],
    }
    assert messages(rule, args, "address.country") == [
        "$.address.country: 'US' is not one of ['FR', 'DE'] (allowed by policy)"
    ]
    assert messages(rule, args, "items[].sku") == [
        "$.items[1].sku: 'IT' is not one of ['FR', 'DE'] (allowed by policy)"
    ]
    assert messages(rule, args, "items.sku") == messages(rule, args, "items[].sku")
    assert messages(rule, args, "tags") == [
        "$.tags[1]: 'X' is not one of ['FR', 'DE'] (allowed by policy)"
    ]


def test_absent_arguments_are_not_checked() -> None:
    assert messages(ArgumentRule(minimum=1), {"y": 0}) == []
    assert messages(ArgumentRule(minimum=1), "not an object") == []


def test_an_invalid_policy_pattern_is_refused_by_the_config() -> None:
    with pytest.raises(ValueError, match="not a valid regular expression"):
        ArgumentRule(pattern="[")


def test_an_invalid_pattern_that_got_past_the_config_is_a_policy_error() -> None:
    broken = ArgumentRule.model_construct(pattern="[")  # as if validation were skipped
    rule = ToolRule.model_construct(arguments={"x": broken}, hook=None)
    problems = check_rules("t", rule, {"x": "a"}, now=NOW)
    assert [p.kind for p in problems] == ["policy_error"]


def test_hook_problems_are_rule_problems() -> None:
    spec = "tests.guard.test_rules:limit_hook"
    assert run_hook(spec, "transfer", {"from": "a", "to": "b"}) == []
    [problem] = run_hook(spec, "transfer", {"from": "a", "to": "a"})
    assert (problem.kind, problem.tool) == ("rule", "transfer")
    assert problem.message == "$.to: an account cannot transfer to itself"
    assert SEEN[-1] == ("transfer", {"from": "a", "to": "a"})


def test_hooks_get_a_copy() -> None:
    arguments = {"a": 1}
    assert run_hook("tests.guard.test_rules:mutating_hook", "t", arguments) == []
    assert arguments == {"a": 1}


def test_hooks_are_imported_once() -> None:
    assert load_hook("tests.guard.test_rules:none_hook") is load_hook(
        "tests.guard.test_rules:none_hook"
    )
    assert run_hook("tests.guard.test_rules:none_hook", "t", {}) == []


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("tests.guard.test_rules:raising_hook", "raised RuntimeError: database down"),
        ("tests.guard.test_rules:wrong_hook", "returned 3; expected a list of strings"),
        ("tests.guard.test_rules:async_hook", "coroutine function"),
        ("tests.guard.test_rules:NOT_CALLABLE", "is not callable"),
        ("tests.guard.test_rules:missing", "cannot be loaded: AttributeError"),
        ("tests.guard.no_such_module:f", "cannot be loaded: ModuleNotFoundError"),
    ],
)
def test_broken_hooks_are_policy_errors_not_crashes(spec: str, fragment: str) -> None:
    [problem] = run_hook(spec, "t", {})
    assert problem.kind == "policy_error"
    assert fragment in problem.message


def test_load_hook_reports_why() -> None:
    with pytest.raises(HookError, match="cannot be loaded"):
        load_hook("tests.guard.no_such_module:f")

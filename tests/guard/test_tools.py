from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from gateway.config.guard import ArgumentRule, ToolGuardConfig, ToolRule
from gateway.guard.repair import settle
from gateway.guard.schemas import Budget, ValidatorCache
from gateway.guard.tools import CheckedCall, ToolCatalog, check_tool_choice

NOW = datetime(2024, 6, 1, 11, 0, tzinfo=UTC)

TRANSFER = {
    "type": "object",
    "properties": {
        "amount": {"type": "number"},
        "to": {"type": "string"},
        "currency": {"type": "string", "enum": ["EUR", "USD", "GBP"]},
        "on": {"type": "string", "format": "date"},
        "urgent": {"type": "boolean"},
        "beneficiary": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "address": {
                    "type": "object",
                    "properties": {"country": {"type": "string"}},
                    "required": ["country"],
                },
            },
            "required": ["name"],
        },
        "tags": {"type": "array", "items": {"type": "string", "enum": ["rent", "gift"]}},
    },
    "required": ["amount", "to"],
    "additionalProperties": False,
}

TOOLS: list[Any] = [
    {"type": "function", "function": {"name": "transfer_money", "parameters": TRANSFER}},
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
            "strict": False,
        },
    },
    {"type": "function", "function": {"name": "search"}},
]

RULES = {
    "transfer_money": ToolRule(
        arguments={
            "amount": ArgumentRule(minimum=0.01, maximum=1000),
            "currency": ArgumentRule(enum=["EUR", "USD"]),
            "on": ArgumentRule(not_in_past=True),
            "to": ArgumentRule(pattern=r"^[A-Z]{2}\d{2}"),
            "beneficiary.address.country": ArgumentRule(enum=["FR", "DE"]),
        },
        hook="tests.guard.test_tools:transfer_hook",
    ),
}

HOOK_CALLS: list[Any] = []


def transfer_hook(tool: str, arguments: Any) -> list[str]:
    HOOK_CALLS.append(arguments)
    if arguments.get("urgent") and arguments["amount"] > 500:
        return ["urgent transfers are limited to 500"]
    return []


def exploding_hook(tool: str, arguments: Any) -> list[str]:
    raise KeyError("boom")


def call(name: Any, arguments: Any, call_id: str = "call_1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def catalog(clean: bool = True, rules: Any = None, **kw: Any) -> ToolCatalog:
    return ToolCatalog.from_request(
        TOOLS, RULES if rules is None else rules, clean, now=lambda: NOW, **kw
    )


def check(name: Any, arguments: Any, **kw: Any) -> CheckedCall:
    return catalog(**kw).check(call(name, arguments))


def messages(checked: CheckedCall) -> list[tuple[str, str]]:
    return [(p.kind, p.message) for p in checked.problems]


GOOD = json.dumps({"amount": 12.5, "to": "FR76 3000", "currency": "EUR", "on": "2024-06-02"})


def test_a_valid_call_passes_untouched() -> None:
    original = call("transfer_money", GOOD)
    checked = catalog().check(original)
    assert checked.ok
    assert checked.call is original
    assert checked.call["function"]["arguments"] == GOOD  # not re-serialized
    assert checked.arguments == json.loads(GOOD)
    assert checked.changes == ()


def test_declared_names_are_listed() -> None:
    assert catalog().names == ["transfer_money", "get_weather", "search"]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "transfer_monye",
            "tool 'transfer_monye' does not exist (did you mean 'transfer_money'?); "
            "available tools: transfer_money, get_weather, search",
        ),
        (
            "Get_Weather",
            "tool 'Get_Weather' does not exist (did you mean 'get_weather'?); "
            "available tools: transfer_money, get_weather, search",
        ),
        (
            "book_flight",
            "tool 'book_flight' does not exist; "
            "available tools: transfer_money, get_weather, search",
        ),
        (
            None,
            "the tool call has no function name (null); "
            "available tools: transfer_money, get_weather, search",
        ),
    ],
)
def test_hallucinated_names_are_intercepted_with_a_suggestion(name: Any, message: str) -> None:
    checked = check(name, "{}")
    assert messages(checked) == [("unknown_tool", message)]
    assert checked.problems[0].tool == (name or "")


def test_dotted_names_suggest_their_underscored_form() -> None:
    tools = [{"type": "function", "function": {"name": "math_factorial"}}]
    checked = ToolCatalog.from_request(tools, {}, True).check(call("math.factorial", "{}"))
    assert "did you mean 'math_factorial'?" in checked.problems[0].message


def test_a_long_tool_list_is_shortened() -> None:
    tools = [{"type": "function", "function": {"name": f"tool_{i:03d}"}} for i in range(40)]
    [problem] = ToolCatalog.from_request(tools, {}, True).check(call("zzz", "{}")).problems
    assert problem.message.endswith("tool_029 and 10 more")


def test_no_tools_declared() -> None:
    checked = ToolCatalog.from_request(None, {}, True).check(call("search", "{}"))
    assert messages(checked) == [
        ("unknown_tool", "tool 'search' does not exist; the request declares no tools")
    ]


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ('{"amount": 1,', "arguments are not valid JSON: Expecting property name"),
        ("{'amount': 1}", "near \"{'amount': 1}\""),
        ('{"amount": NaN, "to": "x"}', "NaN is not JSON"),
        ('{"amount": 1e400, "to": "x"}', "the number 1e400 is out of range"),
        ({"amount": 1}, "arguments must be a string holding a JSON object"),
    ],
)
def test_invalid_json_arguments(arguments: Any, fragment: str) -> None:
    checked = check("transfer_money", arguments)
    [(kind, message)] = messages(checked)
    assert kind == "invalid_json"
    assert fragment in message
    assert checked.arguments is None


@pytest.mark.parametrize(("arguments", "shown"), [("", "''"), ("  ", "'  '"), (None, "null")])
def test_empty_arguments_are_the_empty_object_when_cleaning(arguments: Any, shown: str) -> None:
    checked = check("search", arguments)
    assert checked.ok
    assert checked.call["function"]["arguments"] == "{}"
    assert checked.changes == (f"arguments: {shown} -> {{}}",)
    checked = check("transfer_money", arguments)
    assert messages(checked) == [
        ("schema", "$: 'amount' is a required property"),
        ("schema", "$: 'to' is a required property"),
    ]


def test_empty_arguments_are_invalid_without_cleaning() -> None:
    [(kind, message)] = messages(check("search", "", clean=False))
    assert kind == "invalid_json"
    assert message == "arguments are empty (''); expected a JSON object, e.g. {}"


def test_arguments_must_be_an_object() -> None:
    expected = [("invalid_json", "arguments must be a JSON object, not [1]")]
    assert messages(check("search", "[1]")) == expected


def test_schema_errors_one_line_each_with_paths() -> None:
    arguments = {
        "amount": "abc",
        "currency": "JPY",
        "foo": 1,
        "beneficiary": {"address": {}},
        "tags": ["rent", "bribe"],
    }
    checked = check("transfer_money", json.dumps(arguments), rules={})
    assert messages(checked) == [
        ("schema", "$: 'to' is a required property"),
        (
            "schema",
            "$: additional property 'foo' is not allowed (properties: amount, to, currency, "
            "on, urgent, beneficiary, tags)",
        ),
        ("schema", "$.amount: 'abc' is not of type 'number'"),
        ("schema", "$.beneficiary: 'name' is a required property"),
        ("schema", "$.beneficiary.address: 'country' is a required property"),
        ("schema", "$.currency: 'JPY' is not one of ['EUR', 'USD', 'GBP']"),
        ("schema", "$.tags[1]: 'bribe' is not one of ['rent', 'gift']"),
    ]
    assert all(p.tool == "transfer_money" for p in checked.problems)


def test_extra_arguments_pass_only_where_the_policy_allows_them() -> None:
    # get_weather's schema lists its properties and says nothing about others.
    assert check("get_weather", '{"city": "Paris", "days": 3}', undeclared="allow").ok
    assert messages(check("get_weather", '{"city": "Paris", "days": 3}')) == [
        (
            "undeclared_parameter",
            "$: 'days' is not a parameter of tool 'get_weather'; its parameters: city, unit",
        )
    ]


def test_a_tool_without_parameters_takes_any_object() -> None:
    assert check("search", '{"q": "x", "n": [1]}').ok


def test_cleaning_fixes_types_and_dates_and_reserializes() -> None:
    arguments = {"amount": " 12.5", "to": "FR76", "on": "Jun 2, 2024", "urgent": "false"}
    checked = check("transfer_money", json.dumps(arguments))
    assert checked.ok, checked.problems
    assert checked.changes == (
        "amount: ' 12.5' -> 12.5",
        "on: 'Jun 2, 2024' -> '2024-06-02'",
        "urgent: 'false' -> false",
    )
    assert checked.call["function"]["arguments"] == (
        '{"amount":12.5,"to":"FR76","on":"2024-06-02","urgent":false}'
    )
    assert checked.call["id"] == "call_1"


def test_without_cleaning_the_same_call_is_rejected() -> None:
    arguments = {"amount": "12.5", "to": "FR76"}
    checked = check("transfer_money", json.dumps(arguments), clean=False)
    assert messages(checked) == [("schema", "$.amount: '12.5' is not of type 'number'")]
    assert checked.call["function"]["arguments"] == json.dumps(arguments)


def test_non_ascii_survives_reserialization() -> None:
    checked = check("transfer_money", json.dumps({"amount": "1", "to": "FR76 Zoë 東京"}))
    assert checked.call["function"]["arguments"] == '{"amount":1,"to":"FR76 Zoë 東京"}'


def test_business_rules() -> None:
    arguments = {
        "amount": 5000,
        "to": "nobody",
        "currency": "GBP",
        "on": "2024-01-01",
        "beneficiary": {"name": "Zoë", "address": {"country": "US"}},
    }
    assert messages(check("transfer_money", json.dumps(arguments))) == [
        ("rule", "$.amount: 5000 is greater than the maximum of 1000"),
        ("rule", "$.currency: 'GBP' is not one of ['EUR', 'USD'] (allowed by policy)"),
        ("rule", "$.on: '2024-01-01' is in the past (today is 2024-06-01 UTC)"),
        ("rule", "$.to: 'nobody' does not match the policy's pattern '^[A-Z]{2}\\\\d{2}'"),
        (
            "rule",
            "$.beneficiary.address.country: 'US' is not one of ['FR', 'DE'] (allowed by policy)",
        ),
    ]


def test_hook_runs_on_well_formed_arguments_only() -> None:
    HOOK_CALLS.clear()
    urgent = {"amount": 800, "to": "FR76", "urgent": True}
    assert messages(check("transfer_money", json.dumps(urgent))) == [
        ("rule", "urgent transfers are limited to 500")
    ]
    assert [urgent] == HOOK_CALLS
    check("transfer_money", json.dumps({**urgent, "amount": "lots"}))
    assert len(HOOK_CALLS) == 1  # the schema failed: the hook was not called


def test_a_raising_hook_is_a_problem_not_a_crash() -> None:
    rules = {"search": ToolRule(hook="tests.guard.test_tools:exploding_hook")}
    [problem] = check("search", "{}", rules=rules).problems
    assert problem.kind == "policy_error"
    assert problem.message == "hook 'tests.guard.test_tools:exploding_hook' raised KeyError: 'boom'"


def test_rules_for_undeclared_tools_are_ignored() -> None:
    rules = {"other": ToolRule(hook="tests.guard.test_tools:exploding_hook")}
    assert check("search", "{}", rules=rules).ok


def test_non_function_calls_are_passed_through() -> None:
    custom = {"id": "c", "type": "custom", "custom": {"name": "x", "input": "y"}}
    checked = catalog().check(custom)
    assert checked.ok
    assert checked.call is custom


def test_tools_with_unusable_schemas_are_not_validated_but_said() -> None:
    tools = [
        {"type": "function", "function": {"name": "bfcl", "parameters": {"type": "dict"}}},
        {"type": "function", "function": {"name": "bfcl", "parameters": {}}},
        {"type": "function", "function": {"description": "no name"}},
        {"type": "web_search"},
    ]
    cat = ToolCatalog.from_request(tools, {}, True)
    assert cat.names == ["bfcl"]
    assert len(cat.warnings) == 2  # the schema is compiled (and found unusable) when called
    checked = cat.check(call("bfcl", '{"a": 1}'))
    assert checked.ok
    assert checked.warnings and "not validated" in checked.warnings[0]
    assert len(cat.warnings) == 3
    assert "parameters not a valid JSON Schema at $.type" in cat.warnings[-1]


def test_validators_are_compiled_once_across_requests() -> None:
    cache = ValidatorCache()
    first = catalog(cache=cache)
    assert (cache.hits, cache.misses) == (0, 0), "compiled only when a call needs it"
    compiled = [tool.schema for tool in first.tools.values()]
    assert (cache.hits, cache.misses) == (0, 3)
    second = catalog(cache=cache)
    assert [tool.schema for tool in second.tools.values()] == compiled
    assert (cache.hits, cache.misses) == (3, 3)
    assert second.tools["transfer_money"].schema is first.tools["transfer_money"].schema
    reordered = [
        {
            "type": "function",
            "function": {"name": "transfer_money", "parameters": dict(reversed(TRANSFER.items()))},
        }
    ]
    third = ToolCatalog.from_request(reordered, {}, True, cache=cache)
    assert third.tools["transfer_money"].schema is first.tools["transfer_money"].schema


def test_the_request_is_not_mutated() -> None:
    before = json.dumps(TOOLS, sort_keys=True)
    original = call("transfer_money", json.dumps({"amount": "1", "to": "FR76"}))
    snapshot = json.dumps(original, sort_keys=True)
    catalog().check(original)
    assert json.dumps(original, sort_keys=True) == snapshot
    assert json.dumps(TOOLS, sort_keys=True) == before


# ---------------------------------------------------------------- tool_choice


def named(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name}}


@pytest.mark.parametrize("choice", [None, "auto", {"type": "something_new"}])
def test_tool_choice_auto_accepts_anything(choice: Any) -> None:
    assert check_tool_choice(choice, [], "text") == []
    assert check_tool_choice(choice, [call("a", "{}")], None) == []


def test_tool_choice_required() -> None:
    assert check_tool_choice("required", [call("a", "{}")], None) == []
    [problem] = check_tool_choice("required", [], "Sure, here it is")
    assert problem.kind == "tool_choice"
    assert problem.message == (
        "tool_choice is 'required': the answer must call at least one tool "
        "(it answered with text instead)"
    )
    [problem] = check_tool_choice("required", [], None)
    assert problem.message == "tool_choice is 'required': the answer must call at least one tool"


def test_tool_choice_none() -> None:
    assert check_tool_choice("none", [], "text") == []
    [problem] = check_tool_choice("none", [call("a", "{}"), call("b", "{}")], None)
    assert problem.message == "tool_choice is 'none' but the answer calls 'a', 'b'"


def test_tool_choice_named_function() -> None:
    assert check_tool_choice(named("a"), [call("a", "{}"), call("a", "{}")], None) == []
    [problem] = check_tool_choice(named("a"), [], "text")
    assert problem.message == (
        "tool_choice requires a call to 'a'; the answer has none (it answered with text instead)"
    )
    [problem] = check_tool_choice(named("a"), [call("a", "{}"), call("b", "{}")], None)
    assert (problem.tool, problem.message) == (
        "b",
        "tool_choice allows only 'a'; the answer calls 'b'",
    )


def test_tool_choice_allowed_tools() -> None:
    choice = {
        "type": "allowed_tools",
        "allowed_tools": {
            "mode": "required",
            "tools": [named("a"), {"type": "function", "name": "b"}],
        },
    }
    assert check_tool_choice(choice, [call("a", "{}"), call("b", "{}")], None) == []
    [problem] = check_tool_choice(choice, [call("c", "{}")], None)
    assert problem.message == "tool 'c' is not among the allowed tools: a, b"
    [problem] = check_tool_choice(choice, [], None)
    assert problem.message == "tool_choice requires a call to one of: a, b; the answer has none"
    auto = {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [named("a")]}}
    assert check_tool_choice(auto, [], "text") == []


# --- one validation budget for the whole request -------------------------------------------

SLOW_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "tag",
            "parameters": {
                "type": "object",
                "properties": {"tags": {"type": "array", "items": {"pattern": "^(a|aa)+$"}}},
            },
        },
    }
]
SLOW_ARGUMENTS = json.dumps({"tags": ["a" * 30 + "!"] * 100})  # 100 x 50 ms unbudgeted


def test_a_call_past_the_budget_comes_back_unchecked_within_it() -> None:
    budget = Budget(0.2)
    cat = ToolCatalog.from_request(SLOW_TOOLS, {}, True, budget=budget)
    started = time.perf_counter()
    checked = cat.check(call("tag", SLOW_ARGUMENTS))
    assert time.perf_counter() - started < 0.5
    assert checked.unchecked and checked.ok and "validation budget" in checked.warnings[0]
    assert checked.call["function"]["arguments"] == SLOW_ARGUMENTS  # sent on as it came
    again = cat.check(call("tag", '{"tags": ["a"]}'))  # the same request: nothing left
    assert again.unchecked


def test_settle_stops_at_the_budget_and_asks_for_no_repair() -> None:
    """Without the budget, each repair would validate again: seconds per attempt."""
    asked: list[Any] = []

    async def ask_again(extra: list[Any]) -> dict[str, Any]:
        asked.append(extra)
        return {"role": "assistant", "tool_calls": [call("tag", SLOW_ARGUMENTS)]}

    message = {"role": "assistant", "content": None, "tool_calls": [call("tag", SLOW_ARGUMENTS)]}
    cat = ToolCatalog.from_request(SLOW_TOOLS, {}, True, budget=Budget(0.2))
    started = time.perf_counter()
    settled = asyncio.run(settle(message, cat, None, ToolGuardConfig(), ask_again, inline=False))
    assert time.perf_counter() - started < 0.6
    assert settled.outcome == "unchecked" and asked == []
    assert settled.message["tool_calls"][0]["function"]["arguments"] == SLOW_ARGUMENTS


def test_a_catalog_of_thousands_compiles_only_what_is_called() -> None:
    cache = ValidatorCache()
    tools = [
        {"type": "function", "function": {"name": f"t{i}", "parameters": {"maxProperties": i}}}
        for i in range(5_000)
    ]
    started = time.perf_counter()
    cat = ToolCatalog.from_request(tools, {}, True, cache=cache)
    assert cat.check(call("t7", "{}")).ok
    assert time.perf_counter() - started < 0.5
    assert cache.misses == 1 and len(cache) == 1

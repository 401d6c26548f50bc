from __future__ import annotations

import time
from typing import Any

import pytest

from gateway.guard.schemas import (
    DEFAULT_CACHE,
    MAX_ERRORS,
    Budget,
    BudgetSpent,
    UnusableSchema,
    ValidatorCache,
    compile_schema,
    schema_key,
)

Json = dict[str, Any]


def errors(schema: Any, instance: Any) -> list[str]:
    return compile_schema(schema).errors(instance)


WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "amount": {"type": "number"},
    },
    "required": ["city"],
    "additionalProperties": False,
}


def test_valid_arguments_have_no_errors() -> None:
    assert errors(WEATHER, {"city": "Paris", "unit": "celsius"}) == []


def test_messages_carry_the_json_path() -> None:
    assert errors(WEATHER, {"amount": "abc", "unit": "kelvin", "foo": 1}) == [
        "$: 'city' is a required property",
        "$: additional property 'foo' is not allowed (properties: city, unit, amount)",
        "$.amount: 'abc' is not of type 'number'",
        "$.unit: 'kelvin' is not one of ['celsius', 'fahrenheit']",
    ]


def test_a_misspelled_property_gets_a_suggestion() -> None:
    assert errors(WEATHER, {"cty": "Paris"}) == [
        "$: 'city' is a required property",
        "$: additional property 'cty' is not allowed (did you mean 'city'?)",
    ]


def test_extra_properties_are_allowed_unless_the_schema_forbids_them() -> None:
    schema = {k: v for k, v in WEATHER.items() if k != "additionalProperties"}
    assert errors(schema, {"city": "Paris", "foo": 1}) == []


def test_pattern_properties_are_not_extra() -> None:
    schema = {"type": "object", "patternProperties": {"^x_": {}}, "additionalProperties": False}
    assert errors(schema, {"x_a": 1, "b": 2}) == ["$: additional property 'b' is not allowed"]


def test_nested_paths() -> None:
    schema = {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"qty": {"type": "integer", "minimum": 1}},
                    "required": ["qty"],
                },
            }
        },
    }
    assert errors(schema, {"items": [{"qty": 1}, {"qty": 0}, {}]}) == [
        "$.items[1].qty: 0 is less than the minimum of 1",
        "$.items[2]: 'qty' is a required property",
    ]


def test_formats_are_checked_with_a_hint() -> None:
    schema = {
        "type": "object",
        "properties": {
            "day": {"type": "string", "format": "date"},
            "at": {"type": "string", "format": "date-time"},
            "mail": {"type": "string", "format": "email"},
            "site": {"type": "string", "format": "uri"},
        },
    }
    good = {"day": "2024-01-31", "at": "2024-01-31T10:00:00Z", "mail": "a@b.c", "site": "x"}
    assert errors(schema, good) == []
    assert errors(schema, {"day": "01/31/2024", "at": "2024-01-31T10:00:00", "mail": "ab"}) == [
        "$.at: '2024-01-31T10:00:00' is not a 'date-time' (expected RFC 3339 with an offset, "
        "e.g. 2024-01-31T09:30:00Z)",
        "$.day: '01/31/2024' is not a 'date' (expected YYYY-MM-DD)",
        "$.mail: 'ab' is not a 'email'",
    ]


def test_any_of_names_the_closest_alternative() -> None:
    schema = {
        "type": "object",
        "properties": {"x": {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 2}]}},
    }
    [line] = errors(schema, {"x": "abc"})
    assert line.startswith("$.x: 'abc' is not valid under any of the given schemas; closest")


def test_errors_are_capped() -> None:
    schema = {"type": "array", "items": {"type": "integer"}}
    lines = errors(schema, ["x"] * (MAX_ERRORS + 5))
    assert len(lines) == MAX_ERRORS + 1
    assert lines[-1] == "... and 5 more errors"


def test_long_values_are_cut() -> None:
    [line] = errors({"type": "integer"}, "x" * 1000)
    assert len(line) <= 300
    assert line.endswith("...")


@pytest.mark.parametrize(
    "schema", [{"type": "dict"}, {"properties": {"a": {"pattern": "[unclosed"}}}, "object", 12]
)
def test_invalid_schemas_are_unusable_not_errors(schema: Any) -> None:
    compiled = compile_schema(schema)
    assert compiled.validator is None
    assert compiled.unusable
    with pytest.raises(UnusableSchema):
        compiled.errors({})


def test_unresolvable_refs_are_unusable_at_validation_without_network() -> None:
    for ref in ("#/$defs/missing", "https://example.invalid/schema.json"):
        compiled = compile_schema({"properties": {"a": {"$ref": ref}}})
        with pytest.raises(UnusableSchema):
            compiled.errors({"a": 1})


def test_an_older_draft_named_by_dollar_schema_is_honoured() -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "array",
        "items": [{"type": "integer"}],
    }
    assert errors(schema, [1, "extra"]) == []
    assert errors(schema, ["x"]) == ["$[0]: 'x' is not of type 'integer'"]


def test_the_key_ignores_key_order() -> None:
    assert schema_key({"a": 1, "b": [1, 2]}) == schema_key({"b": [1, 2], "a": 1})
    assert schema_key({"a": 1}) != schema_key({"a": 2})
    assert schema_key({"a": {1, 2}}) is None


def test_cache_reuses_compiled_validators_and_stays_bounded() -> None:
    cache = ValidatorCache(max_entries=2)
    first = cache.get({"type": "object", "properties": {"a": {"type": "integer"}}})
    again = cache.get({"properties": {"a": {"type": "integer"}}, "type": "object"})
    assert again is first
    assert (cache.hits, cache.misses) == (1, 1)
    cache.get({"type": "string"})
    cache.get({"type": "integer"})  # evicts the least recently used: the first
    assert len(cache) == 2
    assert cache.get({"type": "object", "properties": {"a": {"type": "integer"}}}) is not first


def test_the_cache_keeps_its_own_copy_of_the_schema() -> None:
    cache = ValidatorCache()
    schema: dict[str, Any] = {"type": "object", "required": ["a"]}
    compiled = cache.get(schema)
    schema["required"].append("b")
    assert compiled.errors({"a": 1}) == []


# --- one tenant cannot flush another's validators ------------------------------------------


def _schema(i: int) -> Json:
    return {"type": "object", "properties": {"n": {"const": i}}}


def test_one_owners_flood_evicts_its_own_entries_not_anothers() -> None:
    cache = ValidatorCache(max_entries=32)  # no share per owner: the global bound alone
    kept = cache.get({"type": "string"}, owner="a")
    for i in range(300):
        cache.get(_schema(i), owner="b")
    assert len(cache) == 32 and cache.owned("a") == 1 and cache.owned("b") == 31
    assert cache.get({"type": "string"}, owner="a") is kept


def test_an_owner_holds_at_most_its_share() -> None:
    cache = ValidatorCache(max_entries=100, owner_entries=10)
    for owner in ("a", "b"):
        for i in range(50):
            cache.get(_schema(i), owner=owner)
    assert cache.owned("a") == cache.owned("b") == 10
    assert (cache.hits, cache.misses) == (0, 100)  # the partitions do not share entries
    cache.get(_schema(49), owner="a")
    assert cache.hits == 1


def test_the_cache_is_bounded_by_bytes_and_heavy_schemas_are_not_kept() -> None:
    cache = ValidatorCache(max_entries=1_000, max_bytes=100_000, owner_bytes=20_000)
    heavy = {"enum": ["x" * 100] * 300}  # ~31 KB of JSON
    assert cache.get(heavy, owner="a") is not cache.get(heavy, owner="a")
    assert cache.owned("a") == 0
    big = [{"enum": [f"{i}-" + "y" * 100] * 50} for i in range(100)]  # ~5 KB each
    for owner in "abcdefgh":
        for schema in big:
            cache.get(schema, owner=owner)
        assert cache.owned(owner) <= 4  # 20 KB of them
    assert len(cache) <= 20  # 100 KB in all


def test_the_default_cache_gives_each_tenant_a_share() -> None:
    assert DEFAULT_CACHE.owner_entries * 4 == DEFAULT_CACHE.max_entries


# --- the validation budget of a request ----------------------------------------------------

SLOW = "^(a|aa)+$"  # backtracks: each 31-character string takes the whole per-match limit
SLOW_TEXT = "a" * 30 + "!"


def test_a_budget_bounds_all_the_matches_of_a_check() -> None:
    compiled = compile_schema({"type": "array", "items": {"type": "string", "pattern": SLOW}})
    budget = Budget(0.2)
    started = time.process_time()  # CPU, all threads: other processes cannot inflate it
    with pytest.raises(BudgetSpent), budget.running():
        compiled.errors([SLOW_TEXT] * 100)  # 100 x 50 ms unbudgeted
    took = time.process_time() - started
    assert took < 0.5, took
    assert budget.exhausted and budget.spent >= 0.2
    with pytest.raises(BudgetSpent), budget.running():  # spent: the next check stops at once
        compiled.errors(["a"])


def test_a_budget_bounds_keywords_as_well_as_patterns() -> None:
    wide = {"anyOf": [{"type": "integer", "minimum": i, "maximum": i} for i in range(500)]}
    compiled = compile_schema({"type": "array", "items": wide})
    budget = Budget(0.1)
    started = time.perf_counter()
    with pytest.raises(BudgetSpent), budget.running():
        compiled.errors(["not a number"] * 1_000)
    # Unbudgeted: about 11 s. A second leaves room for a collection in a loaded test process
    # (0.4 s was missed once in the fast tier).
    assert time.perf_counter() - started < 1.0


def test_a_budget_is_summed_over_its_runs_and_unbudgeted_checks_are_unchanged() -> None:
    budget = Budget(1.0)
    for _ in range(3):
        with budget.running():
            time.sleep(0.02)
    assert 0.06 <= budget.spent < 0.5
    assert 0.5 < budget.left() <= 0.94
    compiled = compile_schema({"type": "string", "pattern": SLOW})
    (line,) = compiled.errors(SLOW_TEXT)  # no budget running: the per-match limit alone
    assert "could not be checked" in line and "in time" in line


def test_a_pattern_the_time_limited_engine_rejects_is_not_run_without_a_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`re` has no time limit: a pattern `regex` refuses is reported unchecked, not run."""
    import regex

    from gateway.guard import schemas

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise regex.error("unsupported")

    monkeypatch.setattr(schemas.regex, "search", refuse)
    assert schemas.search(SLOW, SLOW_TEXT) is None
    (line,) = compile_schema({"type": "string", "pattern": "^a$"}).errors("a")
    assert "could not be checked" in line

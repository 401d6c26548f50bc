from __future__ import annotations

import copy
from typing import Any

import pytest

from gateway.guard.cleaning import clean_arguments, json_equal


def obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


@pytest.mark.parametrize(
    ("schema", "value", "cleaned"),
    [
        ({"type": "number"}, "12.5", 12.5),
        ({"type": "number"}, " 12 ", 12),
        ({"type": "number"}, "-1e3", -1000.0),
        ({"type": "integer"}, "42", 42),
        ({"type": "integer"}, "+7", 7),
        ({"type": "integer"}, "12.0", 12),
        ({"type": "boolean"}, "true", True),
        ({"type": "boolean"}, "FALSE", False),
        ({"type": ["integer", "null"]}, "3", 3),
        ({"type": ["integer", "number"]}, "12.0", 12),
        ({"type": "array", "items": {"type": "integer"}}, "[1, 2]", [1, 2]),
        ({"type": "array", "items": {"type": "integer"}}, '["1", 2]', [1, 2]),
        (obj(a={"type": "integer"}), '{"a": "1"}', {"a": 1}),
        ({"type": "string", "enum": ["celsius", "fahrenheit"]}, " celsius ", "celsius"),
        ({"type": "string", "format": "date"}, "Jan 1, 2024", "2024-01-01"),
        ({"type": "string", "format": "date"}, "2024年1月1日", "2024-01-01"),
        ({"type": "string", "format": "date-time"}, "2024-01-01 10:00Z", "2024-01-01T10:00:00Z"),
    ],
)
def test_values_take_the_type_the_schema_names(schema: Any, value: Any, cleaned: Any) -> None:
    result, changes = clean_arguments(value, schema)
    assert json_equal(result, cleaned)
    assert len(changes) >= 1


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ({"type": "number"}, "12,5"),
        ({"type": "number"}, "NaN"),
        ({"type": "number"}, "1e999"),
        ({"type": "number"}, "twelve"),
        ({"type": "integer"}, "12.5"),
        ({"type": "integer"}, "1_000"),
        ({"type": "boolean"}, "yes"),
        ({"type": "boolean"}, "1"),
        ({"type": "string"}, 12),
        ({"type": "string"}, "  free text keeps its spaces\n"),
        ({"type": "array"}, "not json ["),
        ({"type": "array"}, '{"a": 1}'),
        ({"type": "object"}, "[1]"),
        ({"type": "array"}, "[NaN]"),
        ({"type": "array"}, "[1e400]"),
        ({"type": "string", "format": "date"}, "01/02/2024"),
        ({"type": "string", "format": "date"}, "2024-02-30"),
        ({"type": "string", "format": "date-time"}, "2024-01-01 10:00"),
        ({"type": "integer"}, None),
        ({}, "12"),
        (True, "12"),
        ({"type": "number"}, True),
    ],
)
def test_values_without_one_reading_are_left_alone(schema: Any, value: Any) -> None:
    result, changes = clean_arguments(value, schema)
    assert result is value
    assert changes == []


def test_nested_objects_and_arrays_are_walked() -> None:
    schema = obj(
        order=obj(
            items={
                "type": "array",
                "items": obj(qty={"type": "integer"}, gift={"type": "boolean"}),
            },
            when={"type": "string", "format": "date"},
        )
    )
    value = {"order": {"items": [{"qty": "2", "gift": "false"}, {"qty": 3}], "when": "1 May 2024"}}
    original = copy.deepcopy(value)
    result, changes = clean_arguments(value, schema)
    assert result == {
        "order": {"items": [{"qty": 2, "gift": False}, {"qty": 3}], "when": "2024-05-01"}
    }
    assert changes == [
        "order.items[0].qty: '2' -> 2",
        "order.items[0].gift: 'false' -> false",
        "order.when: '1 May 2024' -> '2024-05-01'",
    ]
    assert value == original  # the input is not mutated
    assert result["order"]["items"][1] is value["order"]["items"][1]  # untouched parts shared


def test_unknown_fields_are_kept_and_extra_properties_follow_additional_properties() -> None:
    schema = {**obj(a={"type": "integer"}), "additionalProperties": {"type": "number"}}
    result, _ = clean_arguments({"a": "1", "b": "2.5", "c": "x"}, schema)
    assert result == {"a": 1, "b": 2.5, "c": "x"}
    result, changes = clean_arguments({"z": "1"}, obj(a={"type": "integer"}))
    assert result == {"z": "1"}
    assert changes == []


def test_tuple_arrays_use_prefix_items() -> None:
    schema = {"type": "array", "prefixItems": [{"type": "number"}, {"type": "string"}]}
    assert clean_arguments(["1.5", "2"], schema)[0] == [1.5, "2"]
    draft7 = {
        "type": "array",
        "items": [{"type": "number"}],
        "additionalItems": {"type": "boolean"},
    }
    assert clean_arguments(["1", "true"], draft7)[0] == [1, True]


def test_local_refs_are_followed() -> None:
    schema = {
        "type": "object",
        "properties": {
            "amount": {"$ref": "#/$defs/money"},
            "legacy": {"allOf": [{"$ref": "#/definitions/n"}]},
        },
        "$defs": {"money": {"type": "number"}},
        "definitions": {"n": {"type": "integer"}},
    }
    result, _ = clean_arguments({"amount": "9.99", "legacy": "4"}, schema)
    assert result == {"amount": 9.99, "legacy": 4}


def test_unresolvable_and_cyclic_refs_clean_nothing() -> None:
    schema = obj(a={"$ref": "#/$defs/missing"}, b={"$ref": "https://example.com/s.json"})
    assert clean_arguments({"a": "1", "b": "1"}, schema) == ({"a": "1", "b": "1"}, [])
    cyclic = {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}
    assert clean_arguments("1", cyclic) == ("1", [])


def test_recursive_schemas_follow_the_data() -> None:
    schema = {
        "$defs": {"node": obj(value={"type": "integer"}, child={"$ref": "#/$defs/node"})},
        "$ref": "#/$defs/node",
    }
    result, _ = clean_arguments({"value": "1", "child": {"value": "2"}}, schema)
    assert result == {"value": 1, "child": {"value": 2}}


@pytest.mark.parametrize(
    ("branches", "value", "cleaned"),
    [
        # one alternative converts it: clear
        ([{"type": "number"}, {"type": "null"}], "2.5", 2.5),
        # one alternative takes it as it is and cleans it
        ([{"type": "string", "format": "date"}, {"type": "integer"}], "Jan 2, 2024", "2024-01-02"),
        # an alternative takes it as it is: it stays
        ([{"type": "string"}, {"type": "integer"}], "12", "12"),
        # only one of several alternatives can convert it
        ([{"type": "integer"}, {"type": "boolean"}, {"type": "array"}], "1", 1),
        ([{"type": "boolean"}, {"type": "array"}], "true", True),
        # several convert it to the same value
        ([{"type": "number"}, {"type": "integer"}], "3", 3),
    ],
)
def test_any_of_only_when_the_choice_is_clear(
    branches: list[Any], value: Any, cleaned: Any
) -> None:
    for keyword in ("anyOf", "oneOf"):
        assert json_equal(clean_arguments(value, {keyword: branches})[0], cleaned)


def test_any_of_with_conflicting_conversions_is_left() -> None:
    schema = {"anyOf": [{"type": "array"}, {"type": "object", "additionalProperties": True}]}
    assert clean_arguments("x", schema) == ("x", [])
    two_objects = {
        "anyOf": [obj(a={"type": "integer"}), obj(a={"type": "boolean"})],
    }
    assert clean_arguments({"a": "1"}, two_objects) == ({"a": "1"}, [])


def test_json_strings_are_decoded_only_into_the_container_asked_for() -> None:
    schema = obj(ids={"type": "array", "items": {"type": "integer"}}, meta={"type": "object"})
    result, changes = clean_arguments({"ids": '["1", 2]', "meta": '{"k": "v"}'}, schema)
    assert result == {"ids": [1, 2], "meta": {"k": "v"}}
    assert changes[0].startswith("ids: ")


def test_change_lines_name_the_path() -> None:
    schema = obj(**{"amount": {"type": "number"}, "weird key": {"type": "integer"}})
    _, changes = clean_arguments({"amount": "12.5", "weird key": "3"}, schema)
    assert changes == ["amount: '12.5' -> 12.5", "[\"weird key\"]: '3' -> 3"]


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        (1, 1.0, True),
        (True, 1, False),
        ([1, {"a": True}], [1.0, {"a": True}], True),
        ("1", 1, False),
    ],
)
def test_json_equal(a: Any, b: Any, equal: bool) -> None:
    assert json_equal(a, b) is equal


@pytest.mark.parametrize(
    ("schema", "value", "cleaned"),
    [
        ({"type": "string", "enum": ["Celsius", "Fahrenheit"]}, "celsius", "Celsius"),
        ({"type": "string", "enum": ["Celsius", "Fahrenheit"]}, " FAHRENHEIT ", "Fahrenheit"),
        ({"enum": ["EUR", "USD", 3]}, "eur", "EUR"),
        ({"type": ["string", "null"], "enum": ["On", "Off", None]}, "off", "Off"),
        ({"type": "string", "const": "Yes"}, "yes", "Yes"),
        ({"type": "string", "enum": ["STRASSE"]}, "straße", "STRASSE"),  # casefold, not lower
    ],
)
def test_an_enum_value_in_the_wrong_case_takes_the_allowed_spelling(
    schema: Any, value: str, cleaned: str
) -> None:
    result, changes = clean_arguments(value, schema)
    assert result == cleaned
    assert [c.reason for c in changes] == ["enum_case"]


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ({"type": "string", "enum": ["Celsius", "CELSIUS"]}, "celsius"),  # two match: ambiguous
        ({"type": "string", "enum": ["celsius", "Celsius"]}, "celsius"),  # allowed as it is
        ({"type": "string", "enum": ["Celsius"]}, "celsiu"),  # not a case difference
        ({"enum": [1, 2]}, "1"),  # no string to match
        ({"type": "integer", "enum": [1, 2]}, True),  # not a string
    ],
)
def test_an_enum_value_without_one_spelling_is_left_alone(schema: Any, value: Any) -> None:
    result, changes = clean_arguments(value, schema)
    assert result is value and changes == []


def test_each_change_says_why() -> None:
    schema = obj(
        n={"type": "number"},
        day={"type": "string", "format": "date"},
        code={"type": "string", "pattern": "^[A-Z]+$"},
        unit={"type": "string", "enum": ["Celsius"]},
    )
    value = {"n": "1", "day": "Jan 1, 2024", "code": " AB ", "unit": "CELSIUS"}
    _, changes = clean_arguments(value, schema)
    assert [c.reason for c in changes] == ["type", "date", "trim", "enum_case"]
    assert changes[3] == "unit: 'CELSIUS' -> 'Celsius'"

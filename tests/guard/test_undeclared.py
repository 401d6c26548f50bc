from __future__ import annotations

import copy
from typing import Any

import pytest

from gateway.config.guard import UndeclaredPolicy
from gateway.guard.undeclared import Review, normalized_name, review_parameters


def obj(required: tuple[str, ...] = (), **properties: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema


WEATHER = obj(
    ("location",),
    location={"type": "string"},
    user_id={"type": "integer"},
    unit={"type": "string"},
)


def review(
    arguments: Any, schema: Any, policy: UndeclaredPolicy = "repair", rename: bool = True
) -> Review:
    return review_parameters(arguments, schema, policy, rename=rename)


def names(result: Review) -> list[tuple[tuple[Any, ...], str]]:
    return [(u.path, u.name) for u in result.undeclared]


def test_a_name_the_schema_does_not_list_is_undeclared_under_repair() -> None:
    result = review({"location": "Paris", "days": 3}, WEATHER)
    assert names(result) == [((), "days")]
    assert result.undeclared[0].declared == ("location", "user_id", "unit")
    assert result.undeclared[0].missing == ("user_id", "unit")
    assert result.arguments == {"location": "Paris", "days": 3} and result.changes == []


def test_strip_drops_undeclared_names_and_says_so() -> None:
    arguments = {"location": "Paris", "days": 3, "lang": "fr"}
    original = copy.deepcopy(arguments)
    result = review(arguments, WEATHER, "strip")
    assert result.arguments == {"location": "Paris"}
    assert result.undeclared == []
    assert [(str(c), c.reason) for c in result.changes] == [
        ("days: not a declared parameter, removed", "undeclared_stripped"),
        ("lang: not a declared parameter, removed", "undeclared_stripped"),
    ]
    assert arguments == original  # the input is not mutated


def test_allow_is_json_schemas_reading() -> None:
    arguments = {"location": "Paris", "days": 3, "userId": 7}
    result = review(arguments, WEATHER, "allow")
    assert result.arguments is arguments
    assert result.undeclared == [] and result.changes == []


@pytest.mark.parametrize(
    ("given", "declared"),
    [
        ("userId", "user_id"),
        ("UserID", "user_id"),
        ("user-id", "user_id"),
        ("LOCATION", "location"),
    ],
)
def test_a_near_miss_in_case_or_separators_is_renamed(given: str, declared: str) -> None:
    arguments = {"unit": "C", given: "x"}
    result = review(arguments, WEATHER)
    assert declared in result.arguments and given not in result.arguments
    assert list(result.arguments) == ["unit", declared]  # the order is kept
    assert result.renamed and [c.reason for c in result.changes] == ["renamed"]
    assert result.undeclared == []


def test_renaming_needs_one_candidate_not_given_yet_and_one_name_for_it() -> None:
    # the declared name is already given: `userId` is just undeclared
    result = review({"location": "x", "user_id": 1, "userId": 2}, WEATHER)
    assert names(result) == [((), "userId")] and not result.renamed
    # two names would become the same declared one: neither is renamed
    result = review({"location": "x", "userId": 1, "USER_ID": 2}, WEATHER)
    assert names(result) == [((), "userId"), ((), "USER_ID")]
    # two declared names equal ignoring separators: ambiguous
    schema = obj(a_b={"type": "string"}, ab={"type": "string"})
    assert names(review({"aB": "x"}, schema)) == [((), "aB")]
    # a misspelling that is more than case and separators is not renamed (repair says it)
    assert names(review({"location": "x", "units": "C"}, WEATHER)) == [((), "units")]


def test_renaming_is_cleaning_and_follows_the_policy() -> None:
    assert names(review({"location": "x", "userId": 1}, WEATHER, rename=False)) == [((), "userId")]
    # under allow an open object takes `userId` as it is...
    assert review({"userId": 1}, WEATHER, "allow").arguments == {"userId": 1}
    # ...but a closed one would reject it, so the near miss is renamed there too
    closed = {**WEATHER, "additionalProperties": False}
    assert review({"userId": 1}, closed, "allow").arguments == {"user_id": 1}


def test_nested_objects_with_properties_are_checked() -> None:
    schema = obj(
        order=obj(
            items={"type": "array", "items": obj(sku={"type": "string"}, qty={"type": "integer"})},
            address=obj(city={"type": "string"}),
        )
    )
    arguments = {
        "order": {
            "items": [{"sku": "a", "qty": 1}, {"sku": "b", "Qty": 2, "colour": "red"}],
            "address": {"city": "Oslo", "zip": "0150"},
        }
    }
    result = review(arguments, schema)
    assert names(result) == [
        (("order", "items", 1), "colour"),
        (("order", "address"), "zip"),
    ]
    assert result.arguments["order"]["items"][1] == {"sku": "b", "qty": 2, "colour": "red"}
    assert result.arguments["order"]["items"][0] is arguments["order"]["items"][0]
    stripped = review(arguments, schema, "strip").arguments
    assert stripped["order"]["address"] == {"city": "Oslo"}
    assert stripped["order"]["items"][1] == {"sku": "b", "qty": 2}


@pytest.mark.parametrize(
    "schema",
    [
        {**WEATHER, "additionalProperties": True},
        {**WEATHER, "additionalProperties": {"type": "integer"}},
        {**WEATHER, "patternProperties": {"^da": {"type": "integer"}}},
        {**WEATHER, "unevaluatedProperties": {"type": "integer"}},
        {**WEATHER, "propertyNames": {"maxLength": 10}},
        {"type": "object"},
        {"type": "object", "additionalProperties": {"type": "integer"}},
        {"allOf": [WEATHER, obj(days={"type": "integer"})]},
        {"anyOf": [WEATHER, obj(days={"type": "integer"})]},
        {**WEATHER, "if": {"required": ["unit"]}, "then": obj(days={"type": "integer"})},
        {**WEATHER, "dependentSchemas": {"unit": obj(days={"type": "integer"})}},
        {"$ref": "#/$defs/open", "$defs": {"open": {"type": "object"}}},
        {**WEATHER, "$ref": "https://example.com/remote.json"},
        True,
    ],
    ids=[
        "additional-true",
        "additional-schema",
        "pattern",
        "unevaluated",
        "property-names",
        "no-properties",
        "map",
        "allOf",
        "anyOf",
        "if-then",
        "dependent",
        "ref-open",
        "remote-ref",
        "true",
    ],
)
@pytest.mark.parametrize("policy", ["repair", "strip"])
def test_schemas_that_say_what_else_they_take_are_respected(
    schema: Any, policy: UndeclaredPolicy
) -> None:
    arguments = {"location": "Paris", "days": 3}
    result = review(arguments, schema, policy)
    assert result.arguments is arguments
    assert result.undeclared == [] and result.changes == []


def test_a_pattern_declares_only_the_names_it_matches() -> None:
    schema = {**WEATHER, "patternProperties": {"^x-": {"type": "string"}}}
    assert names(review({"location": "P", "x-trace": "1", "days": 3}, schema)) == [((), "days")]


def test_values_of_an_open_map_are_checked_by_its_schema() -> None:
    schema = obj(by_city={"type": "object", "additionalProperties": obj(temp={"type": "number"})})
    result = review({"by_city": {"Oslo": {"temp": 1, "wind": 3}}}, schema)
    assert names(result) == [(("by_city", "Oslo"), "wind")]


def test_explicit_additional_properties_false_is_left_to_validation() -> None:
    closed = {**WEATHER, "additionalProperties": False}
    for policy in ("repair", "strip", "allow"):
        result = review({"location": "P", "days": 3}, closed, policy)  # type: ignore[arg-type]
        assert result.arguments == {"location": "P", "days": 3}
        assert result.undeclared == [] and result.changes == []


def test_a_required_name_the_properties_forget_is_declared() -> None:
    sloppy = {**obj(a={"type": "string"}), "required": ["a", "b"]}
    assert review({"a": "x", "b": 1, "c": 2}, sloppy).undeclared[0].name == "c"
    assert [u.name for u in review({"a": "x", "b": 1}, sloppy).undeclared] == []
    dependent = {**obj(a={}), "dependentRequired": {"a": ["b"]}}
    assert review({"a": 1, "b": 2}, dependent).undeclared == []


def test_an_empty_property_list_declares_no_parameter() -> None:
    assert names(review({"q": 1}, obj())) == [((), "q")]


def test_local_refs_and_one_branch_arrays_are_followed() -> None:
    schema = {
        "type": "object",
        "properties": {
            "who": {"$ref": "#/$defs/person"},
            "tags": {"anyOf": [{"type": "null"}, {"type": "array", "items": obj(k={})}]},
        },
        "$defs": {"person": obj(name={"type": "string"})},
    }
    result = review({"who": {"name": "A", "age": 3}, "tags": [{"k": 1, "v": 2}]}, schema)
    assert names(result) == [(("who",), "age"), (("tags", 0), "v")]


def test_self_referencing_schemas_end() -> None:
    schema = {"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"}
    assert review({"x": 1}, schema).undeclared == []
    tree = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}}
    assert names(review({"kids": [{"kids": [{"toy": 1}]}]}, tree)) == [
        (("kids", 0, "kids", 0), "toy")
    ]


def test_values_that_are_not_objects_are_left_to_validation() -> None:
    assert review("Paris", WEATHER).undeclared == []
    assert review({"location": {"deep": 1}}, WEATHER).undeclared == []  # a string's problem


def test_normalized_name() -> None:
    assert normalized_name("userId") == normalized_name("user_id") == normalized_name("User-ID")
    assert normalized_name("user id") == "userid" and normalized_name("a.b") == "ab"

"""Hypothesis strategies driven by the OpenAI OpenAPI file, a JSON writer that can say what
no JSON library will (NaN, duplicate keys, lone surrogates, bytes that are not UTF-8), and
mutations of a valid body into the ways clients get requests wrong.

`schema_strategy` turns a component schema of tests/data/openai/openapi-subset.json into a
strategy: `$ref`, `allOf` (merged), `anyOf`/`oneOf`, `enum`, `type` (lists too), object
properties with `required`, `additionalProperties`, array and string length bounds, numeric
bounds. It aims at the schema without promising every draw validates (a draw of one `oneOf`
branch may match two): callers check with the real validator when it matters.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

import orjson
from hypothesis import strategies as st

from tests.e2e.helpers import openapi_document

Json = dict[str, Any]
MAX_DEPTH = 128  # gateway/http/handlers.py MAX_JSON_DEPTH


class Raw(bytes):
    """Bytes written verbatim into the JSON text (NaN, a lone surrogate escape, 10^5 brackets)."""

    def __repr__(self) -> str:
        shown = bytes(self[:60]) + (b"..." if len(self) > 60 else b"")
        return f"Raw({shown!r}, {len(self)} bytes)"


class Pairs(list[tuple[Any, Any]]):
    """An object written with its keys in order, duplicates included."""


def dumps(value: Any) -> bytes:
    """JSON text of a tree that may hold Raw and Pairs (no recursion: deep trees are fine)."""
    out: list[bytes] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Token):
            out.append(item.text)
        elif isinstance(item, Raw):
            out.append(bytes(item))
        elif isinstance(item, dict | Pairs):
            pairs = list(item.items()) if isinstance(item, dict) else list(item)
            parts: list[Any] = [_Token(b"{")]
            for i, (key, val) in enumerate(pairs):
                if i:
                    parts.append(_Token(b","))
                parts += [key if isinstance(key, Raw) else _Token(_string(str(key))), _Token(b":")]
                parts.append(val)
            parts.append(_Token(b"}"))
            stack.extend(reversed(parts))
        elif isinstance(item, list | tuple):
            parts = [_Token(b"[")]
            for i, val in enumerate(item):
                if i:
                    parts.append(_Token(b","))
                parts.append(val)
            parts.append(_Token(b"]"))
            stack.extend(reversed(parts))
        elif isinstance(item, str):
            out.append(_string(item))
        elif item is None or isinstance(item, bool | int):
            out.append(json.dumps(item).encode())
        elif isinstance(item, float):
            out.append(json.dumps(item).encode())  # NaN, Infinity and -Infinity as such
        else:
            raise TypeError(f"not JSON: {item!r}")
    return b"".join(out)


class _Token:
    __slots__ = ("text",)

    def __init__(self, text: bytes) -> None:
        self.text = text


def _string(text: str) -> bytes:
    # ensure_ascii escapes lone surrogates as \udXXX: valid JSON grammar, not valid Unicode.
    return json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass")


def depth_of(value: Any) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, depth)
            children = node.values() if isinstance(node, dict) else node
            stack.extend((c, depth + 1) for c in children)
    return deepest


def acceptable_json_object(raw: bytes) -> bool:
    """What a strict server may accept as a request body: UTF-8 JSON (orjson: no NaN, no lone
    surrogates), an object, nested at most MAX_DEPTH levels."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return False
    return isinstance(data, dict) and depth_of(data) <= MAX_DEPTH


# --- strategies from the OpenAPI schemas --------------------------------------------------


def components() -> Json:
    schemas: Json = openapi_document()["components"]["schemas"]
    return schemas


def _resolve(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    seen = 0
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = components()[name]
        seen += 1
        assert seen < 50, "a $ref cycle"
    return schema


def _merge_all_of(schema: Mapping[str, Any]) -> Json:
    merged: Json = {k: v for k, v in schema.items() if k != "allOf"}
    for part in schema["allOf"]:
        part = _resolve(part)
        if "allOf" in part:
            part = _merge_all_of(part)
        for key, value in part.items():
            if key == "properties":
                merged["properties"] = {**merged.get("properties", {}), **value}
            elif key == "required":
                merged["required"] = sorted({*merged.get("required", []), *value})
            else:
                merged.setdefault(key, value)
    return merged


TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=0, max_size=24
)
PLAIN_TEXT = st.text(alphabet="abcdefghij klmnopqrstuvwxyz.?!0123456789", min_size=1, max_size=40)
SMALL_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-1000, 1000)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)


def schema_strategy(schema: Mapping[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """Values aimed at `schema` (a component schema or a piece of one)."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        if depth > 12:
            return st.nothing()
        return st.deferred(lambda: _component_strategy(name, depth + 1))
    if "allOf" in schema:
        return schema_strategy(_merge_all_of(schema), depth + 1)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            rest = {k: v for k, v in schema.items() if k not in (key, "discriminator")}
            branches = [schema_strategy({**rest, **branch}, depth + 1) for branch in schema[key]]
            return st.one_of(branches)
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([schema_strategy({**schema, "type": k}, depth) for k in kind])
    if kind is None:
        if "properties" in schema:
            kind = "object"
        elif "items" in schema:
            kind = "array"
        else:
            return SMALL_JSON
    return _TYPED[kind](schema, depth)


@cache
def _component_strategy(name: str, depth: int) -> st.SearchStrategy[Any]:
    return schema_strategy(components()[name], depth)


def _object(schema: Mapping[str, Any], depth: int) -> st.SearchStrategy[Any]:
    properties = schema.get("properties", {})
    required = set(schema.get("required", ()))
    if not properties:
        extra = schema.get("additionalProperties", True)
        values = SMALL_JSON if extra in (True, {}) else schema_strategy(extra, depth + 1)
        return (
            st.dictionaries(PLAIN_TEXT, values, max_size=3) if extra is not False else st.just({})
        )
    fixed = {k: schema_strategy(v, depth + 1) for k, v in properties.items() if k in required}
    optional = {
        k: schema_strategy(v, depth + 1) for k, v in properties.items() if k not in required
    }
    return st.fixed_dictionaries(fixed, optional=optional)


def _array(schema: Mapping[str, Any], depth: int) -> st.SearchStrategy[Any]:
    low = schema.get("minItems", 0)
    high = min(schema.get("maxItems", low + 3), low + 3)
    items = schema_strategy(schema.get("items", {}), depth + 1)
    if items.is_empty:  # cut off by the depth limit (the Responses item unions recurse deeply)
        return st.just([]) if low == 0 else st.nothing()
    return st.lists(items, min_size=low, max_size=high)


def _string_of(schema: Mapping[str, Any], depth: int) -> st.SearchStrategy[Any]:
    low = schema.get("minLength", 0)
    high = min(schema.get("maxLength", low + 24), low + 24)
    return st.text(
        alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]),
        min_size=low,
        max_size=high,
    )


def _number(schema: Mapping[str, Any], depth: int) -> st.SearchStrategy[Any]:
    low, high = schema.get("minimum"), schema.get("maximum")
    if schema.get("type") == "integer":
        return st.integers(
            min_value=None if low is None else math.ceil(low),
            max_value=None if high is None else math.floor(high),
        ).filter(lambda n: -(2**63) <= n < 2**63)
    return st.floats(min_value=low, max_value=high, allow_nan=False, allow_infinity=False)


_TYPED: dict[str, Callable[[Mapping[str, Any], int], st.SearchStrategy[Any]]] = {
    "object": _object,
    "array": _array,
    "string": _string_of,
    "integer": _number,
    "number": _number,
    "boolean": lambda s, d: st.booleans(),
    "null": lambda s, d: st.none(),
}


def component(name: str) -> st.SearchStrategy[Any]:
    return _component_strategy(name, 0)


# --- hostile values -----------------------------------------------------------------------

NESTING_DEPTHS = [2, 64, 126, 127, 128, 129, 130, 200, 1000, 5000, 100_000]


@st.composite
def deep_nesting(draw: st.DrawFn, depths: list[int] = NESTING_DEPTHS) -> Raw:
    depth = draw(st.sampled_from(depths))
    shape = draw(st.sampled_from(["array", "object", "mixed"]))
    if shape == "array":
        return Raw(b"[" * depth + b"]" * depth)
    if shape == "object":
        return Raw(b'{"a":' * (depth - 1) + b"{}" + b"}" * (depth - 1))
    half = depth // 2
    return Raw(b'{"a":[' * half + b"1" + b"]}" * half)


NUMBER_LITERALS = [
    b"1e308",
    b"-1e308",
    b"1e400",
    b"-1e400",
    b"1e-400",
    b"-0.0",
    b"0",
    b"-1",
    b"3.5",
    b"1E+2",
    b"9223372036854775807",
    b"9223372036854775808",
    b"18446744073709551616",
    b"-9223372036854775809",
    b"1" + b"0" * 400,
    b"0.1e-99999",
    b"2.5e+2147483648",
]
NAN_LITERALS = [b"NaN", b"-NaN", b"Infinity", b"-Infinity", b"nan", b"inf", b"1e", b"01", b".5"]
UNICODE_EDGES = [
    "\u0000",
    "a\u0000b",
    "\u202eRTL\u202c",
    "\ufeffbom",
    "\uffff",
    "\ufffe",
    "\U0010ffff",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467",
    "e" + "\u0301" * 500,
    "\u2028\u2029",
    "中文测试",
    "\x7f\x80\x9f",
    "\r\n\t\x0b\x0c",
    "\\",
    '"',
    "</script>",
    "%00%ff",
]
STRING_LITERALS = [  # inside JSON text, byte for byte
    b'"\\ud800"',
    b'"\\udfff"',
    b'"\\udc00x"',
    b'"x\\ud800\\ud800"',
    b'"\\ud83d\\ude00"',
    b'"\\ud83d"',
    b'"\xff\xfe"',
    b'"\xc0\xaf"',
    b'"\xed\xa0\x80"',
    b'"\xf4\x90\x80\x80"',
    b'"\xe2\x82"',
    b'"\\x41"',
    b'"\\u12"',
    b'"\\u0000"',
    b'"tab\there"',
    b'"new\nline"',
]


def unicode_value() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.sampled_from(UNICODE_EDGES),
        st.sampled_from(STRING_LITERALS).map(Raw),
        st.text(alphabet=st.characters(codec="utf-8"), max_size=30),
        st.text(
            alphabet=st.characters(categories=["Cs", "Co", "Cn", "Zl", "Zp", "Mn"]), max_size=8
        ).map(lambda s: Raw(_string(s))),
    )


def plain_value() -> st.SearchStrategy[Any]:
    """A value of any JSON type that json.dumps can write (hostile strings and numbers too)."""
    return st.one_of(
        SMALL_JSON,
        st.sampled_from(UNICODE_EDGES),
        st.sampled_from([2**63, -(2**63) - 1, 2**64, 10**30, 1e308, -1e308, 5e-324, -0.0]),
    )


def any_value() -> st.SearchStrategy[Any]:
    """A value of any JSON type, hostile ones included."""
    return st.one_of(
        SMALL_JSON,
        st.sampled_from(NUMBER_LITERALS + NAN_LITERALS).map(Raw),
        unicode_value(),
        deep_nesting([2, 64, 129, 300]),
    )


# --- mutations of a valid body --------------------------------------------------------------


def paths(tree: Any, limit: int = 200) -> list[tuple[Any, ...]]:
    """Every path to a value inside dicts and lists (the root excluded), breadth first."""
    found: list[tuple[Any, ...]] = []
    queue: list[tuple[tuple[Any, ...], Any]] = [((), tree)]
    while queue and len(found) < limit:
        path, node = queue.pop(0)
        items = (
            node.items()
            if isinstance(node, dict)
            else enumerate(node)
            if isinstance(node, list)
            else ()
        )
        for key, child in items:
            found.append((*path, key))
            queue.append(((*path, key), child))
    return found


def _parent(tree: Any, path: tuple[Any, ...]) -> Any:
    node = tree
    for key in path[:-1]:
        node = node[key]
    return node


MUTATIONS = [
    "wrong-type",
    "delete",
    "extra-field",
    "huge-string",
    "deep-nesting",
    "number",
    "nan",
    "unicode",
    "duplicate-key",
    "null",
]
EXTRA_FIELD_NAMES = [
    "stream",
    "n",
    "tools",
    "tool_choice",
    "messages",
    "model",
    "input",
    "x_extra",
    "",
    "\u0000",
    "__proto__",
    "constructor",
    "stream_options",
    "fake",
    "user",
    "metadata",
]


@st.composite
def mutated(draw: st.DrawFn, body: Json, max_mutations: int = 3) -> tuple[Any, list[str]]:
    """`body` with one to `max_mutations` mutations, and their names (where they were)."""
    tree: Any = json.loads(json.dumps(body))
    applied: list[str] = []
    for _ in range(draw(st.integers(1, max_mutations))):
        kind = draw(st.sampled_from(MUTATIONS))
        found = [p for p in paths(tree) if not _under_raw(tree, p)]
        if not found:
            break
        path = draw(st.sampled_from(found))
        parent, key = _parent(tree, path), path[-1]
        where = "/".join(map(str, path))
        if kind == "delete":
            del parent[key]
        elif kind == "wrong-type":
            parent[key] = draw(_other_type(parent[key]))
        elif kind == "null":
            parent[key] = None
        elif kind == "extra-field":
            target = parent if isinstance(parent, dict) else tree
            if isinstance(target, dict):
                name = draw(st.sampled_from(EXTRA_FIELD_NAMES) | TEXT)
                target[name] = draw(any_value())
                where = f"{name!r}"
        elif kind == "huge-string":
            size = draw(st.sampled_from([1000, 10_000, 60_000, 200_000, 300_000]))
            parent[key] = draw(st.sampled_from(["x", "é", "\U0001f600", "\\", " "])) * size
        elif kind == "deep-nesting":
            parent[key] = draw(deep_nesting())
        elif kind == "number":
            parent[key] = Raw(draw(st.sampled_from(NUMBER_LITERALS)))
        elif kind == "nan":
            parent[key] = Raw(draw(st.sampled_from(NAN_LITERALS)))
        elif kind == "unicode":
            parent[key] = draw(unicode_value())
        elif kind == "duplicate-key" and isinstance(parent, dict):
            pairs = Pairs(parent.items())
            pairs.append((key, draw(any_value())))
            grand = _parent(tree, path[:-1]) if len(path) > 1 else None
            if grand is None:
                tree = pairs
            else:
                grand[path[-2]] = pairs
        applied.append(f"{kind}@{where}")
    return tree, applied


def _under_raw(tree: Any, path: tuple[Any, ...]) -> bool:
    node = tree
    for key in path[:-1]:
        node = node[key]
        if isinstance(node, Raw | Pairs):
            return True
    return isinstance(node, Raw | Pairs)


def _other_type(value: Any) -> st.SearchStrategy[Any]:
    options: list[st.SearchStrategy[Any]] = []
    if not isinstance(value, str):
        options.append(TEXT)
    if not isinstance(value, bool | int | float) or isinstance(value, bool):
        options.append(st.integers(-(2**70), 2**70) | st.floats())
    if not isinstance(value, bool):
        options.append(st.booleans())
    if not isinstance(value, list):
        options.append(st.lists(SMALL_JSON, max_size=3))
    if not isinstance(value, dict):
        options.append(st.dictionaries(TEXT, SMALL_JSON, max_size=3))
    if value is not None:
        options.append(st.none())
    return st.one_of(options)


BYTE_MUTATIONS = [
    "truncate",
    "garbage-tail",
    "bom",
    "empty",
    "not-object",
    "raw-ff",
    "nul",
    "latin1",
    "whitespace-only",
    "form-encoded",
    "two-documents",
    "utf16",
]


@st.composite
def byte_mutated(draw: st.DrawFn, raw: bytes) -> tuple[bytes, str]:
    """The serialized body broken at the byte level."""
    kind = draw(st.sampled_from(BYTE_MUTATIONS))
    if kind == "truncate":
        return raw[: draw(st.integers(0, max(0, len(raw) - 1)))], kind
    if kind == "garbage-tail":
        return raw + draw(st.binary(min_size=1, max_size=20)), kind
    if kind == "bom":
        return b"\xef\xbb\xbf" + raw, kind
    if kind == "empty":
        return b"", kind
    if kind == "not-object":
        top = draw(st.sampled_from([b"[]", b"[" + raw + b"]", b'"x"', b"1", b"null", b"true"]))
        return top, kind
    if kind == "raw-ff":
        at = draw(st.integers(0, len(raw)))
        return raw[:at] + b"\xff" + raw[at:], kind
    if kind == "nul":
        at = draw(st.integers(0, len(raw)))
        return raw[:at] + b"\x00" + raw[at:], kind
    if kind == "latin1":
        return raw.decode("utf-8", "replace").encode("latin-1", "replace") + b'"\xe9"', kind
    if kind == "whitespace-only":
        return draw(st.sampled_from([b" ", b"\n\n", b"\t \r\n"])), kind
    if kind == "form-encoded":
        return b"model=fake-model&messages=hi", kind
    if kind == "two-documents":
        return raw + b"\n" + raw, kind
    return raw.decode("utf-8", "replace").encode("utf-16"), kind

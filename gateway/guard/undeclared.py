"""Tool-call parameters the tool's schema never declared.

JSON Schema lets an object carry names its `properties` do not list unless it says
`additionalProperties: false`, and most clients' tool schemas do not say it; a Python tool
called with `**arguments` then crashes on a name it does not take. So, under the policies
`repair` and `strip`, an object schema that lists `properties` and says nothing about other
names takes only those names: the others are undeclared (reported, or dropped). Under `allow`
it is JSON Schema's reading: anything goes.

A schema that does say what else it takes is respected under every policy: names matching its
`patternProperties` are declared, `additionalProperties: true` or a schema, `propertyNames` and
`unevaluatedProperties` leave the object open to the schema's own judgement, and
`additionalProperties: false` is enforced by validation as the client wrote it. Names declared
in `allOf`, `anyOf`, `oneOf`, `if`/`then`/`else` or `dependentSchemas` count as declared, and so
do names a schema requires (`required`, `dependentRequired`) without listing them: a sloppy
schema must not make a call impossible.

Before any of that, when cleaning is on, a near miss is renamed: an undeclared name equal to
exactly one declared name not given yet, ignoring case and separators (`userId` -> `user_id`),
and the only such name in its object.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.config.guard import UndeclaredPolicy
from gateway.guard.cleaning import Change, Schema, declared_types, map_items, resolve_local
from gateway.guard.problems import PathPart, argument_path
from gateway.guard.schemas import search

_COMPOSITIONS = ("allOf", "anyOf", "oneOf")
_SINGLE = ("if", "then", "else")
_DYNAMIC = ("$dynamicRef", "$recursiveRef")
_MAX_PARTS = 64  # members gathered for one object: a real tool schema has a handful
_SEPARATORS = re.compile(r"[\s_\-.]+")


@dataclass(frozen=True, slots=True)
class Undeclared:
    """A name the object at `path` does not declare."""

    path: tuple[PathPart, ...]
    name: str
    declared: tuple[str, ...]  # the object's declared names, for the model's feedback
    missing: tuple[str, ...]  # the declared names the call does not give


@dataclass
class Review:
    arguments: Any
    changes: list[Change] = field(default_factory=list)  # renamed, and stripped by policy
    undeclared: list[Undeclared] = field(default_factory=list)  # left for the policy: repair
    renamed: bool = False


def review_parameters(
    arguments: Any, schema: Any, policy: UndeclaredPolicy, *, rename: bool
) -> Review:
    """`arguments` with near misses renamed (when `rename`) and, under `strip`, undeclared
    names dropped; under `repair`, what is undeclared. The input is never mutated."""
    root = schema if isinstance(schema, Mapping) else {}
    review = Review(arguments)
    review.arguments = _Walker(root, policy, rename, review).walk(arguments, schema, ())
    return review


def normalized_name(name: str) -> str:
    """`userId`, `user_id`, `User-ID` -> `userid`: a name ignoring case and separators."""
    return _SEPARATORS.sub("", name).casefold()


@dataclass(frozen=True, slots=True)
class _Object:
    """What an object schema (with its composition members) says about names."""

    properties: dict[str, list[Any]]  # declared name -> the subschemas that declare it
    patterns: dict[str, list[Any]]
    extra: list[Any]  # `additionalProperties` schemas (true, or a schema)
    listed: bool  # some member lists `properties` (an empty list declares no name)
    closed: bool  # some member says `additionalProperties: false`
    opened: bool  # some member lets the schema judge other names itself

    def declares(self, name: str) -> bool:
        # A name whose pattern check cannot finish in time counts as declared: never blamed.
        return name in self.properties or any(search(p, name) is not False for p in self.patterns)


class _Walker:
    def __init__(
        self, root: Schema, policy: UndeclaredPolicy, rename: bool, review: Review
    ) -> None:
        self._root = root
        self._policy = policy
        self._rename = rename
        self._review = review

    def walk(self, value: Any, schema: Any, path: tuple[PathPart, ...]) -> Any:
        resolved = resolve_local(schema, self._root)
        if resolved is None:
            return value
        if isinstance(value, dict):
            return self._object(value, resolved, path)
        if isinstance(value, list):
            return self._array(value, resolved, path)
        return value

    def _object(self, value: dict[str, Any], schema: Schema, path: tuple[PathPart, ...]) -> Any:
        if not _may_be_object(schema):
            return value
        shape = self._shape(schema)
        if shape is None:
            return value  # a member we cannot read: it may declare any name
        out: dict[str, Any] = {}
        renames = self._renames(value, shape) if self._rename else {}
        for key, item in value.items():
            name = renames.get(key, key)
            if name != key:
                self._review.renamed = True
                line = f"{argument_path((*path, key))}: renamed to {name!r}"
                self._review.changes.append(Change(line, "renamed"))
            sub = _only(shape.properties.get(name, ()))
            if sub is None and name not in shape.properties:
                sub = self._other(name, shape, path, value)
                if sub is _DROP:
                    continue
            out[name] = item if sub is None else self.walk(item, sub, (*path, name))
        changed = list(out) != list(value) or any(out[k] is not value[k] for k in out)
        return out if changed else value

    def _other(self, name: str, shape: _Object, path: tuple[PathPart, ...], value: Any) -> Any:
        """The schema for an undeclared `name` (None: not walked), or _DROP."""
        matching = [sub for p, subs in shape.patterns.items() if search(p, name) for sub in subs]
        if shape.declares(name):
            return _only(matching)
        if shape.opened or shape.closed or not shape.listed:
            return _only(shape.extra)  # the schema judges it (false: validation rejects it)
        if self._policy == "allow":
            return None
        if self._policy == "strip":
            line = f"{argument_path((*path, name))}: not a declared parameter, removed"
            self._review.changes.append(Change(line, "undeclared_stripped"))
            return _DROP
        declared = tuple(shape.properties)
        missing = tuple(n for n in declared if n not in value)
        self._review.undeclared.append(Undeclared(path, name, declared, missing))
        return None

    def _renames(self, value: dict[str, Any], shape: _Object) -> dict[str, str]:
        """Undeclared name -> the declared one it equals ignoring case and separators, where
        both sides of the match are unique (two candidates, or two names for one: none)."""
        if not (self._policy != "allow" or shape.closed) or shape.opened or not shape.listed:
            return {}
        by_form: dict[str, list[str]] = {}
        for name in shape.properties:
            if name not in value:
                by_form.setdefault(normalized_name(name), []).append(name)
        wanted: dict[str, list[str]] = {}
        for key in value:
            if not shape.declares(key):
                targets = by_form.get(normalized_name(key), [])
                if len(targets) == 1:
                    wanted.setdefault(targets[0], []).append(key)
        return {keys[0]: target for target, keys in wanted.items() if len(keys) == 1}

    def _array(self, value: list[Any], schema: Schema, path: tuple[PathPart, ...]) -> Any:
        schema = self._branch(schema) or schema  # its own alternatives are not followed

        def walk(item: Any, sub: Any, index: int) -> Any:
            if not isinstance(sub, Mapping | bool):
                return item
            return self.walk(item, sub, (*path, index))

        return map_items(value, schema, walk)

    def _branch(self, schema: Schema) -> Schema | None:
        """The one `anyOf`/`oneOf` alternative that takes an array, when there is one."""
        branches = schema.get("anyOf", schema.get("oneOf"))
        if not isinstance(branches, list):
            return None
        resolved = [resolve_local(b, self._root) for b in branches]
        if any(b is None for b in resolved):
            return None
        arrays = [b for b in resolved if b is not None and _may_be_array(b)]
        return arrays[0] if len(arrays) == 1 else None

    def _shape(self, schema: Schema) -> _Object | None:
        properties: dict[str, list[Any]] = {}
        patterns: dict[str, list[Any]] = {}
        extra: list[Any] = []
        listed = closed = opened = False
        for part in self._parts(schema):
            if part is None or any(k in part for k in _DYNAMIC):
                return None
            declared = part.get("properties")
            if isinstance(declared, Mapping):
                listed = True
                for name, sub in declared.items():
                    properties.setdefault(name, []).append(sub)
            for name in _required_names(part):
                properties.setdefault(name, [])
            pattern_map = part.get("patternProperties")
            if isinstance(pattern_map, Mapping):
                for pattern, sub in pattern_map.items():
                    patterns.setdefault(pattern, []).append(sub)
            additional = part.get("additionalProperties", None)
            if additional is False:
                closed = True
            elif additional is not None:
                extra.append(additional)
            # Keywords by which the schema itself judges the names it does not list.
            opened = opened or additional not in (None, False)
            opened = opened or "unevaluatedProperties" in part or "propertyNames" in part
        return _Object(properties, patterns, extra, listed, closed, opened)

    def _parts(self, schema: Schema) -> Iterator[Schema | None]:
        """The schema and every composition member under it (None for an unreadable one)."""
        pending: list[Any] = [schema]
        seen = 0
        while pending:
            seen += 1
            if seen > _MAX_PARTS:
                yield None
                return
            part = resolve_local(pending.pop(), self._root)
            yield part
            if part is None:
                return
            for key in _COMPOSITIONS:
                members = part.get(key)
                if isinstance(members, list):
                    pending += members
            pending += [part[key] for key in _SINGLE if key in part]
            dependent = part.get("dependentSchemas")
            if isinstance(dependent, Mapping):
                pending += list(dependent.values())


_DROP = object()  # "leave this name out", distinct from every schema


def _required_names(schema: Schema) -> Iterator[str]:
    required = schema.get("required")
    if isinstance(required, list):
        yield from (name for name in required if isinstance(name, str))
    dependent = schema.get("dependentRequired")
    if isinstance(dependent, Mapping):
        for key, names in dependent.items():
            yield key
            if isinstance(names, list):
                yield from (name for name in names if isinstance(name, str))


def _only(subs: Any) -> Any:
    """The one schema among `subs` to walk a value with; None when there are none or several
    (a value judged by two schemas is not walked: neither may be the whole story)."""
    subs = list(subs)
    return subs[0] if len(subs) == 1 else None


def _may_be_object(schema: Schema) -> bool:
    types = declared_types(schema)
    return types is None or "object" in types


def _may_be_array(schema: Schema) -> bool:
    types = declared_types(schema)
    return types is not None and "array" in types

""" "Did you mean": the allowed field name nearest an unknown one, at the level it was written
(`providers.x.base_ulr` -> `base_url`), for config.yaml and policy files alike."""

from __future__ import annotations

import difflib
import types
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel


def did_you_mean(model: type[BaseModel], loc: Sequence[Any]) -> str:
    """' (did you mean 'x'?)' for the unknown field at `loc` (a pydantic error location, the
    unknown name last) when an allowed name at that level is close; else ''."""
    if not loc or not isinstance(loc[-1], str):
        return ""
    names = allowed_names(model, loc[:-1])
    close = difflib.get_close_matches(loc[-1], sorted(names), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def allowed_names(model: type[BaseModel], parent: Sequence[Any]) -> set[str]:
    """The field names a mapping at `parent` (below `model`) may hold: the fields of every
    model that can stand there."""
    kinds: list[Any] = [model]
    for part in parent:
        kinds = [nxt for kind in kinds for nxt in _below(kind, part)]
    return {
        field.alias or name
        for kind in kinds
        if _is_model(kind)
        for name, field in kind.model_fields.items()
    }


def _below(kind: Any, part: Any) -> Iterable[Any]:
    """The types that can stand at `part` below a value of type `kind`."""
    for option in _options(kind):
        origin = get_origin(option)
        if _is_model(option):
            if part in option.model_fields:
                yield from _options(option.model_fields[part].annotation)
            elif part == option.__name__:  # a union member, as pydantic names it in locations
                yield option
        elif origin is dict and isinstance(part, str):
            yield from _options(get_args(option)[1])
        elif origin in (list, tuple) and isinstance(part, int):
            yield from _options(get_args(option)[0])


def _options(kind: Any) -> list[Any]:
    """`kind` without Optional, unions and Annotated: each type a value may have."""
    origin = get_origin(kind)
    if origin is Annotated:
        return _options(get_args(kind)[0])
    if origin is Union or isinstance(kind, types.UnionType):
        return [o for arg in get_args(kind) for o in _options(arg)]
    return [kind]


def _is_model(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, BaseModel)

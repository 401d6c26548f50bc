"""The shape every later stage relies on, checked where upstream answers come in.

The gateway relays what an upstream says (unknown fields included) but reads a few things
itself: `choices` and each choice's `message` or `delta`, their text `content` and
`tool_calls`, embeddings' `data`. An answer where those have another shape (a buggy or hostile
upstream) is an invalid upstream response, like malformed JSON: retried, then fallen back
from, never a crash later on.
"""

from __future__ import annotations

from typing import Any, TypeGuard

Json = dict[str, Any]


def completion_problem(data: Json) -> str | None:
    return _choices_problem(data, "message")


def chunk_problem(data: Json) -> str | None:
    # Every chunk of every stream: what nearly all of them are (text deltas, or none) is
    # passed in one look; anything else gets the general check, which names the problem.
    choices = data.get("choices")
    if choices is None:
        return None
    if type(choices) is not list:
        return _choices_problem(data, "delta", required=False)
    for choice in choices:
        delta = choice.get("delta") if type(choice) is dict else False
        if delta is None:
            continue
        if (
            type(delta) is not dict
            or type(delta.get("content", "")) not in (str, type(None))
            or delta.get("tool_calls") is not None
        ):
            return _choices_problem(data, "delta", required=False)
    return None


# A native answer's list of what it says (upstream/native.py): a completion's choices, a
# Response's output items.
_NATIVE_LISTS = {"completions": "choices", "responses": "output"}


def native_problem(endpoint: str, data: Json) -> str | None:
    """What is wrong with a plain native answer, if anything (it is already a JSON object)."""
    field = _NATIVE_LISTS[endpoint]
    return None if _objects(data.get(field)) else f"`{field}` is not a list of objects"


def embeddings_problem(data: Json) -> str | None:
    if not _objects(data.get("data")):
        return "`data` is not a list of objects"
    return None


def _choices_problem(data: Json, part: str, required: bool = True) -> str | None:
    choices = data.get("choices")
    if choices is None and not required:
        return None  # e.g. the usage chunk
    if not _objects(choices):
        return "`choices` is not a list of objects"
    for choice in choices:
        body = choice.get(part)
        if body is None and not required:
            continue
        if not isinstance(body, dict):
            return f"a choice's `{part}` is not an object"
        content = body.get("content")
        if content is not None and not isinstance(content, str):
            return f"a choice's `{part}.content` is not text"
        calls = body.get("tool_calls")
        if calls is not None and not _objects(calls):
            return f"a choice's `{part}.tool_calls` is not a list of objects"
    return None


def _objects(items: object) -> TypeGuard[list[Json]]:
    """A list of objects (an empty one too)."""
    return isinstance(items, list) and all(isinstance(item, dict) for item in items)

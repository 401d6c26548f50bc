"""The shape every later stage relies on, checked where upstream answers come in.

The gateway relays what an upstream says (unknown fields included) but reads a few things
itself: `choices` and each choice's `message` or `delta`, their text `content` and
`tool_calls`, embeddings' `data`. A 200 where those are missing or have another shape (a buggy
or hostile upstream, a proxy's page, a provider that reports errors with status 200) is an
invalid upstream answer, like malformed JSON: retried, then fallen back from, counted by
`reason`, never cached and never a crash later on.

What is checked is only what a valid answer always has, so no real answer is refused: a
completion has at least one choice, each with a `message` object (its `content` may be null
beside tool calls or a refusal); a stream chunk has a `choices` list (empty in a usage chunk
or Azure's prompt-filter chunk), each choice with a `delta` object (Azure's content-filter
annotations excepted), and a stream has a choice before it ends. Everything else passes
through untouched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeGuard

Json = dict[str, Any]

# The bounded `reason` labels of gateway_upstream_invalid_answers_total.
CONTENT_TYPE = "content_type"  # a plain answer that is not JSON by its Content-Type, or a
# stream that is not text/event-stream
NOT_JSON = "not_json"  # not JSON, not UTF-8, or JSON that is not an object
ERROR_OBJECT = "error_object"  # an error body (`{"error": ...}`) with status 200
CHOICES = "choices"  # `choices` (embeddings: `data`; Responses: `output`) missing, not a
# list of objects, or empty
MESSAGE = "message"  # a choice without its `message` object, or with text that is not text
DELTA = "delta"  # the same for a stream chunk's choice and its `delta`
CHUNK = "chunk"  # a stream event that is not a chat.completion.chunk
EMPTY_STREAM = "empty_stream"  # a stream that ended before any choice
REASONS = (CONTENT_TYPE, NOT_JSON, ERROR_OBJECT, CHOICES, MESSAGE, DELTA, CHUNK, EMPTY_STREAM)

# A chunk's `object`: Azure's prompt-filter chunk says "", some providers leave it out.
_CHUNK_OBJECTS = frozenset({"chat.completion.chunk", ""})


@dataclass(frozen=True, slots=True)
class Problem:
    reason: str  # one of REASONS
    detail: str  # for the error message


def is_json_type(content_type: str) -> bool:
    """`application/json` (any parameters) or a `+json` type: the only media types a plain
    answer may have. A JSON body under text/html or no type at all is someone else's page."""
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and "+json" in media)


def is_error_object(data: Json, field: str = "choices") -> bool:
    """An OpenAI error body answered with status 200 (some providers do): not a success."""
    return "error" in data and field not in data


def completion_problem(data: Json) -> Problem | None:
    choices = data.get("choices")
    if not _objects(choices) or not choices:
        return Problem(CHOICES, "`choices` is not a non-empty list of objects")
    return _parts_problem(choices, "message", MESSAGE)


def chunk_problem(data: Json) -> Problem | None:
    # Every chunk of every stream: what nearly all of them are (text deltas) is passed in one
    # look; anything else gets the general check, which names the problem.
    choices = data.get("choices")
    if type(choices) is list:
        for choice in choices:
            delta = choice.get("delta") if type(choice) is dict else False
            if (
                type(delta) is not dict
                or type(delta.get("content", "")) not in (str, type(None))
                or delta.get("tool_calls") is not None
            ):
                return _chunk_problem(data)
        return None if _is_chunk_object(data.get("object")) else _chunk_problem(data)
    return _chunk_problem(data)


def has_choice(chunk: Json) -> bool:
    """Whether a (checked) chunk carries a choice: a stream must have one before it ends."""
    return bool(chunk.get("choices"))


# A native answer's list of what it says (upstream/native.py): a completion's choices, a
# Response's output items (which may be empty: a background Response starts with none).
_NATIVE_LISTS = {"completions": "choices", "responses": "output"}


def native_field(endpoint: str) -> str:
    return _NATIVE_LISTS[endpoint]


def native_problem(endpoint: str, data: Json) -> Problem | None:
    """What is wrong with a plain native answer, if anything (it is already a JSON object)."""
    field = _NATIVE_LISTS[endpoint]
    items = data.get(field)
    if not _objects(items) or (endpoint == "completions" and not items):
        return Problem(CHOICES, f"`{field}` is not a list of objects")
    return None


def embeddings_problem(data: Json) -> Problem | None:
    items = data.get("data")
    if not _objects(items) or not items:
        return Problem(CHOICES, "`data` is not a non-empty list of objects")
    if any(not isinstance(item.get("embedding"), list | str) for item in items):
        return Problem(CHOICES, "an item of `data` has no `embedding`")
    return None


def _chunk_problem(data: Json) -> Problem | None:
    kind = data.get("object")
    if not _is_chunk_object(kind):
        return Problem(CHUNK, f"a stream event is a {str(kind)[:40]!r}, not a completion chunk")
    choices = data.get("choices")
    if choices is None:
        if isinstance(data.get("usage"), dict):
            return None  # some providers' usage chunk carries no `choices` at all
        return Problem(CHUNK, "a stream chunk has no `choices`")
    if not _objects(choices):
        return Problem(CHUNK, "a stream chunk's `choices` is not a list of objects")
    # Azure's asynchronous content filter annotates a choice without a delta.
    said = [choice for choice in choices if "content_filter_results" not in choice]
    return _parts_problem(said, "delta", DELTA)


def _is_chunk_object(kind: object) -> bool:
    return kind is None or (isinstance(kind, str) and kind in _CHUNK_OBJECTS)


def _parts_problem(choices: list[Json], part: str, reason: str) -> Problem | None:
    for choice in choices:
        body = choice.get(part)
        if not isinstance(body, dict):
            return Problem(reason, f"a choice's `{part}` is not an object")
        content = body.get("content")
        if content is not None and not isinstance(content, str):
            return Problem(reason, f"a choice's `{part}.content` is not text")
        calls = body.get("tool_calls")
        if calls is not None and not _objects(calls):
            return Problem(reason, f"a choice's `{part}.tool_calls` is not a list of objects")
    return None


def _objects(items: object) -> TypeGuard[list[Json]]:
    """A list of objects (an empty one too)."""
    return isinstance(items, list) and all(isinstance(item, dict) for item in items)

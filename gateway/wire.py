"""OpenAI wire types at the gateway's edge.

Requests are validated with strict pydantic models that *allow* unknown fields: we check what
we rely on, and forward the client's original JSON (not a re-dump of these models), so fields
we do not understand reach the upstream untouched.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.errors import ECHO_CHARS, InvalidRequest, clip, echo
from gateway.util.tokens import message_text


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class FunctionCall(_Open):
    name: str
    arguments: str


class ToolCall(_Open):
    id: str
    type: str = "function"
    function: FunctionCall | None = None


class ContentPart(_Open):
    """One part of a message's content: its kind, and its text when it has one (every stage
    that reads a message reads this); other kinds' fields pass through unread."""

    type: str
    text: str | None = None


class Message(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None


class FunctionDef(_Open):
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Open):
    type: str = "function"
    function: FunctionDef | None = None


class StreamOptions(_Open):
    include_usage: bool | None = None


class ChatCompletionRequest(_Open):
    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: int | None = Field(None, ge=1, le=128)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    tools: list[Tool] | None = None
    tool_choice: str | dict[str, Any] | None = None

    @property
    def wants_usage_in_stream(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class ChatParams(Protocol):
    """What the pipeline reads of a chat request; the body itself is forwarded as it came."""

    @property
    def model(self) -> str: ...

    @property
    def stream(self) -> bool | None: ...

    @property
    def n(self) -> int | None: ...

    @property
    def wants_usage_in_stream(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class _PlainChat:
    model: str
    stream: bool | None
    n: int | None
    wants_usage_in_stream: bool


def chat_params(data: Any) -> ChatParams:
    """A chat request body, validated. The common shape (text messages, no tools, plain
    parameters) is checked as a dict, without building models; anything else, accepted or
    refused, goes through `ChatCompletionRequest`, so every refusal names its field as before."""
    if not _plain_chat(data):
        chat: ChatCompletionRequest = validate(ChatCompletionRequest, data)
        _check_tool_choice(data.get("tools") or [], data.get("tool_choice"))
        return chat
    options = data.get("stream_options")
    return _PlainChat(
        data["model"],
        data.get("stream", False),
        data.get("n"),
        bool(options and options.get("include_usage")),
    )


def _check_tool_choice(tools: list[Any], choice: Any) -> None:
    """A `tool_choice` that names a tool the request does not declare, or asks for a call
    with no tools at all, is the client's error: a 400 now, before any upstream call (the
    tool guard would otherwise spend repairs asking the model for a call it cannot make)."""
    if choice is None or choice in ("auto", "none"):
        return
    if not tools and (choice == "required" or isinstance(choice, dict)):
        raise InvalidRequest(
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are "
            "specified.",
            param="tool_choice",
            code="invalid_value",
        )
    if not isinstance(choice, dict):
        return
    declared = {_tool_name(tool) for tool in tools}
    if choice.get("type") == "function":
        wanted = [_tool_name(choice)]
    elif choice.get("type") == "allowed_tools" and isinstance(choice.get("allowed_tools"), dict):
        wanted = [_tool_name(tool) for tool in choice["allowed_tools"].get("tools") or []]
    else:
        return  # a form the upstream validates
    for name in wanted:
        if name is not None and name not in declared:
            raise InvalidRequest(
                f"Invalid value for 'tool_choice': it names the tool {echo(name)}, which is "
                "not declared in 'tools'.",
                param="tool_choice",
                code="invalid_value",
            )


def _tool_name(tool: Any) -> str | None:
    """A tool's (or a named tool choice's) name: `{"type", "function": {"name"}}`, the flat
    `{"type", "name"}`, or `{"type": T, T: {"name"}}` (custom tools)."""
    if not isinstance(tool, dict):
        return None
    kind = tool.get("type", "function")
    inner = tool.get(kind) if isinstance(kind, str) else None
    name = inner.get("name") if isinstance(inner, dict) else tool.get("name")
    return name if isinstance(name, str) else None


_ROLES = frozenset(("system", "developer", "user", "assistant", "tool", "function"))
_NUMBERS = {"temperature": 2.0, "top_p": 1.0}  # float fields, from 0 to this


def _plain_chat(data: Any) -> bool:
    """True only for a body ChatCompletionRequest accepts (strict types, its bounds); False
    sends it to the model, which accepts or refuses it with the field named."""
    if type(data) is not dict:
        return False
    model, messages = data.get("model"), data.get("messages")
    if type(model) is not str or not model or type(messages) is not list or not messages:
        return False
    for message in messages:
        if type(message) is not dict:
            return False
        role = message.get("role")
        if type(role) is not str or role not in _ROLES:
            return False
        for key in ("content", "name", "tool_call_id"):
            value = message.get(key)
            if value is not None and type(value) is not str:
                return False
        if message.get("tool_calls") is not None:
            return False
    if data.get("tools") is not None or type(data.get("stream", False)) not in (bool, type(None)):
        return False
    choice, options = data.get("tool_choice"), data.get("stream_options")
    if choice is not None and choice not in ("auto", "none"):  # the model checks the rest
        return False
    if options is not None and (
        type(options) is not dict or type(options.get("include_usage")) not in (bool, type(None))
    ):
        return False
    n = data.get("n")
    if n is not None and (type(n) is not int or not 1 <= n <= 128):
        return False
    for key in ("max_tokens", "max_completion_tokens"):
        value = data.get(key)
        if value is not None and (type(value) is not int or value < 1):
            return False
    for key, top in _NUMBERS.items():
        value = data.get(key)
        if value is not None and (type(value) is not float or not 0.0 <= value <= top):
            return False
    return True


def last_user_text(body: dict[str, Any]) -> str | None:
    """The text of the last turn when it is a user's text turn; None when it is not (a tool
    result, an image, an assistant prefill), which makes the request uncacheable."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else None
    if not isinstance(last, dict) or last.get("role") != "user":
        return None
    content = last.get("content")
    if isinstance(content, list) and any(
        not isinstance(part, dict) or part.get("type") != "text" for part in content
    ):
        return None
    text = message_text(last)
    return text if text.strip() else None


MAX_EMBEDDING_DIMENSIONS = 16_384


class EmbeddingRequest(_Open):
    model: str = Field(min_length=1)
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float", "base64"] | None = None
    # OpenAI's largest model has 3072; the bound keeps a typo from allocating gigabytes.
    dimensions: int | None = Field(None, ge=1, le=MAX_EMBEDDING_DIMENSIONS)


def validate(model: type[BaseModel], data: Any) -> Any:
    """Validate a parsed JSON body, turning the first error into a 400 naming the field."""
    if not isinstance(data, dict):
        raise InvalidRequest("the request body must be a JSON object", code="invalid_body")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        # A union (a message's content: a string or a list of parts) reports one error per
        # member; name the deepest one under the first field, the one the client got wrong.
        errors = exc.errors()
        first = _param(errors[0]["loc"])
        err = max(
            (e for e in errors if _param(e["loc"]).startswith(first)),
            key=lambda e: len(_param(e["loc"])),
        )
        param = clip(_param(err["loc"]), ECHO_CHARS)  # a dict key in it is the client's
        if err["type"] == "missing":
            message = f"missing required parameter: '{param}'"
            code = "missing_required_parameter"
        else:
            message = f"invalid value for '{param}': {err['msg']}"
            code = "invalid_value"
        raise InvalidRequest(message, param=param, code=code) from None


def _param(loc: tuple[Any, ...]) -> str:
    # pydantic adds the union member name ("str", "list[...]") to loc: drop those.
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "[" in part or part in {"str", "int", "float", "bool", "function-after"}:
            continue
        else:
            out += f".{part}" if out else part
    return out


# --- building responses (the demo provider, and later cache replay and degraded answers) ---


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def chat_completion(
    model: str,
    message: dict[str, Any],
    finish_reason: str,
    usage: dict[str, int] | None,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "id": completion_id(),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        ],
        "usage": usage,
        **extra,
    }


def chunk(
    id_: str,
    model: str,
    created: int,
    delta: dict[str, Any] | None,
    finish_reason: str | None = None,
    usage: dict[str, int] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One `chat.completion.chunk`; `delta=None` makes the usage-only chunk (no choices)."""
    choices = (
        []
        if delta is None
        else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]
    )
    out = {
        "id": id_,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": choices,
        **extra,
    }
    if usage is not None:
        out["usage"] = usage
    return out


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }

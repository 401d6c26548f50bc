"""A Responses API request -> the gateway's chat body, and the input items it lists.

Every capability of the gateway works on chat bodies, so a Responses request is translated
once, here, into the body a chat completions client would have sent for the same question:
the cache, routing, guards and knowledge bases then treat both alike (and a question asked
either way shares cache entries). Only fields the client set are translated, for the same
reason. What has no chat equivalent is refused with the field named (docs/RESPONSES.md).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, with_config
from typing_extensions import TypedDict

from gateway.errors import InvalidRequest, echo
from gateway.responses.items import new_id, text_part
from gateway.wire import validate

Json = dict[str, Any]

# The built-in tools a provider runs itself: only an upstream serving /responses natively can.
BUILT_IN_TOOLS = frozenset(
    {
        "web_search",
        "web_search_preview",
        "web_search_preview_2025_03_11",
        "web_search_2025_08_26",
        "file_search",
        "computer",
        "computer_use_preview",
        "code_interpreter",
        "image_generation",
        "mcp",
        "local_shell",
        "shell",
        "apply_patch",
        "tool_search",
    }
)
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
# Every field of the official CreateResponse: what is not among them is a provider's own
# extension (vLLM's top_k, say, sent with the SDK's extra_body) and goes upstream as it is.
RESPONSES_FIELDS = frozenset(
    {
        "background",
        "context_management",
        "conversation",
        "include",
        "input",
        "instructions",
        "max_output_tokens",
        "max_tool_calls",
        "metadata",
        "model",
        "moderation",
        "parallel_tool_calls",
        "previous_response_id",
        "prompt",
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
        "reasoning",
        "safety_identifier",
        "service_tier",
        "store",
        "stream",
        "stream_options",
        "temperature",
        "text",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "truncation",
        "user",
    }
)
# Responses fields copied to the chat body under the same name, when the client set them.
_SAME_NAME = (
    "temperature",
    "top_p",
    "user",
    "service_tier",
    "prompt_cache_key",
    "safety_identifier",
)


_Summary = Literal["auto", "concise", "detailed"]


# The Response echoes `reasoning` and `text` as they came: their known fields are checked here,
# so that a value the schema forbids is a 400 naming it rather than an invalid Response.
@with_config(ConfigDict(extra="allow"))
class ReasoningParam(TypedDict, total=False):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None
    summary: _Summary | None
    generate_summary: _Summary | None


@with_config(ConfigDict(extra="allow"))
class TextParam(TypedDict, total=False):
    format: Any  # checked by _text
    verbosity: Literal["low", "medium", "high"] | None


class ResponsesRequest(BaseModel):
    """What the gateway reads of `POST /v1/responses` (strict types, unknown fields allowed)."""

    model_config = ConfigDict(extra="allow", strict=True)

    model: Annotated[str, Field(min_length=1)]
    input: str | list[Json] | None = None
    instructions: str | None = None
    tools: list[Json] | None = None
    tool_choice: Literal["none", "auto", "required"] | Json | None = None
    parallel_tool_calls: bool | None = None
    text: TextParam | None = None
    max_output_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    reasoning: ReasoningParam | None = None
    store: bool | None = None
    stream: bool | None = None
    previous_response_id: Annotated[str, Field(min_length=1)] | None = None
    background: bool | None = None
    truncation: Literal["auto", "disabled"] | None = None

    @property
    def stores(self) -> bool:
        return self.store is not False  # OpenAI's default: stored


def parse(body: Any) -> ResponsesRequest:
    request: ResponsesRequest = validate(ResponsesRequest, body)
    if request.input is None and request.previous_response_id is None:
        raise InvalidRequest("Missing required parameter: 'input'.", param="input")
    for name in ("background", "conversation", "prompt"):
        if body.get(name):
            raise InvalidRequest(
                f"'{name}' is not supported by this gateway: it serves responses as they are "
                "generated, from the request itself.",
                param=name,
                code="unsupported_parameter",
            )
    return request


def built_in_tools(request: ResponsesRequest) -> list[str]:
    """The request's tools that only the provider can run (empty: the gateway translates)."""
    return [str(tool.get("type")) for tool in request.tools or [] if tool.get("type") != "function"]


def chat_body(
    request: ResponsesRequest, body: Json, turn: list[Json], *, tools: bool = True
) -> Json:
    """The chat completions body for this request. `turn`: the conversation in chat messages,
    the earlier turns of a response it continues first, without their instructions (as at
    OpenAI, instructions are not carried over: this request's own go first)."""
    system = [{"role": "system", "content": request.instructions}] if request.instructions else []
    if not system + turn:  # else the chat validation's 400 would name 'messages'
        raise InvalidRequest("'input' is empty: there is nothing to respond to.", param="input")
    chat: Json = {"model": request.model, "messages": system + turn}
    chat.update((k, v) for k, v in body.items() if k not in RESPONSES_FIELDS)
    for name in _SAME_NAME:
        if name in body and body[name] is not None:
            chat[name] = body[name]
    if request.max_output_tokens is not None:
        chat["max_completion_tokens"] = request.max_output_tokens
    if request.top_logprobs:
        chat["logprobs"], chat["top_logprobs"] = True, request.top_logprobs
    if request.tools and tools:
        chat["tools"], choice = _tools(request.tools, request.tool_choice)
        if choice is not None:
            chat["tool_choice"] = choice
        if request.parallel_tool_calls is not None:
            chat["parallel_tool_calls"] = request.parallel_tool_calls
    elif tools and request.tool_choice not in (None, "auto", "none"):
        raise InvalidRequest(
            "'tool_choice' names a tool but 'tools' is empty.", param="tool_choice"
        )
    chat.update(_text(request.text))
    effort = (request.reasoning or {}).get("effort")
    if effort is not None:
        chat["reasoning_effort"] = effort
    if request.stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    return chat


def input_items(request: ResponsesRequest) -> list[Json]:
    """The request's input as items with ids, as `GET /v1/responses/{id}/input_items` lists
    them (a string input is one user message)."""
    given = request.input
    if given is None:
        return []
    if isinstance(given, str):
        given = [{"role": "user", "content": given}]
    items = []
    for index, item in enumerate(given):
        if not isinstance(item, dict):
            raise InvalidRequest(f"input[{index}] must be an object.", param=f"input[{index}]")
        kind = item.get("type", "message")
        if not isinstance(kind, str):
            raise InvalidRequest(
                f"input[{index}].type must be a string.", param=f"input[{index}].type"
            )
        if kind == "message":
            item = {**item, "type": "message", "content": _parts(item, index)}
            item.setdefault("status", "completed")
        items.append({"id": item.get("id") or new_id(_ID_PREFIX.get(kind, "item")), **item})
    return items


_ID_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco"}


def conversation(items: list[Json], *, provider_items: bool = False) -> list[Json]:
    """Input items -> chat messages. Consecutive function calls (and the assistant text just
    before them) make one assistant message, as a chat client sends parallel calls.
    `provider_items`: skip the items of built-in tools (a native request's), which no chat
    message can hold, instead of refusing them."""
    messages: list[Json] = []
    for index, item in enumerate(items):
        kind = item.get("type", "message")
        if kind == "message":
            messages.append(_message(item, index))
        elif kind == "function_call":
            _add_call(messages, item, index)
        elif kind == "function_call_output":
            messages.append(_call_output(item, index))
        elif kind == "reasoning" or provider_items:
            continue  # a model's own reasoning: chat upstreams take none back
        else:
            raise InvalidRequest(
                f"Input items of type {echo(kind)} are not supported by this gateway (it serves "
                "messages, function_call and function_call_output items).",
                param=f"input[{index}].type",
                code="unsupported_item_type",
            )
    return messages


def _message(item: Json, index: int) -> Json:
    role = _ROLES.get(item.get("role"))  # type: ignore[arg-type]
    if role is None:
        raise InvalidRequest(
            f"input[{index}].role must be one of user, assistant, system or developer, not "
            f"{echo(item.get('role'))}.",
            param=f"input[{index}].role",
        )
    parts = [_chat_part(part, role, index, i) for i, part in enumerate(item["content"])]
    if all(part["type"] == "text" for part in parts):
        texts = [part["text"] for part in parts]
        content: str | list[Json] = (
            texts[0] if len(texts) == 1 else ("".join(texts) if role == "assistant" else parts)
        )
        return {"role": role, "content": content}
    return {"role": role, "content": parts}


def _parts(item: Json, index: int) -> list[Json]:
    """A message item's content as a list of parts (a string is one text part)."""
    content = item.get("content")
    if isinstance(content, str):  # an assistant's as its output listed it, with every field
        if item.get("role") == "assistant":
            return [text_part(content)]
        return [{"type": "input_text", "text": content}]
    if not isinstance(content, list):
        raise InvalidRequest(
            f"input[{index}].content must be a string or a list of content parts.",
            param=f"input[{index}].content",
        )
    return content


def _chat_part(part: Any, role: str, index: int, at: int) -> Json:
    where = f"input[{index}].content[{at}]"
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in ("input_text", "output_text") and isinstance(part.get("text"), str):
        return {"type": "text", "text": part["text"]}
    if kind == "refusal" and isinstance(part.get("refusal"), str):
        return {"type": "text", "text": part["refusal"]}
    if kind == "input_image" and role == "user":
        url = part.get("image_url")
        if not isinstance(url, str):
            raise InvalidRequest(
                f"{where}: images are accepted by URL or data URL in 'image_url' (this "
                "gateway has no Files API for 'file_id').",
                param=f"{where}.image_url",
                code="unsupported_parameter",
            )
        image = {"url": url, **({"detail": part["detail"]} if part.get("detail") else {})}
        return {"type": "image_url", "image_url": image}
    if kind == "input_file" and role == "user" and (part.get("file_data") or part.get("file_id")):
        keys = ("file_data", "file_id", "filename")
        return {"type": "file", "file": {k: part[k] for k in keys if part.get(k) is not None}}
    if kind == "input_audio" and role == "user" and isinstance(part.get("input_audio"), dict):
        return {"type": "input_audio", "input_audio": part["input_audio"]}
    raise InvalidRequest(
        f"{where} of type {echo(kind)} is not supported in a {role} message (parts: input_text, "
        "input_image, input_file, input_audio for users; output_text, refusal for the "
        "assistant).",
        param=f"{where}.type",
        code="unsupported_content_type",
    )


def _add_call(messages: list[Json], item: Json, index: int) -> None:
    call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
    if not (isinstance(call_id, str) and isinstance(name, str) and isinstance(arguments, str)):
        raise InvalidRequest(
            f"input[{index}]: a function_call item needs call_id, name and arguments (strings).",
            param=f"input[{index}]",
        )
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    last = messages[-1] if messages else None
    if (
        last is not None
        and last["role"] == "assistant"
        and isinstance(last.get("content"), str | None)
    ):
        last.setdefault("tool_calls", []).append(call)
        return
    messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _call_output(item: Json, index: int) -> Json:
    call_id, output = item.get("call_id"), item.get("output")
    if isinstance(output, list):  # content parts: their text, in order
        texts = [part.get("text") for part in output if isinstance(part, dict)]
        output = "".join(text for text in texts if isinstance(text, str))
    if not (isinstance(call_id, str) and isinstance(output, str)):
        raise InvalidRequest(
            f"input[{index}]: a function_call_output item needs call_id and output (strings).",
            param=f"input[{index}]",
        )
    return {"role": "tool", "tool_call_id": call_id, "content": output}


def _tools(tools: list[Json], choice: str | Json | None) -> tuple[list[Json], Any]:
    """Function tools and the tool choice in chat form."""
    translated: list[Json] = []
    for index, tool in enumerate(tools):
        if tool.get("type") != "function" or not isinstance(tool.get("name"), str):
            raise InvalidRequest(
                f"tools[{index}] of type {echo(tool.get('type'))} runs on the provider's side and "
                "this model's upstream does not serve the Responses API natively: only "
                "function tools are translated.",
                param=f"tools[{index}].type",
                code="unsupported_tool",
            )
        function = {
            k: tool[k]
            for k in ("name", "description", "parameters", "strict")
            if tool.get(k) is not None
        }
        translated.append({"type": "function", "function": function})
    if choice is None or isinstance(choice, str):
        return translated, choice
    kind = choice.get("type")
    if kind == "function" and isinstance(choice.get("name"), str):
        return translated, {"type": "function", "function": {"name": choice["name"]}}
    if kind == "allowed_tools" and isinstance(choice.get("tools"), list):
        allowed = {t.get("name") for t in choice["tools"] if isinstance(t, dict)}
        kept = [t for t in translated if t["function"]["name"] in allowed]
        return kept, choice.get("mode", "auto")
    raise InvalidRequest(
        f"tool_choice of type {echo(kind)} is not supported (auto, none, required, a function, "
        "or allowed_tools).",
        param="tool_choice",
        code="unsupported_tool",
    )


def _text(text: TextParam | None) -> Json:
    """`text.format` -> `response_format`; `text.verbosity` as it is."""
    chat: Json = {}
    if not text:
        return chat
    if text.get("verbosity") is not None:
        chat["verbosity"] = text["verbosity"]
    form = text.get("format")
    if form is not None and not isinstance(form, dict):
        raise InvalidRequest("text.format must be an object.", param="text.format")
    if not form or form.get("type") == "text":
        return chat
    if form.get("type") == "json_object":
        chat["response_format"] = {"type": "json_object"}
    elif form.get("type") == "json_schema" and isinstance(form.get("schema"), dict):
        _check_json_schema_format(form)
        keys = ("name", "schema", "strict", "description")
        schema = {k: form[k] for k in keys if form.get(k) is not None}
        chat["response_format"] = {"type": "json_schema", "json_schema": schema}
    else:
        raise InvalidRequest(
            "text.format must be text, json_object, or json_schema with a 'schema' object.",
            param="text.format",
        )
    return chat


def _check_json_schema_format(form: Json) -> None:
    """The fields of a json_schema format the Response echoes: a string name (required, as at
    OpenAI), a boolean `strict`, a string `description`."""
    if not isinstance(form.get("name"), str):
        missing = form.get("name") is None
        raise InvalidRequest(
            "Missing required parameter: 'text.format.name'."
            if missing
            else "text.format.name must be a string.",
            param="text.format.name",
            code="missing_required_parameter" if missing else None,
        )
    for key, kind in (("strict", bool), ("description", str)):
        value = form.get(key)
        if value is not None and not isinstance(value, kind):
            raise InvalidRequest(
                f"text.format.{key} must be a {kind.__name__}.", param=f"text.format.{key}"
            )

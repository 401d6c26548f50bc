"""A Responses request only the provider can run (built-in tools: web or file search, computer
use...), relayed to an upstream that serves `/v1/responses` itself (`native: [responses]` in
its provider config), through the executor's deployments, breakers, retries and fallbacks.

The gateway's chat stages (cache, tool guard, knowledge bases, scoring of an alias) read chat
messages and do not apply; what the answer is stays the provider's. What the gateway still
owns is the conversation: a `previous_response_id` of the gateway's store is expanded into
input items (the provider does not know the gateway's ids), and the provider's answer is kept
in the tenant's store under its own id, so retrieve, delete, input_items and a later turn work
as they do for translated responses.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from gateway.context import RequestContext
from gateway.errors import GatewayError
from gateway.pipeline import Pipeline
from gateway.reply.native import NativeEvents, NativeUsage
from gateway.reply.reply import Reply
from gateway.responses.items import new_id, text_part
from gateway.responses.request import ResponsesRequest
from gateway.upstream.native import EVENT

Json = dict[str, Any]
ENDPOINT = "responses"
Keep = Callable[[Json], Awaitable[None]]


def serves(ctx: RequestContext, pipeline: Pipeline, model: str) -> bool:
    """Whether the model's upstream serves the Responses API itself. Sets `ctx.route`."""
    alias = pipeline.settings.policies.of(ctx).routing.aliases.get(model)
    route = ctx.route = pipeline.resolve(pipeline.router.first_tier(model, alias), "chat")
    return pipeline.executor.serves_natively(route, ENDPOINT)


def upstream_body(asked: ResponsesRequest, body: Json, history: list[Json]) -> Json:
    """The body as the client sent it, an earlier conversation of the gateway's own store
    written into its input; the provider stores nothing (the gateway does)."""
    relayed = {**body, "store": False}
    if asked.previous_response_id is not None:
        relayed.pop("previous_response_id")
        given = asked.input if isinstance(asked.input, list) else []
        if isinstance(asked.input, str):
            given = [{"role": "user", "content": asked.input}]
        relayed["input"] = items_of(history) + given
    return relayed


async def relay(
    ctx: RequestContext, pipeline: Pipeline, body: Json, stream: bool, keep: Keep
) -> Json | tuple[Reply, NativeStream]:
    """The provider's Response, or its stream and how to write it (AllUpstreamsUnavailable
    is the caller's: level 4)."""
    assert ctx.route is not None, "serves() resolved the route"
    answer = await pipeline.executor.native(ctx, ctx.route, ENDPOINT, body, stream=stream)
    if isinstance(answer, dict):
        await keep(answer)
        return answer
    return await Reply(answer).then(NativeUsage(ctx)).ready(), NativeStream(keep)


class NativeStream(NativeEvents):
    """The provider's events as they came; its final Response kept once the stream ends. A
    stream that breaks ends as a translated one does: the `error` event, then
    `response.failed` with the Response as the provider last showed it."""

    def __init__(self, keep: Keep) -> None:
        super().__init__(ENDPOINT)
        self._keep = keep
        self._final: Json | None = None
        self._latest: Json | None = None  # the Response of the last event that carried one

    def batch(self, chunks: list[Json]) -> bytes:
        for event in chunks:
            response = event.get("response")
            if isinstance(response, dict):
                self._latest = response
            if event.get(EVENT, event.get("type")) in ("response.completed", "response.incomplete"):
                self._final = response
        return super().batch(chunks)

    def failed(self, err: GatewayError) -> bytes:
        self._final = None
        announced = super().failed(err)
        if self._latest is None:
            return announced
        message = err.body()["error"]["message"]
        code = "rate_limit_exceeded" if err.status == 429 else "server_error"
        response = {**self._latest, "status": "failed", "completed_at": None}
        response["error"] = {"code": code, "message": message}
        event = {EVENT: "response.failed", "type": "response.failed", "response": response}
        return announced + self._event({**event, "sequence_number": self._sequence + 1})

    async def end(self) -> bytes:
        if isinstance(self._final, dict) and _is_list_of_objects(self._final.get("output")):
            await self._keep(self._final)
        return await super().end()


def _is_list_of_objects(value: Any) -> bool:
    """A provider's `output` the store can keep (the gateway replays it on a later turn)."""
    return isinstance(value, list) and all(isinstance(item, dict) for item in value)


def items_of(conversation: list[Json]) -> list[Json]:
    """Chat messages -> Responses input items (what `request.conversation` reads, reversed)."""
    items: list[Json] = []
    for message in conversation:
        role, content = message.get("role"), message.get("content")
        if role == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.get("tool_call_id"),
                    "output": content if isinstance(content, str) else "",
                }
            )
            continue
        if isinstance(content, str) and content:  # the easy form every server accepts
            items.append({"type": "message", "role": role, "content": content})
        elif content:
            items.append({"type": "message", "role": role, "content": _parts(role, content)})
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            items.append(
                {
                    "type": "function_call",
                    "id": new_id("fc"),
                    "call_id": call.get("id"),
                    "name": function.get("name"),
                    "arguments": function.get("arguments"),
                }
            )
    return items


def _parts(role: Any, content: list[Json]) -> list[Json]:
    parts = []
    for part in content:
        if part.get("type") == "text":
            text = part.get("text", "")
            parts.append(text_part(text) if role == "assistant" else _input_text(text))
        elif part.get("type") == "image_url":
            image = part.get("image_url") or {}
            parts.append({"type": "input_image", "image_url": image.get("url"),
                          "detail": image.get("detail", "auto")})  # fmt: skip
        elif part.get("type") == "file":
            parts.append({"type": "input_file", **(part.get("file") or {})})
        elif part.get("type") == "input_audio":
            parts.append(part)
    return parts


def _input_text(text: str) -> Json:
    return {"type": "input_text", "text": text}

"""Route handlers: parse, call the pipeline, render. No decisions are made here."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from gateway.errors import GatewayError, InvalidRequest, ModelNotFound, PayloadTooLarge
from gateway.http import render
from gateway.http.keys import CTX, METRICS, RUNTIME
from gateway.metrics import CONTENT_TYPE
from gateway.streaming import ChunkStream
from gateway.tokens import message_text
from gateway.wire import ChatCompletionRequest, EmbeddingRequest, validate


async def chat_completions(request: web.Request) -> web.StreamResponse:
    ctx, runtime = request[CTX], request[RUNTIME]
    body = await read_json(request)
    chat: ChatCompletionRequest = validate(ChatCompletionRequest, body)
    ctx.requested_model, ctx.stream = chat.model, bool(chat.stream)
    if runtime.settings.server.log_prompts:
        ctx.prompt = message_text(body["messages"][-1])
    reply = await runtime.pipeline.chat(ctx, chat, body)
    if isinstance(reply, ChunkStream):
        return await render.stream(request, ctx, reply)
    return render.json(ctx, reply)


async def embeddings(request: web.Request) -> web.StreamResponse:
    ctx, runtime = request[CTX], request[RUNTIME]
    body = await read_json(request)
    embed: EmbeddingRequest = validate(EmbeddingRequest, body)
    ctx.requested_model = embed.model
    return render.json(ctx, await runtime.pipeline.embeddings(ctx, embed, body))


async def list_models(request: web.Request) -> web.StreamResponse:
    settings = request[RUNTIME].settings
    data = [_model_card(settings.loaded_at, r.name, r.provider) for r in settings.served_models()]
    return render.json(request[CTX], {"object": "list", "data": data})


async def retrieve_model(request: web.Request) -> web.StreamResponse:
    settings = request[RUNTIME].settings
    name = request.match_info["model"]
    route = next((r for r in settings.served_models() if r.name == name), None)
    if route is None:
        raise ModelNotFound(f"The model '{name}' does not exist.", param="model")
    return render.json(request[CTX], _model_card(settings.loaded_at, route.name, route.provider))


async def healthz(request: web.Request) -> web.StreamResponse:
    return render.json(request[CTX], {"status": "ok"})


async def readyz(request: web.Request) -> web.StreamResponse:
    runtime = request[RUNTIME]
    models = runtime.settings.served_models()
    if not models:
        raise GatewayError(
            "No model is servable: every provider is disabled.", status=503, code="not_ready"
        )
    return render.json(
        request[CTX],
        {
            "status": "ready",
            "config": runtime.settings.source,
            "models": len(models),
            "providers": runtime.upstreams.names(),
        },
    )


async def metrics(request: web.Request) -> web.StreamResponse:
    return web.Response(
        body=request.app[METRICS].exposition(), headers={"Content-Type": CONTENT_TYPE}
    )


async def admin_config(request: web.Request) -> web.StreamResponse:
    """The config in force. It holds environment variable *names*, never their values."""
    settings = request[RUNTIME].settings
    providers = {
        name: {"enabled": p.disabled_reason is None, "disabled_reason": p.disabled_reason}
        for name, p in settings.providers.items()
    }
    return render.json(
        request[CTX],
        {
            "source": settings.source,
            "loaded_at": settings.loaded_at,
            "config": settings.file.model_dump(mode="json"),
            "providers": providers,
        },
    )


async def read_json(request: web.Request) -> Any:
    limit = request[RUNTIME].settings.server.max_body_bytes
    too_large = PayloadTooLarge(f"The request body is larger than the limit of {limit} bytes.")
    if request.content_length is not None and request.content_length > limit:
        raise too_large
    raw = bytearray()
    async for piece in request.content.iter_any():
        raw += piece
        if len(raw) > limit:
            raise too_large
    if not raw:
        raise InvalidRequest("The request body is empty; send a JSON object.", code="invalid_json")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(
            f"The request body is not valid JSON: {exc}", code="invalid_json"
        ) from None


def _model_card(created: int, name: str, provider: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": provider}

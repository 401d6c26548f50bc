"""The request flow, stage by stage, and nothing else.

    resolve the model -> call the upstream (plain, or a stream whose first chunk has arrived)

Later stages (policy, rate limit, loop guard, routing, cache, knowledge base, tool-call guard,
cache store) slot in here in the order of docs/ARCHITECTURE.md. Nothing in this module knows
HTTP: it takes wire types and a RequestContext and returns JSON or a chunk stream.
"""

from __future__ import annotations

import time
from typing import Any

from gateway.config import ModelRoute, Settings
from gateway.context import RequestContext
from gateway.errors import InvalidRequest, ModelNotFound
from gateway.streaming import ChunkStream
from gateway.upstream import Upstreams
from gateway.wire import ChatCompletionRequest, EmbeddingRequest

Json = dict[str, Any]


class Pipeline:
    def __init__(self, settings: Settings, upstreams: Upstreams) -> None:
        self.settings = settings
        self.upstreams = upstreams

    async def chat(
        self, ctx: RequestContext, request: ChatCompletionRequest, body: Json
    ) -> Json | ChunkStream:
        route = ctx.route = self.resolve(request.model, "chat")
        provider = self.upstreams.get(route.provider)
        upstream_body = {**body, "model": route.upstream_model}
        started = time.perf_counter()
        if request.stream:
            wants_usage = request.wants_usage_in_stream
            if provider.settings.stream_usage and not wants_usage:
                # Ask for usage anyway, for accounting; ChunkStream hides it from the client.
                options = body.get("stream_options") or {}
                upstream_body["stream_options"] = {**options, "include_usage": True}
            return await ChunkStream.open(ctx, provider.stream(upstream_body), wants_usage)
        reply = await provider.chat(upstream_body)
        ctx.upstream_seconds = time.perf_counter() - started
        ctx.record_usage(reply.get("usage"))
        return reply

    async def embeddings(self, ctx: RequestContext, request: EmbeddingRequest, body: Json) -> Json:
        route = ctx.route = self.resolve(request.model, "embedding")
        provider = self.upstreams.get(route.provider)
        started = time.perf_counter()
        reply = await provider.embeddings({**body, "model": route.upstream_model})
        ctx.upstream_seconds = time.perf_counter() - started
        ctx.record_usage(reply.get("usage"))
        return reply

    def resolve(self, model: str, kind: str) -> ModelRoute:
        route = self.settings.routes.get(model)
        served = self.settings.served_models(kind)
        if route is None:
            raise ModelNotFound(
                f"The model '{model}' does not exist. Available models: "
                + ", ".join(sorted(r.name for r in served)),
                param="model",
            )
        if route.kind != kind:
            raise InvalidRequest(
                f"The model '{model}' is a {route.kind} model and cannot serve this endpoint. "
                f"Models for it: " + ", ".join(sorted(r.name for r in served)),
                param="model",
                code="model_not_supported",
            )
        reason = self.settings.providers[route.provider].disabled_reason
        if reason is not None:
            raise ModelNotFound(
                f"The model '{model}' is configured but its provider '{route.provider}' "
                f"is disabled ({reason})",
                param="model",
            )
        return route

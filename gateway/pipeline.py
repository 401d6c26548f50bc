"""The request flow, stage by stage, and nothing else.

    resolve the model -> cache lookup (exact, then semantic) -> on a hit: answer from it
                      -> call the upstream (plain, or a stream whose first chunk has arrived)
                      -> store the complete answer in the cache (in the background)

Later stages (policy, rate limit, loop guard, routing, knowledge base, resilience, tool-call
guard) slot in here in the order of docs/ARCHITECTURE.md. Nothing in this module knows
HTTP: it takes wire types and a RequestContext and returns JSON or a chunk stream.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

from gateway import chunks, wire
from gateway.cache.service import CacheHit, SemanticCache
from gateway.config import ModelRoute, Settings
from gateway.context import RequestContext
from gateway.errors import InvalidRequest, ModelNotFound
from gateway.streaming import ChunkStream
from gateway.upstream import Upstreams
from gateway.wire import ChatCompletionRequest, EmbeddingRequest

Json = dict[str, Any]


class Pipeline:
    def __init__(
        self, settings: Settings, upstreams: Upstreams, cache: SemanticCache | None = None
    ) -> None:
        self.settings = settings
        self.upstreams = upstreams
        self.cache = cache

    async def chat(
        self, ctx: RequestContext, request: ChatCompletionRequest, body: Json
    ) -> Json | ChunkStream:
        route = ctx.route = self.resolve(request.model, "chat")
        cache = self.cache
        plan = cache.plan(ctx, route, body, ctx.cache_directive) if cache else None
        if cache and plan:
            hit = await cache.lookup(ctx, plan)
            if hit is not None:
                return await self._from_cache(ctx, request, hit)
        store = partial(cache.store_later, ctx, plan) if cache and plan else None
        return await self._from_upstream(ctx, request, body, route, store)

    async def _from_upstream(
        self,
        ctx: RequestContext,
        request: ChatCompletionRequest,
        body: Json,
        route: ModelRoute,
        on_complete: Callable[[Json], None] | None,
    ) -> Json | ChunkStream:
        provider = self.upstreams.get(route.provider)
        upstream_body = {**body, "model": route.upstream_model}
        if request.stream:
            wants_usage = request.wants_usage_in_stream
            if provider.settings.stream_usage and not wants_usage:
                # Ask for usage anyway, for accounting; ChunkStream hides it from the client.
                options = body.get("stream_options") or {}
                upstream_body["stream_options"] = {**options, "include_usage": True}
            source = provider.stream(upstream_body)
            return await ChunkStream.open(ctx, source, wants_usage, on_complete)
        started = time.perf_counter()
        reply = await provider.chat(upstream_body)
        ctx.upstream_seconds = time.perf_counter() - started
        ctx.record_usage(reply.get("usage"))
        if on_complete is not None:
            on_complete(reply)
        return reply

    async def _from_cache(
        self, ctx: RequestContext, request: ChatCompletionRequest, hit: CacheHit
    ) -> Json | ChunkStream:
        completion = {**hit.entry.response, "id": wire.completion_id(), "created": int(time.time())}
        ctx.saved_usage = completion.get("usage")
        if request.stream:
            replayed = chunks.replay(completion, request.wants_usage_in_stream)
            return await ChunkStream.open(ctx, replayed, client_wants_usage=True)
        return completion

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
        if (
            route is not None
            and route.kind == kind
            and route.disabled_reason is None
        ):
            return route
        served = self.settings.served_models(kind)
        if route is None:
            raise ModelNotFound(
                f"The model '{model}' does not exist. Available models: "
                + ", ".join(sorted(r.name for r in served)),
                param="model",
            )
        if route.kind != kind:
            raise InvalidRequest(
                f"The model '{model}' is {_article(route.kind)} {route.kind} model and cannot "
                "serve this endpoint. "
                f"Models for it: " + ", ".join(sorted(r.name for r in served)),
                param="model",
                code="model_not_supported",
            )
        raise ModelNotFound(
            f"The model '{model}' is configured but its {route.disabled_reason}",
            param="model",
        )


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"

"""Route handlers: parse, call the pipeline, render. No decisions are made here."""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from gateway.cache.service import Directive, SemanticCache
from gateway.config.policy_set import Policy
from gateway.embedding.two_stage import TwoStageEmbedder
from gateway.errors import GatewayError, InvalidRequest, ModelNotFound, NotFound, echo
from gateway.http import render
from gateway.http.body import read_body, too_large
from gateway.http.keys import (
    BREAKERS,
    CACHE,
    CTX,
    DRAIN,
    METRICS,
    RELOADER,
    RUNTIME,
    SHARED_STATE,
)
from gateway.observability.metrics import CONTENT_TYPE
from gateway.observability.redact import redacted
from gateway.util import offload
from gateway.util.jsondepth import too_deep
from gateway.util.tokens import message_text
from gateway.wire import ChatParams, EmbeddingRequest, chat_params, validate

ROUTER_OWNER = "gateway-router"  # `owned_by` of routed aliases in /v1/models
# orjson re-encodes at most ~254 levels; real requests nest far less.
MAX_JSON_DEPTH = 128
Json = dict[str, Any]
INLINE_PARSE_BYTES = 65_536  # bodies up to this size are parsed on the loop (~0.2 ms)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    ctx, runtime = request[CTX], request[RUNTIME]
    body = await read_json(request)
    chat = chat_params(body)
    read_chat_headers(request, chat, body)
    if chat.stream:
        render.streams(request)
    reply = await runtime.pipeline.chat(ctx, chat, body)
    if reply.completion is not None:
        return render.json(ctx, reply.completion)
    return await render.stream(request, ctx, reply)


def read_chat_headers(request: web.Request, chat: ChatParams, body: Json) -> None:
    """What a chat request (or one translated to chat) tells the pipeline beside its body."""
    read_request_headers(request, chat.model, chat.stream)
    if request[RUNTIME].settings.server.log_prompts:
        request[CTX].prompt = message_text(body["messages"][-1])


def read_request_headers(request: web.Request, model: str, stream: bool | None) -> None:
    """The model asked for, and the x-gateway-* (and Cache-Control) request headers, on the
    request's context: for every endpoint the pipeline answers."""
    ctx = request[CTX]
    ctx.requested_model, ctx.stream = model, bool(stream)
    ctx.cache_directive = cache_directive(request.headers)
    ctx.knowledge_directive = request.headers.get("x-gateway-knowledge-base")
    ctx.deadline_seconds = deadline(request.headers)


async def embeddings(request: web.Request) -> web.StreamResponse:
    ctx, runtime = request[CTX], request[RUNTIME]
    body = await read_json(request)
    embed: EmbeddingRequest = validate(EmbeddingRequest, body)
    ctx.requested_model = embed.model
    ctx.deadline_seconds = deadline(request.headers)
    return render.json(ctx, await runtime.pipeline.embeddings(ctx, embed, body))


async def list_models(request: web.Request) -> web.StreamResponse:
    settings = request[RUNTIME].settings
    data = [_model_card(settings.loaded_at, r.name, r.provider) for r in settings.served_models()]
    data += [_model_card(settings.loaded_at, a, ROUTER_OWNER) for a in settings.served_aliases()]
    return render.json(request[CTX], {"object": "list", "data": data})


async def retrieve_model(request: web.Request) -> web.StreamResponse:
    settings = request[RUNTIME].settings
    name = request.match_info["model"]
    if name in settings.served_aliases():
        return render.json(request[CTX], _model_card(settings.loaded_at, name, ROUTER_OWNER))
    route = next((r for r in settings.served_models() if r.name == name), None)
    if route is None:
        raise ModelNotFound(f"The model {echo(name)} does not exist.", param="model")
    return render.json(request[CTX], _model_card(settings.loaded_at, route.name, route.provider))


_EXPLICIT_DIRECTIVES: dict[str, Directive] = {"bypass": "bypass", "refresh": "refresh"}


def cache_directive(headers: Mapping[str, str]) -> Directive:
    """`x-gateway-cache: bypass|refresh`, else the standard Cache-Control request directives:
    no-store = neither read nor write the cache, no-cache = do not read it (but refresh it)."""
    explicit = headers.get("x-gateway-cache")
    if explicit is not None:
        directive = _EXPLICIT_DIRECTIVES.get(explicit.strip().lower())
        if directive is not None:
            return directive
        raise InvalidRequest(
            f"Header x-gateway-cache must be 'bypass' or 'refresh', not {echo(explicit)}.",
            code="invalid_header",
        )
    control = headers.get("Cache-Control", "").lower()
    if "no-store" in control:
        return "bypass"
    if "no-cache" in control:
        return "refresh"
    return "default"


MAX_DEADLINE_SECONDS = 3600.0


def deadline(headers: Mapping[str, str]) -> float | None:
    """`x-gateway-timeout: SECONDS`: this request's deadline to its first byte, retries and
    fallbacks included (default: the model's deadline_seconds)."""
    given = headers.get("x-gateway-timeout")
    if given is None:
        return None
    try:
        seconds = float(given)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= MAX_DEADLINE_SECONDS:  # also rejects nan
        raise InvalidRequest(
            f"Header x-gateway-timeout must be a number of seconds in (0, "
            f"{MAX_DEADLINE_SECONDS:g}], not {echo(given)}.",
            code="invalid_header",
        )
    return seconds


async def healthz(request: web.Request) -> web.StreamResponse:
    return render.json(request[CTX], {"status": "ok"})


async def readyz(request: web.Request) -> web.StreamResponse:
    runtime = request[RUNTIME]
    if request.app[DRAIN].draining:
        raise GatewayError(
            "The gateway is shutting down: finishing requests in flight, taking no new ones.",
            status=503,
            code="draining",
        )
    models = runtime.settings.served_models()
    if not models:
        raise GatewayError(
            "No model is servable: every provider is disabled.", status=503, code="not_ready"
        )
    shared = await request.app[SHARED_STATE].current()
    return render.json(
        request[CTX],
        {
            # degraded: some shared state is unreachable; this replica serves on local state
            "status": "ready" if all(shared.values()) else "degraded",
            "shared_state": {name: "ok" if up else "unreachable" for name, up in shared.items()},
            "config": Path(runtime.settings.source).name,  # not the path: /readyz is open
            "models": len(models),
            # each provider's last health probe (upstream/health.py); not part of "status":
            # a provider in trouble degrades answers, it does not make the replica unready
            "providers": {
                name: health.summary() for name, health in runtime.upstreams.health.items()
            },
            "cache": _cache_state(request.app[CACHE]),
            "knowledge_bases": runtime.knowledge.state(),
        },
    )


def _cache_state(cache: SemanticCache | None) -> dict[str, Any]:
    if cache is None:
        return {"enabled": False}
    embedder = cache.embedder
    return {
        "enabled": True,
        "semantic": embedder is not None and cache.embedder_ready,
        "embedder": embedder.name if embedder else None,
        "embedder_error": cache.embedder_error,
        # two-stage embedding: "on", "loading" or "failed" (None: one stage)
        "quick_stage": embedder.quick_state if isinstance(embedder, TwoStageEmbedder) else None,
    }


async def metrics(request: web.Request) -> web.StreamResponse:
    return web.Response(
        body=request.app[METRICS].exposition(), headers={"Content-Type": CONTENT_TYPE}
    )


async def admin_config(request: web.Request) -> web.StreamResponse:
    """The config in force. It holds environment variable *names*, never their values, and
    header values and URL credentials are redacted (gateway/observability/redact.py)."""
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
            "config": redacted(settings.file.model_dump(mode="json")),
            "providers": providers,
            "policies": [_policy_summary(p) for p in settings.policies.policies],
        },
    )


async def admin_policies(request: web.Request) -> web.StreamResponse:
    """Which policies apply to a tenant asking for a model, and why:
    `GET /admin/policies?tenant=T&model=M`. Without both, the loaded policies."""
    settings = request[RUNTIME].settings
    tenant, model = request.query.get("tenant"), request.query.get("model")
    if tenant is None and model is None:
        policies = [_policy_summary(p) for p in settings.policies.policies]
        return render.json(request[CTX], {"policies": policies})
    if not tenant or model is None:
        raise InvalidRequest(
            "Ask with both: /admin/policies?tenant=NAME&model=NAME (model may be empty for "
            "what depends on the tenant only).",
            code="invalid_query",
        )
    resolved = settings.policies.resolve(tenant, model)
    effective = {
        "cache": resolved.cache.model_dump(mode="json", exclude_none=True),
        "knowledge_base": resolved.knowledge_base.model_dump(mode="json"),
        "rate_limits": resolved.rate_limits.model_dump(mode="json"),
        "byok": resolved.byok.model_dump(mode="json"),
        "overload": resolved.overload.model_dump(mode="json"),
        "metrics": resolved.metrics.model_dump(mode="json"),
        "guard": resolved.guard.model_dump(mode="json"),
        "degradation": resolved.degradation.model_dump(mode="json"),
        "routing": {"aliases": resolved.routing.model_dump(mode="json")["aliases"]},
    }
    body = {**resolved.explain(), "effective": redacted(effective)}
    return render.json(request[CTX], body)


def _policy_summary(policy: Policy) -> dict[str, Any]:
    return {
        "name": policy.name,
        "source": policy.source,
        "description": policy.description,
        "match": policy.match.model_dump(),
        "sets": sorted(policy.fields),
    }


async def admin_cache_stats(request: web.Request) -> web.StreamResponse:
    cache = _require_cache(request)
    stats = await cache.store.stats()
    verification = {model: state.as_json() for model, state in cache.verifier.snapshot().items()}
    body = {**asdict(stats), **_cache_state(cache), "verification": verification}
    return render.json(request[CTX], body)


async def admin_cache_purge(request: web.Request) -> web.StreamResponse:
    """Body: {} purges everything; {"tenant": ...} and/or {"model": ...} narrow it."""
    cache = _require_cache(request)
    body = await read_json(request) if request.can_read_body else {}
    if (
        not isinstance(body, dict)
        or set(body) - {"tenant", "model"}
        or not all(isinstance(v, str) for v in body.values())
    ):
        raise InvalidRequest(
            'The purge body is {} or {"tenant": "...", "model": "..."} (either or both).',
            code="invalid_body",
        )
    await cache.flush()
    purged = await cache.store.purge(tenant=body.get("tenant"), model=body.get("model"))
    return render.json(request[CTX], {"purged": purged})


async def admin_reload(request: web.Request) -> web.StreamResponse:
    """Re-read the config now. An invalid one is refused (422, every problem listed) and the
    running config stays."""
    outcome = await request.app[RELOADER].reload()
    if outcome.result in ("invalid", "failed"):
        raise GatewayError(
            f"Config reload refused ({outcome.result}); the running config is unchanged: "
            + "; ".join(outcome.problems),
            status=422,
            type="invalid_request_error",
            code="config_invalid",
        )
    return render.json(request[CTX], {"result": outcome.result, "source": outcome.source})


async def admin_breakers(request: web.Request) -> web.StreamResponse:
    """Every circuit breaker: state, consecutive failures, when it opened, when it may retry."""
    states = [asdict(state) for state in request.app[BREAKERS].snapshot()]
    return render.json(request[CTX], {"breakers": states})


async def admin_breaker(request: web.Request) -> web.StreamResponse:
    """POST /admin/breakers/{name}/reset closes a breaker; .../open opens it (to drain a
    deployment by hand)."""
    breakers = request.app[BREAKERS]
    name = request.match_info["name"]
    breaker = breakers.find(name)
    if breaker is None:
        known = ", ".join(b.name for b in breakers) or "(none yet)"
        raise NotFound(f"No circuit breaker named {echo(name)}. Known: {known}")
    if request.match_info["action"] == "reset":
        breaker.reset()
    else:
        breaker.force_open()
    return render.json(request[CTX], asdict(breaker.snapshot()))


def _require_cache(request: web.Request) -> SemanticCache:
    cache = request.app[CACHE]
    if cache is None:
        raise NotFound("The cache is not enabled for any model in this configuration.")
    return cache


async def read_json(request: web.Request) -> Any:
    server = request[RUNTIME].settings.server
    limit = server.max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        raise too_large(limit)
    try:  # chunked or compressed: the decoded bytes are counted as they arrive
        raw = await read_body(request, limit, server.body_timeout_seconds)
    except (ValueError, zlib.error, HttpProcessingError, RequestPayloadError) as exc:
        raise InvalidRequest(
            f"The request body could not be read ({type(exc).__name__}): check its "
            "Content-Encoding.",
            code="invalid_body",
        ) from None
    request[CTX].body_bytes = len(raw)
    if not raw:
        raise InvalidRequest("The request body is empty; send a JSON object.", code="invalid_json")
    inline = len(raw) <= INLINE_PARSE_BYTES  # most bodies: no coroutine for a parse in place
    try:  # a large body is parsed off the loop (3 MB: ~10 ms)
        data = orjson.loads(raw) if inline else await offload.run(False, orjson.loads, raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(
            f"The request body is not valid JSON: {exc}", code="invalid_json"
        ) from None
    deep = (
        too_deep(raw, data, MAX_JSON_DEPTH)
        if inline
        else await offload.run(False, too_deep, raw, data, MAX_JSON_DEPTH)
    )
    if deep:
        raise InvalidRequest(
            f"The request JSON nests deeper than {MAX_JSON_DEPTH} levels.", code="invalid_json"
        )
    return data


def _model_card(created: int, name: str, provider: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": provider}

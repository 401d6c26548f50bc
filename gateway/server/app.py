"""Build the aiohttp application: routes, the middleware, and resources with lifetimes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path

from aiohttp import web

from gateway.cache.factory import build_cache
from gateway.config import Pricing, Settings
from gateway.http import completions, handlers, malformed, responses
from gateway.http.keys import (
    ACCESS_LOG,
    BREAKERS,
    CACHE,
    CONNECTIONS,
    DRAIN,
    LIMITER,
    METRICS,
    RELOADER,
    RESPONSES,
    RUNTIME_REF,
    SHARED_STATE,
)
from gateway.http.middleware import gateway_middleware
from gateway.observability.accesslog import AccessLog
from gateway.observability.metrics import Metrics
from gateway.ratelimit import RateLimiter
from gateway.resilience.breaker import Breakers
from gateway.responses.store import build_response_store
from gateway.server.connections import ConnectionLimits, Connections
from gateway.server.reload import Reloader
from gateway.server.runtime import Runtime, RuntimeRef
from gateway.server.shutdown import Drain
from gateway.state.shared import SharedState

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


ROUTES: list[tuple[str, str, Handler]] = [
    ("POST", "/v1/chat/completions", handlers.chat_completions),
    ("POST", "/v1/completions", completions.completions),
    ("POST", "/v1/embeddings", handlers.embeddings),
    ("POST", "/v1/responses", responses.create),
    ("GET", "/v1/responses/{response_id}", responses.retrieve),
    ("DELETE", "/v1/responses/{response_id}", responses.delete),
    ("GET", "/v1/responses/{response_id}/input_items", responses.input_items),
    ("POST", "/v1/responses/{response_id}/cancel", responses.cancel),
    ("GET", "/v1/models", handlers.list_models),
    ("GET", "/v1/models/{model:.+}", handlers.retrieve_model),
    ("GET", "/healthz", handlers.healthz),
    ("GET", "/readyz", handlers.readyz),
    ("GET", "/metrics", handlers.metrics),
    ("GET", "/admin/config", handlers.admin_config),
    ("GET", "/admin/policies", handlers.admin_policies),
    ("GET", "/admin/cache/stats", handlers.admin_cache_stats),
    ("POST", "/admin/cache/purge", handlers.admin_cache_purge),
    ("POST", "/admin/reload", handlers.admin_reload),
    ("GET", "/admin/breakers", handlers.admin_breakers),
    ("POST", "/admin/breakers/{name:.+}/{action:reset|open}", handlers.admin_breaker),
]


def build_app(settings: Settings, access_log: AccessLog | None = None) -> web.Application:
    malformed.install()  # requests aiohttp refuses before routing get OpenAI error bodies too
    # Bodies are read and limited by the handlers against the live config, not by aiohttp.
    app = web.Application(middlewares=[gateway_middleware], client_max_size=2**40)
    redis = settings.file.shared_redis()
    cache = app[CACHE] = build_cache(
        settings.file.cache,
        settings.routes.values(),
        settings.policies.policies,
        shared=redis.target("cache"),
    )
    metrics = app[METRICS] = Metrics()
    breakers = app[BREAKERS] = Breakers(
        settings.resilience.breaker, redis.target("breakers"), on_change=metrics.breaker_changed
    )
    metrics.watch_breakers(breakers)
    ref = app[RUNTIME_REF] = RuntimeRef(Runtime.build(settings, breakers, cache))
    app[RELOADER] = Reloader(ref, breakers, cache, on_result=metrics.config_reloaded)
    limiter = app[LIMITER] = RateLimiter(redis.target("rate_limits"))
    app[ACCESS_LOG] = access_log or AccessLog(enabled=settings.server.access_log)
    responses = app[RESPONSES] = build_response_store(
        settings.file.responses,
        redis.target("responses"),
        on_failure=metrics.response_store_failed,
        # Read at each write: a reload or a policy file changes a tenant's quota at once.
        quotas=lambda tenant: ref.current.settings.policies.for_tenant(tenant).storage.quota(),
    )
    app[DRAIN] = Drain()
    connections = app[CONNECTIONS] = Connections(
        ConnectionLimits.of(settings.server),
        on_refused=metrics.connection_refused,
        on_timed_out=metrics.client_timed_out,
    )
    metrics.connections_open.set_function(lambda: connections.open)
    metrics.in_flight.set_function(lambda: ref.in_flight)  # read when scraped
    if cache is not None:
        metrics.cache_entries.set_function(lambda: len(cache.store))
        cache.verifier.events = metrics.verification_events(partial(_pricing, ref))
        metrics.watch_verification(cache.verifier, _verifying(settings), partial(_per_tenant, ref))
    shared = app[SHARED_STATE] = SharedState.of(cache, breakers, limiter, responses)
    metrics.watch_shared_state(shared)
    app.cleanup_ctx.append(_cache_lifetime)
    app.cleanup_ctx.append(_response_store_lifetime)
    app.cleanup_ctx.append(_runtime_lifetime)
    app.cleanup_ctx.append(_config_watch)
    app.cleanup_ctx.append(_shared_state_watch)
    for method, path, handler in ROUTES:
        for verb in ("GET", "HEAD") if method == "GET" else (method,):  # as add_get does
            app.router.add_route(verb, path, handler, expect_handler=malformed.expect_handler)
    return app


def _pricing(ref: RuntimeRef, model: str) -> Pricing | None:
    """A model's price in the running config (reloads change it)."""
    route = ref.current.settings.routes.get(model)
    return route.pricing if route is not None else None


def _per_tenant(ref: RuntimeRef, tenant: str, model: str) -> bool:
    """Whether the running config's policies give `tenant` its own series for `model`."""
    return ref.current.settings.policies.resolve(tenant, model).metrics.per_tenant


def _verifying(settings: Settings) -> list[str]:
    """The models whose cache verifies its hits, as configured at start."""
    return sorted(
        name
        for name, route in settings.routes.items()
        if route.cache.enabled and route.cache.verify.sample_rate > 0
    )


async def _cache_lifetime(app: web.Application) -> AsyncIterator[None]:
    cache = app[CACHE]
    if cache is not None:
        await cache.start()
    yield
    if cache is not None:
        await cache.close()


async def _response_store_lifetime(app: web.Application) -> AsyncIterator[None]:
    await app[RESPONSES].start()
    yield
    await app[RESPONSES].close()


async def _config_watch(app: web.Application) -> AsyncIterator[None]:
    """Poll the config file for edits, when the config came from one and asks for it."""
    reloader = app[RELOADER]
    settings = app[RUNTIME_REF].current.settings
    watch = None
    if settings.server.watch_config and Path(settings.source).is_file():
        watch = asyncio.get_running_loop().create_task(reloader.watch())
    yield
    if watch is not None:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
    await reloader.close()


async def _shared_state_watch(app: web.Application) -> AsyncIterator[None]:
    async with app[SHARED_STATE].watching():
        yield


async def _runtime_lifetime(app: web.Application) -> AsyncIterator[None]:
    await app[RUNTIME_REF].current.start()
    yield
    await app[RUNTIME_REF].current.close()
    app[BREAKERS].close()
    await app[LIMITER].aclose()
    app[ACCESS_LOG].flush()

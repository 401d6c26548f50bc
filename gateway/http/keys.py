"""Typed keys for application and request state."""

from __future__ import annotations

from aiohttp import web

from gateway.cache.service import SemanticCache
from gateway.context import RequestContext
from gateway.observability.accesslog import AccessLog
from gateway.observability.metrics import Metrics
from gateway.ratelimit import RateLimiter
from gateway.resilience.breaker import Breakers
from gateway.responses.store import ResponseStore
from gateway.server.connections import Connections
from gateway.server.reload import Reloader
from gateway.server.runtime import Runtime, RuntimeRef
from gateway.server.shutdown import Drain
from gateway.state.shared import SharedState

RUNTIME_REF = web.AppKey("runtime_ref", RuntimeRef)
METRICS = web.AppKey("metrics", Metrics)
ACCESS_LOG = web.AppKey("access_log", AccessLog)
CACHE: web.AppKey[SemanticCache | None] = web.AppKey("cache")  # None: no model uses the cache
BREAKERS = web.AppKey("breakers", Breakers)  # per process: survive config reloads
RELOADER = web.AppKey("reloader", Reloader)
LIMITER = web.AppKey("limiter", RateLimiter)  # per process; budgets outlive reloads
SHARED_STATE = web.AppKey("shared_state", SharedState)  # per process: /readyz, redis_up
RESPONSES = web.AppKey("responses", ResponseStore)  # stored Responses, per process
DRAIN = web.AppKey("drain", Drain)  # set on SIGTERM (gateway/server/shutdown.py)
CONNECTIONS = web.AppKey("connections", Connections)  # client connections: count and cap
CTX = web.RequestKey("ctx", RequestContext)
RUNTIME = web.RequestKey("runtime", Runtime)  # the runtime this request started with

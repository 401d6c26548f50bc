"""The one middleware: request id, authentication, error bodies, metrics and the access log.

Every way out of a request passes here, so this is the only place that decides what an error
looks like: a GatewayError becomes its OpenAI body; aiohttp's own HTTP errors (unknown route,
wrong method, body too large) are translated; anything unexpected becomes a generic 500 body
with the request id, and the traceback goes to the log only.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Awaitable, Callable

from aiohttp import web

from gateway.config import RateLimitConfig
from gateway.context import RequestContext
from gateway.errors import (
    ECHO_CHARS,
    GatewayError,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    clip,
)
from gateway.http import auth, render
from gateway.http.keys import ACCESS_LOG, CTX, DRAIN, LIMITER, METRICS, RUNTIME, RUNTIME_REF
from gateway.ratelimit import Permit, RateLimited, unpaid_tokens
from gateway.server.shutdown import ShuttingDown
from gateway.util import fair

log = logging.getLogger("gateway")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_AUTHENTICATED = frozenset({"chat", "responses", "completions", "embeddings", "models"})
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
_ENDPOINTS = {
    "/v1/chat/completions": "chat",
    "/v1/responses": "responses",
    "/v1/completions": "completions",
    "/v1/embeddings": "embeddings",
    "/v1/models": "models",
    "/healthz": "health",
    "/readyz": "health",
    "/metrics": "metrics",
}

# Asked every few seconds by balancers and Prometheus: out of the access log unless
# server.log_probes (their counts are in the metrics either way).
_PROBES = frozenset({"health", "metrics"})


@web.middleware
async def gateway_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    runtime = request[RUNTIME] = request.app[RUNTIME_REF].current
    ctx = request[CTX] = RequestContext(
        request_id=request_id(request.headers.get("x-request-id")),
        endpoint=_endpoint(request.path),
    )
    metrics = request.app[METRICS]
    drain = request.app[DRAIN]
    runtime.enter()
    ctx.in_flight = request.app[RUNTIME_REF].enter()
    task = drain.enter()
    owner = None
    try:
        if drain.expired:  # a pipelined request behind one the shutdown ended
            raise ShuttingDown()
        if ctx.endpoint in _AUTHENTICATED:
            ctx.tenant = auth.tenant_for(runtime.settings, request.headers.get("Authorization"))
            owner = fair.OWNER.set(ctx.tenant)  # shared CPU work served per tenant in turn
            if ctx.endpoint != "models":
                policy = runtime.settings.policies.for_tenant(ctx.tenant)
                given = request.headers.get(auth.PROVIDER_KEY_HEADER)
                auth.bring_own_key(ctx, policy.byok, given)
                if not policy.rate_limits.unlimited:
                    await _admit(request, ctx, policy.rate_limits)
        elif ctx.endpoint == "admin":
            auth.check_admin(runtime.settings, request.headers.get("Authorization"))
        elif ctx.endpoint == "metrics":
            auth.check_metrics(runtime.settings, request.headers.get("Authorization"))
        response = await handler(request)
        if ctx.error_code is None:
            ctx.status = response.status
        return response
    except GatewayError as err:
        return render.error(ctx, err)
    except web.HTTPException as exc:
        return render.error(ctx, _translate(exc, request))
    except asyncio.CancelledError:
        if drain.ended(task):  # the shutdown timeout, not the client: answer all the same
            return await render.shutting_down(request, ctx)
        ctx.status, ctx.error_code = render.CLIENT_CLOSED, "client_disconnected"
        raise
    except ConnectionResetError:
        ctx.status, ctx.error_code = render.CLIENT_CLOSED, "client_disconnected"
        raise
    except Exception:
        log.exception("unhandled error in request %s", ctx.request_id)
        return render.error(ctx, render.internal_error(ctx))
    finally:
        drain.leave(task)  # answered: what is left here is the request's own bookkeeping
        for permit in ctx.permits:
            await _settle_permit(permit, ctx)
        runtime.leave()
        request.app[RUNTIME_REF].leave()
        metrics.observe(ctx)
        if ctx.endpoint not in _PROBES or runtime.settings.server.log_probes:
            request.app[ACCESS_LOG].write(ctx, request.method, request.path)
        if owner is not None:
            fair.OWNER.reset(owner)


async def _admit(request: web.Request, ctx: RequestContext, limits: RateLimitConfig) -> None:
    """Rate-limit permits onto `ctx.permits`, or a 429 with Retry-After: the tenant's, and for
    a caller's own provider key also the key's (each key has a budget of its own, within the
    tenant's: new keys cannot multiply a tenant's budget). Counted in tokens by a cheap
    estimate of the request body (the prompt); the rest is charged when the request ends.
    Not called for unlimited tenants."""
    owners = [ctx.tenant or ""]
    if ctx.byok_hash is not None:
        owners.append(f"{owners[0]}:key:{ctx.byok_hash}")
    estimate = (request.content_length or 0) // 4 if limits.tokens_per_minute else 0
    ctx.tokens_charged = estimate
    try:
        for owner in owners:
            ctx.permits.append(await request.app[LIMITER].acquire(owner, limits, estimate))
    except RateLimited as refused:
        ctx.rate_limited = refused.limit
        raise


async def _settle_permit(permit: Permit, ctx: RequestContext) -> None:
    """Charge what admission could not know: the completion's tokens, and the prompt's beyond
    what was charged on admission (a chunked body has no Content-Length to estimate from: its
    size once read counts, or the upstream's own count when that is larger)."""
    size = (ctx.body_bytes or 0) // 4
    await permit.record_tokens(unpaid_tokens(ctx.usage, ctx.tokens_charged, size))
    await permit.release()


def _translate(exc: web.HTTPException, request: web.Request) -> GatewayError:
    if isinstance(exc, web.HTTPNotFound):
        return NotFound(f"Unknown endpoint: {clip(f'{request.method} {request.path}', ECHO_CHARS)}")
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(exc.allowed_methods))
        return MethodNotAllowed(
            f"{clip(request.method, ECHO_CHARS)} is not allowed on "
            f"{clip(request.path, ECHO_CHARS)}; allowed: {allowed}",
            headers={"Allow": allowed},
        )
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return PayloadTooLarge("The request body is larger than the configured limit.")
    return GatewayError(exc.reason, status=exc.status, type="invalid_request_error")


def request_id(given: str | None) -> str:
    """The client's x-request-id when it is sane, else a new one."""
    if given and _REQUEST_ID.match(given):
        return given
    return f"req_{os.urandom(16).hex()}"


def _endpoint(path: str) -> str:
    endpoint = _ENDPOINTS.get(path)
    if endpoint:
        return endpoint
    if path.startswith("/v1/models/"):
        return "models"
    if path.startswith("/v1/responses/"):
        return "responses"
    if path == "/admin" or path.startswith("/admin/"):  # unknown admin paths need the key too
        return "admin"
    return "other"

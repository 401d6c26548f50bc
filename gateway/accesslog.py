"""One structured JSON line per request, on the `gateway.access` logger. No prompt text unless
the config turns `server.log_prompts` on."""

from __future__ import annotations

import logging
import time

import orjson

from gateway.context import RequestContext

log = logging.getLogger("gateway.access")


def write(ctx: RequestContext, method: str, path: str) -> None:
    if not log.isEnabledFor(logging.INFO):
        return
    usage = ctx.usage or {}
    line = {
        "ts": round(time.time(), 3),
        "request_id": ctx.request_id,
        "method": method,
        "path": path,
        "status": ctx.status,
        "tenant": ctx.tenant,
        "model": ctx.requested_model,
        "served_model": ctx.route.name if ctx.route else None,
        "upstream": ctx.route.provider if ctx.route else None,
        "upstream_model": ctx.route.upstream_model if ctx.route else None,
        "stream": ctx.stream,
        "latency_ms": round(ctx.elapsed() * 1000, 2),
        "upstream_ms": _ms(ctx.upstream_seconds),
        "ttft_ms": _ms(ctx.first_token_seconds),
        "prompt_tokens": usage.get("prompt_tokens"),
        "completion_tokens": usage.get("completion_tokens"),
        "error": ctx.error_code,
    }
    if ctx.prompt is not None:
        line["prompt"] = ctx.prompt
    log.info(orjson.dumps(line).decode())


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)

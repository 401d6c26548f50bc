"""One structured JSON line per request, without prompt text unless `server.log_prompts`.

Lines are buffered and written together a few times a second (and at shutdown): one write
per request through stdlib logging cost the hot path more than everything else in the
middleware together.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import BinaryIO

import orjson

from gateway.context import RequestContext

FLUSH_SECONDS = 0.05
LOGGED_CHARS = 256  # of a client-chosen name (the model asked for): a log line stays a line


class AccessLog:
    def __init__(self, sink: BinaryIO | None = None, enabled: bool = True) -> None:
        self.sink = sink if sink is not None else sys.stderr.buffer
        self.enabled = enabled
        self._lines: list[bytes] = []
        self._flush_scheduled = False

    def write(self, ctx: RequestContext, method: str, path: str) -> None:
        if not self.enabled:
            return
        self._lines.append(orjson.dumps(_line(ctx, method, path)))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_later(FLUSH_SECONDS, self.flush)

    def flush(self) -> None:
        self._flush_scheduled = False
        if self._lines:
            lines, self._lines = self._lines, []
            self.sink.write(b"\n".join(lines) + b"\n")
            self.sink.flush()


def _bounded(name: str | None) -> str | None:
    """A client-chosen name, at most LOGGED_CHARS characters, with the length it had."""
    if name is None or len(name) <= LOGGED_CHARS:
        return name
    return f"{name[:LOGGED_CHARS]}… ({len(name)} characters)"


def _line(ctx: RequestContext, method: str, path: str) -> dict[str, object]:
    usage = ctx.usage or {}
    route = ctx.route
    served = ctx.served_deployment
    line: dict[str, object] = {
        "ts": round(time.time(), 3),
        "request_id": ctx.request_id,
        "method": method,
        "path": path,
        "status": ctx.status,
        "tenant": ctx.tenant,
        "model": _bounded(ctx.requested_model),
        "served_model": route.name if route else None,
        "upstream": served.provider if served else None,
        "upstream_model": served.upstream_model if served else None,
        "attempts": ctx.attempts,
        "fallback": ctx.fallback_model,
        "stream": ctx.stream,
        "latency_ms": round(ctx.elapsed() * 1000, 2),
        "upstream_ms": _ms(ctx.upstream_seconds),
        "ttft_ms": _ms(ctx.first_token_seconds),
        "prompt_tokens": usage.get("prompt_tokens"),
        "completion_tokens": usage.get("completion_tokens"),
        "cache": ctx.cache_result,
        "knowledge_base": ctx.knowledge_base,
        "level": ctx.degradation_level,
        "error": ctx.error_code,
    }
    if ctx.policy is not None and ctx.policy.applied:
        line["policies"] = [a.policy.name for a in ctx.policy.applied]
    if ctx.byok_hash is not None:
        line["own_key"] = ctx.byok_hash  # a hash: the key itself is never written
    if ctx.shed:
        line["shed"] = ctx.shed
    if ctx.tool_guard is not None:  # what the tool-call guard did, and each change it made
        line["tool_guard"] = ctx.tool_guard
        if ctx.tool_problems:
            line["tool_problems"] = ctx.tool_problems
        if ctx.tool_cleanings:
            line["tool_cleanings"] = ctx.tool_cleanings
    if ctx.cache_near_miss is not None:  # why a close candidate was refused
        line["cache_near_miss"] = ctx.cache_near_miss
    if ctx.cache_exact_only is not None:  # why the semantic tier was not asked
        line["cache_exact_only"] = ctx.cache_exact_only
    if ctx.prompt is not None:
        line["prompt"] = ctx.prompt
    return line


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)

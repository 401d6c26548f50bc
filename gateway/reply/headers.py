"""The gateway's `x-gateway-*` response headers that describe an answer, not one request.

How an answer was made (the routed tier, the degradation level and its reason, the knowledge
base, what the tool-call guard did) belongs to the answer: a cached answer keeps these and a hit
replays them. Its request id, cache result, attempts, shedding, loop stops, compression and
rate-limit headers describe one request only and are never stored.
"""

from __future__ import annotations

from typing import Any

from gateway import degradation
from gateway.context import RequestContext

ROUTE = "x-gateway-route"
KNOWLEDGE_BASE = "x-gateway-knowledge-base"
TOOL_GUARD = "x-gateway-tool-guard"
ANSWER_HEADERS = frozenset(
    {ROUTE, degradation.LEVEL_HEADER, degradation.HEADER, KNOWLEDGE_BASE, TOOL_GUARD}
)


def answer_headers(ctx: RequestContext) -> dict[str, str]:
    headers: dict[str, str] = {}
    if ctx.routing is not None:
        headers[ROUTE] = ctx.routing.header()
    level = ctx.degradation_level
    if level is not None:
        headers[degradation.LEVEL_HEADER] = str(level)
        if level in degradation.REASONS:
            headers[degradation.HEADER] = degradation.REASONS[level]
    if ctx.knowledge_base is not None:
        headers[KNOWLEDGE_BASE] = ctx.knowledge_base
    if ctx.tool_guard is not None:
        headers[TOOL_GUARD] = ctx.tool_guard
    return headers


def replayable(stored: Any) -> dict[str, str]:
    """What a stored entry may add to a hit's headers: answer headers only, as strings (an
    entry written before answers kept headers has none)."""
    if not isinstance(stored, dict):
        return {}
    return {k: v for k, v in stored.items() if k in ANSWER_HEADERS and isinstance(v, str)}

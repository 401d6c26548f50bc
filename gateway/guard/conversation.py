"""The conversation stage, before any model is called: stop runaway agent loops, and compress
long histories (summaries from a cheap model, cached by the prefix they replace)."""

from __future__ import annotations

import logging
from typing import Any

from gateway.config import ModelRoute, Settings
from gateway.context import RequestContext
from gateway.errors import GatewayError
from gateway.guard.compression import Compressor
from gateway.guard.loops import check_loop, finalize_request
from gateway.guard.summarizer import summary_request, summary_text
from gateway.resilience.executor import UpstreamExecutor
from gateway.server.overload import sheds

log = logging.getLogger("gateway.guard")
Json = dict[str, Any]
SUMMARY_TIMEOUT_SECONDS = 15.0


class AgentLoopStopped(GatewayError):
    status = 400
    type = "invalid_request_error"
    code = "agent_loop_detected"


class ConversationGuard:
    def __init__(self, settings: Settings, executor: UpstreamExecutor) -> None:
        self.settings = settings
        self.executor = executor
        self.compressor = Compressor()

    def stop_loops(self, ctx: RequestContext, body: Json) -> Json:
        """The body to send: as it came, or (a loop detected, policy `finalize`) one that asks
        the model to answer from what it has, with tools off. Policy `error`: a 400."""
        config = self.settings.policies.of(ctx).guard.loops
        if not config.enabled:
            return body
        stop = check_loop(body["messages"], config)
        if stop is None:
            return body
        ctx.loop_stop = stop.reason
        log.info(
            "request %s: agent loop stopped (%s): %s", ctx.request_id, stop.reason, stop.message
        )
        if config.action == "error":
            raise AgentLoopStopped(
                f"Agent loop stopped by the gateway: {stop.message}", param="messages"
            )
        return finalize_request(body, stop)

    async def compress(self, ctx: RequestContext, route: ModelRoute, body: Json) -> Json:
        policy = self.settings.policies.of(ctx)
        config = policy.guard.compression
        if not config.enabled or sheds(ctx, "compression"):
            return body
        summarizer = self.settings.routes.get(config.summarizer_model or route.name, route)

        async def summarize(messages: list[Json]) -> str:
            request = summary_request(summarizer.name, messages)
            return summary_text(await self.executor.on_behalf(ctx, summarizer, request, "summary"))

        result = await self.compressor.compress(
            body["messages"],
            config,
            summarize,
            timeout=SUMMARY_TIMEOUT_SECONDS,
            scope=f"{ctx.tenant}\x00{summarizer.name}",
        )
        if result.failure is not None:
            log.warning(
                "request %s: summarizing failed (%s%s): kept the last turns only",
                ctx.request_id,
                result.failure,
                f": {result.detail}" if result.detail else "",
            )
        ctx.compression = _outcome(result.summarized, result.cache_hit, result.failure)
        ctx.compressed_turns = result.summarized + result.dropped
        if result.messages is body["messages"]:
            return body
        return {**body, "messages": result.messages}


def _outcome(summarized: int, cache_hit: bool, failure: str | None) -> str | None:
    if failure is not None:
        return "failed"
    if summarized:
        return "cached" if cache_hit else "summarized"
    return None

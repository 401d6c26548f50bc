"""The tool-call guard stage: every tool call a model answers with is checked against the
request's `tools` (and `tool_choice`) before the client sees it, repaired with the model when
it is wrong, and otherwise handled by policy. Plain answers are reviewed whole; streams have
their tool-call deltas held (guard/held_calls.py) and reviewed once complete.

Before any upstream call, `admit` refuses declarations over the policy's limits with a 400
(guard/limits.py); the review spends at most the policy's validation budget, checking off the
event loop unless the request is small, and an answer it could not judge in time goes on
`unchecked` with a header saying why."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.config import ModelRoute, Settings
from gateway.context import RequestContext
from gateway.errors import GatewayError
from gateway.guard.held_calls import HeldToolCalls
from gateway.guard.limits import SMALL_BYTES, light, measure, too_many
from gateway.guard.repair import Settled, settle
from gateway.guard.schemas import Budget
from gateway.guard.tools import ToolCatalog
from gateway.reply.stage import Stage
from gateway.resilience.executor import UpstreamExecutor
from gateway.util import offload

log = logging.getLogger("gateway.guard")
Json = dict[str, Any]
_PROBLEMS_HEADER_CHARS = 512


class ToolCallFailed(GatewayError):
    """The model's tool calls stayed invalid after repair, and the policy says fail."""

    status = 502
    type = "upstream_error"
    code = "invalid_tool_call"


class ToolCallGuard:
    def __init__(self, settings: Settings, executor: UpstreamExecutor) -> None:
        self.settings = settings
        self.executor = executor

    async def admit(self, ctx: RequestContext, body: Json) -> None:
        """Raises ToolsOverLimit (a 400) when the request's tools are over the policy's
        limits; measured off the event loop when the request is large."""
        tools = body.get("tools")
        config = self.settings.policies.of(ctx).guard.tools
        if not config.enabled or not isinstance(tools, list) or not tools:
            return
        too_many(tools, config.limits)
        small = ctx.body_bytes is not None and ctx.body_bytes < SMALL_BYTES
        await offload.run(small, measure, tools, config.limits)

    def applies(self, ctx: RequestContext, body: Json) -> bool:
        """Requests that declare tools, with one choice (n > 1 answers pass unchecked)."""
        config = self.settings.policies.of(ctx).guard.tools
        return config.enabled and bool(body.get("tools")) and (body.get("n") or 1) == 1

    async def review(self, ctx: RequestContext, route: ModelRoute, body: Json, reply: Json) -> Json:
        """A plain answer with its tool calls settled."""
        choices = reply.get("choices") or []
        if len(choices) != 1 or not isinstance(choices[0].get("message"), dict):
            return reply
        settled = await self._settle(ctx, route, body, choices[0]["message"])
        choice = {**choices[0], "message": settled.message}
        if choices[0].get("finish_reason") in ("tool_calls", "stop", None):
            choice["finish_reason"] = settled.finish_reason
        return {**reply, "choices": [choice]}

    def stage(self, ctx: RequestContext, route: ModelRoute, body: Json) -> Stage | None:
        """The guard as a reply stage, for requests it applies to: a plain answer is reviewed
        whole; a stream's content flows on, its tool calls are sent once complete and settled."""
        if not self.applies(ctx, body):
            return None

        async def review(reply: Json) -> Json:
            return await self.review(ctx, route, body, reply)

        async def settle_message(message: Json) -> Settled:
            return await self._settle(ctx, route, body, message)

        return _ToolCallStage(review, HeldToolCalls(settle_message))

    async def _settle(
        self, ctx: RequestContext, route: ModelRoute, body: Json, message: Json
    ) -> Settled:
        config = self.settings.policies.of(ctx).guard.tools
        tools = body.get("tools") or []
        budget = Budget(config.limits.validation_ms / 1000)
        catalog = ToolCatalog.from_request(
            tools,
            config.rules,
            config.clean,
            undeclared=config.undeclared_parameters,
            owner=ctx.tenant or "",
            budget=budget,
        )
        answering = self.settings.routes.get(ctx.fallback_model or route.name, route)

        async def ask_again(extra: list[Json]) -> Json:
            repair = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
            repair["messages"] = [*body["messages"], *extra]
            reply = await self.executor.on_behalf(ctx, answering, repair, "repair")
            choices = reply.get("choices") or [{}]
            return dict(choices[0].get("message") or {})

        inline = light(tools, ctx.body_bytes)
        settled = await settle(
            message, catalog, body.get("tool_choice"), config, ask_again, inline=inline
        )
        ctx.tool_guard = settled.outcome
        ctx.tool_repairs = settled.repairs
        ctx.tool_problems = [p.kind for p in settled.problems]
        ctx.tool_cleanings = settled.cleanings
        dropped = settled.cleanings.count("undeclared_stripped")
        if dropped:  # the app never sees them: say so where an operator looks
            log.info(
                "request %s: %d undeclared tool-call parameter(s) removed", ctx.request_id, dropped
            )
        if settled.outcome == "repaired":  # what the model fixed: an operator's only trace of it
            log.info(
                "request %s: tool calls repaired after %d repair(s); the first answer: %s",
                ctx.request_id,
                settled.repairs,
                "; ".join(map(str, settled.found)),
            )
        if settled.problems:
            log.info(
                "request %s: tool calls %s after %d repair(s): %s",
                ctx.request_id,
                settled.outcome,
                settled.repairs,
                "; ".join(map(str, settled.problems)),
            )
        if settled.outcome == "failed":
            raise ToolCallFailed(
                "The model's tool calls are invalid and could not be repaired: "
                + "; ".join(map(str, settled.problems))
            )
        if settled.outcome == "unchecked":
            log.warning(
                "request %s: tool calls not checked, the validation budget of %d ms is spent "
                "(%.0f ms)",
                ctx.request_id,
                config.limits.validation_ms,
                budget.spent * 1000,
            )
            spent = f"the validation budget of {config.limits.validation_ms} ms is spent"
            ctx.response_headers["x-gateway-tool-problems"] = f"not checked: {spent}"
        if settled.outcome == "passed":
            text = "; ".join(map(str, settled.problems))[:_PROBLEMS_HEADER_CHARS]
            ctx.response_headers["x-gateway-tool-problems"] = text.encode(
                "ascii", "replace"
            ).decode()
        return settled


class _ToolCallStage(Stage):
    def __init__(self, review: Callable[[Json], Awaitable[Json]], held: HeldToolCalls) -> None:
        self._review = review
        self._held = held

    async def answer(self, completion: Json) -> Json:
        return await self._review(completion)

    def chunks(self, batch: list[Json]) -> list[Json]:
        return [chunk for chunk in map(self._held.feed, batch) if chunk is not None]

    async def finish(self) -> list[Json]:
        return await self._held.finish()

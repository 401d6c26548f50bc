"""A legacy completions request through the chat pipeline: one pipeline call per prompt (run
concurrently, their choices merged), or, for a stream, the one prompt's chat stream written as
text completion chunks. A request only a native completions endpoint can answer goes to one
(gateway/completions/native.py), or is refused with the parameter named."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from gateway.completions import native
from gateway.completions.request import CompletionRequest, chat_body, choices, native_only
from gateway.completions.response import TextChunks, summed_usage, text_completion
from gateway.context import RequestContext
from gateway.pipeline import Pipeline
from gateway.ratelimit import RateLimited
from gateway.reply.native import NativeEvents
from gateway.reply.reply import Reply
from gateway.wire import chat_params

Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Streamed:
    """A stream to relay, and how its chunks are written."""

    reply: Reply
    form: TextChunks | NativeEvents


async def complete(
    ctx: RequestContext, pipeline: Pipeline, request: CompletionRequest, body: Json
) -> Json | Streamed:
    """The text completion for `request` (`body` as the client sent it), or its stream."""
    server = pipeline.settings.server
    asked = choices(request, server.completions_max_prompts, server.completions_max_choices)
    await _charge_fan_out(ctx, request, asked)
    refused = native_only(request)
    if refused is not None:
        answer = await native.relay(ctx, pipeline, request, body, refused)
        return answer if isinstance(answer, dict) else Streamed(*answer)
    prompts = request.prompts
    assert prompts, "native_only refuses token prompts and empty lists"
    if request.stream:
        chat = chat_body(body, prompts[0])
        reply = await pipeline.chat(ctx, chat_params(chat), chat)
        if reply.completion is None:
            return Streamed(reply, TextChunks())
        return text_completion([reply.completion], request.n or 1)
    # The first prompt runs on the request's own context; the others each on one of their
    # own, so that concurrent calls never read each other's decisions (a fallback's answer
    # must not be cached as the model's), merged into the request's record afterwards.
    contexts = [ctx, *(ctx.sibling(str(i)) for i in range(1, len(prompts)))]
    calls = (
        _answer(c, pipeline, chat_body(body, p)) for c, p in zip(contexts, prompts, strict=True)
    )
    answers = await _all(calls)
    for sibling in contexts[1:]:
        _merge(ctx, sibling)
    if len(answers) > 1:
        ctx.usage = summed_usage([a.get("usage") for a in answers])
    return text_completion(answers, request.n or 1)


async def _charge_fan_out(ctx: RequestContext, request: CompletionRequest, asked: int) -> None:
    """Count what one request fans out to against the tenant's rate limits (and its own
    key's), before any upstream call: each choice beyond the first as one more request, and
    each prompt beyond the first the tokens its call sends again besides the prompt (the
    prompts themselves were counted on admission, from the body's size). A 429 otherwise."""
    prompts = request.prompts or []
    again = max(0, (ctx.body_bytes or 0) - sum(len(p) for p in prompts)) // 4
    tokens = again * max(0, len(prompts) - 1)
    try:
        for permit in ctx.permits:
            await permit.charge(asked - 1, tokens)
    except RateLimited as refused:
        ctx.rate_limited = refused.limit
        raise
    ctx.tokens_charged += tokens


async def _answer(ctx: RequestContext, pipeline: Pipeline, chat: Json) -> Json:
    reply = await pipeline.chat(ctx, chat_params(chat), chat)
    assert reply.completion is not None, "a plain request has a plain answer"
    return reply.completion


def _merge(ctx: RequestContext, sibling: RequestContext) -> None:
    """What one more prompt's calls did, onto the request's record (metrics, access log,
    headers): attempts and failures add up; the worst level and any fallback show."""
    ctx.attempts += sibling.attempts
    ctx.retries += sibling.retries
    ctx.upstream_failures += sibling.upstream_failures
    ctx.invalid_answers += sibling.invalid_answers
    ctx.guard_usage += sibling.guard_usage
    ctx.tool_problems += sibling.tool_problems
    ctx.tool_cleanings += sibling.tool_cleanings
    ctx.shed += [name for name in sibling.shed if name not in ctx.shed]
    ctx.response_headers.update(sibling.response_headers)
    ctx.fallback_model = ctx.fallback_model or sibling.fallback_model
    ctx.error_code = ctx.error_code or sibling.error_code
    if (sibling.degradation_level or 0) > (ctx.degradation_level or 0):
        ctx.degradation_level = sibling.degradation_level
    if ctx.upstream_seconds is None or (sibling.upstream_seconds or 0) > ctx.upstream_seconds:
        ctx.upstream_seconds = sibling.upstream_seconds


# Prompts of one request answered at once: a list of 2048 is not 2048 upstream calls at once
# (rate limits count the request once).
CONCURRENT_PROMPTS = 8


async def _all(calls: Any) -> list[Json]:
    """Every call's result, in order, at most CONCURRENT_PROMPTS at a time; the first failure
    cancels the rest."""
    slots = asyncio.Semaphore(CONCURRENT_PROMPTS)

    async def bounded(call: Awaitable[Json]) -> Json:
        async with slots:
            return await call

    tasks = [asyncio.ensure_future(bounded(call)) for call in calls]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()

"""A legacy completions request through the chat pipeline: one pipeline call per prompt (run
concurrently, their choices merged), or, for a stream, the one prompt's chat stream written as
text completion chunks. A request only a native completions endpoint can answer goes to one
(gateway/completions/native.py), or is refused with the parameter named."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from gateway.completions import native
from gateway.completions.request import CompletionRequest, chat_body, native_only
from gateway.completions.response import TextChunks, summed_usage, text_completion
from gateway.context import RequestContext
from gateway.pipeline import Pipeline
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
    answers = await _all(_answer(ctx, pipeline, chat_body(body, p)) for p in prompts)
    if len(answers) > 1:
        ctx.usage = summed_usage([a.get("usage") for a in answers])  # for the request's record
    return text_completion(answers, request.n or 1)


async def _answer(ctx: RequestContext, pipeline: Pipeline, chat: Json) -> Json:
    reply = await pipeline.chat(ctx, chat_params(chat), chat)
    assert reply.completion is not None, "a plain request has a plain answer"
    return reply.completion


async def _all(calls: Any) -> list[Json]:
    """Every call's result, in order; the first failure cancels the rest."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()

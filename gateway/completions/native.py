"""A completions request only a native completions endpoint can answer (echo, logprobs,
suffix, best_of, token prompts, a stream of several prompts), relayed to an upstream that
serves `/v1/completions` itself: through the executor's deployments, breakers, retries and
fallbacks, its answer and stream events unchanged. The gateway's chat stages (cache, tool
guard, knowledge bases, routing by complexity) do not apply: they read chat messages. Nothing
answered: level 4, a text completion saying so, as on the chat path."""

from __future__ import annotations

from typing import Any

from gateway.completions.request import CompletionRequest
from gateway.completions.response import TextChunks, text_completion
from gateway.context import RequestContext
from gateway.errors import InvalidRequest, echo
from gateway.pipeline import Pipeline
from gateway.reply.native import NativeEvents, NativeUsage
from gateway.reply.reply import Reply
from gateway.resilience.executor import AllUpstreamsUnavailable
from gateway.wire import chat_params

Json = dict[str, Any]
ENDPOINT = "completions"


async def relay(
    ctx: RequestContext,
    pipeline: Pipeline,
    request: CompletionRequest,
    body: Json,
    refused: tuple[str, str],
) -> Json | tuple[Reply, TextChunks | NativeEvents]:
    """The native answer to `body`, or its stream and how to write it; a 400 naming the
    parameter (`refused`: it and why) when no upstream of the model serves completions."""
    policy = pipeline.settings.policies.of(ctx)
    alias = policy.routing.aliases.get(request.model)
    # An alias starts at its first tier: scoring reads chat messages, which this has none of.
    route = ctx.route = pipeline.resolve(pipeline.router.first_tier(request.model, alias), "chat")
    executor = pipeline.executor
    if not executor.serves_natively(route, ENDPOINT):
        param, why = refused
        raise InvalidRequest(
            f"'{param}' needs an upstream that serves /v1/completions natively, and the "
            f"model {echo(request.model)} has none: {why}.",
            param=param,
            code="unsupported_parameter",
        )
    try:
        answer = await executor.native(ctx, route, ENDPOINT, body, stream=bool(request.stream))
    except AllUpstreamsUnavailable as err:
        return await _unavailable(ctx, pipeline, request, err)
    if isinstance(answer, dict):
        return answer
    return await Reply(answer).then(NativeUsage(ctx)).ready(), NativeEvents(ENDPOINT)


async def _unavailable(
    ctx: RequestContext,
    pipeline: Pipeline,
    request: CompletionRequest,
    err: AllUpstreamsUnavailable,
) -> Json | tuple[Reply, TextChunks | NativeEvents]:
    """Level 4 as the chat path gives it (`Pipeline.unavailable`), as a text completion: one
    choice for each prompt and n, in the language of the last prompt."""
    prompts = request.prompts or [""]
    chat: Json = {
        "model": request.model,
        "messages": [{"role": "user", "content": prompts[-1]}],
        "n": len(prompts) * (request.n or 1),
        "stream": bool(request.stream),
    }
    if request.stream_options is not None:
        chat["stream_options"] = {"include_usage": request.wants_usage_in_stream}
    reply = await pipeline.unavailable(ctx, chat_params(chat), chat, err)
    if reply.completion is not None:
        return text_completion([reply.completion], 1)
    return reply, TextChunks()

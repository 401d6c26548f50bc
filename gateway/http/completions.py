"""`POST /v1/completions`: read, validate, hand to gateway/completions/service.py, render."""

from __future__ import annotations

from aiohttp import web

from gateway.completions import request as legacy
from gateway.completions.service import complete
from gateway.http import render
from gateway.http.handlers import cache_directive, deadline, read_json
from gateway.http.keys import CTX, RUNTIME


async def completions(request: web.Request) -> web.StreamResponse:
    ctx, runtime = request[CTX], request[RUNTIME]
    body = await read_json(request)
    parsed = legacy.parse(body)
    ctx.requested_model, ctx.stream = parsed.model, bool(parsed.stream)
    ctx.cache_directive = cache_directive(request.headers)
    ctx.knowledge_directive = request.headers.get("x-gateway-knowledge-base")
    ctx.deadline_seconds = deadline(request.headers)
    prompts = parsed.prompts
    if runtime.settings.server.log_prompts and prompts:
        ctx.prompt = prompts[-1]
    answer = await complete(ctx, runtime.pipeline, parsed, body)
    if isinstance(answer, dict):
        return render.json(ctx, answer)
    return await render.stream(request, ctx, answer.reply, form=answer.form)

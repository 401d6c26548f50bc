"""`POST /v1/completions`: read, validate, hand to gateway/completions/service.py, render."""

from __future__ import annotations

from aiohttp import web

from gateway.completions import request as legacy
from gateway.completions.response import TextChunks
from gateway.completions.service import complete
from gateway.http import render
from gateway.http.handlers import read_json, read_request_headers
from gateway.http.keys import CTX, RUNTIME


async def completions(request: web.Request) -> web.StreamResponse:
    ctx, runtime = request[CTX], request[RUNTIME]
    body = await read_json(request)
    parsed = legacy.parse(body)
    read_request_headers(request, parsed.model, parsed.stream)
    if parsed.stream:
        render.streams(request, TextChunks())
    prompts = parsed.prompts
    if runtime.settings.server.log_prompts and prompts:
        ctx.prompt = prompts[-1]
    answer = await complete(ctx, runtime.pipeline, parsed, body)
    if isinstance(answer, dict):
        return render.json(ctx, answer)
    return await render.stream(request, ctx, answer.reply, form=answer.form)

"""The Responses API: `POST /v1/responses` and the stored responses it leaves.

A request is translated to the gateway's chat form (gateway/responses/request.py), answered by
the same pipeline as chat completions, and the answer translated back: a Response object, or
the Responses event stream. Stored responses are the tenant's own (gateway/responses/store.py).
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

from aiohttp import web

from gateway.context import RequestContext
from gateway.errors import InvalidRequest, NotFound
from gateway.http import render
from gateway.http.handlers import read_chat_headers, read_json
from gateway.http.keys import CTX, RESPONSES, RUNTIME
from gateway.responses import output
from gateway.responses import request as translate
from gateway.responses.events import ResponseEvents
from gateway.responses.store import ResponseStore, StoredResponse, new_response_id
from gateway.wire import chat_params

Json = dict[str, Any]


async def create(request: web.Request) -> web.StreamResponse:
    ctx, runtime, store = request[CTX], request[RUNTIME], request.app[RESPONSES]
    body = await read_json(request)
    asked = translate.parse(body)
    history: list[Json] = []
    if asked.previous_response_id is not None:
        previous = await store.get(_tenant(ctx), asked.previous_response_id)
        if previous is None:
            raise NotFound(
                f"Previous response with id '{asked.previous_response_id}' not found.",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        history = previous.conversation
    items = translate.input_items(asked)
    turn = history + translate.conversation(items)
    chat = translate.chat_body(asked, body, turn)
    params = chat_params(chat)
    read_chat_headers(request, params, chat)
    reply = await runtime.pipeline.chat(ctx, params, chat)
    model = ctx.route.name if ctx.route is not None else asked.model
    snapshot = partial(_snapshot, new_response_id(), asked, body, model, int(time.time()))

    async def keep(response: Json, _completion: Json) -> None:
        if asked.stores:
            conversation = turn + output.conversation_output(response["output"])
            await store.put(_tenant(ctx), StoredResponse(response, items, conversation))

    completion = reply.completion
    if completion is None:
        return await render.stream(request, ctx, reply, ResponseEvents(snapshot, keep))
    choice = (completion.get("choices") or [{}])[0]
    response = snapshot(
        output.output_items(completion),
        "completed",
        completion.get("usage"),
        choice.get("finish_reason"),
        None,
    )
    if "sources" in completion:
        response["sources"] = completion["sources"]
    await keep(response, completion)
    return render.json(ctx, response)


async def retrieve(request: web.Request) -> web.StreamResponse:
    return render.json(request[CTX], (await _stored(request)).response)


async def delete(request: web.Request) -> web.StreamResponse:
    response_id = request.match_info["response_id"]
    if not await _store(request).delete(_tenant(request[CTX]), response_id):
        raise _not_found(response_id)
    return render.json(request[CTX], {"id": response_id, "object": "response", "deleted": True})


async def input_items(request: web.Request) -> web.StreamResponse:
    """`GET /v1/responses/{id}/input_items?limit=&order=&after=`, paged as OpenAI pages."""
    items = (await _stored(request)).input_items
    query = request.query
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequest("order must be 'asc' or 'desc'.", param="order")
    limit = _limit(query.get("limit", "20"))
    ordered = items if order == "asc" else items[::-1]
    after = query.get("after")
    if after is not None:
        ids = [item["id"] for item in ordered]
        if after not in ids:
            raise InvalidRequest(f"No input item with id '{after}'.", param="after")
        ordered = ordered[ids.index(after) + 1 :]
    page = ordered[:limit]
    return render.json(
        request[CTX],
        {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(ordered) > limit,
        },
    )


def _snapshot(
    response_id: str,
    asked: translate.ResponsesRequest,
    body: Json,
    model: str,
    created_at: int,
    items: list[Json],
    status: str,
    usage: Json | None,
    finish_reason: str | None,
    error: Json | None,
) -> Json:
    return output.response_object(
        response_id,
        asked,
        body,
        model=model,
        output=items,
        status=status,
        created_at=created_at,
        usage=usage,
        finish_reason=finish_reason,
        error=error,
    )


async def _stored(request: web.Request) -> StoredResponse:
    response_id = request.match_info["response_id"]
    stored = await _store(request).get(_tenant(request[CTX]), response_id)
    if stored is None:
        raise _not_found(response_id)
    return stored


def _store(request: web.Request) -> ResponseStore:
    return request.app[RESPONSES]


def _tenant(ctx: RequestContext) -> str:
    return ctx.tenant or ""


def _not_found(response_id: str) -> NotFound:
    # The same words for an id that never existed, expired, was deleted or is another
    # tenant's: nothing tells them apart.
    return NotFound(f"Response with id '{response_id}' not found.", param="response_id")


def _limit(given: str) -> int:
    try:
        limit = int(given)
    except ValueError:
        limit = 0
    if not 1 <= limit <= 100:
        raise InvalidRequest(
            f"limit must be an integer from 1 to 100, not {given!r}.", param="limit"
        )
    return limit

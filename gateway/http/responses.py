"""The Responses API: `POST /v1/responses` and the stored responses it leaves.

A request is translated to the gateway's chat form (gateway/responses/request.py), answered by
the same pipeline as chat completions, and the answer translated back: a Response object, or
the Responses event stream. Stored responses are the tenant's own (gateway/responses/store.py).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from aiohttp import web

from gateway.context import RequestContext
from gateway.errors import InvalidRequest, NotFound, echo
from gateway.http import render
from gateway.http.handlers import read_chat_headers, read_json
from gateway.http.keys import CTX, RESPONSES, RUNTIME
from gateway.reply.reply import Reply
from gateway.resilience.executor import AllUpstreamsUnavailable
from gateway.responses import native, output
from gateway.responses import request as translate
from gateway.responses.events import ResponseEvents
from gateway.responses.request import ResponsesRequest
from gateway.responses.store import Chain, ResponseStore, StoredResponse, new_response_id
from gateway.wire import chat_params

Json = dict[str, Any]


async def create(request: web.Request) -> web.StreamResponse:
    ctx, pipeline = request[CTX], request[RUNTIME].pipeline
    body = await read_json(request)
    asked = _admitted(request, translate.parse(body))
    if asked.stream:
        render.streams(request, _stream_form(asked, body, asked.model))
    chain = await _history(request, asked)
    history = chain.conversation
    items = translate.input_items(asked)
    if translate.built_in_tools(asked) and native.serves(ctx, pipeline, asked.model):
        return await _native(request, asked, body, chain, items)
    new = translate.conversation(items)
    chat = translate.chat_body(asked, body, history + new)
    params = chat_params(chat)
    read_chat_headers(request, params, chat)
    reply = await pipeline.chat(ctx, params, chat)
    return await _answer(request, asked, body, Conversation(new, items, chain), reply)


_NO_HISTORY = Chain([], [])


@dataclass(frozen=True, slots=True)
class Conversation:
    """What a stored response keeps beside itself: the chat turns this request added
    before its answer, this request's own input items, and the chain it continued."""

    new: list[Json]
    items: list[Json]
    chain: Chain


def _admitted(request: web.Request, asked: ResponsesRequest) -> ResponsesRequest:
    """The request as answered: a store that cannot take it (quota, size, a failing disk)
    refuses an explicit `store: true` before any upstream call; when `store` was left to
    its default, the answer says `store: false` instead (docs/RESPONSES.md)."""
    if not asked.stores:
        return asked
    ctx = request[CTX]
    # A row keeps the request's input twice (input items, chat turns): about twice the body.
    size = 2 * (ctx.body_bytes or request.content_length or 0)
    if _store(request).admit(_tenant(ctx), size, explicit=asked.store is True):
        return asked
    return asked.model_copy(update={"store": False})


async def _history(request: web.Request, asked: translate.ResponsesRequest) -> Chain:
    """The conversation `previous_response_id` continues (the tenant's own only)."""
    if asked.previous_response_id is None:
        return _NO_HISTORY
    chain = await _store(request).history(_tenant(request[CTX]), asked.previous_response_id)
    if chain is None:
        raise NotFound(
            f"Previous response with id {echo(asked.previous_response_id)} not found.",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    return chain


async def _answer(
    request: web.Request,
    asked: translate.ResponsesRequest,
    body: Json,
    conversation: Conversation,
    reply: Reply,
) -> web.StreamResponse:
    """The pipeline's chat answer as a Response, or as the Responses event stream."""
    ctx = request[CTX]
    model = ctx.route.name if ctx.route is not None else asked.model
    keep = partial(_keep, request, asked, conversation)

    completion = reply.completion
    if completion is None:
        return await render.stream(request, ctx, reply, _stream_form(asked, body, model, keep))
    snapshot = partial(_snapshot, new_response_id(), asked, body, model, int(time.time()))
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
    await keep(response)
    return render.json(ctx, response)


def _stream_form(
    asked: translate.ResponsesRequest,
    body: Json,
    model: str,
    keep: Callable[[Json], Awaitable[None]] | None = None,
) -> ResponseEvents:
    """The Responses event stream of a new response; without `keep` (the form a shutdown
    ends a stream in before its first byte) a completed response is not stored."""
    snapshot = partial(_snapshot, new_response_id(), asked, body, model, int(time.time()))
    return ResponseEvents(snapshot, keep or _keep_nothing)


async def _keep_nothing(response: Json) -> None:
    return None


async def _keep(
    request: web.Request,
    asked: translate.ResponsesRequest,
    conversation: Conversation,
    response: Json,
) -> None:
    """Keep `response` for the tenant, with what continuing it needs (when `store` is on):
    the turns this request added and the id it continued, not the whole conversation again.
    Not kept (a limit, a failing store): the client gets the answer with `store: false`."""
    if asked.stores and isinstance(response.get("id"), str):
        turns = conversation.new + output.conversation_output(response.get("output") or [])
        stored = StoredResponse(response, conversation.items, turns, asked.previous_response_id)
        kept = await _store(request).put(_tenant(request[CTX]), stored, conversation.chain.ids)
        if not kept:
            response["store"] = False


async def _native(
    request: web.Request,
    asked: translate.ResponsesRequest,
    body: Json,
    chain: Chain,
    items: list[Json],
) -> web.StreamResponse:
    """A request with built-in tools, to an upstream that runs them (responses/native.py);
    level 4 when none answers, as on the chat path."""
    ctx, pipeline = request[CTX], request[RUNTIME].pipeline
    new = translate.conversation(items, provider_items=True)
    chat = translate.chat_body(asked, body, chain.conversation + new, tools=False)  # level 4
    params = chat_params(chat)
    read_chat_headers(request, params, chat)
    conversation = Conversation(new, items, chain)
    keep = partial(_keep, request, asked, conversation)
    relayed = native.upstream_body(asked, body, chain.conversation)
    try:
        answer = await native.relay(ctx, pipeline, relayed, bool(asked.stream), keep)
    except AllUpstreamsUnavailable as err:
        reply = await pipeline.unavailable(ctx, params, chat, err)
        return await _answer(request, asked, body, conversation, reply)
    if isinstance(answer, dict):
        return render.json(ctx, answer)
    return await render.stream(request, ctx, *answer)


async def retrieve(request: web.Request) -> web.StreamResponse:
    return render.json(request[CTX], (await _stored(request)).response)


async def delete(request: web.Request) -> web.StreamResponse:
    response_id = request.match_info["response_id"]
    if not await _store(request).delete(_tenant(request[CTX]), response_id):
        raise _not_found(response_id)
    return render.json(request[CTX], {"id": response_id, "object": "response", "deleted": True})


async def cancel(request: web.Request) -> web.StreamResponse:
    """`POST /v1/responses/{id}/cancel` cancels a background response; the gateway runs none
    (`background` is refused), so a stored response is already complete, as at OpenAI."""
    await _stored(request)  # another tenant's or an unknown id: the same 404
    raise InvalidRequest(
        "Only background responses can be cancelled, and this gateway runs none: the "
        "response is already complete.",
        param="response_id",
        code="not_cancellable",
    )


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
            raise InvalidRequest(f"No input item with id {echo(after)}.", param="after")
        ordered = ordered[ids.index(after) + 1 :]
    page = ordered[:limit]
    return render.json(
        request[CTX],
        {
            "object": "list",
            "data": page,
            # An empty page has no ids; the official list schema still wants strings.
            "first_id": page[0]["id"] if page else "",
            "last_id": page[-1]["id"] if page else "",
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
    return NotFound(f"Response with id {echo(response_id)} not found.", param="response_id")


def _limit(given: str) -> int:
    try:
        limit = int(given)
    except ValueError:
        limit = 0
    if not 1 <= limit <= 100:
        raise InvalidRequest(
            f"limit must be an integer from 1 to 100, not {echo(given)}.", param="limit"
        )
    return limit

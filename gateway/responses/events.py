"""Chat completion chunks -> the Responses API event stream.

The official sequence: `response.created`, `response.in_progress`, then per output item
`response.output_item.added`, its content (`response.content_part.added`,
`response.output_text.delta`... `.done`, `response.content_part.done`, or a function call's
`response.function_call_arguments.delta`... `.done`), `response.output_item.done`, and at the
end `response.completed` (or `response.incomplete`) with the whole Response. A failure after
the headers is an `error` event and `response.failed`. Every event has a `sequence_number`,
0, 1, 2... Items open one at a time, in the order the upstream's deltas start them; the tool
guard holds a call's deltas until it is settled, so a call usually arrives whole.

It is a `StreamForm` (gateway/http/render.py): render.stream writes what it returns.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from gateway.errors import GatewayError
from gateway.responses import items, output
from gateway.responses.items import new_id

Json = dict[str, Any]
# The Response as it stands: (output items, status, usage, finish_reason, error) -> Response
Snapshot = Callable[[list[Json], str, Json | None, str | None, Json | None], Json]


# A text part's kind -> the field that holds its text, and the event of one delta of it.
_TEXT_FIELD = {"output_text": "text", "refusal": "refusal", "reasoning_text": "text"}
_DELTA = {
    "output_text": "response.output_text.delta",
    "refusal": "response.refusal.delta",
    "reasoning_text": "response.reasoning_text.delta",
}
# A failed Response's error.code is one of the official codes.
_ERROR_CODES = {429: "rate_limit_exceeded"}


class ResponseEvents:
    def __init__(self, snapshot: Snapshot, on_complete: Callable[[Json], Awaitable[None]]) -> None:
        """`on_complete(response)` runs once the stream ended normally, before
        its last event is written (a stored response is readable when the client has it)."""
        self._snapshot = snapshot
        self._on_complete = on_complete
        self._sequence = 0
        self._started = False
        self._failed = False
        self._items: list[Json] = []
        self._open: Json | None = None  # the item receiving deltas
        self._calls: dict[int, Json] = {}  # a tool call's chat index -> its item
        self._usage: Json | None = None  # the stream's usage chunk, for response.completed
        self._finish_reason: str | None = None
        self._sources: Any = None

    def batch(self, chunks: list[Json]) -> bytes:
        events = self._start() if not self._started else []
        for chunk in chunks:
            if chunk.get("usage"):
                self._usage = chunk["usage"]
            if "sources" in chunk:
                self._sources = chunk["sources"]
            for choice in chunk.get("choices") or []:
                if choice.get("index", 0) != 0:
                    continue  # the Responses API has one output per response
                delta = choice.get("delta") or {}
                if delta.get("reasoning_content"):
                    events += self._text(delta["reasoning_content"], "reasoning_text")
                if delta.get("content"):
                    events += self._text(delta["content"], "output_text")
                if delta.get("refusal"):
                    events += self._text(delta["refusal"], "refusal")
                for call in delta.get("tool_calls") or []:
                    events += self._call(call)
                if choice.get("finish_reason"):
                    self._finish_reason = choice["finish_reason"]
        return self._encode(events)

    def failed(self, err: GatewayError) -> bytes:
        self._failed = True
        events = self._start() if not self._started else []
        body = err.body()["error"]
        events.append(
            {
                "type": "error",
                "code": body.get("code") or body.get("type"),
                "message": body["message"],
                "param": body.get("param"),
            }
        )
        for item in self._items:
            if item["status"] == "in_progress":
                item["status"] = "incomplete"
        error = {"code": _ERROR_CODES.get(err.status, "server_error"), "message": body["message"]}
        response = self._snapshot(self._items, "failed", None, None, error)
        events.append({"type": "response.failed", "response": response})
        return self._encode(events)

    async def end(self) -> bytes:
        if self._failed:
            return b""
        events = self._start() if not self._started else []
        events += self._close()
        if not self._items:  # nothing said: still one (empty) message, as a plain call gives
            item_id = new_id("msg")
            events += self._open_item(items.message_item(item_id, [], "in_progress"))
            events += self._text_part_added(item_id)
            events += self._close()
        response = self._snapshot(self._items, "completed", self._usage, self._finish_reason, None)
        if self._sources is not None:
            response["sources"] = self._sources
        await self._on_complete(response)
        kind = "response.completed" if response["status"] == "completed" else "response.incomplete"
        events.append({"type": kind, "response": response})
        return self._encode(events)

    # -- items -------------------------------------------------------------------------

    def _start(self) -> list[Json]:
        self._started = True
        created = self._snapshot([], "in_progress", None, None, None)
        return [
            {"type": "response.created", "response": created},
            {"type": "response.in_progress", "response": created},
        ]

    def _text(self, text: str, kind: str) -> list[Json]:
        """A text delta of a part of `kind` (output_text, refusal: a message's; reasoning_text:
        a reasoning item's), opening its item and part when it is the first."""
        events: list[Json] = []
        item_type = "reasoning" if kind == "reasoning_text" else "message"
        item = self._open
        if item is None or item["type"] != item_type:
            events += self._close()
            if item_type == "reasoning":
                opened = items.reasoning_item(new_id("rs"), [], "in_progress")
            else:
                opened = items.message_item(new_id("msg"), [], "in_progress")
            events += self._open_item(opened)
            item = opened
        parts = item["content"]
        if not parts or parts[-1]["type"] != kind:
            events += self._close_part()
            part = items.PARTS[kind]("")
            parts.append(part)
            events.append(
                self._at(item, {"type": "response.content_part.added", "part": dict(part)})
            )
        part = parts[-1]
        field = _TEXT_FIELD[kind]
        part[field] += text
        delta: Json = {"type": _DELTA[kind], "delta": text}
        if kind == "output_text":
            delta["logprobs"] = []
        events.append(self._at(item, delta))
        return events

    def _text_part_added(self, item_id: str) -> list[Json]:
        item = self._open
        assert item is not None and item["id"] == item_id
        item["content"].append(items.text_part(""))
        part = items.text_part("")
        return [self._at(item, {"type": "response.content_part.added", "part": part})]

    def _call(self, delta: Json) -> list[Json]:
        events: list[Json] = []
        index = delta.get("index", 0)
        function = delta.get("function") or {}
        item = self._calls.get(index)
        if item is None:
            # The call's name is in its first delta (the tool guard relays a call whole):
            # output_item.added carries it, as OpenAI's does.
            events += self._close()
            call_id = delta.get("id") or new_id("call")
            name = function.get("name") or ""
            item = items.call_item(new_id("fc"), call_id, name, "", "in_progress")
            self._calls[index] = item
            events += self._open_item(item)
        elif item is not self._open:
            return events  # a late delta for a call already closed: its done event is sent
        elif function.get("name"):
            item["name"] += function["name"]
        if function.get("arguments"):
            item["arguments"] += function["arguments"]
            events.append(
                {
                    "type": "response.function_call_arguments.delta",
                    "item_id": item["id"],
                    "output_index": self._items.index(item),
                    "delta": function["arguments"],
                }
            )
        return events

    def _open_item(self, item: Json) -> list[Json]:
        self._items.append(item)
        self._open = item
        added = {**item, "content": []} if "content" in item else dict(item)
        return [
            {
                "type": "response.output_item.added",
                "output_index": len(self._items) - 1,
                "item": added,
            }
        ]

    def _close(self) -> list[Json]:
        """Close the open item: its last part, then the item."""
        item = self._open
        if item is None:
            return []
        events = self._close_part()
        if item["type"] == "function_call":
            events.append(
                {
                    "type": "response.function_call_arguments.done",
                    "item_id": item["id"],
                    "output_index": self._items.index(item),
                    "name": item["name"],
                    "arguments": item["arguments"],
                }
            )
        incomplete = self._finish_reason in output.INCOMPLETE and item["type"] == "message"
        item["status"] = "incomplete" if incomplete else "completed"
        self._open = None
        index = self._items.index(item)
        done = {"type": "response.output_item.done", "output_index": index, "item": item}
        return [*events, done]

    def _close_part(self) -> list[Json]:
        item = self._open
        if item is None or item["type"] == "function_call" or not item["content"]:
            return []
        part = item["content"][-1]
        kind = part["type"]
        finished = {
            "type": _DELTA[kind].replace(".delta", ".done"),
            **{k: part[k] for k in (_TEXT_FIELD[kind],)},
        }
        if kind == "output_text":
            finished["logprobs"] = []
        done = {"type": "response.content_part.done", "part": dict(part)}
        return [self._at(item, finished), self._at(item, done)]

    def _at(self, item: Json, event: Json) -> Json:
        index = self._items.index(item)
        where = {"item_id": item["id"], "output_index": index}
        where["content_index"] = len(item["content"]) - 1
        return {**event, **where}

    def _encode(self, events: list[Json]) -> bytes:
        out = []
        for event in events:
            event["sequence_number"] = self._sequence
            self._sequence += 1
            out.append(b"event: %s\ndata: %s\n\n" % (event["type"].encode(), orjson.dumps(event)))
        return b"".join(out)

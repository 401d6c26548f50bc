"""A native answer on its way out (gateway/upstream/native.py brought it in): its stream
written again as it came, and its usage on the request's record.

Nothing here changes an event: a completions stream is `data:` lines ending in `[DONE]`, a
Responses stream is `event: <type>` and `data:` lines with no `[DONE]`. A failure after the
headers is written in the endpoint's own shape (an error body; a Responses `error` event).
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.context import RequestContext
from gateway.errors import GatewayError
from gateway.reply import sse
from gateway.reply.stage import Stage
from gateway.upstream.native import EVENT

Json = dict[str, Any]


class NativeEvents:
    """The `StreamForm` (gateway/http/render.py) of a native stream of `endpoint`."""

    def __init__(self, endpoint: str) -> None:
        self._responses = endpoint == "responses"
        self._sequence = -1  # the last sequence number relayed (Responses)

    def batch(self, chunks: list[Json]) -> bytes:
        return b"".join(map(self._event, chunks))

    def failed(self, err: GatewayError) -> bytes:
        if not self._responses:
            return sse.encode(err.body())
        body = err.body()["error"]
        return self._event(
            {
                EVENT: "error",
                "type": "error",
                "code": body.get("code") or body.get("type"),
                "message": body.get("message"),
                "param": body.get("param"),
                "sequence_number": self._sequence + 1,
            }
        )

    async def end(self) -> bytes:
        return b"" if self._responses else sse.DONE

    def _event(self, event: Json) -> bytes:
        name = event.pop(EVENT, None)
        sequence = event.get("sequence_number")
        if isinstance(sequence, int):
            self._sequence = sequence
        data = b"data: " + orjson.dumps(event) + b"\n\n"
        return data if name is None else b"event: " + name.encode() + b"\n" + data


class NativeUsage(Stage):
    """Puts a native stream's usage on the request's record as it passes (a completions usage
    chunk; a Responses `response.completed`'s), changing nothing."""

    def __init__(self, ctx: RequestContext) -> None:
        self._ctx = ctx

    def chunks(self, batch: list[Json]) -> list[Json]:
        for event in batch:
            usage = event.get("usage")
            if usage is None and isinstance(event.get("response"), dict):
                usage = event["response"].get("usage")
            if usage:
                self._ctx.record_usage(chat_usage(usage))
        return batch


def chat_usage(usage: Any) -> Any:
    """A native answer's usage in the chat form the gateway accounts (Responses say
    input/output tokens); anything else as it is."""
    if not isinstance(usage, dict) or "input_tokens" not in usage:
        return usage
    prompt, completion = usage.get("input_tokens") or 0, usage.get("output_tokens") or 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": usage.get("total_tokens") or prompt + completion,
    }

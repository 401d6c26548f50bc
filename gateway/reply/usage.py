"""The usage stage, last for every answer: a stream's tokens go on the request's record and its
usage is hidden from a client that did not ask for it.

The gateway asks an upstream for a stream's usage whether the client did or not (to account
tokens); a client that did not ask gets neither the usage-only chunk nor `usage: null` fields.
A plain answer's usage was recorded with the call that brought it (the executor's).
"""

from __future__ import annotations

from typing import Any

from gateway.context import RequestContext
from gateway.reply.stage import Stage

Json = dict[str, Any]


class UsageAccounting(Stage):
    def __init__(self, ctx: RequestContext, client_wants_usage: bool) -> None:
        self._ctx = ctx
        self._client_wants_usage = client_wants_usage

    def chunks(self, batch: list[Json]) -> list[Json]:
        # The hot path of every stream: one loop over the batch, no call per chunk.
        ctx = self._ctx
        count_chars = ctx.prompt_tokens_estimate is not None  # the stream may bring no usage
        shown = self._client_wants_usage
        out = []
        for chunk in batch:
            usage = chunk.get("usage")
            if usage:
                ctx.record_usage(usage)
            if count_chars:
                for choice in chunk.get("choices") or ():
                    content = (choice.get("delta") or {}).get("content")
                    if isinstance(content, str):
                        ctx.streamed_chars += len(content)
            if not shown:
                chunk.pop("usage", None)
                if usage and not chunk.get("choices"):
                    continue
            out.append(chunk)
        return out

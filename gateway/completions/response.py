"""Chat answers back into legacy text completions: a whole completion, the merge of one
request's prompts, and a stream's chunks (as a `StreamForm` for gateway/http/render.py)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from gateway.errors import GatewayError
from gateway.reply import sse

Json = dict[str, Any]

# The legacy API knows these three; a chat answer that ended on a tool call simply stopped.
_FINISH_REASONS = frozenset({"stop", "length", "content_filter"})
# Top-level fields of a chat answer that a text completion carries over as they are.
_CARRIED = ("system_fingerprint", "sources")


def completion_id() -> str:
    return f"cmpl-{uuid.uuid4().hex[:24]}"


def finish_reason(reason: Any) -> str:
    return reason if reason in _FINISH_REASONS else "stop"


def text_completion(answers: list[Json], n: int) -> Json:
    """One `text_completion` from the chat answers to a request's prompts, in prompt order:
    choice `i` of prompt `p` is index `p * n + i`, as OpenAI numbers them; usage is summed."""
    first = answers[0]
    choices = []
    for prompt_index, answer in enumerate(answers):
        for choice in answer.get("choices") or []:
            message = choice.get("message") or {}
            choices.append(
                {
                    "text": message.get("content") or "",
                    "index": prompt_index * n + int(choice.get("index") or 0),
                    "logprobs": None,
                    "finish_reason": finish_reason(choice.get("finish_reason")),
                }
            )
    out: Json = {
        "id": completion_id(),
        "object": "text_completion",
        "created": first.get("created") or int(time.time()),
        "model": first.get("model") or "",
        "choices": choices,
    }
    out.update({key: first[key] for key in _CARRIED if first.get(key) is not None})
    usage = summed_usage([a.get("usage") for a in answers])
    if usage is not None:
        out["usage"] = usage
    return out


def summed_usage(usages: list[Any]) -> Json | None:
    """The token counts of several answers added up (None when none reported any)."""
    reported = [u for u in usages if isinstance(u, dict)]
    if not reported:
        return None
    if len(reported) == 1:
        return reported[0]
    total: Json = {}
    for usage in reported:
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            if isinstance(usage.get(key), int):
                total[key] = total.get(key, 0) + usage[key]
    return total


class TextChunks:
    """A chat stream written as legacy completion chunks: each delta's text becomes a
    `text_completion` chunk (one id for the stream), the usage chunk stays a usage chunk, an
    error after the headers is an error event, and the stream ends with `data: [DONE]`."""

    def __init__(self) -> None:
        self._id = completion_id()

    def batch(self, chunks: list[Json]) -> bytes:
        return b"".join(sse.encode(c) for c in map(self._chunk, chunks) if c is not None)

    def failed(self, err: GatewayError) -> bytes:
        return sse.encode(err.body())

    async def end(self) -> bytes:
        return sse.DONE

    def _chunk(self, chunk: Json) -> Json | None:
        choices = []
        for choice in chunk.get("choices") or []:
            text = (choice.get("delta") or {}).get("content") or ""
            reason = choice.get("finish_reason")
            if text or reason:  # the role-only opening delta carries nothing here
                choices.append(
                    {
                        "text": text,
                        "index": choice.get("index") or 0,
                        "logprobs": None,
                        "finish_reason": finish_reason(reason) if reason else None,
                    }
                )
        usage = chunk.get("usage")
        if not choices and not usage and chunk.get("sources") is None:
            return None
        out: Json = {
            "id": self._id,
            "object": "text_completion",
            "created": chunk.get("created") or int(time.time()),
            "model": chunk.get("model") or "",
            "choices": choices,
        }
        out.update({key: chunk[key] for key in _CARRIED if chunk.get(key) is not None})
        if usage:
            out["usage"] = usage
        return out

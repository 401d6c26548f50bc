"""The fake upstream's `shape` and `content_type` knobs: 200 answers that only look valid.

Real upstreams (a proxy's login page, a misconfigured base URL, a provider that reports errors
with status 200) answer 200 with something that is not a completion. Each `Shape` is one such
answer, built from the fake's good answer so that everything else about it stays real:

- `not_json`: a body that is not JSON (streams: `data:` lines of plain text);
- `no_choices`, `choices_not_list`, `empty_choices`: the answer's list (`choices`; `data` of
  embeddings; `output` of a Response) missing, an object instead of a list, or empty (streams:
  in every chunk);
- `no_message`, `message_not_object`: a choice without its `message` (streams: `delta`), or
  with a string in its place (chat only);
- `error_object`: an OpenAI error body (`{"error": {...}}`) with status 200 (streams: as the
  first event);
- `not_chunk` (streams): plain `chat.completion` objects where chunks belong;
- `no_chunks` (streams): `data: [DONE]` and nothing before it;
- `json_answer` (streams): the whole answer as one JSON completion, `application/json`.

`content_type` replaces the 200's Content-Type header (`""`: none at all), plain or streamed.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from aiohttp import web

Json = dict[str, Any]
Shape = Literal[
    "not_json",
    "no_choices",
    "choices_not_list",
    "empty_choices",
    "no_message",
    "message_not_object",
    "error_object",
    "not_chunk",
    "no_chunks",
    "json_answer",
]
STREAM_ONLY: frozenset[str] = frozenset({"not_chunk", "no_chunks", "json_answer"})

NOT_JSON = b"<html><body>Welcome! Please sign in.</body></html>"
ERROR = {
    "error": {
        "message": "fake upstream error inside a 200",
        "type": "server_error",
        "param": None,
        "code": "fake_error_in_200",
    }
}
_LISTS = ("choices", "data", "output")  # chat and completions, embeddings, Responses


def plain_body(answer: Json, shape: Shape | None) -> bytes:
    """A plain answer's body, broken as `shape` says (a stream-only shape leaves it good)."""
    if shape == "not_json":
        return NOT_JSON
    if shape == "error_object":
        return orjson.dumps(ERROR)
    return orjson.dumps(_broken(answer, shape, "message"))


def chunk_events(chunks: list[bytes], shape: Shape | None) -> list[bytes]:
    """A chat stream's event data, broken as `shape` says."""
    if shape is None:
        return chunks
    if shape == "no_chunks":
        return []
    if shape == "not_json":
        return [b"Welcome! Please sign in." for _ in chunks]
    if shape == "error_object":
        return [orjson.dumps(ERROR), *chunks]
    out = []
    for data in chunks:
        chunk = orjson.loads(data)
        if shape == "not_chunk":
            chunk["object"] = "chat.completion"
            for choice in chunk.get("choices") or []:
                choice["message"] = choice.pop("delta")
        else:
            chunk = _broken(chunk, shape, "delta")
        out.append(orjson.dumps(chunk))
    return out


def response(body: bytes, content_type: str | None, default: str) -> web.StreamResponse:
    """A 200 with `body` and the Content-Type the knob says (`""`: the header left out)."""
    if content_type == "":
        # web.Response would add application/octet-stream; a bare StreamResponse adds none.
        return _Unlabelled(body)
    return web.Response(body=body, headers={"Content-Type": content_type or default})


def _broken(answer: Json, shape: Shape | None, part: str) -> Json:
    field = next((name for name in _LISTS if name in answer), "choices")
    if shape == "no_choices":
        return {k: v for k, v in answer.items() if k != field}
    if shape == "choices_not_list":
        items = answer.get(field) or [{}]
        return {**answer, field: items[0]}
    if shape == "empty_choices":
        return {**answer, field: []}
    if shape in ("no_message", "message_not_object"):
        choices = []
        for choice in answer.get("choices") or []:
            body = choice.get(part)
            rest = {k: v for k, v in choice.items() if k != part}
            if shape == "message_not_object":
                text = body.get("content") if isinstance(body, dict) else None
                rest[part] = text or "Echo"
            choices.append(rest)
        return {**answer, "choices": choices}
    return answer


class _Unlabelled(web.StreamResponse):
    """A 200 whose body goes out with no Content-Type header."""

    def __init__(self, body: bytes) -> None:
        super().__init__(headers={"Content-Length": str(len(body))})
        self._payload = body

    async def prepare(self, request: web.BaseRequest) -> Any:
        writer = await super().prepare(request)
        await self.write(self._payload)
        await self.write_eof()
        return writer

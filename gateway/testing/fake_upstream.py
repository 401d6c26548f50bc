"""A fake OpenAI-compatible upstream with fault knobs, for tests and benchmarks.

Run it alone with `python -m gateway.testing.fake_upstream --port 9000`, or in-process with
`FakeUpstream`. Behaviour is steered per request, by the first source that sets a knob:

1. a `"fake": {...}` object in the request body (the gateway forwards unknown fields, so
   clients set it with the SDK's `extra_body`);
2. the server's per-model settings (`POST /_fake/config {"models": {"name": {...}}}`);
3. the server's defaults (`POST /_fake/config {"defaults": {...}}`).

Knobs (see `Knobs`): latency, slow first byte, delay between chunks, error status and body
kind, Retry-After, malformed JSON or UTF-8, a stream cut mid-way or ending without [DONE], 200s
that only look valid (`shape`, `content_type`: gateway/testing/fake_shapes.py), scripted
content and tool calls (one reply per assistant turn already in the history), reasoning
content, and response extras. Besides chat and embeddings it serves `/v1/completions` and
`/v1/responses` itself, as an upstream with `native:` endpoints does
(gateway/testing/fake_native.py), under the same knobs. Like a real provider it can accept only
some keys (401 otherwise) and serve only some models (404 otherwise): `keys`, `served_models`.
`GET /_fake/requests` returns the bodies and headers received, `GET /_fake/stats` counts
requests and client disconnects.

Faults no knob describes are injected with a `Fault` (`FakeUpstream(fault=...)` or
`upstream.inject(...)`): a function given each request (`Received`) that may answer it itself
(return a response), change its knobs (return `Knobs`), delay (an async fault), raise, or
leave it alone (return None).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import inspect
import struct
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from gateway.testing import fake_native, fake_shapes
from gateway.testing.cli import run_fake

Json = dict[str, Any]


class ScriptedReply(BaseModel):
    model_config = ConfigDict(extra="forbid")
    content: str | None = None
    tool_calls: list[Json] | None = None  # [{"name": ..., "arguments": str | object}]
    finish_reason: str | None = None


class Knobs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    latency_ms: float = 0  # before the response headers
    first_byte_ms: float = 0  # streams: after headers, before the first chunk
    chunk_delay_ms: float = 0  # streams: between chunks
    status: int | None = None  # answer with this HTTP error status
    error_body: Literal["json", "html", "empty", "text"] = "json"
    error_message: str = "fake upstream error"
    retry_after: str | None = None
    fail_times: int | None = None  # answer `status` only to the first N requests for a model
    malformed: bool = False  # a 200 whose JSON (or one stream chunk) is broken
    invalid_utf8: bool = False  # a 200 whose body (or one stream chunk) is not UTF-8
    cut_after: int | None = None  # streams: drop the connection after this many chunks
    no_done: bool = False  # streams: end cleanly but without [DONE]
    stream_error_after: int | None = None  # streams: send an {"error"} event after N chunks
    shape: fake_shapes.Shape | None = None  # a 200 that is not a proper answer (fake_shapes)
    content_type: str | None = None  # the 200's Content-Type instead of the right one ("": none)
    content: str | None = None  # default: "Echo: <last user text>"
    echo_user: bool = False  # the default answer names the request's `user` field too
    echo_tail: int | None = None  # the default answer echoes only the text's last N characters
    replies: list[ScriptedReply] = Field(default_factory=list)  # by assistant turn
    words_per_chunk: int = 1
    reasoning_content: str | None = None
    extra: Json = Field(default_factory=dict)  # extra top-level response fields
    # Request fields this model refuses with OpenAI's 400 (as its reasoning models refuse
    # max_tokens: "Unsupported parameter ... Use 'max_completion_tokens' instead.")
    unsupported: list[str] = Field(default_factory=list)


@dataclass(frozen=True)
class Received:
    """What a `Fault` is given: the request, its parsed body and the knobs that apply."""

    request: web.Request
    body: Json
    knobs: Knobs

    @property
    def model(self) -> str:
        return str(self.body.get("model"))


FaultResult = web.StreamResponse | Knobs | None
Fault = Callable[[Received], FaultResult | Awaitable[FaultResult]]


class FakeUpstream:
    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        history: int = 1000,
        fault: Fault | None = None,
        keys: list[str] | None = None,
        served_models: list[str] | None = None,
    ) -> None:
        self.host, self.port = host, port
        self.fault = fault
        # As a real provider: only these bearer keys are accepted (401 otherwise) and only
        # these models served (404 otherwise); None accepts any. Also set by /_fake/config.
        self.keys = keys
        self.served_models = served_models
        self.defaults = Knobs()
        self.per_model: dict[str, Knobs] = {}
        self.received: deque[Json] = deque(maxlen=history)
        # in_flight: requests being answered now; peak_in_flight: the most at once since reset
        self.stats = {"requests": 0, "disconnects": 0, "in_flight": 0, "peak_in_flight": 0}
        self.failed: dict[str, int] = {}  # model -> failures served under `fail_times`
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def app(self) -> web.Application:
        app = web.Application(client_max_size=2**30)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/_fake/config", self._configure)
        app.router.add_get("/_fake/requests", self._requests)
        app.router.add_delete("/_fake/requests", self._clear)
        app.router.add_get("/_fake/stats", self._stats)
        return app

    async def start(self) -> FakeUpstream:
        self._runner = web.AppRunner(self.app(), handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()

    async def __aenter__(self) -> FakeUpstream:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def inject(self, fault: Fault | None) -> None:
        """Apply `fault` to every request from now on (None: no fault); `reset` clears it."""
        self.fault = fault

    def reset(self) -> None:
        self.fault = None
        self.keys = self.served_models = None
        self.defaults, self.per_model = Knobs(), {}
        self.received.clear()
        self.failed.clear()
        self.stats.update(requests=0, disconnects=0, peak_in_flight=self.stats["in_flight"])

    # --- handlers ---------------------------------------------------------------------------

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body, knobs = await self._receive(request)
        return await self._guarded(request, body, knobs, self._chat_reply)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        """Legacy completions, served natively (gateway/testing/fake_native.py)."""
        body, knobs = await self._receive(request)
        return await self._guarded(request, body, knobs, self._native_reply)

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        """The Responses API, served natively (gateway/testing/fake_native.py)."""
        body, knobs = await self._receive(request)
        return await self._guarded(request, body, knobs, self._native_reply)

    async def _native_reply(self, request: web.Request, body: Json, knobs: Knobs) -> Any:
        responses = request.path.endswith("/responses")
        if body.get("stream"):
            if responses:
                events = fake_native.response_events(body, knobs)
            else:
                events = fake_native.completion_chunks(body, knobs)
            return await self._sse(request, knobs, events, done=not responses)
        if knobs.malformed:
            return web.Response(body=b'{"id": "x", "output": [', content_type="application/json")
        answer = (fake_native.response if responses else fake_native.completion)(body, knobs)
        return _json_answer(answer, knobs)

    async def _embeddings(self, request: web.Request) -> web.StreamResponse:
        body, knobs = await self._receive(request)
        return await self._guarded(request, body, knobs, self._embedding_reply)

    async def _guarded(
        self, request: web.Request, body: Json, knobs: Knobs, reply: Any
    ) -> web.StreamResponse:
        self.stats["in_flight"] += 1
        self.stats["peak_in_flight"] = max(self.stats["peak_in_flight"], self.stats["in_flight"])
        try:
            refusal = self._refusal(request, body)
            if refusal is not None:
                return refusal
            if self.fault is not None:
                outcome = self.fault(Received(request, body, knobs))
                if inspect.isawaitable(outcome):
                    outcome = await outcome
                if isinstance(outcome, web.StreamResponse):
                    return outcome
                knobs = outcome or knobs
            if knobs.latency_ms:
                await asyncio.sleep(knobs.latency_ms / 1000)
            if knobs.status and self._should_fail(str(body.get("model")), knobs):
                return _error_response(knobs)
            refused = next((name for name in knobs.unsupported if name in body), None)
            if refused is not None:
                return _unsupported(refused)
            response: web.StreamResponse = await reply(request, body, knobs)
            return response
        except (asyncio.CancelledError, ConnectionResetError):
            self.stats["disconnects"] += 1
            raise
        finally:
            self.stats["in_flight"] -= 1

    def _should_fail(self, model: str, knobs: Knobs) -> bool:
        if knobs.fail_times is None:
            return True
        done = self.failed.get(model, 0)
        if done >= knobs.fail_times:
            return False
        self.failed[model] = done + 1
        return True

    async def _chat_reply(self, request: web.Request, body: Json, knobs: Knobs) -> Any:
        message, finish = _message(body, knobs)
        model = str(body.get("model"))
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if body.get("stream"):
            return await self._stream(request, body, knobs, model, message, finish, usage)
        if knobs.invalid_utf8:
            return web.Response(body=b'{"id": "\xff\xfe"}', content_type="application/json")
        if knobs.malformed:
            return web.Response(
                body=b'{"id": "chatcmpl-x", "choices": [', content_type="application/json"
            )
        return _json_answer(_completion(body, knobs, model, message, finish, usage), knobs)

    async def _stream(
        self,
        request: web.Request,
        body: Json,
        knobs: Knobs,
        model: str,
        message: Json,
        finish: str,
        usage: Json,
    ) -> web.StreamResponse:
        if knobs.shape == "json_answer":  # a plain answer to a stream request
            return _json_answer(_completion(body, knobs, model, message, finish, usage), knobs)
        chunks = fake_shapes.chunk_events(
            _chunks(body, knobs, model, message, finish, usage), knobs.shape
        )
        return await self._sse(request, knobs, [(None, data) for data in chunks], done=True)

    async def _sse(
        self,
        request: web.Request,
        knobs: Knobs,
        events: list[tuple[str | None, bytes]],
        *,
        done: bool,
    ) -> web.StreamResponse:
        """Write `events` (an `event:` line for those with a name) under the stream knobs, and
        `data: [DONE]` after them when `done` (chat, completions; Responses streams have none)."""
        content_type = "text/event-stream" if knobs.content_type is None else knobs.content_type
        response = web.StreamResponse(
            headers={"Content-Type": content_type} if content_type else {}
        )
        await response.prepare(request)
        if knobs.first_byte_ms:
            await asyncio.sleep(knobs.first_byte_ms / 1000)
        for i, (name, data) in enumerate(events):
            if knobs.cut_after is not None and i >= knobs.cut_after:
                assert request.transport is not None
                request.transport.close()  # an abrupt cut, mid-stream
                return response
            error = knobs.stream_error_after is not None and i == knobs.stream_error_after
            if error:
                name, data = _stream_error(name, knobs, i)
            elif knobs.malformed and i == 1:
                data = b'{"id": "broken'
            elif knobs.invalid_utf8 and i == 1:
                data = b'{"id": "\xff\xfe"}'
            if i and knobs.chunk_delay_ms:
                await asyncio.sleep(knobs.chunk_delay_ms / 1000)
            head = b"" if name is None else b"event: " + name.encode() + b"\n"
            await response.write(head + b"data: " + data + b"\n\n")
            if error:
                break
        if done and not knobs.no_done:
            await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _embedding_reply(self, request: web.Request, body: Json, knobs: Knobs) -> Any:
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else list(inputs or [])
        dims = int(body.get("dimensions") or 16)
        data = []
        for i, text in enumerate(texts):
            digest = hashlib.sha256(str(text).encode()).digest()
            vector = [(digest[j % 32] - 128) / 128 for j in range(dims)]
            encoded: Any = vector
            if body.get("encoding_format") == "base64":
                encoded = base64.b64encode(struct.pack(f"<{dims}f", *vector)).decode()
            data.append({"object": "embedding", "index": i, "embedding": encoded})
        answer = {
            "object": "list",
            "data": data,
            "model": body.get("model"),
            "usage": {"prompt_tokens": len(texts), "total_tokens": len(texts)},
        }
        return _json_answer(answer, knobs)

    def _refusal(self, request: web.Request, body: Json | None) -> web.Response | None:
        """OpenAI's 401 for a key it does not accept, and its 404 for a model it does not serve
        (the bodies as api.openai.com words them)."""
        if self.keys is not None:
            key = request.headers.get("Authorization", "").removeprefix("Bearer ")
            if key not in self.keys:
                shown = f"{key[:3]}***{key[-4:]}" if len(key) > 8 else "***"
                return _openai_error(
                    401,
                    f"Incorrect API key provided: {shown}. You can find your API key at "
                    "https://platform.openai.com/account/api-keys.",
                    "invalid_api_key",
                )
        model = None if body is None else body.get("model")
        if self.served_models is not None and body is not None and model not in self.served_models:
            return _openai_error(
                404,
                f"The model `{model}` does not exist or you do not have access to it.",
                "model_not_found",
            )
        return None

    async def _models(self, request: web.Request) -> web.Response:
        refusal = self._refusal(request, None)
        if refusal is not None:
            return refusal
        names = self.served_models if self.served_models is not None else ["fake-model"]
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {"id": name, "object": "model", "created": 0, "owned_by": "fake"}
                    for name in names
                ],
            }
        )

    async def _configure(self, request: web.Request) -> web.Response:
        data = await request.json()
        if "keys" in data:
            self.keys = data["keys"]
        if "served_models" in data:
            self.served_models = data["served_models"]
        if "defaults" in data:
            self.defaults = Knobs.model_validate(data["defaults"])
        for name, knobs in (data.get("models") or {}).items():
            self.per_model[name] = Knobs.model_validate(knobs)
        return web.json_response({"ok": True})

    async def _requests(self, request: web.Request) -> web.Response:
        return web.json_response(list(self.received))

    async def _clear(self, request: web.Request) -> web.Response:
        self.received.clear()
        return web.json_response({"ok": True})

    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats)

    async def _receive(self, request: web.Request) -> tuple[Json, Knobs]:
        self.stats["requests"] += 1
        body = orjson.loads(await request.read())
        self.received.append({"path": request.path, "headers": dict(request.headers), "body": body})
        knobs = self.per_model.get(str(body.get("model")), self.defaults)
        if isinstance(body.get("fake"), dict):
            # Copy the validated values (not a dump): scripted replies must stay models.
            override = Knobs.model_validate(body["fake"])
            knobs = knobs.model_copy(
                update={name: getattr(override, name) for name in override.model_fields_set}
            )
        return body, knobs


def _openai_error(status: int, message: str, code: str) -> web.Response:
    error = {"message": message, "type": "invalid_request_error", "param": None, "code": code}
    return web.json_response({"error": error}, status=status)


# --- reply construction ---------------------------------------------------------------------


def _message(body: Json, knobs: Knobs) -> tuple[Json, str]:
    messages = body.get("messages") or []
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    scripted = knobs.replies[min(turn, len(knobs.replies) - 1)] if knobs.replies else None
    message: Json = {"role": "assistant", "content": None, "refusal": None}
    if knobs.reasoning_content is not None:
        message["reasoning_content"] = knobs.reasoning_content
    if scripted and scripted.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.get("id") or f"call_{i}_{uuid.uuid4().hex[:8]}",
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": call["arguments"]
                    if isinstance(call.get("arguments"), str)
                    else orjson.dumps(call.get("arguments", {})).decode(),
                },
            }
            for i, call in enumerate(scripted.tool_calls)
        ]
        message["content"] = scripted.content
        return message, scripted.finish_reason or "tool_calls"
    if scripted and scripted.content is not None:
        message["content"] = scripted.content
        return message, scripted.finish_reason or "stop"
    last_user: Json = next((m for m in reversed(messages) if m.get("role") == "user"), {})
    content = last_user.get("content")
    text = content if isinstance(content, str) else orjson.dumps(content).decode()
    if knobs.echo_tail is not None:
        text = text[-knobs.echo_tail :]
    echo = f"Echo[{body.get('user')}]: {text}" if knobs.echo_user else f"Echo: {text}"
    message["content"] = knobs.content if knobs.content is not None else echo
    return message, "stop"


def _completion(
    body: Json, knobs: Knobs, model: str, message: Json, finish: str, usage: Json
) -> Json:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:20]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": message, "logprobs": _logprobs(body), "finish_reason": finish}
        ],
        "usage": usage,
        "system_fingerprint": "fp_fake",
        "service_tier": "default",
        **knobs.extra,
    }


def _json_answer(answer: Json, knobs: Knobs) -> web.StreamResponse:
    """A plain 200, broken as the `shape` and `content_type` knobs say."""
    if knobs.shape is None and knobs.content_type is None:
        return web.json_response(answer, dumps=lambda d: orjson.dumps(d).decode())
    body = fake_shapes.plain_body(answer, knobs.shape)
    return fake_shapes.response(body, knobs.content_type, "application/json")


def _chunks(
    body: Json, knobs: Knobs, model: str, message: Json, finish: str, usage: Json
) -> list[bytes]:
    id_, created = f"chatcmpl-{uuid.uuid4().hex[:20]}", int(time.time())
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

    def chunk(delta: Json | None, finish_reason: str | None = None, **kw: Any) -> bytes:
        out: Json = {
            "id": id_,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": "fp_fake",
            "service_tier": "default",
            "choices": []
            if delta is None
            else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
            **knobs.extra,
            **kw,
        }
        if include_usage and "usage" not in out:
            out["usage"] = None
        return orjson.dumps(out)

    out = [chunk({"role": "assistant", "content": "", "refusal": None})]
    if message.get("reasoning_content"):
        out.append(chunk({"reasoning_content": message["reasoning_content"]}))
    words = (message.get("content") or "").split(" ") if message.get("content") else []
    step = max(1, knobs.words_per_chunk)
    for i in range(0, len(words), step):
        piece = " ".join(words[i : i + step])
        out.append(chunk({"content": piece if i == 0 else " " + piece}))
    for index, call in enumerate(message.get("tool_calls") or []):
        fn = call["function"]
        out.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": fn["name"], "arguments": ""},
                        }
                    ]
                }
            )
        )
        args = fn["arguments"]
        for start in range(0, len(args), 10):
            out.append(
                chunk(
                    {
                        "tool_calls": [
                            {"index": index, "function": {"arguments": args[start : start + 10]}}
                        ]
                    }
                )
            )
    out.append(chunk({}, finish))
    if include_usage:
        out.append(chunk(None, usage=usage))
    return out


def _stream_error(name: str | None, knobs: Knobs, sequence: int) -> tuple[str | None, bytes]:
    """The error event of a stream told to fail: `{"error": ...}` data in chat and completions
    streams, an `error` event in a Responses stream (the one kind with event names)."""
    if name is None:
        return None, orjson.dumps(
            {"error": {"message": knobs.error_message, "type": "server_error"}}
        )
    event = {
        "type": "error",
        "code": "server_error",
        "message": knobs.error_message,
        "param": None,
        "sequence_number": sequence,
    }
    return "error", orjson.dumps(event)


def _logprobs(body: Json) -> Json | None:
    return {"content": [], "refusal": None} if body.get("logprobs") else None


def _unsupported(field: str) -> web.Response:
    """OpenAI's 400 for a parameter the model does not take."""
    instead = " Use 'max_completion_tokens' instead." if field == "max_tokens" else ""
    error = {
        "message": f"Unsupported parameter: '{field}' is not supported with this model.{instead}",
        "type": "invalid_request_error",
        "param": field,
        "code": "unsupported_parameter",
    }
    return web.json_response({"error": error}, status=400)


def _error_response(knobs: Knobs) -> web.Response:
    status = knobs.status or 500
    headers = {"Retry-After": knobs.retry_after} if knobs.retry_after else {}
    if knobs.error_body == "html":
        return web.Response(
            status=status,
            text="<html><body><h1>Bad Gateway</h1></body></html>",
            content_type="text/html",
            headers=headers,
        )
    if knobs.error_body == "empty":
        return web.Response(status=status, headers=headers)
    if knobs.error_body == "text":
        return web.Response(status=status, text=knobs.error_message, headers=headers)
    error_type = "invalid_request_error" if status < 500 else "server_error"
    return web.json_response(
        {
            "error": {
                "message": knobs.error_message,
                "type": error_type,
                "param": None,
                "code": f"fake_{status}",
            }
        },
        status=status,
        headers=headers,
    )


def main() -> None:
    async def start(host: str, port: int) -> str:
        fake = await FakeUpstream(host, port).start()
        return f"fake upstream listening on http://{fake.host}:{fake.port}"

    run_fake("A fake OpenAI-compatible upstream.", 9000, start)


if __name__ == "__main__":
    main()

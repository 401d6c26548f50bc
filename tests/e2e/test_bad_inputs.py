"""Bad requests, sent as raw bytes: each gets the right status and an OpenAI error body.

Whatever a client sends, the answer is JSON with `{"error": {message, type, param, code}}`,
`param` names the offending field for field errors, and nothing leaks (no HTML, no
traceback). After all of them the gateway still serves normal requests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from gateway.testing.harness.inprocess import GatewayServer
from tests.e2e.conftest import GATEWAY_KEY
from tests.e2e.helpers import Json, RawResponse, assert_raw_error, request

MAX_BODY = 65536  # server.max_body_bytes in gateway.testing.harness.fake_settings
VALID: Json = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}


def chat(**changes: Any) -> bytes:
    """A valid chat body with some fields changed (a value of `...` removes the field)."""
    body = {k: v for k, v in {**VALID, **changes}.items() if v is not ...}
    return json.dumps(body).encode()


def nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


@dataclass(frozen=True)
class Bad:
    id: str
    body: bytes | None
    status: int = 400
    param: str | None = None
    code: str | None = None
    method: str = "POST"
    path: str = "/v1/chat/completions"
    headers: dict[str, str] = field(default_factory=dict)
    chunked: bool = False
    keyed: bool = False  # send to the gateway that requires API keys


BAD_INPUTS = [
    # Not a JSON object.
    Bad("not-json", b"model=fake-model&messages=hi", code="invalid_json"),
    Bad("truncated-json", b'{"model": "fake-model", "messages": [', code="invalid_json"),
    Bad("empty-body", b"", code="invalid_json"),
    Bad("json-array", b'[{"model": "fake-model"}]'),
    Bad("json-string", b'"hello"'),
    Bad("json-null", b"null"),
    Bad(
        "non-utf8",
        b'{"model": "fake-model", "messages": [{"role": "user", "content": "\xff\xfe"}]}',
    ),
    Bad("nested-100000", b"[" * 100_000 + b"]" * 100_000, status=413),
    Bad("nested-30000", b"[" * 30_000 + b"]" * 30_000),
    Bad("nested-field-300", chat(x_deep=nested(300))),
    # Wrong types and values, each naming its field.
    Bad("model-int", chat(model=123), param="model", code="invalid_value"),
    Bad("model-empty", chat(model=""), param="model"),
    Bad("messages-string", chat(messages="x"), param="messages"),
    Bad("messages-item-string", chat(messages=["x"]), param="messages[0]"),
    Bad("stream-string", chat(stream="yes"), param="stream"),
    Bad("temperature-string", chat(temperature="hot"), param="temperature"),
    Bad("temperature-too-high", chat(temperature=3), param="temperature"),
    Bad("n-zero", chat(n=0), param="n"),
    Bad(
        "include-usage-string",
        chat(stream=True, stream_options={"include_usage": "yes"}),
        param="stream_options.include_usage",
    ),
    Bad(
        "tool-name-empty",
        chat(tools=[{"type": "function", "function": {"name": ""}}]),
        param="tools[0].function.name",
    ),
    Bad("missing-model", chat(model=...), param="model", code="missing_required_parameter"),
    Bad(
        "missing-messages", chat(messages=...), param="messages", code="missing_required_parameter"
    ),
    Bad("empty-messages", chat(messages=[]), param="messages"),
    Bad("bad-role", chat(messages=[{"role": "wizard", "content": "hi"}]), param="messages[0].role"),
    Bad(
        "content-number",
        chat(messages=[{"role": "user", "content": 5}]),
        param="messages[0].content",
    ),
    Bad(
        "embedding-model-on-chat",
        chat(model="fake-embedding"),
        param="model",
        code="model_not_supported",
    ),
    Bad(
        "chat-model-on-embeddings",
        b'{"model": "fake-model", "input": "x"}',
        path="/v1/embeddings",
        param="model",
        code="model_not_supported",
    ),
    Bad(
        "embedding-input-int",
        b'{"model": "fake-embedding", "input": 5}',
        path="/v1/embeddings",
        param="input",
    ),
    Bad(
        "embedding-format-hex",
        b'{"model": "fake-embedding", "input": "x", "encoding_format": "hex"}',
        path="/v1/embeddings",
        param="encoding_format",
    ),
    # Too large.
    Bad(
        "huge-content-length",
        chat(padding="x" * (MAX_BODY + 1000)),
        status=413,
        code="request_too_large",
    ),
    Bad(
        "huge-chunked",
        chat(padding="x" * (MAX_BODY + 1000)),
        status=413,
        code="request_too_large",
        chunked=True,
    ),
    # Unknown things.
    Bad("unknown-model", chat(model="gpt-nope"), status=404, param="model", code="model_not_found"),
    Bad(
        "unknown-model-retrieve",
        None,
        status=404,
        method="GET",
        path="/v1/models/gpt-nope",
        param="model",
    ),
    Bad("unknown-endpoint", None, status=404, method="GET", path="/v1/nowhere"),
    Bad(
        "legacy-completions-echo",
        b'{"model": "fake-model", "prompt": "hi", "echo": true}',
        status=400,
        path="/v1/completions",
        code="unsupported_parameter",
    ),
    Bad("get-chat", None, status=405, method="GET", code="method_not_allowed"),
    Bad("post-models", b"{}", status=405, path="/v1/models"),
    Bad("put-embeddings", b"{}", status=405, method="PUT", path="/v1/embeddings"),
    # Keys, on the gateway that requires them.
    Bad(
        "wrong-key",
        chat(),
        status=401,
        keyed=True,
        code="invalid_api_key",
        headers={"Authorization": "Bearer sk-not-a-key"},
    ),
    Bad("missing-key", chat(), status=401, keyed=True, code="invalid_api_key"),
    Bad(
        "basic-auth",
        chat(),
        status=401,
        keyed=True,
        code="invalid_api_key",
        headers={"Authorization": "Basic dXNlcjpwYXNz"},
    ),
    Bad("empty-bearer", chat(), status=401, keyed=True, headers={"Authorization": "Bearer "}),
]


async def send(bad: Bad, gateway: GatewayServer) -> RawResponse:
    headers = (
        {"Content-Type": "application/json", **bad.headers} if bad.body is not None else bad.headers
    )
    return await request(
        bad.method, gateway.url + bad.path, body=bad.body, headers=headers, chunked=bad.chunked
    )


@pytest.mark.parametrize("bad", BAD_INPUTS, ids=[b.id for b in BAD_INPUTS])
async def test_bad_input_gets_openai_error(
    bad: Bad, gw: GatewayServer, keyed_gateway: GatewayServer
) -> None:
    resp = await send(bad, keyed_gateway if bad.keyed else gw)
    error = assert_raw_error(resp, bad.status, code=bad.code, param=bad.param)
    if bad.status == 400 and bad.param is not None:
        assert bad.param in error["message"], "the message names the field too"
    assert resp.headers.get("x-request-id"), "errors carry a request id"


async def test_405_names_the_allowed_methods(gw: GatewayServer) -> None:
    """RFC 9110 15.5.6: a 405 response must carry an Allow header."""
    resp = await request("GET", gw.url + "/v1/chat/completions")
    assert_raw_error(resp, 405)
    assert resp.headers.get("Allow") == "POST"


async def test_gateway_still_serves_after_bad_inputs(
    gw: GatewayServer, keyed_gateway: GatewayServer
) -> None:
    for bad in BAD_INPUTS:  # independent of test order: replay the table first
        resp = await send(bad, keyed_gateway if bad.keyed else gw)
        assert resp.status >= 400 and resp.body, bad.id
    ok = await request("POST", gw.url + "/v1/chat/completions", body=VALID)
    assert ok.status == 200, ok.text
    assert ok.json()["choices"][0]["message"]["content"] == "Echo: hi"
    keyed = await request(
        "POST",
        keyed_gateway.url + "/v1/chat/completions",
        body=VALID,
        headers={"Authorization": f"Bearer {GATEWAY_KEY}"},
    )
    assert keyed.status == 200, keyed.text
    health = await request("GET", gw.url + "/healthz")
    assert health.status == 200 and health.json() == {"status": "ok"}

"""What the gateway sends validates against OpenAI's own schemas
(tests/data/openai/openapi-subset.json).

Bodies are read raw (aiohttp), not through the SDK, so nothing is coerced on the way: the
exact JSON and every SSE chunk is checked, for each provider kind, with and without tools.
"""

from __future__ import annotations

from typing import Any

import pytest

from gateway.testing.harness.inprocess import GatewayServer
from tests.chat import function_tool
from tests.e2e.conftest import GATEWAY_KEY
from tests.e2e.helpers import (
    Json,
    assert_conforms,
    assert_raw_error,
    request,
    schema_validator,
    sse_json,
)

LOOKUP_ARGS = {"query": {"type": "string"}, "limit": {"type": "integer"}}
TOOLS: list[Json] = [function_tool("lookup", LOOKUP_ARGS, ["query", "limit"])]
SCRIPTED_CALLS = {
    "replies": [
        {
            "tool_calls": [
                {"id": "call_1", "name": "lookup", "arguments": {"query": "a", "limit": 3}},
                {"id": "call_2", "name": "lookup", "arguments": {"query": "b", "limit": 1}},
            ]
        }
    ]
}
EXTRAS = {"reasoning_content": "hmm", "extra": {"x_meta": {"a": 1}}}

# (model, extra request fields): fake and demo, plain text and tool calls.
CHAT_CASES: dict[str, tuple[str, Json]] = {
    "fake-text": ("fake-model", {}),
    "fake-extras": ("fake-model", {"logprobs": True, "fake": EXTRAS}),
    "fake-tools": ("fake-model", {"tools": TOOLS, "fake": SCRIPTED_CALLS}),
    "demo-text": ("demo", {}),
    "demo-tools": ("demo", {"tools": TOOLS}),
}


def chat_body(case: str, **more: Any) -> Json:
    model, extra = CHAT_CASES[case]
    return {"model": model, "messages": [{"role": "user", "content": "find a b"}], **extra, **more}


def test_the_validator_is_not_vacuous() -> None:
    """A wrong body must fail, so a passing check means something ($refs resolve)."""
    broken = {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "logprobs": None,
                "message": {"role": "user", "content": 5},
            }
        ],
    }
    with pytest.raises(AssertionError, match="message"):
        assert_conforms(broken, "CreateChatCompletionResponse")
    assert not schema_validator("Model").is_valid({"id": "m", "object": "model"})


@pytest.mark.parametrize("case", list(CHAT_CASES))
async def test_chat_completion_conforms(gw: GatewayServer, case: str) -> None:
    resp = await request("POST", gw.url + "/v1/chat/completions", body=chat_body(case))
    assert resp.status == 200, resp.text
    reply = resp.json()
    assert_conforms(reply, "CreateChatCompletionResponse")
    expects_tools = "tools" in CHAT_CASES[case][1]
    assert bool(reply["choices"][0]["message"].get("tool_calls")) == expects_tools
    assert reply["choices"][0]["finish_reason"] == ("tool_calls" if expects_tools else "stop")


@pytest.mark.parametrize("include_usage", [False, True], ids=["no-usage", "usage"])
@pytest.mark.parametrize("case", list(CHAT_CASES))
async def test_every_stream_chunk_conforms(
    gw: GatewayServer, case: str, include_usage: bool
) -> None:
    options = {"stream_options": {"include_usage": True}} if include_usage else {}
    resp = await request(
        "POST", gw.url + "/v1/chat/completions", body=chat_body(case, stream=True, **options)
    )
    assert resp.status == 200, resp.text
    chunks, done = sse_json(resp.sse())
    assert done and len(chunks) >= 3
    for chunk in chunks:
        assert_conforms(chunk, "CreateChatCompletionStreamResponse")
    usage_chunks = [c for c in chunks if c.get("usage")]
    assert len(usage_chunks) == (1 if include_usage else 0)
    if include_usage:
        assert chunks[-1] is usage_chunks[0] and chunks[-1]["choices"] == []


async def test_models_conform(gw: GatewayServer) -> None:
    listing = await request("GET", gw.url + "/v1/models")
    assert listing.status == 200
    assert_conforms(listing.json(), "ListModelsResponse")
    ids = [m["id"] for m in listing.json()["data"]]
    assert "fake-alias" in ids
    for model_id in ids:
        one = await request("GET", f"{gw.url}/v1/models/{model_id}")
        assert one.status == 200
        assert_conforms(one.json(), "Model")
        assert one.json()["id"] == model_id


@pytest.mark.parametrize("model", ["fake-embedding", "demo-embedding"])
async def test_embeddings_conform(gw: GatewayServer, model: str) -> None:
    # Only the float encoding is described by the schema (base64 is a string per item).
    for given in ("one text", ["two", "texts"]):
        resp = await request(
            "POST",
            gw.url + "/v1/embeddings",
            body={"model": model, "input": given, "encoding_format": "float"},
        )
        assert resp.status == 200, resp.text
        assert_conforms(resp.json(), "CreateEmbeddingResponse")
        assert len(resp.json()["data"]) == (1 if isinstance(given, str) else 2)


CHAT = "/v1/chat/completions"
ERROR_CASES: dict[str, tuple[str, str, Json | bytes | None, int]] = {
    "invalid-json": ("POST", CHAT, b"{nope", 400),
    "bad-field": ("POST", CHAT, {"model": "fake-model", "messages": "x"}, 400),
    "unknown-model": (
        "POST",
        CHAT,
        {"model": "nope", "messages": [{"role": "user", "content": "x"}]},
        404,
    ),
    "upstream-400": ("POST", CHAT, chat_body("fake-text", fake={"status": 400}), 400),
    "upstream-429": (
        "POST",
        CHAT,
        chat_body("fake-text", fake={"status": 429, "retry_after": "1"}),
        503,
    ),
    "upstream-500": (
        "POST",
        CHAT,
        chat_body("fake-text", fake={"status": 500, "error_body": "html"}),
        503,
    ),
    "upstream-401": ("POST", CHAT, chat_body("fake-text", fake={"status": 401}), 502),
    "malformed": ("POST", CHAT, chat_body("fake-text", fake={"malformed": True}), 503),
    "too-large": ("POST", CHAT, b"x" * 70_000, 413),
    "unknown-endpoint": ("GET", "/v1/nowhere", None, 404),
    "wrong-method": ("GET", CHAT, None, 405),
    "embeddings-bad-input": (
        "POST",
        "/v1/embeddings",
        {"model": "fake-embedding", "input": 1},
        400,
    ),
}


@pytest.mark.parametrize("case", list(ERROR_CASES))
async def test_error_bodies_conform(gw: GatewayServer, case: str) -> None:
    method, path, body, status = ERROR_CASES[case]
    resp = await request(method, gw.url + path, body=body)
    assert_raw_error(resp, status)
    assert_conforms(resp.json(), "ErrorResponse")


async def test_auth_error_conforms(keyed_gateway: GatewayServer) -> None:
    resp = await request(
        "GET", keyed_gateway.url + "/v1/models", headers={"Authorization": "Bearer wrong"}
    )
    assert_raw_error(resp, 401)
    assert_conforms(resp.json(), "ErrorResponse")
    ok = await request(
        "GET", keyed_gateway.url + "/v1/models", headers={"Authorization": f"Bearer {GATEWAY_KEY}"}
    )
    assert ok.status == 200
    assert_conforms(ok.json(), "ListModelsResponse")


@pytest.mark.parametrize(
    "knobs",
    [{"cut_after": 2}, {"stream_error_after": 1}, {"no_done": True}],
    ids=["cut", "error-event", "no-done"],
)
async def test_mid_stream_error_event_conforms(gw: GatewayServer, knobs: Json) -> None:
    resp = await request(
        "POST", gw.url + CHAT, body=chat_body("fake-text", stream=True, fake=knobs)
    )
    events, done = sse_json(resp.sse())
    assert done
    *chunks, error = events
    for chunk in chunks:
        assert_conforms(chunk, "CreateChatCompletionStreamResponse")
    assert_conforms(error, "ErrorResponse")

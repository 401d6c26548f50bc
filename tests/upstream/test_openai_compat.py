"""The OpenAI-compatible adapter against canned HTTP answers (aioresponses): request shape,
error mapping and stream parsing, without a server."""

from collections.abc import AsyncIterator

import aiohttp
import pytest
from aioresponses import aioresponses

from gateway.config import build_settings, parse_config
from gateway.errors import GatewayError, UpstreamError, UpstreamTimeout
from gateway.upstream.openai_compat import OpenAICompatible

URL = "http://upstream.test/v1/chat/completions"
SECRET = "sk-upstream-secret-xyz"
CONFIG = """
providers:
  up:
    type: openai
    base_url: http://upstream.test/v1/
    api_key_env: UP_KEY
    headers: {X-Extra: yes-please}
models: [{name: m, provider: up}]
"""


@pytest.fixture
async def provider() -> AsyncIterator[OpenAICompatible]:
    settings = build_settings(parse_config(CONFIG), "<t>", {"UP_KEY": SECRET})
    adapter = OpenAICompatible(settings.providers["up"], settings.secrets())
    yield adapter
    await adapter.close()


BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "odd_field": [1, 2]}


async def test_chat_posts_the_body_with_key_and_headers(provider: OpenAICompatible) -> None:
    with aioresponses() as mock:
        mock.post(URL, payload={"id": "x", "choices": [{"message": {}}], "extra": True})
        reply = await provider.chat(BODY)
        (request,) = mock.requests[("POST", aiohttp.client.URL(URL))]
    assert reply == {"id": "x", "choices": [{"message": {}}], "extra": True}
    assert request.kwargs["headers"]["Authorization"] == f"Bearer {SECRET}"
    assert request.kwargs["headers"]["X-Extra"] == "yes-please"
    assert b'"odd_field":[1,2]' in request.kwargs["data"]


@pytest.mark.parametrize(
    ("status", "body", "expected_status", "expected_code", "message_part"),
    [
        (400, {"error": {"message": "bad temp", "param": "temperature"}}, 400, None, "bad temp"),
        (
            404,
            {"error": {"message": "no such model", "code": "model_not_found"}},
            502,
            "upstream_model_unknown",
            "does not know the model 'm'",
        ),
        (404, "", 502, "upstream_not_found", "base_url"),
        (400, {"error": {"message": "Model Not Exist"}}, 502, "upstream_model_unknown", "Not"),
        (429, {"error": {"message": "slow down"}}, 429, "rate_limit_exceeded", "slow down"),
        (
            401,
            {"error": {"message": f"Incorrect API key provided: {SECRET}"}},
            502,
            "upstream_auth_failed",
            "rejected the gateway's key",
        ),
        (500, {"error": {"message": "boom"}}, 502, "upstream_error", "boom"),
        (503, "<html><h1>down</h1></html>", 502, "upstream_error", "HTTP 503"),
        (504, "", 504, "upstream_timeout", "timed out"),
    ],
)
async def test_upstream_errors_are_mapped(
    provider: OpenAICompatible,
    status: int,
    body: object,
    expected_status: int,
    expected_code: str | None,
    message_part: str,
) -> None:
    with aioresponses() as mock:
        if isinstance(body, dict):
            mock.post(URL, status=status, payload=body, headers={"Retry-After": "7"})
        else:
            mock.post(URL, status=status, body=body, content_type="text/html")
        with pytest.raises(GatewayError) as info:
            await provider.chat(BODY)
    err = info.value
    assert (err.status, err.code) == (expected_status, expected_code)
    assert message_part in err.message
    assert SECRET not in err.message and "<html" not in err.message
    if status == 429:
        assert err.headers == {"Retry-After": "7"}


async def test_secret_in_a_passed_through_message_is_scrubbed(provider: OpenAICompatible) -> None:
    with aioresponses() as mock:
        mock.post(URL, status=400, payload={"error": {"message": f"key {SECRET} lacks scope"}})
        with pytest.raises(GatewayError) as info:
            await provider.chat(BODY)
    assert info.value.message == "key *** lacks scope"


async def test_non_json_success_is_a_502(provider: OpenAICompatible) -> None:
    with aioresponses() as mock:
        mock.post(URL, body="{not json", content_type="application/json")
        with pytest.raises(UpstreamError) as info:
            await provider.chat(BODY)
    assert info.value.code == "upstream_invalid_response"


async def test_network_failures_become_502_and_504(provider: OpenAICompatible) -> None:
    with aioresponses() as mock:
        mock.post(URL, exception=aiohttp.ServerTimeoutError("slow"))
        mock.post(URL, exception=aiohttp.ServerDisconnectedError())
        with pytest.raises(UpstreamTimeout):
            await provider.chat(BODY)
        with pytest.raises(UpstreamError) as info:
            await provider.chat(BODY)
    assert info.value.status == 502


SSE = (
    b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"he"}}]}\n\n'
    b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"llo"},"finish_reason":"stop"}]}'
    b"\n\ndata: [DONE]\n\n"
)


async def test_stream_yields_parsed_chunks_until_done(provider: OpenAICompatible) -> None:
    with aioresponses() as mock:
        mock.post(URL, body=SSE, content_type="text/event-stream")
        chunks = [c async for batch in provider.stream({**BODY, "stream": True}) for c in batch]
    assert [c["choices"][0]["delta"]["content"] for c in chunks] == ["he", "llo"]


async def test_chunks_before_a_bad_event_are_still_delivered(provider: OpenAICompatible) -> None:
    body = SSE.split(b"data: [DONE]")[0] + b'data: {"broken\n\n'
    got: list[dict[str, object]] = []
    with aioresponses() as mock:
        mock.post(URL, body=body, content_type="text/event-stream")
        with pytest.raises(UpstreamError):
            async for batch in provider.stream({**BODY, "stream": True}):
                got += batch
    assert len(got) == 2


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (SSE.replace(b"data: [DONE]\n\n", b""), "upstream_stream_cut"),
        (b'data: {"broken\n\n', "upstream_invalid_response"),
        (b'data: {"error": {"message": "overloaded"}}\n\n', "upstream_error"),
    ],
)
async def test_broken_streams_raise(provider: OpenAICompatible, body: bytes, code: str) -> None:
    with aioresponses() as mock:
        mock.post(URL, body=body, content_type="text/event-stream")
        with pytest.raises(UpstreamError) as info:
            _ = [batch async for batch in provider.stream({**BODY, "stream": True})]
    assert info.value.code == code


async def test_stream_that_is_not_sse_is_rejected(provider: OpenAICompatible) -> None:
    with aioresponses() as mock:
        mock.post(URL, payload={"id": "x"})
        with pytest.raises(UpstreamError, match="did not answer with an event stream"):
            _ = [batch async for batch in provider.stream({**BODY, "stream": True})]

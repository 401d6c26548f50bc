"""The pipeline without HTTP: model resolution and the stream's usage handling."""

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import pytest

from gateway.config import BreakerConfig, build_settings, parse_config
from gateway.context import RequestContext
from gateway.errors import InvalidRequest, ModelNotFound, UpstreamError
from gateway.pipeline import Pipeline
from gateway.reply.reply import Reply
from gateway.reply.stream import ChunkStream
from gateway.reply.usage import UsageAccounting
from gateway.resilience.breaker import Breakers
from gateway.server.runtime import Runtime
from gateway.wire import ChatCompletionRequest

CONFIG = """
providers:
  demo: {type: demo}
  offline: {type: openai, base_url: "http://127.0.0.1:9/v1", api_key_env: NOT_SET_ANYWHERE}
models:
  - {name: demo, provider: demo, aliases: [cheap]}
  - {name: demo-embedding, provider: demo, kind: embedding}
  - {name: gpt-x, provider: offline}
"""
SETTINGS = build_settings(parse_config(CONFIG), "<t>", {})


@pytest.fixture
def pipeline() -> Pipeline:
    return Runtime.build(SETTINGS, Breakers(BreakerConfig())).pipeline


def _ctx() -> RequestContext:
    return RequestContext(request_id="r", endpoint="chat")


def test_unknown_model_lists_what_exists(pipeline: Pipeline) -> None:
    with pytest.raises(ModelNotFound) as info:
        pipeline.resolve("gpt-5", "chat")
    assert info.value.message.endswith("Available models: cheap, demo")
    assert info.value.param == "model"


def test_unknown_model_lists_the_routed_aliases_too() -> None:
    config = (
        CONFIG
        + """
routing:
  aliases:
    smart-auto: {tiers: [{model: demo}]}
"""
    )
    settings = build_settings(parse_config(config), "<t>", {})
    pipeline = Runtime.build(settings, Breakers(BreakerConfig())).pipeline
    with pytest.raises(ModelNotFound) as info:
        pipeline.resolve("gpt-5", "chat")
    assert info.value.message.endswith("Available models: cheap, demo, smart-auto")
    with pytest.raises(InvalidRequest) as wrong:
        pipeline.resolve("demo", "embedding")
    assert "smart-auto" not in wrong.value.message, "an alias serves chat only"


def test_wrong_kind_is_a_400(pipeline: Pipeline) -> None:
    with pytest.raises(InvalidRequest, match=r"is an? embedding model"):
        pipeline.resolve("demo-embedding", "chat")


def test_disabled_provider_says_why(pipeline: Pipeline) -> None:
    with pytest.raises(ModelNotFound, match="NOT_SET_ANYWHERE is not set"):
        pipeline.resolve("gpt-x", "chat")


async def test_alias_resolves_and_upstream_sees_the_upstream_name(pipeline: Pipeline) -> None:
    body = {"model": "cheap", "messages": [{"role": "user", "content": "hi"}]}
    ctx = _ctx()
    reply = await pipeline.chat(ctx, ChatCompletionRequest.model_validate(body), body)
    assert reply.completion is not None and reply.completion["model"] == "demo"
    assert ctx.route is not None and ctx.route.name == "cheap" and ctx.usage


async def _source(
    *chunks: dict[str, Any], fail: bool = False
) -> AsyncIterator[list[dict[str, Any]]]:
    for chunk in chunks:
        yield [chunk]
    if fail:
        raise UpstreamError("cut")


TEXT = {"choices": [{"index": 0, "delta": {"content": "a"}}], "usage": None}
USAGE = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}


@pytest.mark.parametrize("client_wants_usage", [True, False])
async def test_usage_is_accounted_and_shown_only_when_asked(client_wants_usage: bool) -> None:
    ctx = _ctx()
    stream = await ChunkStream.open(ctx, _source(dict(TEXT), dict(USAGE)))
    reply = await Reply(stream).then(UsageAccounting(ctx, client_wants_usage)).ready()
    async with aclosing(reply.relay()) as relay:
        seen = [chunk async for batch in relay for chunk in batch]
    assert ctx.usage == USAGE["usage"]
    if client_wants_usage:
        assert seen == [TEXT, USAGE]
    else:
        assert seen == [{"choices": TEXT["choices"]}]
    assert ctx.first_token_seconds is not None and ctx.upstream_seconds is not None


async def test_failure_before_the_first_chunk_raises_at_open() -> None:
    with pytest.raises(UpstreamError):
        await ChunkStream.open(_ctx(), _source(fail=True))


async def test_failure_mid_stream_raises_from_relay() -> None:
    stream = await ChunkStream.open(_ctx(), _source(dict(TEXT), fail=True))
    async with aclosing(stream.relay(())) as relay:
        with pytest.raises(UpstreamError):
            _ = [batch async for batch in relay]

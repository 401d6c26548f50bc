"""One reply shape: stages apply in order to plain answers and streams alike."""

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import pytest

from gateway.context import RequestContext
from gateway.errors import UpstreamError
from gateway.reply.reply import Reply
from gateway.reply.stage import OnComplete, Stage
from gateway.reply.stream import ChunkStream
from gateway.reply.usage import UsageAccounting

Json = dict[str, Any]


def _ctx() -> RequestContext:
    return RequestContext(request_id="r", endpoint="chat")


def _delta(text: str, finish: str | None = None) -> Json:
    return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}


def _texts(batches: list[list[Json]]) -> list[list[str]]:
    return [[c["choices"][0]["delta"]["content"] for c in batch] for batch in batches]


class Suffix(Stage):
    """Appends its mark to every piece of content; at the end, adds a chunk of its own."""

    def __init__(self, mark: str, log: list[str]) -> None:
        self.mark, self.log = mark, log

    async def answer(self, completion: Json) -> Json:
        message = completion["choices"][0]["message"]
        message["content"] += self.mark
        return completion

    def chunks(self, batch: list[Json]) -> list[Json]:
        for chunk in batch:
            chunk["choices"][0]["delta"]["content"] += self.mark
        return batch

    async def finish(self) -> list[Json]:
        self.log.append(f"finish {self.mark}")
        return [_delta(f"end{self.mark}:")]

    def ended(self) -> None:
        self.log.append(f"ended {self.mark}")


async def _source(*batches: list[Json], fail: bool = False) -> AsyncIterator[list[Json]]:
    for batch in batches:
        yield batch
    if fail:
        raise UpstreamError("cut")


async def _stream(*batches: list[Json], fail: bool = False) -> ChunkStream:
    return await ChunkStream.open(_ctx(), _source(*batches, fail=fail))


async def _relayed(reply: Reply) -> list[list[Json]]:
    async with aclosing(reply.relay()) as relay:
        return [batch async for batch in relay]


async def test_two_stages_on_a_stream_both_apply_in_order() -> None:
    log: list[str] = []
    stream = await _stream([_delta("x")], [_delta("y"), _delta("z")])
    reply = await Reply(stream).then(Suffix("a", log)).then(Suffix("b", log)).ready()
    assert reply.completion is None
    batches = await _relayed(reply)
    # a's closing chunk passes through b; b's own comes after it.
    assert _texts(batches) == [["xab"], ["yab", "zab"], ["enda:b", "endb:"]]
    assert log == ["finish a", "finish b", "ended a", "ended b"]


async def test_two_stages_on_a_plain_answer_both_apply_in_order() -> None:
    log: list[str] = []
    completion = {"choices": [{"index": 0, "message": {"content": "x"}}]}
    reply = await Reply(completion).then(Suffix("a", log)).then(None).then(Suffix("b", log)).ready()
    assert reply.completion is not None
    assert reply.completion["choices"][0]["message"]["content"] == "xab"
    assert log == []  # finish and ended belong to streams


async def test_a_stage_that_holds_chunks_keeps_them_from_the_stages_after_it() -> None:
    class Hold(Stage):
        def __init__(self) -> None:
            self.held: list[Json] = []

        def chunks(self, batch: list[Json]) -> list[Json]:
            self.held += batch
            return []

        async def finish(self) -> list[Json]:
            return self.held

    log: list[str] = []
    stream = await _stream([_delta("x")], [_delta("y")])
    batches = await _relayed(await Reply(stream).then(Hold()).then(Suffix("b", log)).ready())
    assert _texts(batches) == [[], [], ["xb", "yb", "endb:"]]


async def test_an_opening_edit_is_seen_by_every_stage_even_those_added_before() -> None:
    class Lead(Stage):
        def opening(self, first: list[Json]) -> list[Json]:
            return [_delta("lead "), *first]

    stream = await _stream([_delta("x")])
    reply = await Reply(stream).then(Suffix("a", [])).then(Lead()).ready()
    assert _texts(await _relayed(reply))[0] == ["lead a", "xa"]


async def test_a_broken_stream_never_ends() -> None:
    log: list[str] = []
    stream = await _stream([_delta("x")], fail=True)
    reply = await Reply(stream).then(Suffix("a", log)).ready()
    with pytest.raises(UpstreamError):
        await _relayed(reply)
    assert log == []


async def test_a_stream_the_client_leaves_never_ends() -> None:
    log: list[str] = []
    stream = await _stream([_delta("x")], [_delta("y")])
    reply = await Reply(stream).then(Suffix("a", log)).ready()
    async with aclosing(reply.relay()) as relay:
        async for _ in relay:
            break
    assert log == []


async def test_a_stream_ends_only_after_its_last_batch_was_taken() -> None:
    log: list[str] = []
    stream = await _stream([_delta("x")])
    reply = await Reply(stream).then(Suffix("a", log)).ready()
    async with aclosing(reply.relay()) as relay:
        assert _texts([await anext(relay)]) == [["xa"]]
        assert _texts([await anext(relay)]) == [["enda:"]]
        assert log == ["finish a"]
        with pytest.raises(StopAsyncIteration):
            await anext(relay)
    assert log == ["finish a", "ended a"]


async def test_on_complete_hears_a_plain_answer_at_once() -> None:
    heard: list[Json] = []
    completion = {"choices": [{"index": 0, "message": {"content": "x"}}]}
    await Reply(completion).then(OnComplete(heard.append)).ready()
    assert heard == [completion]


async def test_on_complete_hears_a_stream_as_the_stages_before_it_passed_it() -> None:
    heard: list[Json] = []
    stream = await _stream([_delta("x")], [_delta("y", "stop")])
    reply = await Reply(stream).then(Suffix("a", [])).then(OnComplete(heard.append)).ready()
    await _relayed(reply)
    (completion,) = heard
    assert completion["choices"][0]["message"]["content"] == "xayaenda:"
    assert completion["choices"][0]["finish_reason"] == "stop"


async def test_on_complete_hears_nothing_of_a_broken_stream() -> None:
    heard: list[Json] = []
    stream = await _stream([_delta("x")], fail=True)
    reply = await Reply(stream).then(OnComplete(heard.append)).ready()
    with pytest.raises(UpstreamError):
        await _relayed(reply)
    assert heard == []


async def test_usage_accounting_counts_streamed_characters_for_pricing() -> None:
    ctx = _ctx()
    ctx.prompt_tokens_estimate = 10
    stream = await ChunkStream.open(ctx, _source([_delta("abc")], [_delta("de")]))
    await _relayed(await Reply(stream).then(UsageAccounting(ctx, False)).ready())
    assert ctx.streamed_chars == 5 and ctx.usage is None


async def test_stages_are_added_before_ready() -> None:
    reply = await Reply({"choices": []}).ready()
    with pytest.raises(AssertionError):
        reply.then(Stage())

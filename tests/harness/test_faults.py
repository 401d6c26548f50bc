"""The fake upstream's fault hook: a fault may answer, change the knobs, delay or raise."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from gateway.testing.fake_upstream import FakeUpstream, Knobs, Received

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
async def fake() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream() as upstream:
        yield upstream


async def post(fake: FakeUpstream, body: dict[str, object] = CHAT) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(fake.url + "/chat/completions", json=body) as resp,
    ):
        return resp.status, await resp.read()


async def test_a_fault_can_answer_itself(fake: FakeUpstream) -> None:
    fake.inject(lambda got: web.Response(status=418, text=f"no {got.model}"))
    assert await post(fake) == (418, b"no m")
    assert fake.stats["requests"] == 1 and fake.stats["in_flight"] == 0


async def test_a_fault_can_change_the_knobs_per_request(fake: FakeUpstream) -> None:
    def every_second(got: Received) -> Knobs | None:
        if fake.stats["requests"] % 2 == 0:
            return got.knobs.model_copy(update={"status": 503})
        return None

    fake.inject(every_second)
    statuses = [(await post(fake))[0] for _ in range(4)]
    assert statuses == [200, 503, 200, 503]


async def test_an_async_fault_delays_and_an_exception_fails_the_request(fake: FakeUpstream) -> None:
    async def slow(got: Received) -> None:
        await asyncio.sleep(0.2)

    fake.inject(slow)
    started = time.perf_counter()
    status, body = await post(fake)
    assert status == 200 and b"Echo: hi" in body
    assert time.perf_counter() - started >= 0.2

    def refuse(got: Received) -> None:
        raise web.HTTPTooManyRequests(text="slow down")

    fake.inject(refuse)
    assert await post(fake) == (429, b"slow down")


async def test_reset_clears_the_fault_and_the_constructor_sets_one() -> None:
    async with FakeUpstream(fault=lambda got: web.Response(status=500)) as fake:
        assert (await post(fake))[0] == 500
        fake.reset()
        assert (await post(fake))[0] == 200

"""Random faults on the fake upstream: each drawn at its rate, counted, and the rest of the
answer untouched."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp
import pytest

from gateway.testing.fake_upstream import FakeUpstream, Knobs
from gateway.testing.harness.random_faults import HALLUCINATED, Faults, RandomFaults

NONE = Faults(**{name: 0.0 for name in Faults.__dataclass_fields__})
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


@pytest.fixture
async def fake() -> AsyncIterator[FakeUpstream]:
    upstream = await FakeUpstream().start()
    try:
        yield upstream
    finally:
        await upstream.stop()


async def ask(fake: FakeUpstream, faults: Faults, **body: object) -> tuple[int, dict]:
    fake.inject(RandomFaults(faults, seed=1, stats=fake.stats))
    fake.defaults = Knobs(echo_user=True)
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "user": "t1.r7"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(fake.url + "/chat/completions", json=request | body) as resp,
    ):
        return resp.status, json.loads(await resp.read() or b"{}")


async def test_no_fault_at_rate_zero(fake: FakeUpstream) -> None:
    status, body = await ask(fake, NONE)
    assert status == 200 and body["choices"][0]["message"]["content"] == "Echo[t1.r7]: hi"
    assert all(v == 0 for k, v in fake.stats.items() if k.startswith("injected_"))


async def test_a_certain_fault_is_drawn_and_counted(fake: FakeUpstream) -> None:
    status, _ = await ask(fake, Faults(**{**NONE.__dict__, "error_500": 1.0}))
    assert status == 500 and fake.stats["injected_error_500"] == 1


async def test_tool_calls_name_an_undeclared_tool_with_the_echo_in_their_arguments(
    fake: FakeUpstream,
) -> None:
    faults = Faults(**{**NONE.__dict__, "hallucinate": 1.0})
    status, body = await ask(fake, faults, tools=TOOLS)
    call = body["choices"][0]["message"]["tool_calls"][0]["function"]
    assert status == 200 and call["name"] in HALLUCINATED
    assert json.loads(call["arguments"]) == {"query": "Echo[t1.r7]: hi"}
    assert fake.stats["injected_hallucinate"] == 1

"""The one health object (gateway/state/shared.py) that /readyz and `gateway_redis_up` read:
which parts share state, whether each reaches Redis, and the probe that notices it is back."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from gateway.config import BreakerConfig, RedisTarget
from gateway.observability.metrics import Metrics
from gateway.ratelimit import RateLimiter
from gateway.resilience.breaker import Breakers
from gateway.state import shared as shared_module
from gateway.state.shared import SharedState


@dataclass
class Part:
    shared: bool = True
    redis_up: bool = True
    probes: int = 0

    async def probe_redis(self) -> None:
        self.probes += 1
        self.redis_up = True


def test_only_parts_that_share_are_reported_in_order() -> None:
    state = SharedState({"cache": Part(), "breakers": Part(shared=False), "rate_limits": Part()})
    assert state.components() == ["cache", "rate_limits"]
    assert state.states() == {"cache": True, "rate_limits": True}


def test_a_part_that_lost_redis_reads_down_until_it_is_back() -> None:
    limits = Part(redis_up=False)
    state = SharedState({"rate_limits": limits})
    assert state.states() == {"rate_limits": False} and not state.up("rate_limits")
    limits.redis_up = True
    assert state.up("rate_limits")


def test_the_real_parts_share_only_when_configured_to() -> None:
    memory = SharedState.of(None, Breakers(BreakerConfig()), RateLimiter())
    assert memory.components() == [] and memory.states() == {}
    target = RedisTarget("redis://127.0.0.1:1/0", "unused")  # never called here
    shared = SharedState.of(None, Breakers(BreakerConfig(), target), RateLimiter(target))
    assert shared.components() == ["breakers", "rate_limits"]
    assert shared.states() == {"breakers": True, "rate_limits": True}, "up until a call fails"


def test_the_gauge_reads_the_same_object() -> None:
    limits = Part()
    state = SharedState({"cache": Part(shared=False), "rate_limits": limits})
    metrics = Metrics()
    metrics.watch_shared_state(state)
    text = metrics.exposition().decode()
    assert 'gateway_redis_up{component="rate_limits"} 1.0' in text
    assert 'component="cache"' not in text
    limits.redis_up = False
    assert 'gateway_redis_up{component="rate_limits"} 0.0' in metrics.exposition().decode()


async def test_watching_probes_the_sharing_parts_once_a_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shared_module, "WATCH_SECONDS", 0.01)
    down, unshared = Part(redis_up=False), Part(shared=False)
    state = SharedState({"breakers": down, "rate_limits": unshared})
    async with state.watching():
        while down.probes < 2:
            await asyncio.sleep(0.01)
    assert down.redis_up and unshared.probes == 0
    probes = down.probes
    await asyncio.sleep(0.05)
    assert down.probes == probes, "the watch ends with the block"


async def test_nothing_is_watched_when_nothing_shares() -> None:
    before = len(asyncio.all_tasks())
    async with SharedState({"breakers": Part(shared=False)}).watching():
        assert len(asyncio.all_tasks()) == before


@dataclass
class Stuck(Part):
    """A Redis that takes the connection and never answers (a blackholed host)."""

    async def probe_redis(self) -> None:
        self.probes += 1
        await asyncio.sleep(3600)


@dataclass
class Failing(Part):
    async def probe_redis(self) -> None:
        raise OSError("connection refused")


async def test_current_asks_every_sharing_part_and_waits_a_bounded_time() -> None:
    down = Part(redis_up=False)  # its probe finds Redis back
    stuck, failing, unshared = Stuck(), Failing(), Part(shared=False)
    state = SharedState({"cache": down, "breakers": stuck, "rate_limits": failing, "x": unshared})
    loop = asyncio.get_running_loop()
    started = loop.time()
    current = await state.current(timeout=0.05)
    assert current == {"cache": True, "breakers": False, "rate_limits": False}
    assert loop.time() - started < 5  # bounded by the timeout, not by the stuck probe
    assert down.probes == stuck.probes == 1 and unshared.probes == 0
    assert await SharedState({"breakers": Part(shared=False)}).current() == {}

"""SIGTERM to one of three replicas while it relays slow streams and a slow plain request.

The drain (gateway/server/shutdown.py): /readyz answers 503 "draining" for `drain_seconds`, then the
replica stops accepting connections; requests in flight get `shutdown_timeout_seconds` to
finish; streams still running then end with an SSE error event (code server_shutting_down)
and `data: [DONE]`, never cut silently; pending cache writes are flushed; the process exits 0.
The other replicas stay ready meanwhile, and serve what the stopped one stored in Redis.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from gateway.server.shutdown import EXIT_WITHIN_SECONDS
from gateway.testing.fake_upstream import FakeUpstream, Knobs
from tests.scaleout.cluster import Replica, ready_replicas, upstream_calls
from tests.scaleout.cluster import base_config as base

DRAIN, TIMEOUT = 0.5, 2.0  # server.drain_seconds, server.shutdown_timeout_seconds
CHUNK_DELAY = 0.25  # seconds between two chunks of an `up-slow` stream
LATENCY = 1.5  # seconds before `up-lazy` answers
SHORT = [f"short {i}" for i in range(4)]  # 5 chunks: done in 1 s
LONG = [f"long stream {i} " + " ".join(["word"] * 30) for i in range(4)]  # 36 chunks: 8.75 s
PLAIN = "a plain request that takes a while"


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str, fake: FakeUpstream
) -> Iterator[list[Replica]]:
    config = base(
        fake.url,
        server={"drain_seconds": DRAIN, "shutdown_timeout_seconds": TIMEOUT},
        models=[
            {"name": "slow", "provider": "fake", "upstream_model": "up-slow"},
            {"name": "lazy", "provider": "fake", "upstream_model": "up-lazy"},
        ],
        redis={"url": redis_url, "namespace": f"so-shutdown-{uuid.uuid4().hex[:12]}"},
        cache={
            "store": {"type": "redis"},
            "embedder": {"type": "hash"},
            "defaults": {"enabled": True},
        },
    )
    yield from ready_replicas(tmp_path_factory, "shutdown", config)


@dataclass(frozen=True, slots=True)
class Streamed:
    prompt: str
    status: int
    body: bytes
    ended: float  # monotonic
    cut: str | None  # the client's error, if the connection broke off

    def events(self) -> list[str]:
        text = self.body.decode()
        assert text.endswith("\n\n"), f"{self.prompt!r} ends mid-event: {text[-120:]!r}"
        blocks = text[:-2].split("\n\n")
        assert all(b.startswith("data: ") for b in blocks), blocks
        return [b[len("data: ") :] for b in blocks]


async def stream(
    session: aiohttp.ClientSession, url: str, prompt: str, started: asyncio.Event
) -> Streamed:
    body = {"model": "slow", "stream": True, "messages": [{"role": "user", "content": prompt}]}
    async with session.post(url + "/v1/chat/completions", json=body) as resp:
        started.set()  # the response (and its stream) has begun
        raw, cut = bytearray(), None
        try:
            async for piece in resp.content.iter_any():
                raw += piece
        except (aiohttp.ClientError, ConnectionError) as err:
            cut = repr(err)
        return Streamed(prompt, resp.status, bytes(raw), time.monotonic(), cut)


async def plain(session: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    body = {"model": "lazy", "messages": [{"role": "user", "content": PLAIN}]}
    async with session.post(url + "/v1/chat/completions", json=body) as resp:
        data = await resp.json()
        return resp.status, data["choices"][0]["message"]["content"]


async def refused(url: str) -> bool:
    """Whether a new connection to `url` is refused."""
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        try:
            async with session.get(url + "/healthz", timeout=aiohttp.ClientTimeout(total=1)):
                return False
        except aiohttp.ClientConnectorError:
            return True
        except aiohttp.ClientError:  # accepted, then closed: the listener is going away
            return False


def test_sigterm_drains_streams_and_requests_then_exits_cleanly(
    cluster: list[Replica], fake_upstream: FakeUpstream
) -> None:
    victim, r2, r3 = cluster
    fake_upstream.per_model["up-slow"] = Knobs(chunk_delay_ms=CHUNK_DELAY * 1000)
    fake_upstream.per_model["up-lazy"] = Knobs(latency_ms=LATENCY * 1000)

    async def run() -> tuple[float, list[Streamed], tuple[int, str], list[tuple[float, int, str]]]:
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            started = [asyncio.Event() for _ in SHORT + LONG]
            streams = [
                asyncio.ensure_future(stream(session, victim.url, p, e))
                for p, e in zip(SHORT + LONG, started, strict=True)
            ]
            lazy = asyncio.ensure_future(plain(session, victim.url))
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started)), 10)
            while upstream_calls(fake_upstream, "up-lazy") < 1:  # the plain request is in too
                await asyncio.sleep(0.01)
            assert not any(s.done() for s in streams), "every stream is still running"
            sigterm = time.monotonic()
            victim.proc.send_signal(signal.SIGTERM)

            readiness = []  # (seconds since SIGTERM, status, code or status) of /readyz
            while time.monotonic() - sigterm < DRAIN - 0.1:
                async with session.get(victim.url + "/readyz") as resp:
                    body: dict[str, Any] = await resp.json()
                    said = body["error"]["code"] if "error" in body else body["status"]
                    readiness.append((round(time.monotonic() - sigterm, 3), resp.status, said))
                assert (await asyncio.to_thread(r2.readyz)).json()["status"] == "ready"
                await asyncio.sleep(0.05)
            deadline = sigterm + DRAIN + 1.0
            while not await refused(victim.url):
                assert time.monotonic() < deadline, "still accepting connections after the drain"
                await asyncio.sleep(0.05)
            readiness.append((time.monotonic() - sigterm, 0, "refused"))
            return sigterm, await asyncio.gather(*streams), await lazy, readiness

    sigterm, streamed, lazy, readiness = asyncio.run(run())
    try:
        code = victim.proc.wait(DRAIN + TIMEOUT + 3)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running {DRAIN + TIMEOUT + 3} s after SIGTERM:\n{victim.output()}")
    exited = time.monotonic() - sigterm
    output = victim.output()
    assert code == 0, f"exit status {code}:\n{output}"
    print(f"SIGTERM -> exit 0 in {exited:.2f} s; /readyz of the replica: {readiness}")

    # /readyz: 503 "draining" from (almost) the signal on, until connections are refused.
    draining = [r for r in readiness if r[1] == 503]
    assert draining, readiness
    assert all(r[1] == 503 for r in readiness[readiness.index(draining[0]) : -1]), readiness
    assert {r[2] for r in draining} == {"draining"}, draining
    # The 9 requests, and the first /readyz probe when it is in the middleware at that moment.
    assert re.search(r"gateway draining: (9|10) requests in flight", output), output

    # The plain request in flight finished normally.
    assert lazy == (200, f"Echo: {PLAIN}")

    # Streams: the short ones finished; the long ones were ended at the timeout with an error
    # event then [DONE]; none broke off without a word.
    expire_at = DRAIN + TIMEOUT  # gateway/server/shutdown.py Drain.ending
    for result in streamed:
        assert result.status == 200 and result.cut is None, (result.prompt, result.cut)
        events = result.events()
        assert events[-1] == "[DONE]", (result.prompt, events[-3:])
        chunks = [json.loads(e) for e in events[:-1]]
        errors = [c["error"] for c in chunks if "error" in c]
        content = "".join(
            c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices")
        )
        if result.prompt in SHORT:
            assert not errors, (result.prompt, errors)
            assert content == f"Echo: {result.prompt}"
            assert result.ended - sigterm < expire_at
        else:
            assert len(errors) == 1 and "error" in chunks[-1], (result.prompt, events[-3:])
            assert errors[0]["code"] == "server_shutting_down", errors
            assert errors[0]["type"] == "server_error", errors
            assert 3 <= len(content.split()) < 32, f"some of the stream came first: {content!r}"
            assert f"Echo: {result.prompt}".startswith(content)
            assert expire_at - 0.3 <= result.ended - sigterm <= expire_at + 1.0, (
                f"ended {result.ended - sigterm:.2f} s after SIGTERM, expiry at {expire_at} s"
            )
    assert exited <= DRAIN + TIMEOUT + EXIT_WITHIN_SECONDS

    # What the stopped replica answered in full is in the shared cache; a cut stream is not.
    before = upstream_calls(fake_upstream, "up-lazy")
    again = r2.ask(PLAIN, model="lazy")
    assert (again.cache, again.content) == ("hit-exact", f"Echo: {PLAIN}")
    assert upstream_calls(fake_upstream, "up-lazy") == before
    assert r3.ask(SHORT[0], model="slow").cache == "hit-exact"
    assert r2.ask(LONG[0], model="slow").cache == "miss"
    for replica in (r2, r3):
        assert replica.readyz().json()["status"] == "ready"

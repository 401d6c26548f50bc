"""The SQLite cache store through `kill -9`: a real gateway process (`python -m gateway serve`,
hash embedder, SQLite store) is killed with SIGKILL at a random moment of a write-heavy run,
started again on the same file, twenty times.

Each round, 16 clients ask new questions (every one a miss, then a background cache write)
and ask each again: a later exact hit on a question proves its entry was committed (the store
indexes an entry only after its transaction commits), so that entry is *acknowledged*. A
poller reads /admin/cache/stats meanwhile: an entry it counts is committed too. Then SIGKILL,
at a random time between 0.3 and 1.2 s into the load, with requests and writes in flight.

After every restart:
  - the store opens (the gateway gets ready and /admin/cache/stats answers);
  - it holds at least as many entries as the last count read before the kill;
  - a sample of the questions acknowledged in the round before, and of older ones, is an
    exact hit again, with the answer to that question;
and throughout, every answer (hit or miss) is the answer to the question asked. At the end,
SQLite's integrity check passes, every acknowledged question has its row in the file, and every
stored row answers the question it is stored under.

Also here: a finding of the soak run (bench/soak.py): the store's memory grows with every
write once it is full, beyond its max_entries bound.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import sqlite3
import time
import tracemalloc
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.cache.embedded_store import EmbeddedStore
from gateway.cache.store import CacheEntry
from gateway.testing.fake_upstream import FakeUpstream
from gateway.testing.harness.configs import Json, write_config
from gateway.testing.harness.starters import start_gateway
from tests.resilience.test_redis_breakers import ADMIN_ENV, ADMIN_KEY

ROUNDS = 20
CLIENTS = 16
KILL_AFTER = (0.3, 1.2)  # seconds into the load
NEW_SAMPLE = 80  # questions acknowledged in the round before, re-checked after each restart
OLD_SAMPLE = 20  # and older ones (every one is checked in the file at the end)
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
WORDS = [
    a + b
    for a in ("bra", "cle", "dro", "fli", "gru", "kna", "plo", "sve", "tri", "zu")
    for b in ("mak", "nel", "pir", "sod", "tev", "vun", "wox", "yal", "zet", "qim")
]


@dataclass
class Ledger:
    """What the run has proven so far."""

    acknowledged: dict[str, int] = field(default_factory=dict)  # question -> round
    counted: int = 0  # the last /admin/cache/stats entry count read before a kill
    wrong: list[str] = field(default_factory=list)  # answers that do not answer the question
    hits: int = 0
    misses: int = 0
    rechecked: int = 0


def config(fake_url: str, store: Path) -> Json:
    fake = {"type": "openai", "base_url": fake_url, "timeouts": {"connect": 2, "read": 5}}
    return {
        "server": {"access_log": False, "watch_config": False, "shutdown_timeout_seconds": 1},
        "auth": {"admin_key_env": "GATEWAY_ADMIN_KEY"},
        "providers": {"fake": fake},
        "models": [{"name": "writer", "provider": "fake", "upstream_model": "writer-up"}],
        "cache": {
            "store": {"type": "sqlite", "path": str(store), "max_entries": 1000000},
            "embedder": {"type": "hash"},
            "defaults": {"enabled": True},
        },
    }


def question(rng: random.Random, round_no: int, n: int) -> str:
    words = " ".join(rng.choices(WORDS, k=6))
    return f"Round {round_no} item {n}: what does {words} mean?"


def body(text: str) -> bytes:
    return json.dumps(
        {"model": "writer", "messages": [{"role": "user", "content": text}], "temperature": 0}
    ).encode()


def get_json(url: str, timeout: float = 5.0) -> Any:
    request = urllib.request.Request(url, headers=ADMIN)
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        return json.loads(resp.read())


def wait_ready(base: str, timeout: float = 20.0) -> dict[str, Any]:
    """Until /readyz says ready; then the store's stats (it opened)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if get_json(base + "/readyz").get("status") == "ready":
                stats: dict[str, Any] = get_json(base + "/admin/cache/stats")
                return stats
        except OSError:
            pass
        if time.monotonic() >= deadline:
            raise AssertionError(f"{base} not ready within {timeout} s")
        time.sleep(0.05)


async def ask(session: aiohttp.ClientSession, base: str, text: str) -> tuple[str, str]:
    """(x-gateway-cache, content) of one chat completion."""
    async with session.post(
        base + "/v1/chat/completions",
        data=body(text),
        headers={"Content-Type": "application/json"},
        timeout=aiohttp.ClientTimeout(total=10),
    ) as resp:
        data = await resp.json(content_type=None)
        assert resp.status == 200, (resp.status, data)
        return resp.headers.get("x-gateway-cache", "-"), data["choices"][0]["message"]["content"]


def check_answer(ledger: Ledger, text: str, result: str, content: str) -> None:
    if content != f"Echo: {text}":
        ledger.wrong.append(f"{text!r} answered ({result}) with {content!r}")
    if result.startswith("hit"):
        ledger.hits += 1
    else:
        ledger.misses += 1


async def recheck(base: str, ledger: Ledger, questions: list[str]) -> list[str]:
    """Ask acknowledged questions again: each must be an exact hit with its own answer."""
    lost: list[str] = []
    async with aiohttp.ClientSession() as session:

        async def one(text: str) -> None:
            result, content = await ask(session, base, text)
            ledger.rechecked += 1
            check_answer(ledger, text, result, content)
            if result != "hit-exact":
                lost.append(
                    f"{text!r}: {result} (acknowledged in round {ledger.acknowledged[text]})"
                )

        for start in range(0, len(questions), CLIENTS):
            await asyncio.gather(*(one(q) for q in questions[start : start + CLIENTS]))
    return lost


async def write_load(
    base: str, proc_pid: int, ledger: Ledger, round_no: int, rng: random.Random
) -> int:
    """Clients ask new questions (then each once more) until the process is killed at a
    random moment; returns how many questions were asked."""
    kill_at = time.monotonic() + rng.uniform(*KILL_AFTER)
    asked = 0
    counter = iter(range(1_000_000))
    seeds = [rng.random() for _ in range(CLIENTS)]

    async def client(session: aiohttp.ClientSession, seed: float) -> None:
        nonlocal asked
        own = random.Random(seed)
        mine: list[str] = []
        while True:
            try:
                text = question(own, round_no, next(counter))
                asked += 1
                result, content = await ask(session, base, text)
                check_answer(ledger, text, result, content)
                mine.append(text)
                if len(mine) > 1:  # the one before has had time to be written
                    earlier = mine.pop(0)
                    result, content = await ask(session, base, earlier)
                    check_answer(ledger, earlier, result, content)
                    if result == "hit-exact":
                        ledger.acknowledged.setdefault(earlier, round_no)
            except (TimeoutError, aiohttp.ClientError):
                return  # killed

    async def stats_poller(session: aiohttp.ClientSession) -> None:
        while True:
            try:
                async with session.get(base + "/admin/cache/stats", headers=ADMIN) as resp:
                    ledger.counted = max(ledger.counted, int((await resp.json())["entries"]))
            except (TimeoutError, aiohttp.ClientError):
                return
            await asyncio.sleep(0.05)

    async def killer() -> None:
        await asyncio.sleep(max(0.0, kill_at - time.monotonic()))
        import os

        os.kill(proc_pid, signal.SIGKILL)

    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=10)
    ) as session:
        await asyncio.gather(killer(), stats_poller(session), *(client(session, s) for s in seeds))
    return asked


@pytest.fixture
def store_path(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "store" / "cache.sqlite3"


def test_kill_9_during_writes_loses_no_acknowledged_entry_and_serves_no_corrupt_one(
    tmp_path: Path, store_path: Path, fake_upstream: FakeUpstream
) -> None:
    started = time.monotonic()
    fake_upstream.defaults.latency_ms = 2  # answers take a moment: writes overlap requests
    path = write_config(tmp_path, config(fake_upstream.url, store_path))
    rng = random.Random(20240601)
    ledger = Ledger()
    asked_total = 0
    lost: list[str] = []
    for round_no in range(1, ROUNDS + 1):
        with start_gateway(tmp_path, path, name=f"gateway-{round_no}", env=ADMIN_ENV) as gateway:
            base, proc = gateway.url, gateway.proc
            stats = wait_ready(base)
            assert stats["entries"] >= ledger.counted, (
                f"round {round_no}: the store opened with {stats['entries']} entries, but "
                f"{ledger.counted} were counted before the kill"
            )
            newest = [q for q, r in ledger.acknowledged.items() if r == round_no - 1]
            older = [q for q, r in ledger.acknowledged.items() if r < round_no - 1]
            sample = rng.sample(newest, min(NEW_SAMPLE, len(newest)))
            sample += rng.sample(older, min(OLD_SAMPLE, len(older)))
            lost += asyncio.run(recheck(base, ledger, sample))
            asked_total += asyncio.run(write_load(base, proc.pid, ledger, round_no, rng))
            assert proc.wait(10) == -signal.SIGKILL, "the gateway died of the kill, not before"

    # Once more: the store opens after the last kill; every acknowledged entry is there.
    with start_gateway(tmp_path, path, name="gateway-final", env=ADMIN_ENV) as gateway:
        base = gateway.url
        stats = wait_ready(base)
        assert stats["entries"] >= ledger.counted
        final = [q for q, r in ledger.acknowledged.items() if r == ROUNDS]
        lost += asyncio.run(recheck(base, ledger, final))

    summary = (
        f"{ROUNDS} kills, {asked_total} questions asked, {len(ledger.acknowledged)} "
        f"acknowledged, {ledger.rechecked} re-checked after restarts, {ledger.hits} hits, "
        f"{ledger.misses} misses, {stats['entries']} entries stored"
    )
    print(summary)
    assert not lost, f"acknowledged entries lost after kill -9 ({summary}):\n" + "\n".join(lost)
    assert not ledger.wrong, f"wrong answers served ({summary}):\n" + "\n".join(ledger.wrong[:20])
    assert len(ledger.acknowledged) >= 5 * ROUNDS, f"too little was proven: {summary}"
    assert ledger.counted > 0

    db = sqlite3.connect(f"file:{store_path}?mode=ro", uri=True)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = db.execute("SELECT text, response FROM entries").fetchall()
    finally:
        db.close()
    stored = {text for text, _ in rows}
    missing = [q for q in ledger.acknowledged if q not in stored]
    assert not missing, f"acknowledged entries not in the store file: {missing[:10]}"
    corrupt = [
        text
        for text, response in rows
        if json.loads(response)["choices"][0]["message"]["content"] != f"Echo: {text}"
    ]
    assert not corrupt, f"rows whose answer is not their question's: {corrupt[:10]}"
    assert time.monotonic() - started < 90, summary


# --- finding from bench/soak.py: the store's memory grows past max_entries -----------------


def entry(n: int) -> CacheEntry:
    return CacheEntry(
        scope="scope",
        exact_key=f"key-{n}",
        tenant="t",
        model="m",
        text=f"question {n}",
        response={"n": n},
        expires_at=time.time() + 86_400,
    )


async def store_memory_after(store: EmbeddedStore, start: int, count: int) -> int:
    for n in range(start, start + count):
        await store.put(entry(n))
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(True, "*gateway/cache/*")]
    )
    return sum(stat.size for stat in snapshot.statistics("filename"))


async def test_a_full_store_stops_growing_however_many_entries_pass_through_it(
    tmp_path: Path,
) -> None:
    """FINDING (gateway/cache/embedded_store.py, EmbeddedStore._remember / _forget / evict):
    every put pushes (expires_at, id) on the `_expiries` heap; an entry evicted as least
    recently used (or replaced under the same key) leaves its pair on the heap, which is only
    popped once that time passes (ttl_seconds, a day by default). So a store held at
    max_entries keeps growing by one heap pair (~100 bytes) per write for a whole TTL:
    1 GB a day at 100 new answers a second, whatever max_entries says. The memory the store
    holds must stay bounded by max_entries (stale pairs dropped on eviction, or the heap
    compacted when it outgrows the live entries)."""
    store = EmbeddedStore(str(tmp_path / "cache.sqlite3"), max_entries=200, approximate_above=10**6)
    await store.open()
    tracemalloc.start()
    try:
        full = await store_memory_after(store, 0, 1_000)  # full long since
        later = await store_memory_after(store, 1_000, 8_000)
    finally:
        tracemalloc.stop()
        await store.close()
    assert len(store) == 200
    growth = later - full
    assert growth < 100_000, (
        f"the store holds {len(store)} entries (max_entries 200) but its memory grew by "
        f"{growth / 1e6:.2f} MB over 8,000 more writes"
    )

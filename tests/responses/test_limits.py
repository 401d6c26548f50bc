"""Owners and limits of the embedded response store (issue 32, item 2): quotas enforced in the
transaction that writes, freed by delete and expiry; the size cap; the store's own bounds;
conversations kept as chains (each turn once, renewed with their tip, a broken one a clear
404); large rows decoded off the event loop; a failed write pauses `store: true`."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.config.responses import Quota
from gateway.responses import backend
from gateway.responses.backend import (
    ConversationBroken,
    StorageQuotaExceeded,
    StoredResponseTooLarge,
    StoreNotWritable,
)
from gateway.responses.embedded_store import EmbeddedResponseStore
from gateway.responses.store import StoredResponse, new_response_id

TTL = 3600
QUOTA = Quota(max_responses=10, max_bytes=50_000)


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def turn(text: str, previous: str | None = None) -> StoredResponse:
    rid = new_response_id()
    answer = {"role": "assistant", "content": f"re: {text[:10]}"}
    return StoredResponse(
        {"id": rid, "object": "response", "output": []},
        [{"id": "msg_1", "type": "message", "role": "user", "content": text}],
        [{"role": "user", "content": text}, answer],
        previous,
    )


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def store(tmp_path: Path, clock: Clock) -> AsyncIterator[EmbeddedResponseStore]:
    s = EmbeddedResponseStore(
        str(tmp_path / "r.sqlite3"),
        TTL,
        max_response_bytes=20_000,
        quotas=lambda tenant: QUOTA if tenant == "small" else Quota(),
        clock=clock,
    )
    await s.start()
    yield s
    await s.close()


async def test_concurrent_puts_never_take_a_tenant_past_its_quota(
    store: EmbeddedResponseStore,
) -> None:
    results = await asyncio.gather(*(store.put("small", turn(f"q{i}")) for i in range(50)))
    count, used = store.usage("small")
    assert sum(results) == count == QUOTA.max_responses and used <= 50_000
    assert store.refused["storage_quota_exceeded"] == 40
    # another tenant is not charged for it
    assert await store.put("other", turn("mine")) is True
    assert store.usage("other")[0] == 1


async def test_bytes_are_charged_and_freed_by_delete_and_expiry(
    store: EmbeddedResponseStore, clock: Clock
) -> None:
    kept = [turn("x" * 9_000) for _ in range(6)]  # ~18 KB a row: two fit in 50 KB
    assert [await store.put("small", k) for k in kept] == [True, True] + [False] * 4
    count, used = store.usage("small")
    assert count == 2 and 36_000 < used <= 50_000
    with pytest.raises(StorageQuotaExceeded):
        store.admit("small", 20_000, explicit=True)
    assert store.admit("small", 20_000, explicit=False) is False
    for k in kept:
        await store.delete("small", k.response["id"])
    assert store.usage("small")[1] < used
    clock.now += TTL + 1
    await store.sweep()
    assert store.usage("small") == (0, 0) and store.size == 0
    assert store.admit("small", 20_000, explicit=True) is True


async def test_a_row_over_the_size_cap_is_refused_before_and_after(
    store: EmbeddedResponseStore,
) -> None:
    with pytest.raises(StoredResponseTooLarge):
        store.admit("other", 30_000, explicit=True)
    assert await store.put("other", turn("z" * 15_000)) is False  # two copies: 30 KB
    assert store.refused["stored_response_too_large"] == 1 and len(store) == 0


async def test_the_store_refuses_past_its_own_bytes(tmp_path: Path) -> None:
    s = EmbeddedResponseStore(None, TTL, max_bytes=30_000)
    await s.start()
    try:
        results = [await s.put(f"t{i}", turn("w" * 4_000)) for i in range(10)]
        assert s.size <= 30_000 and results.count(True) == 3
    finally:
        await s.close()


async def test_a_chain_stores_each_turn_once_and_reads_back_whole(
    store: EmbeddedResponseStore, clock: Clock
) -> None:
    previous: str | None = None
    ids: list[str] = []
    for i in range(20):
        one = turn(f"{i}:" + "t" * 1_000, previous)
        assert await store.put("other", one, ids)
        previous = one.response["id"]
        ids = [previous, *ids]
        clock.now += 60
    assert store.size < 20 * 2 * 1_200  # linear: each turn's row holds its own turn
    chain = await store.history("other", previous)  # type: ignore[arg-type]
    assert chain is not None and chain.ids == ids
    users = [m["content"].split(":")[0] for m in chain.conversation if m["role"] == "user"]
    assert users == [str(i) for i in range(20)]
    # the chain lives as long as its tip: the first row was renewed by each continuation
    clock.now += TTL - 120  # the first row alone would have expired 19 minutes ago
    assert await store.history("other", previous) is not None  # type: ignore[arg-type]
    # an earlier row deleted: the conversation cannot be rebuilt, and says so
    await store.delete("other", ids[5])
    with pytest.raises(ConversationBroken) as broken:
        await store.history("other", previous)  # type: ignore[arg-type]
    assert broken.value.status == 404 and broken.value.code == "previous_response_not_found"
    assert await store.history("other", new_response_id()) is None


async def test_a_large_row_is_decoded_off_the_event_loop(store: EmbeddedResponseStore) -> None:
    big = turn("b" * 9_000)
    big.conversation.append({"role": "user", "content": "c" * 400_000})
    store.max_response_bytes = None
    assert await store.put("other", big)
    threads: list[str] = []
    decode = backend.decode

    def recorded(blob: bytes) -> StoredResponse:
        threads.append(threading.current_thread().name)
        return decode(blob)

    backend.decode = recorded
    try:
        assert await store.get("other", big.response["id"]) == big
        assert await store.get("other", turn("small").response["id"]) is None
    finally:
        backend.decode = decode
    assert threads and threads[0] != threading.main_thread().name


async def test_a_failed_write_pauses_explicit_storage(
    store: EmbeddedResponseStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(*args: object) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(store, "_insert", full)
    assert await store.put("other", turn("lost")) is False
    with pytest.raises(StoreNotWritable) as paused:
        store.admit("other", 10, explicit=True)
    assert paused.value.status == 503 and paused.value.code == "store_unavailable"
    assert store.admit("other", 10, explicit=False) is False
    monkeypatch.setattr(backend, "WRITE_PAUSE", 0.0)


async def test_a_file_from_before_owners_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE responses (id INTEGER PRIMARY KEY, key BLOB NOT NULL UNIQUE, "
        "value BLOB NOT NULL, created_at REAL NOT NULL, expires_at REAL NOT NULL);"
    )
    db.execute(
        "INSERT INTO responses (key, value, created_at, expires_at) VALUES "
        "(x'00', x'7b7d', 0, 9e12)"
    )
    db.commit()
    db.close()
    s = EmbeddedResponseStore(str(path), TTL)
    await s.start()
    try:
        assert len(s) == 1 and s.size == 2  # charged to nobody, counted in the store's bytes
        assert await s.put("t", turn("new"))
        assert s.usage("t")[0] == 1
    finally:
        await s.close()

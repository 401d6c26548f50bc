"""The embedded response store (gateway/responses/embedded_store.py, behind store.py): SQLite in
a temporary directory, on an injected clock so expiry needs no sleeping."""

from __future__ import annotations

import asyncio
import logging
import re
import sqlite3
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.config.responses import ResponsesConfig
from gateway.responses.embedded_store import EmbeddedResponseStore, Row
from gateway.responses.store import (
    ResponseStore,
    StoredResponse,
    build_response_store,
    new_response_id,
)

TTL = 3600


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def stored(text: str = "hello", response_id: str | None = None) -> StoredResponse:
    rid = response_id or new_response_id()
    item = {"id": f"msg_{rid[5:]}", "type": "message", "role": "user", "content": text}
    answer = {"role": "assistant", "content": f"re: {text}"}
    return StoredResponse(
        response={"id": rid, "object": "response", "status": "completed", "output": [answer]},
        input_items=[item],
        conversation=[{"role": "user", "content": text}, answer],
    )


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def store(tmp_path: Path, clock: Clock) -> AsyncIterator[EmbeddedResponseStore]:
    s = EmbeddedResponseStore(str(tmp_path / "responses.sqlite3"), TTL, clock=clock)
    await s.start()
    yield s
    await s.close()


def test_ids_are_resp_and_48_random_hex_characters() -> None:
    ids = {new_response_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(re.fullmatch(r"resp_[0-9a-f]{48}", i) for i in ids)


async def test_a_response_is_read_back_as_stored_then_deleted(
    store: EmbeddedResponseStore,
) -> None:
    one = stored()
    await store.put("acme", one)
    assert await store.get("acme", one.response["id"]) == one
    assert await store.delete("acme", one.response["id"]) is True
    assert await store.get("acme", one.response["id"]) is None
    assert await store.delete("acme", one.response["id"]) is False
    assert len(store) == 0


async def test_an_unknown_id_is_none(store: EmbeddedResponseStore) -> None:
    assert await store.get("acme", new_response_id()) is None
    assert await store.get("acme", "not even an id") is None
    assert await store.delete("acme", new_response_id()) is False


async def test_another_tenant_gets_what_an_unknown_id_gets(store: EmbeddedResponseStore) -> None:
    mine = stored("mine")
    rid = mine.response["id"]
    await store.put("team-a", mine)
    assert await store.get("team-b", rid) is None
    assert await store.delete("team-b", rid) is False
    # B writing under A's id keeps its own row: A's is untouched, each reads its own
    theirs = stored("theirs", rid)
    await store.put("team-b", theirs)
    assert await store.get("team-a", rid) == mine
    assert await store.get("team-b", rid) == theirs
    assert await store.delete("team-b", rid) is True
    assert await store.get("team-a", rid) == mine


async def test_the_file_names_no_tenant_and_no_id_in_its_keys(
    store: EmbeddedResponseStore, tmp_path: Path
) -> None:
    one = stored()
    await store.put("tenant-with-a-name", one)
    db = sqlite3.connect(tmp_path / "responses.sqlite3")
    try:
        key, owner = db.execute("SELECT key, owner FROM responses").fetchone()
        columns = [row[1] for row in db.execute("PRAGMA table_info(responses)")]
    finally:
        db.close()
    assert len(key) == 32  # a SHA-256
    assert b"tenant-with-a-name" not in key and one.response["id"].encode() not in key
    assert columns == ["id", "key", "value", "created_at", "expires_at", "owner", "size"]
    assert len(owner) == 16 and b"tenant-with-a-name" not in owner  # charged by a hash
    mode = stat.S_IMODE((tmp_path / "responses.sqlite3").stat().st_mode)
    assert mode == 0o600  # conversations: readable by this user only


async def test_an_expired_response_is_never_returned_and_is_swept(
    store: EmbeddedResponseStore, clock: Clock
) -> None:
    old, newer = stored("old"), stored("newer")
    await store.put("acme", old)
    clock.now += TTL - 10
    await store.put("acme", newer)
    clock.now += 9
    assert await store.get("acme", old.response["id"]) == old  # one second left
    clock.now += 1
    assert await store.get("acme", old.response["id"]) is None
    assert await store.delete("acme", old.response["id"]) is False
    assert len(store) == 1  # the expired row was removed by that delete
    clock.now += TTL
    assert await store.get("acme", newer.response["id"]) is None
    assert await store.sweep() == 1
    assert len(store) == 0


async def test_the_periodic_sweep_removes_expired_rows(tmp_path: Path, clock: Clock) -> None:
    s = EmbeddedResponseStore(str(tmp_path / "r.sqlite3"), TTL, sweep_seconds=0.01, clock=clock)
    await s.start()
    try:
        await s.put("acme", stored())
        clock.now += TTL
        for _ in range(500):
            if len(s) == 0:
                break
            await asyncio.sleep(0.01)
        assert len(s) == 0
    finally:
        await s.close()


async def test_responses_survive_a_restart_and_expired_ones_do_not(
    tmp_path: Path, clock: Clock
) -> None:
    path = str(tmp_path / "data" / "responses.sqlite3")  # the directory is made
    first = EmbeddedResponseStore(path, TTL, clock=clock)
    await first.start()
    kept, expiring = stored("kept"), stored("expiring")
    await first.put("acme", expiring)
    clock.now += 100
    await first.put("acme", kept)
    await first.close()

    clock.now += TTL - 50  # `expiring` is past its TTL now, `kept` is not
    second = EmbeddedResponseStore(path, TTL, clock=clock)
    await second.start()
    try:
        assert len(second) == 1  # swept at start
        assert await second.get("acme", kept.response["id"]) == kept
        assert await second.get("acme", expiring.response["id"]) is None
    finally:
        await second.close()


async def test_past_max_entries_the_oldest_go_first(tmp_path: Path, clock: Clock) -> None:
    s = EmbeddedResponseStore(str(tmp_path / "r.sqlite3"), TTL, max_entries=3, clock=clock)
    await s.start()
    try:
        rows = [stored(f"turn {i}") for i in range(5)]
        for row in rows:
            await s.put("acme", row)
        assert len(s) == 3
        found = [await s.get("acme", row.response["id"]) for row in rows]
        assert found == [None, None, *rows[2:]]
        await s.put("acme", rows[3])  # written again: replaced in place, nothing dropped
        assert len(s) == 3 and await s.get("acme", rows[2].response["id"]) == rows[2]
    finally:
        await s.close()


async def test_a_long_conversation_is_kept_whole(store: EmbeddedResponseStore) -> None:
    turns = [{"role": "user", "content": f"{i} " + "x" * 100_000} for i in range(60)]
    long = StoredResponse({"id": new_response_id()}, [{"id": "msg_1"}], turns)
    await store.put("acme", long)
    back = await store.get("acme", long.response["id"])
    assert back == long  # 6 MB in one row, nothing cut


async def test_a_response_is_readable_while_its_write_is_in_flight(
    store: EmbeddedResponseStore,
) -> None:
    """A client continuing the moment it got the response finds it."""
    one = stored()
    writing = asyncio.ensure_future(store.put("acme", one))
    await asyncio.sleep(0)  # the put has encoded it and handed the write to the store's thread
    assert await store.get("acme", one.response["id"]) == one
    assert not writing.done()
    await writing
    assert await store.get("acme", one.response["id"]) == one


async def test_a_response_deleted_while_its_write_is_in_flight_stays_deleted(
    store: EmbeddedResponseStore,
) -> None:
    one = stored()
    writing = asyncio.ensure_future(store.put("acme", one))
    await asyncio.sleep(0)
    assert await store.delete("acme", one.response["id"]) is True
    await writing
    assert await store.get("acme", one.response["id"]) is None
    assert len(store) == 0


async def test_each_get_returns_its_own_copy(store: EmbeddedResponseStore) -> None:
    """A handler extending a conversation in place changes nothing stored."""
    one = stored()
    await store.put("acme", one)
    first = await store.get("acme", one.response["id"])
    assert first is not None
    first.conversation.append({"role": "user", "content": "more"})
    assert await store.get("acme", one.response["id"]) == one


async def test_a_put_that_cannot_be_kept_is_logged_and_counted_never_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    failed: list[str] = []
    s = EmbeddedResponseStore(str(tmp_path / "r.sqlite3"), TTL, on_failure=failed.append)
    await s.start()
    try:
        odd = StoredResponse({"id": new_response_id(), "metadata": {1: "int key"}}, [], [])
        with caplog.at_level(logging.WARNING, "gateway.responses"):
            await s.put("acme", odd)
            await s.put("acme", odd)
        assert await s.get("acme", odd.response["id"]) is None
    finally:
        await s.close()
    assert failed == ["put", "put"] and s.failures["put"] == 2
    warnings = [r.getMessage() for r in caplog.records if r.name == "gateway.responses"]
    assert len(warnings) == 1  # throttled: one per interval
    assert "put failed, the response is not kept" in warnings[0]


def test_the_config_builds_the_store_it_names(tmp_path: Path) -> None:
    sqlite = build_response_store(
        ResponsesConfig.model_validate({"store": {"path": str(tmp_path / "r.sqlite3")}}), None
    )
    memory = build_response_store(
        ResponsesConfig.model_validate({"store": {"type": "memory"}}), None
    )
    assert isinstance(sqlite, EmbeddedResponseStore) and isinstance(memory, EmbeddedResponseStore)
    assert sqlite.path == str(tmp_path / "r.sqlite3") and memory.path is None
    assert sqlite.ttl_seconds == 30 * 86_400
    assert not sqlite.shared
    with pytest.raises(ValueError, match="needs its Redis"):
        build_response_store(ResponsesConfig.model_validate({"store": {"type": "redis"}}), None)


async def test_a_memory_store_keeps_nothing_across_restarts(clock: Clock) -> None:
    one = stored()
    for expected in (one, None):
        s: ResponseStore = EmbeddedResponseStore(None, TTL, clock=clock)
        await s.start()
        if expected is not None:
            await s.put("acme", one)
        assert await s.get("acme", one.response["id"]) == expected
        await s.close()


async def test_concurrent_puts_share_transactions_and_are_all_kept(
    tmp_path: Path, clock: Clock
) -> None:
    """Group commit: the writes that arrive while one commits go in the next transaction, so
    many concurrent puts take a few transactions, and each put returns once its row is in."""
    path = str(tmp_path / "responses.sqlite3")
    s = EmbeddedResponseStore(path, TTL, max_entries=30, clock=clock)
    await s.start()
    transactions = 0
    insert = s._insert

    def counted(batch: list[Row], now: float) -> list[bool]:
        nonlocal transactions
        transactions += 1
        return insert(batch, now)

    s._insert = counted  # type: ignore[method-assign]
    many = [stored(f"question {i}") for i in range(40)]
    await asyncio.gather(*(s.put("acme", one) for one in many))
    assert transactions < len(many) / 2
    assert len(s) == 30  # max_entries applied across the batches
    await s.close()

    reopened = EmbeddedResponseStore(path, TTL, clock=clock)
    await reopened.start()
    try:
        kept = [await reopened.get("acme", one.response["id"]) for one in many]
        assert kept[10:] == many[10:] and kept[:10] == [None] * 10  # the oldest went first
    finally:
        await reopened.close()

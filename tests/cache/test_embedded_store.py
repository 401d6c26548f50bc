"""The embedded store: tiers, expiry, LRU, purge, persistence across restarts and kill -9."""

import asyncio
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.cache.embedded_store import EmbeddedStore, file_stats
from gateway.cache.store import CacheEntry
from tests.cache.entries import entry as make_entry
from tests.cache.entries import vector as unit_vector


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EmbeddedStore]:
    s = EmbeddedStore(str(tmp_path / "cache.sqlite3"), max_entries=50, approximate_above=1000)
    await s.open()
    yield s
    await s.close()


async def stored_then_reopened(path: str, entries: int) -> EmbeddedStore:
    """A store at `path` with entries 0..entries-1 written, closed, and opened anew."""
    first = EmbeddedStore(path, max_entries=100, approximate_above=1000)
    await first.open()
    for n in range(entries):
        await first.put(make_entry(n))
    await first.close()
    store = EmbeddedStore(path, max_entries=100, approximate_above=1000)
    await store.open()
    return store


async def test_exact_and_semantic_lookups(store: EmbeddedStore) -> None:
    await store.put(make_entry(1))
    now = time.time()
    got = await store.get("s:1", now)
    assert got is not None and got.response == {"answer": 1} and got.text == "question 1"
    ((found, similarity),) = await store.search("s", unit_vector(1), "e", 1, now)
    assert found.exact_key == "s:1" and similarity == pytest.approx(1.0, abs=1e-5)
    assert await store.search("other-scope", unit_vector(1), "e", 1, now) == []
    assert await store.search("s", unit_vector(1), "another-embedder", 1, now) == []


async def test_same_exact_key_replaces(store: EmbeddedStore) -> None:
    await store.put(make_entry(1))
    replacement = make_entry(1)
    replacement.response = {"answer": "new"}
    await store.put(replacement)
    got = await store.get("s:1", time.time())
    assert len(store) == 1 and got is not None and got.response == {"answer": "new"}


async def test_hot_entries_are_served_from_memory_until_they_are_forgotten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await stored_then_reopened(str(tmp_path / "cache.sqlite3"), 3)
    reads: list[list[int]] = []
    read = store._read
    monkeypatch.setattr(store, "_read", lambda ids: reads.append(ids) or read(ids))
    try:
        now = time.time()
        for _ in range(3):  # read from disk once, then from memory
            assert (await store.get("s:1", now)) is not None
            assert [e.exact_key for e, _ in await store.search("s", unit_vector(1), "e", 1, now)]
        assert len(reads) == 1
        fresh = make_entry(7)
        await store.put(fresh)  # a new answer is hot from its write
        assert await store.get("s:7", now) is fresh and len(reads) == 1
        await store.purge(tenant="t")
        assert await store.get("s:1", now) is None and await store.get("s:7", now) is None
        assert await store.search("s", unit_vector(1), "e", 1, now) == []
    finally:
        await store.close()


async def test_expired_entries_are_invisible_then_evicted(store: EmbeddedStore) -> None:
    await store.put(make_entry(1, ttl=0.05))
    later = time.time() + 1
    assert await store.get("s:1", later) is None
    assert await store.search("s", unit_vector(1), "e", 1, later) == []
    assert await store.evict(later) == 1 and len(store) == 0


async def test_least_recently_used_goes_first_past_the_cap(store: EmbeddedStore) -> None:
    for n in range(50):
        await store.put(make_entry(n))
    assert await store.get("s:0", time.time()) is not None  # 0 is now the most recent
    await store.put(make_entry(50))
    assert len(store) == 50
    assert await store.get("s:0", time.time()) is not None
    assert await store.get("s:1", time.time()) is None  # the least recently used went


def _sized(n: int, tenant: str, size: int) -> CacheEntry:
    """Entry `n` of `tenant` whose question takes `size` bytes."""
    made = make_entry(n, tenant=tenant)
    made.text = f"question {n} ".ljust(size, "x")
    return made


async def test_past_the_entry_cap_the_tenant_holding_most_gives_up_its_own(
    store: EmbeddedStore,
) -> None:
    """A flood of one tenant's entries evicts its own least recently used, never a lighter
    tenant's (with one tenant, that is plain LRU, as above)."""
    for n in range(5):
        await store.put(make_entry(n, tenant="quiet"))
    for n in range(100, 200):
        await store.put(make_entry(n, tenant="flood"))
    assert len(store) == 50
    now = time.time()
    assert all([await store.get(f"s:{n}", now) for n in range(5)])  # the quiet tenant's all kept
    assert (await store.stats()).by_tenant == {"quiet": 5, "flood": 45}
    assert await store.get("s:199", now) is not None and await store.get("s:100", now) is None


async def test_past_the_byte_cap_the_heaviest_tenant_gives_up_its_own(tmp_path: Path) -> None:
    path = str(tmp_path / "cache.sqlite3")
    store = EmbeddedStore(path, max_entries=1000, approximate_above=1000, max_bytes=200_000)
    await store.open()
    try:
        for n in range(10):
            await store.put(_sized(n, "quiet", 1_000))
        for n in range(100, 140):  # 40 entries of 10 KB: twice the cap
            await store.put(_sized(n, "flood", 10_000))
        stats = await store.stats()
        assert stats.entry_bytes is not None and stats.entry_bytes <= 200_000
        assert stats.by_tenant["quiet"] == 10, stats  # never the lighter tenant's
        assert 10 <= stats.by_tenant["flood"] < 20, stats
        assert await store.get("s:139", time.time()) is not None  # the newest kept
    finally:
        await store.close()
    # Reopened, the entries' sizes are read back from the file; the CLI reads them too.
    reopened = EmbeddedStore(path, max_entries=1000, approximate_above=1000, max_bytes=200_000)
    await reopened.open()
    try:
        assert (await reopened.stats()).entry_bytes == stats.entry_bytes
    finally:
        await reopened.close()
    assert file_stats(path, 1000, 200_000).entry_bytes == stats.entry_bytes


async def test_purge_by_tenant_model_or_all(store: EmbeddedStore) -> None:
    for n in range(6):
        await store.put(make_entry(n, tenant="a" if n < 4 else "b"))
    assert await store.purge(tenant="a") == 4
    assert (await store.stats()).by_tenant == {"b": 2}
    assert await store.purge(model="nope") == 0
    assert await store.purge() == 2 and len(store) == 0


async def test_entries_survive_a_restart(tmp_path: Path) -> None:
    path = str(tmp_path / "c.sqlite3")
    second = await stored_then_reopened(path, 10)
    try:
        assert len(second) == 10
        assert (await second.get("s:3", time.time())) is not None
        ((found, _),) = await second.search("s", unit_vector(7), "e", 1, time.time())
        assert found.exact_key == "s:7"
    finally:
        await second.close()
    assert file_stats(path, 100).entries == 10


WRITER = textwrap.dedent(
    """
    import asyncio, sys, time
    import numpy as np
    from gateway.cache.embedded_store import EmbeddedStore
    from gateway.cache.store import CacheEntry

    async def main():
        store = EmbeddedStore(sys.argv[1], max_entries=1_000_000, approximate_above=100_000)
        await store.open()
        n = 0
        while True:
            v = np.ones(16, dtype=np.float32) / 4
            await store.put(CacheEntry(scope="s", exact_key=f"k{n}", tenant="t", model="m",
                text="q", response={"n": n}, expires_at=time.time() + 3600, vector=v,
                embedder="e"))
            print(n, flush=True)  # acknowledged: put() returned
            n += 1

    asyncio.run(main())
    """
)


async def test_kill_9_during_a_write_burst_loses_no_acknowledged_entry(tmp_path: Path) -> None:
    path = str(tmp_path / "burst.sqlite3")
    with subprocess.Popen(
        [sys.executable, "-c", WRITER, path],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    ) as writer:
        assert writer.stdout is not None
        acknowledged = -1
        while acknowledged < 300:
            acknowledged = int(writer.stdout.readline())
        writer.kill()  # SIGKILL, mid-burst
        writer.wait()
    store = EmbeddedStore(path, max_entries=1_000_000, approximate_above=100_000)
    await store.open()
    try:
        for n in range(acknowledged + 1):
            entry = await store.get(f"k{n}", time.time())
            assert entry is not None and entry.response == {"n": n}
    finally:
        await store.close()


async def test_a_published_entry_is_found_before_its_write_and_kept_after(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "ryw.sqlite3")
    store = EmbeddedStore(path, max_entries=50, approximate_above=1000)
    await store.open()
    fresh = make_entry(1)
    store.publish(fresh)  # synchronous: nothing awaited, nothing on disk yet
    now = time.time()
    exact = asyncio.create_task(store.get("s:1", now))
    similar = asyncio.create_task(store.search("s", unit_vector(1), "e", 1, now))
    await asyncio.sleep(0.01)
    assert not exact.done() and not similar.done()  # found, waiting for the write
    assert len(store) == 0 and file_stats(path, 50).entries == 0
    await store.put(fresh)  # the durable write of that same entry
    got = await exact
    assert got is not None and got.response == {"answer": 1}
    ((found, _),) = await similar
    assert found.exact_key == "s:1"
    assert len(store) == 1 and file_stats(path, 50).entries == 1
    await store.close()
    reopened = EmbeddedStore(path, max_entries=50, approximate_above=1000)
    await reopened.open()
    try:
        got = await reopened.get("s:1", time.time())
        assert got is not None and got.response == {"answer": 1}
    finally:
        await reopened.close()


async def test_an_older_write_never_replaces_a_newer_one(store: EmbeddedStore) -> None:
    older, newer = make_entry(1), make_entry(1)
    newer.response = {"answer": "new"}
    store.publish(older)
    store.publish(newer)  # replaces it in memory at once, under a higher id
    await store._run(store._write, newer, None)
    await store._run(store._write, older, None)  # the older write lands last: no effect
    (row,) = await store._run(store._read, [newer.id])
    assert row.response == {"answer": "new"}
    assert await store._run(store._read, [older.id]) == []


async def test_an_entry_purged_while_being_written_stays_gone(tmp_path: Path) -> None:
    path = str(tmp_path / "purged.sqlite3")
    store = EmbeddedStore(path, max_entries=50, approximate_above=1000)
    await store.open()
    try:
        fresh = make_entry(1)
        store.publish(fresh)
        waiting = asyncio.create_task(store.get("s:1", time.time()))
        await asyncio.sleep(0)
        assert await store.purge() == 1  # the published one is withdrawn
        assert await waiting is None
        await store.put(fresh)  # must not resurrect it on disk
        assert len(store) == 0 and file_stats(path, 50).entries == 0
    finally:
        await store.close()


async def test_headers_are_kept_and_old_files_without_them_still_open(tmp_path: Path) -> None:
    import sqlite3

    path = str(tmp_path / "old.sqlite3")
    db = sqlite3.connect(path)
    db.executescript(  # the schema before entries kept their answer's headers
        "CREATE TABLE entries (id INTEGER PRIMARY KEY, exact_key TEXT NOT NULL UNIQUE, "
        "scope TEXT NOT NULL, tenant TEXT NOT NULL, model TEXT NOT NULL, text TEXT NOT NULL, "
        "response BLOB NOT NULL, embedder TEXT, vector BLOB, created_at REAL NOT NULL, "
        "expires_at REAL NOT NULL, last_used REAL NOT NULL);"
    )
    db.execute(
        "INSERT INTO entries VALUES (7, 's:old', 's', 't', 'm', 'q', '{\"answer\": 0}', NULL, "
        "NULL, 0, ?, 0)",
        (time.time() + 3600,),
    )
    db.commit()
    db.close()
    store = EmbeddedStore(path, max_entries=50, approximate_above=1000)
    await store.open()
    try:
        old = await store.get("s:old", time.time())
        assert old is not None and old.headers == {} and old.response == {"answer": 0}
        fresh = make_entry(1)
        fresh.headers = {"x-gateway-level": "1", "x-gateway-knowledge-base": "handbook"}
        await store.put(fresh)
        assert fresh.id is not None and fresh.id > 7  # ids continue after the file's
        (row,) = await store._run(store._read, [fresh.id])
        assert row.headers == fresh.headers
    finally:
        await store.close()

"""The shared cache store: entries in Redis, so every replica answers what any replica stored.

Redis holds everything: one hash per entry (`{ns}:e:<exact key>`: id, scope, tenant, model,
text, response, the answer's headers, embedder, vector, times) that Redis expires itself at
the entry's TTL, a sorted set by last use (`{ns}:lru`, for the size cap) and one by expiry
(`{ns}:exp`). The exact tier reads the hash directly: one round trip, nothing local.

The semantic tier needs vector search. Debian's redis-server 7 has none, so each replica keeps
a local index (the embedded store's `ScopedIndex`) fed from a Redis Stream (`{ns}:events`) of
inserts and deletions: on start (and after any lost connection) a replica takes a snapshot of
the entry hashes, then follows the stream from the point the snapshot began, so every replica
converges on the same entries within the stream's delivery lag (measured: docs/BENCHMARKS.md).
A search finds ids locally and reads the answers from Redis, so an entry deleted elsewhere is
never served.

Read-your-writes: `publish` puts an entry in the local view at once under a temporary
(negative) id, its answer held in memory; `put` writes it to Redis and swaps in the real id.
Until then the local entry wins over stream events for its exact key; a failed write
withdraws it.

Redis unreachable: reads and writes raise, and the cache service treats that as a miss (the
request is answered by the upstream); the follower retries every second, reports itself
unsynced (readiness, metrics) and takes a fresh snapshot when Redis is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
from redis.exceptions import RedisError

from gateway.cache.index import IndexesByEmbedder
from gateway.cache.store import CacheEntry, Commits, StoreStats
from gateway.observability.logthrottle import ThrottledWarnings
from gateway.observability.redact import without_credentials
from gateway.state.redis import SharedClient, Timeouts

log = logging.getLogger("gateway.cache")

SOCKET_TIMEOUT = 0.5  # a cache lookup that waits longer is worse than a miss
FOLLOW_BLOCK_MS = 1000
RETRY_SECONDS = 1.0
RESYNC_WAIT_SECONDS = 0.3  # a probe that found Redis back waits this long for the resync
_SCAN_BATCH = 500
_LAG_SAMPLES = 1024
_PENDING_TRIES = 3  # a lookup follows an answer replaced while it waited, this many times
_FIELDS = ("id", "scope", "tenant", "model", "embedder", "vector", "expires_at")

# KEYS: entry, lru, exp, next_id, events. ARGV: exact, scope, tenant, model, text, response,
# embedder, vector, created_at, expires_at, max_stream, ts, headers. Returns the new id.
_PUT = """
local id = redis.call('INCR', KEYS[4])
local old = redis.call('HGET', KEYS[1], 'id') or ''
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'id', id, 'scope', ARGV[2], 'tenant', ARGV[3], 'model', ARGV[4],
  'text', ARGV[5], 'response', ARGV[6], 'embedder', ARGV[7], 'vector', ARGV[8],
  'created_at', ARGV[9], 'expires_at', ARGV[10], 'headers', ARGV[13])
redis.call('PEXPIREAT', KEYS[1], math.floor(tonumber(ARGV[10]) * 1000))
redis.call('ZADD', KEYS[2], ARGV[9], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[10], ARGV[1])
redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[11], '*', 'op', 'put', 'id', id, 'old', old,
  'exact', ARGV[1], 'scope', ARGV[2], 'tenant', ARGV[3], 'model', ARGV[4],
  'embedder', ARGV[7], 'vector', ARGV[8], 'expires_at', ARGV[10], 'ts', ARGV[12])
return id
"""

# KEYS: lru, exp, events. ARGV: prefix of entry keys, now, max_entries, max_stream, ts.
# Drops expired entries and the least recently used beyond the cap; returns how many.
_EVICT = """
local doomed = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[2], 'LIMIT', 0, 1000)
local over = redis.call('ZCARD', KEYS[1]) - #doomed - tonumber(ARGV[3])
if over > 0 then
  for _, exact in ipairs(redis.call('ZRANGE', KEYS[1], 0, over - 1)) do
    table.insert(doomed, exact)
  end
end
local n = 0
for _, exact in ipairs(doomed) do
  local key = ARGV[1] .. exact
  local id = redis.call('HGET', key, 'id')
  redis.call('DEL', key)
  if redis.call('ZREM', KEYS[1], exact) + redis.call('ZREM', KEYS[2], exact) > 0 then
    n = n + 1
    redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[4], '*', 'op', 'del', 'id', id or '',
      'exact', exact, 'ts', ARGV[5])
  end
end
return n
"""

# KEYS: lru, exp, events. ARGV: prefix, max_stream, ts, exact keys... Deletes those entries.
_DELETE = """
local n = 0
for i = 4, #ARGV do
  local key = ARGV[1] .. ARGV[i]
  local id = redis.call('HGET', key, 'id')
  n = n + redis.call('DEL', key)
  redis.call('ZREM', KEYS[1], ARGV[i])
  redis.call('ZREM', KEYS[2], ARGV[i])
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[2], '*', 'op', 'del', 'id', id or '',
    'exact', ARGV[i], 'ts', ARGV[3])
end
return n
"""

_SCRIPTS = {"put": _PUT, "evict": _EVICT, "delete": _DELETE}


@dataclass(slots=True)
class _Meta:
    exact_key: str
    scope: str
    tenant: str
    model: str
    embedder: str | None
    expires_at: float


class RedisStore:
    def __init__(self, url: str, namespace: str, max_entries: int, approximate_above: int) -> None:
        self.url = url
        self._shown_url = without_credentials(url)  # what logs say: never the password
        self.max_entries = max_entries
        self.approximate_above = approximate_above
        self._prefix = f"{namespace}:e:"
        self._lru, self._exp = f"{namespace}:lru", f"{namespace}:exp"
        self._next_id, self._events = f"{namespace}:next_id", f"{namespace}:events"
        self._max_stream = str(max(10_000, 2 * max_entries))
        self._client = SharedClient(url, Timeouts(SOCKET_TIMEOUT, SOCKET_TIMEOUT))
        # Its own pool: XREAD blocks longer than lookups may wait.
        self._follower_client = SharedClient(url, Timeouts(FOLLOW_BLOCK_MS / 1000 + 2, 1))
        self._scripts: dict[str, Any] = {}  # registered on first use, with the client
        self._meta: dict[int, _Meta] = {}
        self._by_exact: dict[str, int] = {}
        self._indexes = IndexesByEmbedder(approximate_above)
        self._pending: dict[int, CacheEntry] = {}  # published here, not yet in Redis
        self._commits = Commits()
        self._temp_ids = itertools.count(-1, -1)
        self._follower: asyncio.Task[None] | None = None
        self._closing = False
        self._first_sync = asyncio.Event()
        self.synced = False  # local index caught up with Redis (false while Redis is away)
        self._answers = True  # Redis answered the last probe (the follower learns it later)
        self._wake = asyncio.Event()  # a probe found Redis back: resynchronise now
        self._in_sync = asyncio.Event()  # set while `synced`
        self.lags: list[float] = []  # seconds from a write (any replica) to its arrival here
        self._warnings = ThrottledWarnings(log)

    def __len__(self) -> int:
        return len(self._meta) - len(self._pending)

    # --- shared state (gateway/state/shared.py) ---------------------------------------------

    shared = True

    @property
    def redis_up(self) -> bool:
        """Reaches Redis, and the local index has caught up with it."""
        return self.synced and self._answers

    async def probe_redis(self) -> None:
        """Ask Redis now: a follower blocked in XREAD learns that Redis is gone only when its
        read times out, and one that lost it waits a second before trying again; a probe
        that finds Redis back wakes it to resynchronise at once."""
        try:
            await self._redis.ping()
        except (RedisError, OSError):
            self._answers = False
            return
        self._answers = True
        if not self.synced:
            self._wake.set()
            with contextlib.suppress(TimeoutError):  # a small index is caught up at once
                await asyncio.wait_for(self._in_sync.wait(), RESYNC_WAIT_SECONDS)

    # Any: redis-py's annotations mix bytes and str; replies here are always bytes.
    @property
    def _redis(self) -> Any:
        return self._client.redis

    @property
    def _follower_redis(self) -> Any:
        return self._follower_client.redis

    def _script(self, name: str) -> Any:
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = self._redis.register_script(_SCRIPTS[name])
        return script

    # --- lifecycle ---------------------------------------------------------------------------

    async def open(self, wait: float = 5.0) -> None:
        """Start following Redis; waits up to `wait` s for the first snapshot, and starts
        anyway when Redis is away (it keeps trying)."""
        if self._follower is None:
            self._follower = asyncio.get_running_loop().create_task(self._follow())
        try:
            await asyncio.wait_for(self._first_sync.wait(), wait)
        except TimeoutError:
            log.warning(
                "cache: Redis at %s not reachable yet; serving with misses", self._shown_url
            )

    async def close(self) -> None:
        self._closing = True
        if self._follower is not None:
            self._follower.cancel()
            # A cancellation that lands inside redis-py's reconnect can be lost; the flag
            # then ends the loop at its next turn, and close() never waits forever.
            await asyncio.wait([self._follower], timeout=FOLLOW_BLOCK_MS / 1000 + 5)
        await self._client.aclose()
        await self._follower_client.aclose()

    # --- the interface -----------------------------------------------------------------------

    async def get(self, exact_key: str, now: float) -> CacheEntry | None:
        for _ in range(_PENDING_TRIES):
            temp = self._by_exact.get(exact_key, 0)
            pending = self._pending.get(temp)
            if pending is None:
                break
            if await self._commits.wait(temp):
                return pending if pending.expires_at > now else None
            # withdrawn while we waited (replaced here by a newer answer, or its write failed)
        (raw,) = await self._read_and_touch([exact_key], now)
        entry = _entry(exact_key, raw) if raw else None
        if entry is None or entry.expires_at <= now:
            return None
        return entry

    async def search(
        self,
        scope: str,
        vector: np.ndarray,
        embedder: str,
        k: int,
        now: float,
        min_similarity: float = -1.0,
    ) -> list[tuple[CacheEntry, float]]:
        found = [
            (self._meta[i].exact_key, i, s)
            for i, s in self._indexes.search(embedder, scope, vector, k)
            if s >= min_similarity and i in self._meta and self._meta[i].expires_at > now
        ]
        if not found:
            return []
        stored = [exact for exact, id_, _ in found if id_ not in self._pending]
        replies = await self._read_and_touch(stored, now) if stored else []
        rows = dict(zip(stored, replies, strict=True))
        hits = []
        for exact, id_, similarity in found:
            pending = self._pending.get(id_)
            if pending is not None:  # ours, being written: served once it is in Redis
                if await self._commits.wait(id_) and pending.expires_at > now:
                    hits.append((pending, similarity))
                continue
            raw = rows.get(exact)
            entry = _entry(exact, raw) if raw else None
            if entry is not None and entry.id == id_ and entry.expires_at > now:
                hits.append((entry, similarity))
        return hits

    def best_similarity(self, scope: str, vector: np.ndarray, embedder: str) -> float | None:
        nearest = self._indexes.search(embedder, scope, vector, 1)
        return nearest[0][1] if nearest else None

    def publish(self, entry: CacheEntry) -> None:
        """In this replica's view at once; the others hear of it once `put` has written it.
        Not while Redis is away: its write would fail, and the cache is misses meanwhile."""
        if not self.synced:
            return
        entry.id = next(self._temp_ids)
        entry.created_at = entry.created_at or time.time()
        self._pending[entry.id] = entry
        self._commits.begin(entry.id)
        self._add_entry(entry, replace_pending=True)

    async def put(self, entry: CacheEntry) -> int:
        if entry.id is None:
            self.publish(entry)
        elif self._pending.get(entry.id) is not entry:
            return entry.id  # withdrawn since it was published (replaced, purged): not written
        temp = entry.id  # None: not published (Redis was away), written all the same
        vector = _vector_bytes(entry)
        now = time.time()
        keys = [self._prefix + entry.exact_key, self._lru, self._exp, self._next_id, self._events]
        args: list[Any] = [
            entry.exact_key,
            entry.scope,
            entry.tenant,
            entry.model,
            entry.text,
            orjson.dumps(entry.response),
            entry.embedder or "",
            vector,
            repr(now),
            repr(entry.expires_at),
            self._max_stream,
            repr(now),
            orjson.dumps(entry.headers),
        ]
        try:
            id_ = int(await self._script("put")(keys=keys, args=args))
        except BaseException:
            if temp is not None:
                self._remove(temp)  # not in Redis: not served here either
            raise
        current = temp is None or self._by_exact.get(entry.exact_key) == temp
        if temp is not None:
            self._commits.end(temp, current)  # waiting lookups get the entry (or a miss)
            self._pending.pop(temp, None)
            self._remove(temp)
        if current:  # else a newer answer published here since (or a purge) wins
            entry.id = id_
            self._add_entry(entry)
        if len(self._meta) > self.max_entries:
            await self.evict(now)
        return id_

    async def evict(self, now: float) -> int:
        for id_ in [i for i, m in self._meta.items() if m.expires_at <= now]:
            self._remove(id_)
        keys = [self._lru, self._exp, self._events]
        args: list[Any] = [
            self._prefix,
            repr(now),
            self.max_entries,
            self._max_stream,
            repr(time.time()),
        ]
        return int(await self._script("evict")(keys=keys, args=args))

    async def purge(self, tenant: str | None = None, model: str | None = None) -> int:
        doomed: list[str] = []
        async for batch in self._scan_entries(("tenant", "model")):
            doomed += [
                exact
                for exact, (t, m) in batch
                if (tenant is None or _text(t) == tenant) and (model is None or _text(m) == model)
            ]
        purged = 0
        for start in range(0, len(doomed), _SCAN_BATCH):
            chunk = doomed[start : start + _SCAN_BATCH]
            keys = [self._lru, self._exp, self._events]
            args = [self._prefix, self._max_stream, repr(time.time()), *chunk]
            purged += int(await self._script("delete")(keys=keys, args=args))
            for exact in chunk:
                if exact in self._by_exact:
                    self._remove(self._by_exact[exact])
        return purged

    async def stats(self) -> StoreStats:
        metas = [m for i, m in self._meta.items() if i not in self._pending]  # in Redis
        return StoreStats(
            entries=len(metas),
            scopes=len({m.scope for m in metas}),
            by_tenant=dict(Counter(m.tenant for m in metas)),
            by_model=dict(Counter(m.model for m in metas)),
            bytes_on_disk=None,
            max_entries=self.max_entries,
        )

    async def wait_for_index_builds(self) -> None:
        await self._indexes.wait_for_builds()

    # --- following the other replicas ---------------------------------------------------------

    async def _follow(self) -> None:
        while not self._closing:
            try:
                last = await self._snapshot()
                self.synced = True
                self._in_sync.set()
                self._first_sync.set()
                while not self._closing:
                    replies = await self._follower_redis.xread(
                        {self._events: last}, count=_SCAN_BATCH, block=FOLLOW_BLOCK_MS
                    )
                    for _stream, events in replies:
                        for event_id, fields in events:
                            self._apply(fields)
                            last = event_id
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as err:
                self.synced = False
                self._in_sync.clear()
                self._warnings.warning(
                    "cache: lost Redis at %s (%s); resynchronising", self._shown_url, err
                )
                self._wake.clear()
                with contextlib.suppress(TimeoutError):  # or sooner, when a probe wakes it
                    await asyncio.wait_for(self._wake.wait(), RETRY_SECONDS)

    async def _snapshot(self) -> bytes:
        """Replace the local index with every entry in Redis; returns the stream position the
        snapshot starts from (events after it are applied on top: idempotent)."""
        newest = await self._follower_redis.xrevrange(self._events, count=1)
        last = newest[0][0] if newest else b"0-0"
        self._meta, self._by_exact = {}, {}
        self._indexes = IndexesByEmbedder(self.approximate_above)
        for entry in list(self._pending.values()):  # still being written: keep them visible
            self._add_entry(entry, replace_pending=True)
        async for batch in self._scan_entries(_FIELDS, client=self._follower_redis):
            for exact, (id_, scope, tenant, model, embedder, vector, expires_at) in batch:
                if id_ is not None and expires_at is not None:
                    self._add(
                        int(id_),
                        exact,
                        _text(scope),
                        _text(tenant),
                        _text(model),
                        _text(embedder) or None,
                        vector or b"",
                        float(expires_at),
                    )
        return last

    def _apply(self, fields: dict[bytes, bytes]) -> None:
        op, exact = fields.get(b"op"), fields.get(b"exact", b"").decode()
        ts = fields.get(b"ts")
        if ts:
            self.lags.append(max(0.0, time.time() - float(ts)))
            if len(self.lags) > _LAG_SAMPLES:
                del self.lags[: _LAG_SAMPLES // 2]
        if op == b"put":
            self._add(
                int(fields[b"id"]),
                exact,
                _text(fields.get(b"scope")),
                _text(fields.get(b"tenant")),
                _text(fields.get(b"model")),
                _text(fields.get(b"embedder")) or None,
                fields.get(b"vector") or b"",
                float(fields[b"expires_at"]),
            )
        elif op == b"del":
            id_ = fields.get(b"id")
            if id_:
                self._remove(int(id_))
            elif exact in self._by_exact:  # Redis had expired the hash: it was the expired one
                current = self._by_exact[exact]
                if self._meta[current].expires_at <= time.time():
                    self._remove(current)

    async def _scan_entries(self, fields: tuple[str, ...], client: Any = None) -> Any:
        """Batches of (exact key, field values) for every entry hash."""
        client = client or self._redis
        cursor = 0
        while True:
            cursor, keys = await client.scan(cursor, match=self._prefix + "*", count=_SCAN_BATCH)
            if keys:
                async with client.pipeline(transaction=False) as pipe:
                    for key in keys:
                        pipe.hmget(key, fields)
                    rows = await pipe.execute()
                cut = len(self._prefix)
                yield [(k.decode()[cut:], row) for k, row in zip(keys, rows, strict=True)]
            if cursor == 0:
                return

    # --- the local index ----------------------------------------------------------------------

    def _add(
        self,
        id_: int,
        exact: str,
        scope: str,
        tenant: str,
        model: str,
        embedder: str | None,
        vector: bytes,
        expires_at: float,
        replace_pending: bool = False,
    ) -> None:
        old = self._by_exact.get(exact)
        if old is not None and old != id_:
            if old in self._pending and not replace_pending:
                return  # our own answer, still being written, stays what we serve
            self._remove(old)
        self._meta[id_] = _Meta(exact, scope, tenant, model, embedder, expires_at)
        self._by_exact[exact] = id_
        if embedder and vector:
            self._indexes.add(embedder, scope, id_, np.frombuffer(vector, dtype=np.float32))

    def _add_entry(self, entry: CacheEntry, replace_pending: bool = False) -> None:
        assert entry.id is not None
        self._add(
            entry.id,
            entry.exact_key,
            entry.scope,
            entry.tenant,
            entry.model,
            entry.embedder,
            _vector_bytes(entry),
            entry.expires_at,
            replace_pending,
        )

    def _remove(self, id_: int) -> None:
        meta = self._meta.pop(id_, None)
        if meta is None:
            return
        if self._by_exact.get(meta.exact_key) == id_:
            del self._by_exact[meta.exact_key]
        if self._pending.pop(id_, None) is not None:
            self._commits.end(id_, False)
        self._indexes.remove(meta.embedder, id_)

    async def _read_and_touch(self, exact_keys: list[str], now: float) -> list[Any]:
        """The entries' hashes, and their last use set to now, in one round trip (`xx`: a key
        that is gone is not added back to the LRU set)."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for exact in exact_keys:
                pipe.hgetall(self._prefix + exact)
            pipe.zadd(self._lru, dict.fromkeys(exact_keys, now), xx=True)
            replies = await pipe.execute()
        return list(replies[:-1])


def _vector_bytes(entry: CacheEntry) -> bytes:
    return b"" if entry.vector is None else entry.vector.astype(np.float32).tobytes()


def _text(value: bytes | None) -> str:
    return value.decode() if value else ""


def _entry(exact_key: str, raw: dict[bytes, bytes]) -> CacheEntry | None:
    try:
        vector = raw.get(b"vector") or b""
        return CacheEntry(
            id=int(raw[b"id"]),
            scope=_text(raw[b"scope"]),
            exact_key=exact_key,
            tenant=_text(raw[b"tenant"]),
            model=_text(raw[b"model"]),
            text=_text(raw[b"text"]),
            response=orjson.loads(raw[b"response"]),
            embedder=_text(raw.get(b"embedder")) or None,
            vector=np.frombuffer(vector, dtype=np.float32) if vector else None,
            created_at=float(raw[b"created_at"]),
            expires_at=float(raw[b"expires_at"]),
            headers=orjson.loads(raw[b"headers"]) if raw.get(b"headers") else {},
        )
    except (KeyError, ValueError, orjson.JSONDecodeError):
        return None  # a half-written or foreign hash is a miss, never a crash

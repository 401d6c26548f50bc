"""Verdicts and wrong-entry marks shared through Redis (a `type: redis` cache store), so every
replica estimates from every replica's verdicts and refuses every entry any replica found wrong.

Keys, under the store's namespace:
    {ns}:verify:w:<model>   the model's latest verdicts (a list, newest first, at most WINDOW)
    {ns}:verify:models      the models that have a window
    {ns}:verify:m:<entry>   an entry's marks (a list), expiring with the entry
    {ns}:verify:events      a stream of every verdict and mark, which replicas follow

A write is one script: the stream event, then the list item tagged with the event's id and the
writing replica. A replica (re)starting takes the newest event id L, loads the list items it has
not seen (id above its last, at most L, written by another replica), and follows the stream from
L: nothing is counted twice, nothing written meanwhile is missed.

Lookups read memory only (MemoryLedger). Redis away: a verdict or mark is kept here at once and
queued (bounded); the follower retries every second and, when Redis is back, writes the queue
and catches up. Nothing raises into the request path; failures are logged throttled.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
import uuid
from collections import deque
from typing import Any

import numpy as np
import orjson
from redis.exceptions import RedisError, ResponseError

from gateway.cache.verify.estimate import Observation
from gateway.cache.verify.ledger import WINDOW, Mark, MemoryLedger
from gateway.observability.logthrottle import ThrottledWarnings
from gateway.observability.redact import without_credentials
from gateway.state.redis import SharedClient, Timeouts

log = logging.getLogger("gateway.cache.verify")

SOCKET_TIMEOUT = 0.5
FOLLOW_BLOCK_MS = 1000
RETRY_SECONDS = 1.0
OPEN_WAIT_SECONDS = 2.0  # the store has waited for Redis already (redis_store.open)
MAX_STREAM = 20_000  # events kept for replicas that fall behind (approximately)
MAX_MARKS_PER_ENTRY = 256
MAX_QUEUED = 10_000  # writes kept for Redis while it is away; the oldest go first
_SCAN_BATCH = 500
_MARK_HEAD = struct.Struct("<dd")  # similarity, expires_at; then the float32 vector

# KEYS: window, models, events. ARGV: model, origin, payload, window size, max stream.
_RECORD = """
local id = redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[5], '*', 'op', 'v',
  'origin', ARGV[2], 'model', ARGV[1], 'payload', ARGV[3])
redis.call('LPUSH', KEYS[1], id .. '\\n' .. ARGV[2] .. '\\n' .. ARGV[3])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[4]) - 1)
redis.call('SADD', KEYS[2], ARGV[1])
return id
"""

# KEYS: marks, events. ARGV: entry, origin, payload, expires_at (ms), per-entry cap, max stream.
_MARK = """
local id = redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[6], '*', 'op', 'm',
  'origin', ARGV[2], 'entry', ARGV[1], 'payload', ARGV[3])
redis.call('LPUSH', KEYS[1], id .. '\\n' .. ARGV[2] .. '\\n' .. ARGV[3])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[5]) - 1)
local ttl = redis.call('PTTL', KEYS[1])
local at = tonumber(ARGV[4])
if ttl < 0 or redis.call('TIME')[1] * 1000 + ttl < at then
  redis.call('PEXPIREAT', KEYS[1], at)
end
return id
"""

_StreamId = tuple[int, int]


class RedisLedger(MemoryLedger):
    def __init__(self, url: str, namespace: str) -> None:
        super().__init__()
        self._shown_url = without_credentials(url)
        base = f"{namespace}:verify"
        self._window_prefix, self._mark_prefix = f"{base}:w:", f"{base}:m:"
        self._models_key, self._events = f"{base}:models", f"{base}:events"
        self._origin = uuid.uuid4().hex[:12]  # this replica: its own events are not re-read
        self._client = SharedClient(url, Timeouts(SOCKET_TIMEOUT, SOCKET_TIMEOUT))
        self._follower_client = SharedClient(url, Timeouts(FOLLOW_BLOCK_MS / 1000 + 2, 1))
        self._scripts: dict[str, Any] = {}
        self._queue: deque[tuple[str, Observation | Mark]] = deque(maxlen=MAX_QUEUED)
        self._last: _StreamId = (0, 0)  # the newest event applied here
        self._follower: asyncio.Task[None] | None = None
        self._closing = False
        self._first_sync = asyncio.Event()
        self.synced = False  # caught up with Redis and following it
        self._warnings = ThrottledWarnings(log)

    @property
    def _redis(self) -> Any:
        return self._client.redis

    @property
    def _follower_redis(self) -> Any:
        return self._follower_client.redis

    # --- lifecycle ---------------------------------------------------------------------------

    async def open(self, wait: float = OPEN_WAIT_SECONDS) -> None:
        """Load the shared verdicts and marks (waiting up to `wait` s) and follow them; starts
        anyway when Redis is away (it keeps trying)."""
        if self._follower is None:
            self._follower = asyncio.get_running_loop().create_task(self._follow())
        try:
            await asyncio.wait_for(self._first_sync.wait(), wait)
        except TimeoutError:
            log.warning(
                "cache verification: Redis at %s not reachable yet; verdicts kept here",
                self._shown_url,
            )

    async def close(self) -> None:
        self._closing = True
        follower = self._follower
        deadline = time.monotonic() + FOLLOW_BLOCK_MS / 1000 + 5
        # A cancellation that lands while redis-py sends a command can be lost: cancel again
        # (the `_closing` flag ends the loop at its next turn in any case).
        while follower is not None and not follower.done() and time.monotonic() < deadline:
            follower.cancel()
            await asyncio.wait([follower], timeout=0.05)
        await self._client.aclose()
        await self._follower_client.aclose()

    # --- writes ------------------------------------------------------------------------------

    async def record(self, model: str, observation: Observation) -> None:
        self.remember(model, observation)
        await self._write("v", model, observation)

    async def mark(self, mark: Mark) -> None:
        self.remember_mark(mark)
        if mark.expires_at > time.time():
            await self._write("m", mark.entry, mark)

    async def _write(self, op: str, key: str, item: Observation | Mark) -> None:
        if not self.synced:  # Redis away (the follower says so): queued, written when back
            self._queue.append((key, item))
            return
        try:
            await self._send(self._redis, key, item)
        except ResponseError as err:  # Redis refused it (a foreign key in the way): not retried
            self._refused(op, key, err)
        except (RedisError, OSError) as err:
            self._queue.append((key, item))
            self._warnings.warning(
                "cache verification: Redis write failed (%s), kept in this process: %r",
                op,
                err,
                key="write",
            )

    async def _send(self, client: Any, key: str, item: Observation | Mark) -> None:
        if isinstance(item, Mark):
            keys = [self._mark_prefix + item.entry, self._events]
            args: list[Any] = [
                item.entry,
                self._origin,
                _mark_payload(item),
                int(item.expires_at * 1000),
                MAX_MARKS_PER_ENTRY,
                MAX_STREAM,
            ]
            await self._script(client, "mark", _MARK)(keys=keys, args=args)
        else:
            keys = [self._window_prefix + key, self._models_key, self._events]
            args = [key, self._origin, _observation_payload(item), WINDOW, MAX_STREAM]
            await self._script(client, "record", _RECORD)(keys=keys, args=args)

    async def _flush_queue(self) -> None:
        """What was kept here while Redis was away, now written (the oldest first)."""
        now = time.time()
        while self._queue:
            key, item = self._queue[0]
            if not (isinstance(item, Mark) and item.expires_at <= now):
                try:
                    await self._send(self._follower_redis, key, item)
                except ResponseError as err:  # never accepted: dropped, the rest still go
                    self._refused("queued", key, err)
            self._queue.popleft()

    def _refused(self, what: str, key: str, err: ResponseError) -> None:
        self._warnings.warning(
            "cache verification: Redis refused a write (%s %r), kept in this process only: %s",
            what,
            key[:80],
            err,
            key="refused",
        )

    def _script(self, client: Any, name: str, source: str) -> Any:
        cached = self._scripts.get(f"{id(client)}:{name}")
        if cached is None:
            cached = self._scripts[f"{id(client)}:{name}"] = client.register_script(source)
        return cached

    # --- following the other replicas --------------------------------------------------------

    async def _follow(self) -> None:
        while not self._closing:
            try:
                await self._flush_queue()
                await self._catch_up()
                self.synced = True
                self._first_sync.set()
                while not self._closing:
                    replies = await self._follower_redis.xread(
                        {self._events: _format(self._last)},
                        count=_SCAN_BATCH,
                        block=FOLLOW_BLOCK_MS,
                    )
                    for _stream, events in replies:
                        for event_id, fields in events:
                            self._apply(fields)
                            self._last = max(self._last, _parse(event_id))
                    if self._queue:  # a write that failed while Redis blinked
                        await self._flush_queue()
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError) as err:
                self.synced = False
                self._warnings.warning(
                    "cache verification: lost Redis at %s (%r); verdicts kept here, retrying",
                    self._shown_url,
                    err,
                    key="follow",
                )
                await asyncio.sleep(RETRY_SECONDS)
            except Exception as err:  # a bug must not end the sharing for good
                self.synced = False
                log.exception("cache verification: following Redis failed: %r; retrying", err)
                await asyncio.sleep(RETRY_SECONDS)

    async def _catch_up(self) -> None:
        """Load the verdicts and marks written since the last event seen here (all of them on
        start), up to the stream's newest event, which following continues from. Everything is
        read before anything is kept: a catch-up cut short by Redis leaves memory as it was,
        so the next one counts nothing twice."""
        redis = self._follower_redis
        newest = await redis.xrevrange(self._events, count=1)
        upper = _parse(newest[0][0]) if newest else None  # None: no stream (yet)
        seen, loaded = self._last, self._last
        verdicts: list[tuple[str, Observation]] = []
        models = sorted(_text(m) for m in await _members(redis, self._models_key))
        if models:
            async with redis.pipeline(transaction=False) as pipe:
                for model in models:
                    pipe.lrange(self._window_prefix + model, 0, WINDOW - 1)
                windows = await pipe.execute(raise_on_error=False)
            for model, items in zip(models, windows, strict=True):
                if isinstance(items, Exception):
                    continue  # not a list (a foreign key of the same name): skipped
                for event, payload in self._unseen(reversed(items), seen, upper):
                    observation = _observation(payload)
                    if observation is not None:
                        verdicts.append((model, observation))
                    loaded = max(loaded, event)
        marks: list[Mark] = []
        async for entry, items in self._mark_lists(redis):
            for event, payload in self._unseen(reversed(items), seen, upper):
                mark = _mark(entry, payload)
                if mark is not None:
                    marks.append(mark)
                loaded = max(loaded, event)
        for model, observation in verdicts:
            self.remember(model, observation)
        now = time.time()
        for mark in marks:
            if mark.expires_at > now:
                self.remember_mark(mark)
        self._last = upper if upper is not None else loaded

    def _unseen(
        self, items: Any, seen: _StreamId, upper: _StreamId | None
    ) -> list[tuple[_StreamId, bytes]]:
        """Another replica's list items after `seen` and up to `upper` (later ones arrive on
        the stream), oldest first."""
        found = []
        for item in items:
            try:
                event, origin, payload = bytes(item).split(b"\n", 2)
                at = _parse(event)
            except ValueError:
                continue  # not written by this module: ignored
            if origin.decode() == self._origin or at <= seen:
                continue
            if upper is not None and at > upper:
                continue
            found.append((at, payload))
        return found

    async def _mark_lists(self, redis: Any) -> Any:
        cursor = 0
        cut = len(self._mark_prefix)
        while True:
            cursor, keys = await redis.scan(
                cursor, match=self._mark_prefix + "*", count=_SCAN_BATCH
            )
            if keys:
                async with redis.pipeline(transaction=False) as pipe:
                    for key in keys:
                        pipe.lrange(key, 0, MAX_MARKS_PER_ENTRY - 1)
                    lists = await pipe.execute(raise_on_error=False)
                for key, items in zip(keys, lists, strict=True):
                    if not isinstance(items, Exception):
                        yield _text(key)[cut:], items
            if cursor == 0:
                return

    def _apply(self, fields: dict[bytes, bytes]) -> None:
        if _text(fields.get(b"origin")) == self._origin:
            return  # ours: remembered when it was written
        payload = fields.get(b"payload") or b""
        op = fields.get(b"op")
        if op == b"v":
            observation = _observation(payload)
            model = _text(fields.get(b"model"))
            if observation is not None and model:
                self.remember(model, observation)
        elif op == b"m":
            mark = _mark(_text(fields.get(b"entry")), payload)
            if mark is not None and mark.expires_at > time.time():
                self.remember_mark(mark)


# --- encoding ------------------------------------------------------------------------------


def _observation_payload(o: Observation) -> bytes:
    return orjson.dumps([o.similarity, o.agree, o.weight, o.kind, o.at])


def _observation(payload: bytes) -> Observation | None:
    try:
        similarity, agree, weight, kind, at = orjson.loads(payload)
        if kind not in ("served", "explored"):
            return None
        return Observation(float(similarity), bool(agree), float(weight), kind, float(at))
    except (ValueError, TypeError, orjson.JSONDecodeError):
        return None  # a foreign or damaged item is skipped, never a crash


def _mark_payload(mark: Mark) -> bytes:
    vector = np.asarray(mark.vector, dtype=np.float32).tobytes()
    return _MARK_HEAD.pack(mark.similarity, mark.expires_at) + vector


def _mark(entry: str, payload: bytes) -> Mark | None:
    head = _MARK_HEAD.size
    if not entry or len(payload) <= head or (len(payload) - head) % 4:
        return None
    similarity, expires_at = _MARK_HEAD.unpack(payload[:head])
    vector = np.frombuffer(payload[head:], dtype=np.float32)
    return Mark(entry, vector, similarity, expires_at)


def _parse(event_id: bytes | str) -> _StreamId:
    text = event_id.decode() if isinstance(event_id, bytes) else event_id
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def _format(event_id: _StreamId) -> str:
    return f"{event_id[0]}-{event_id[1]}"


async def _members(redis: Any, key: str) -> set[bytes]:
    try:
        return set(await redis.smembers(key))
    except ResponseError:  # not a set (a foreign key of the same name)
        return set()


def _text(value: bytes | None) -> str:
    return value.decode(errors="replace") if value else ""

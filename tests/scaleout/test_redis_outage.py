"""Redis killed while three replicas serve, then started again on the same port.

While it is away every replica keeps answering (the cache misses, each replica's breakers
work on local state, rate limits fail open), /readyz says "degraded" naming the unreachable
parts and gateway_redis_up is 0. Once it is back the replicas resynchronise by themselves,
without a restart: ready again, an answer through one replica is a hit on another, breakers
and rate limits are shared again.

The module runs a redis-server of its own (the session's one is shared by other tests) and a
fake upstream of its own (with a history long enough to count requests under load).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
import redis

from gateway.resilience.shared_storage import STATE_SECONDS
from gateway.state.health import PAUSE_AFTER_FAILURE
from gateway.testing.fake_upstream import FakeUpstream, Knobs
from gateway.testing.harness.inprocess import ServerThread
from gateway.testing.harness.redis_server import RedisServer
from tests.scaleout.cluster import (
    Answer,
    Replica,
    ready_replicas,
    require_redis_server,
    upstream_calls,
    wait_each,
    wait_for,
)
from tests.scaleout.cluster import base_config as base

CAPPED = [f"capped-{i}" for i in range(4)]  # each may send 2 requests, then (nearly) nothing
CAPPED_BURST = 2
STRICT, STRICT_BURST = "strict", 3
TENANTS = ["ops", "free", *CAPPED, STRICT]  # `free` has no rate limit
KEYS = {t: f"SO_OUT_KEY_{t.upper().replace('-', '_')}" for t in TENANTS}
SECRET = {tenant: f"sk-scaleout-outage-{tenant}" for tenant in KEYS}
PARTS = ("cache", "breakers", "rate_limits")
UNREACHABLE = ("degraded", dict.fromkeys(PARTS, "unreachable"))
DETECT_SECONDS = 5.0  # Redis gone -> every replica reports it
# Redis back -> every replica ready again. Each part probes once a second and a stale
# connection's first command fails once more, so about 2-3 s on a quiet machine; a whole-suite
# run on a loaded 2-core machine once took over 5. The bug this guards against was "never".
RESYNC_SECONDS = 15.0


@pytest.fixture(scope="module")
def redis_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    require_redis_server()
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def own_fake(server_thread: ServerThread) -> Iterator[FakeUpstream]:
    upstream = server_thread.call(FakeUpstream(history=100_000).start())
    yield upstream
    server_thread.call(upstream.stop())


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, redis_process: RedisServer, own_fake: FakeUpstream
) -> Iterator[list[Replica]]:
    url, ns = redis_process.url, f"so-outage-{uuid.uuid4().hex[:8]}"
    # Each part with its own url and namespace, as before the redis: section (issue 16): still
    # accepted (with a warning), so the old form stays tested against a real outage.
    storage = {"type": "redis", "url": url, "namespace": ns}
    limits = {
        "ops": {"requests_per_second": 1000, "burst": 1000},
        **{t: {"requests_per_second": 0.01, "burst": CAPPED_BURST} for t in CAPPED},
        STRICT: {"requests_per_second": 0.01, "burst": STRICT_BURST},
    }
    uncached = {"cache": {"enabled": False}}
    config = base(
        own_fake.url,
        KEYS,
        models=[
            {"name": "assistant", "provider": "fake", "upstream_model": "up-assistant"},
            {"name": "flaky-a", "provider": "fake", "upstream_model": "up-flaky-a", **uncached},
            {"name": "flaky-b", "provider": "fake", "upstream_model": "up-flaky-b", **uncached},
        ],
        cache={"store": storage, "embedder": {"type": "hash"}, "defaults": {"enabled": True}},
        resilience={
            "retry": {"attempts": 1},
            "breaker": {"failures": 2, "reset_seconds": 30},
            "breaker_storage": storage,
        },
        degradation={"unavailable": {"mode": "answer"}},
        rate_limits={"storage": storage, "tenants": limits},
    )
    env = {KEYS[t]: SECRET[t] for t in KEYS}
    yield from ready_replicas(tmp_path_factory, "outage", config, env)


# --- clients that keep asking -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Record:
    replica: str
    sent: float  # monotonic
    seconds: float
    status: int  # 0: no HTTP answer at all
    cache: str | None
    error: str = ""


@dataclass
class Background:
    """Two clients per replica asking a few recurring questions (as tenant `ops`), ~20 per
    second each, in a thread, until stopped."""

    group: list[Replica]
    records: list[Record] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Background:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(20)

    def between(self, start: float, end: float) -> list[Record]:
        return [r for r in self.records if start <= r.sent < end]

    async def _run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=10)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            await asyncio.gather(*(self._client(session, r, c) for r in self.group for c in "ab"))

    async def _client(self, session: aiohttp.ClientSession, replica: Replica, client: str) -> None:
        headers = {"Authorization": f"Bearer {SECRET['ops']}"}
        n = 0
        while not self._stop.is_set():
            # Every other question recurs (cache hits while Redis is there), the others are
            # new (misses: answered upstream, through the breaker).
            unique = f"{replica.name}, client {client}, request {n}" if n % 2 else ""
            text = f"Background question number {n // 2 % 4}: what is new? {unique}".strip()
            body = {"model": "assistant", "messages": [{"role": "user", "content": text}]}
            sent = time.monotonic()
            try:
                url = replica.url + "/v1/chat/completions"
                async with session.post(url, json=body, headers=headers) as resp:
                    await resp.read()
                    status, cache, error = resp.status, resp.headers.get("x-gateway-cache"), ""
            except (aiohttp.ClientError, TimeoutError) as err:
                status, cache, error = 0, None, repr(err)
            self.records.append(
                Record(replica.name, sent, time.monotonic() - sent, status, cache, error)
            )
            n += 1
            await asyncio.sleep(0.05)


# --- checks ---------------------------------------------------------------------------------


def shared_state(replica: Replica) -> tuple[str, dict[str, str]]:
    reply = replica.readyz()
    assert reply.status == 200, f"{replica.name}: /readyz {reply.status} {reply.body!r}"
    body = reply.json()
    return body["status"], body["shared_state"]


def wait_state(group: list[Replica], status: str, part_state: str, timeout: float) -> float:
    """Until every replica's /readyz reports `status` with every part `part_state`; returns
    how long that took."""
    start = time.monotonic()
    wanted = (status, dict.fromkeys(PARTS, part_state))
    wait_each(group, lambda r: shared_state(r) == wanted, timeout, described, poll=0.05)
    return time.monotonic() - start


def described(replica: Replica) -> str:
    return f"{replica.name}: {shared_state(replica)}"


def capped(group: list[Replica], tenant: str = CAPPED[0]) -> list[int]:
    """One request of `tenant` through each replica in turn: their statuses."""
    return [status(replica, tenant) for replica in group]


def status(replica: Replica, tenant: str) -> int:
    try:
        replica.ask("hi", key=SECRET[tenant])
    except Exception as err:  # openai.RateLimitError and friends carry the status
        return int(getattr(err, "status_code", -1))
    return 200


def assert_unavailable(answer: Answer, where: str) -> None:
    assert answer.headers.get("x-gateway-level") == "4", f"{where}: {answer.headers}"


def nudge(replica: Replica, cache: bool = True) -> None:
    """A request that reaches the breaker and rate-limit storage: a new question of `ops`
    (without `cache`, it does not touch the cache either)."""
    extra: dict[str, Any] = {} if cache else {"extra_headers": {"x-gateway-cache": "bypass"}}
    replica.ask(f"Anything new since {uuid.uuid4().hex}?", key=SECRET["ops"], **extra)


def nudged(replica: Replica, cache: bool = True) -> tuple[str, dict[str, str]]:
    """`replica`'s shared state just after a nudge."""
    nudge(replica, cache)
    return shared_state(replica)


@pytest.fixture
def settled(cluster: list[Replica], redis_process: RedisServer) -> list[Replica]:
    """Redis running and every replica ready on it (whatever an earlier test left)."""
    assert redis_process.server is not None
    if not redis_process.server.running:
        redis_process.start()
    wait_each(cluster, lambda r: nudged(r)[0] == "ready", RESYNC_SECONDS, described, poll=0.2)
    return cluster


def test_replicas_serve_through_a_redis_outage_and_resynchronise_after_it(
    settled: list[Replica], redis_process: RedisServer, own_fake: FakeUpstream
) -> None:
    cluster = settled
    r1, r2, r3 = cluster
    assert [shared_state(r) for r in cluster] == [("ready", dict.fromkeys(PARTS, "ok"))] * 3
    assert capped(cluster) == [200] * CAPPED_BURST + [429], "one shared bucket before"

    with Background(cluster) as traffic:
        time.sleep(0.5)
        # --- Redis dies ----------------------------------------------------------------------
        killed = time.monotonic()
        redis_process.kill()
        detected = wait_state(cluster, "degraded", "unreachable", DETECT_SECONDS)
        for replica in cluster:
            for part in PARTS:
                assert replica.metric("gateway_redis_up", component=part) == 0, (replica, part)

        # The cache: misses, every time, and the upstream answers.
        question = "Which regions does the outage status page cover?"
        for replica in (r1, r1, r2):
            answer = replica.ask(question, key=SECRET["ops"])
            assert answer.content == f"Echo: {question}"
            assert not (answer.cache or "").startswith("hit"), answer.headers
        outage_cache = answer.cache
        assert upstream_calls(own_fake, "up-assistant") > 0
        assert sum(r["body"]["messages"][-1]["content"] == question for r in own_fake.received) == 3

        # Rate limits fail open: `capped` spent its shared bucket above, and is admitted now.
        assert capped(cluster + cluster) == [200] * 6

        # Breakers on each replica's own state: replica 1's opens, replica 2's stays closed.
        own_fake.per_model["up-flaky-a"] = Knobs(status=500)
        for sent in (1, 2):
            assert_unavailable(r1.ask("hello", model="flaky-a", key=SECRET["ops"]), "replica 1")
            assert upstream_calls(own_fake, "up-flaky-a") == sent
        assert_unavailable(r1.ask("hello", model="flaky-a", key=SECRET["ops"]), "replica 1")
        assert upstream_calls(own_fake, "up-flaky-a") == 2, "replica 1's open breaker refused"
        assert_unavailable(r2.ask("hello", model="flaky-a", key=SECRET["ops"]), "replica 2")
        assert upstream_calls(own_fake, "up-flaky-a") == 3, "replica 2 still tried (its own state)"
        assert r1.breaker("fake/up-flaky-a")["state"] == "open"
        assert r2.breaker("fake/up-flaky-a")["state"] == "closed"
        time.sleep(max(0.0, killed + 2.5 - time.monotonic()))  # clients keep asking meanwhile

        # --- Redis is back, empty, on the same port ------------------------------------------
        restarted = time.monotonic()
        redis_process.start()
        resynced = wait_state(cluster, "ready", "ok", RESYNC_SECONDS)
        back = time.monotonic()  # every replica has said "ok" for every part
        for replica in cluster:
            assert replica.proc.poll() is None and replica.proc.pid == replica.pid
            for part in PARTS:
                assert replica.metric("gateway_redis_up", component=part) == 1, (replica, part)

        # The cache is shared again: a new answer through replica 1 is a hit on 2 and 3, and
        # their semantic indexes (resynchronised from a fresh snapshot) follow it again. (A
        # lookup may still fail once on a stale connection, see the stale-connection test
        # below: each try asks a new question.)
        shared = []
        for topic in ("API keys", "SSH keys", "webhook secrets"):
            question = f"How do I rotate the {topic} of my team?"
            shared.append([r.ask(question, key=SECRET["ops"]).cache for r in cluster])
            if shared[-1] == ["miss", "hit-exact", "hit-exact"]:
                break
            time.sleep(0.2)
        assert shared[-1] == ["miss", "hit-exact", "hit-exact"], f"never shared again: {shared}"
        wait_each(
            [r2, r3],
            lambda r: r.cache_stats()["by_tenant"].get("ops", 0) >= 1,
            2.0,
            lambda r: f"{r.name} indexes {r.cache_stats()}",
        )

        # Breakers are shared again: failures behind replica 2 open it for replica 3.
        own_fake.per_model["up-flaky-b"] = Knobs(status=500)
        for _ in range(2):
            assert_unavailable(r2.ask("hello", model="flaky-b", key=SECRET["ops"]), "replica 2")
        before = upstream_calls(own_fake, "up-flaky-b")
        assert before == 2
        time.sleep(STATE_SECONDS)  # a replica reads the shared state at most this stale
        assert_unavailable(r3.ask("hello", model="flaky-b", key=SECRET["ops"]), "replica 3")
        assert upstream_calls(own_fake, "up-flaky-b") == before, "replica 3 refused: shared"
        assert [r.breaker("fake/up-flaky-b")["state"] for r in cluster] == ["open"] * 3

        # Rate limits are shared again: a tenant's bucket of 2 holds across the replicas,
        # once a second has passed since the last failed call (until then the limiter does
        # not ask Redis, by design). A replica may still fail open once more after that
        # (see the stale-connection test below), so each try takes a fresh tenant.
        time.sleep(max(0.0, back + PAUSE_AFTER_FAILURE + 0.1 - time.monotonic()))
        tries = []
        for tenant in CAPPED[1:]:
            tries.append(capped(cluster, tenant))
            if tries[-1] == [200] * CAPPED_BURST + [429]:
                break
            time.sleep(PAUSE_AFTER_FAILURE + 0.1)
        assert tries[-1] == [200] * CAPPED_BURST + [429], f"never shared again: {tries}"
        time.sleep(0.5)  # background hits again
        ended = time.monotonic()

    during = traffic.between(killed, restarted)
    after = traffic.between(back, ended)
    failed = [r for r in traffic.records if r.status != 200]
    slowest = max(r.seconds for r in during)
    print(
        f"outage: detected by all in {detected:.2f} s, resynchronised {resynced:.2f} s after "
        f"the restart; background: {len(traffic.records)} requests, {len(during)} during the "
        f"outage (slowest {slowest * 1000:.0f} ms), cache header during it {outage_cache!r}; "
        f"after it: cache through replicas 1, 2, 3 {shared}, rate limits {tries}"
    )
    assert not failed, f"{len(failed)} background requests failed, e.g. {failed[:3]}"
    assert {r.replica for r in during} == {r.name for r in cluster}, "all kept being asked"
    assert not any((r.cache or "").startswith("hit") for r in during if r.sent > killed + 0.2)
    assert slowest < 1.0, f"a request took {slowest:.2f} s during the outage"
    assert any(r.cache == "hit-exact" for r in after), "background hits resumed after it"


def test_readiness_sees_redis_back_without_requests_reaching_breakers_or_limits(
    settled: list[Replica], redis_process: RedisServer
) -> None:
    """Was a gateway bug (gateway/state/shared.py, shared_parts): /readyz and gateway_redis_up
    report the breakers' and rate limits' Redis as the last call to it went
    (RedisHealth.up in gateway/resilience/shared_storage.py, RedisBackend.up in
    gateway/ratelimit/redis_backend.py), and only requests that reach a breaker (cache
    misses) or a tenant's limits make such calls. Once Redis is back, a replica that is idle,
    or whose requests are all answered from the cache, keeps saying "degraded: breakers
    unreachable" (and rate_limits) indefinitely, with gateway_redis_up 0, although Redis
    answers and the cache (which follows Redis by itself) is "ok" again. Readiness should
    find out by itself, e.g. ping Redis (at most once a second) while a part is marked down."""
    cluster = settled
    redis_process.kill()
    # Each finds out: cache misses through the breaker and the limits.
    wait_each(cluster, lambda r: nudged(r) == UNREACHABLE, DETECT_SECONDS, described, poll=0.2)

    redis_process.start()  # back; from now on nobody sends a chat request
    deadline = time.monotonic() + RESYNC_SECONDS
    states = {r.name: shared_state(r) for r in cluster}
    while time.monotonic() < deadline and any(s[0] != "ready" for s in states.values()):
        time.sleep(0.1)
        states = {r.name: shared_state(r) for r in cluster}
    stuck = {name: parts for name, (status, parts) in states.items() if status != "ready"}
    assert not stuck, (
        f"Redis has been answering for {RESYNC_SECONDS:g} s, but /readyz still reports "
        f"{stuck} (cache recovered on its own; breakers and rate limits wait for requests)"
    )


def test_readiness_is_the_state_at_the_probe_both_ways(
    settled: list[Replica], redis_process: RedisServer
) -> None:
    """Was a gateway bug: /readyz read each part's state as the last call to Redis had left it.
    Just after Redis was killed it still said `rate_limits: ok` (no request had failed yet),
    and after it came back `cache: unreachable` while hits worked, for up to 0.9 s (the
    follower slept before resynchronising). Now each /readyz asks Redis itself (0.5 s at
    most) and a probe that finds Redis back wakes the cache's follower: no request and no
    waiting between the change and the probe that reports it."""
    cluster = settled
    redis_process.kill()
    for replica in cluster:  # the first probe after the kill, nothing sent in between
        assert shared_state(replica) == UNREACHABLE, described(replica)
    redis_process.start()  # returns once Redis answers PING
    for replica in cluster:  # the first probe after that
        status, parts = shared_state(replica)
        assert parts["breakers"] == parts["rate_limits"] == "ok", (replica.name, parts)
        if parts["cache"] != "ok":  # only a resync longer than the probe waits (0.3 s)
            status, parts = shared_state(replica)
        assert (status, parts) == ("ready", dict.fromkeys(PARTS, "ok")), (replica.name, parts)


def test_stale_connections_after_a_redis_restart_neither_skip_limits_nor_miss_the_cache(
    settled: list[Replica], redis_process: RedisServer
) -> None:
    """Was a gateway bug (gateway/ratelimit/redis_backend.py RedisBackend.__init__, and the same in
    gateway/cache/redis_store.py RedisStore.__init__): the asyncio connection pools keep the
    connections they had before Redis went away, and with `retry=Retry(NoBackoff(), 0)` the
    first command on each of them after Redis is back fails (ConnectionError), even
    though the replica has already reached the restarted Redis (/readyz "ok"):
    - rate limits: that request is admitted unlimited (fail open), the limiter then stops
      asking Redis for another second (PAUSE_AFTER_FAILURE) and /readyz flips back to
      "rate_limits: unreachable". Concurrent requests get past a limit, once per stale
      connection (here a burst of 3 admits all 6 requests sent at once).
    - cache: the lookup fails and counts as a miss (x-gateway-cache: error), so an answer
      that is in Redis goes to the upstream again (seen in about one run in three here: some
      stale connections of the cache's pool are noticed and reconnected by redis-py).
    Expected: once a call to the restarted Redis worked, every request is served by it (e.g.
    drop the pool's connections on a connection error, or retry once on a fresh one)."""
    r1 = settled[0]
    question = "Which plan includes single sign-on?"

    def paused_burst(tenant: str, count: int, text: str = "hi") -> list[tuple[int, str]]:
        # CLIENT PAUSE holds every command for 150 ms (under the 0.25 s socket timeouts):
        # requests sent meanwhile wait in the limiter or the cache lookup at the same time,
        # each on a connection of its own.
        admin = redis.Redis.from_url(redis_process.url)
        try:
            admin.client_pause(150)
            return asyncio.run(burst(r1, tenant, count, text))
        finally:
            admin.close()

    # Several pooled connections in the limiter (`ops` is limited) and the cache (`free` is
    # not, so its requests reach the lookup at once).
    assert [s for s, _ in paused_burst("ops", 8)] == [200] * 8
    assert [s for s, _ in paused_burst("free", 8, "warm-up")] == [200] * 8

    # One request at a time from here on, and none through the cache (the cache follower
    # reports its state by itself): the pools' other connections are left as they were.
    redis_process.kill()

    def state() -> tuple[str, dict[str, str]]:
        return nudged(r1, cache=False)

    wait_for(lambda: state() == UNREACHABLE, DETECT_SECONDS, lambda: described(r1))
    redis_process.start()
    wait_for(lambda: state()[0] == "ready", RESYNC_SECONDS, lambda: described(r1), poll=0.2)
    time.sleep(PAUSE_AFTER_FAILURE + 0.1)  # past any pause: the limiter asks Redis again

    seeded = r1.ask(question, key=SECRET["free"]).cache  # a miss, stored in the new Redis
    time.sleep(0.2)  # the write, in the background, is done
    looked_up = [seeded, *sorted(cache for _, cache in paused_burst("free", 6, question))]
    limited = sorted(s for s, _ in paused_burst(STRICT, 6))
    print(f"after the restart: cache {looked_up}, a burst of {STRICT_BURST}: {limited}")
    assert (looked_up.count("error"), limited) == (0, [200] * STRICT_BURST + [429] * 3), (
        f"requests after this replica had reached the restarted Redis: cache lookups "
        f"{looked_up} (no 'error' expected), rate limit admitted {limited.count(200)} of 6 "
        f"sent at once with a burst of {STRICT_BURST} (/readyz now {shared_state(r1)})"
    )


async def burst(
    replica: Replica, tenant: str, count: int, text: str = "hi"
) -> list[tuple[int, str]]:
    """`count` requests of `tenant` sent at once: their statuses and x-gateway-cache."""
    headers = {"Authorization": f"Bearer {SECRET[tenant]}"}
    body = {"model": "assistant", "messages": [{"role": "user", "content": text}]}
    url = replica.url + "/v1/chat/completions"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def one() -> tuple[int, str]:
            async with session.post(url, json=body, headers=headers) as resp:
                await resp.read()
                return resp.status, resp.headers.get("x-gateway-cache", "")

        return sorted(await asyncio.gather(*(one() for _ in range(count))))

"""Three gateway replicas, each a real `python -m gateway serve` process, sharing one real
redis-server: starting them, asking them, reading their readiness, admin API and metrics.

The replicas run from one config file (written by each test module from a dict) in front of
the fake upstream, which runs in the test process (tests/conftest.py), so tests count what it
receives. A test that kills Redis and starts it again on the same port uses the harness's
`RedisServer`.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from gateway.testing.fake_upstream import FakeUpstream, Knobs, ScriptedReply
from gateway.testing.harness.configs import Json, write_config
from gateway.testing.harness.redis_server import INSTALL_HINT, redis_server_path
from gateway.testing.harness.starters import listening, spawn_gateway
from gateway.testing.harness.sync_http import Reply, http
from gateway.util.merge import deep_merge
from tests.clients import sdk_client
from tests.resilience.test_redis_breakers import ADMIN_ENV, ADMIN_KEY

REPLICAS = 3
READY_TIMEOUT = 60.0  # MiniLM loads in a few seconds per process; three share two cores

# Answers the fake gives while a test must not leave new cache entries behind: the cache only
# stores complete answers (finish_reason "stop"), so polls that miss do not fill the cache.
UNCACHEABLE_CONTENT = "fresh from the upstream (truncated, so never cached)"
UNCACHEABLE = Knobs(replies=[ScriptedReply(content=UNCACHEABLE_CONTENT, finish_reason="length")])


def require_redis_server() -> None:
    if redis_server_path() is None:
        pytest.skip(INSTALL_HINT)


# --- the replicas --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Answer:
    content: str
    headers: dict[str, str]

    @property
    def cache(self) -> str | None:
        return self.headers.get("x-gateway-cache")


@dataclass(slots=True)
class Replica:
    name: str
    proc: subprocess.Popen[bytes]
    url: str
    log: Path
    pid: int = field(init=False)

    def __post_init__(self) -> None:
        self.pid = self.proc.pid

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def readyz(self, timeout: float = 5.0) -> Reply:
        return http("GET", self.url + "/readyz", timeout=timeout)

    def admin(self, path: str, method: str = "GET", body: Any = None) -> Any:
        headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
        reply = http(method, self.url + path, body, headers)
        assert reply.status == 200, f"{self.name} {method} {path}: {reply.status} {reply.body!r}"
        return reply.json()

    def breaker(self, name: str) -> dict[str, Any]:
        states: list[dict[str, Any]] = self.admin("/admin/breakers")["breakers"]
        found = [b for b in states if b["name"] == name]
        assert found, f"{self.name} has no breaker {name}: {states}"
        return found[0]

    def cache_stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = self.admin("/admin/cache/stats")
        return stats

    def metric(self, name: str, **labels: str) -> float:
        text = http("GET", self.url + "/metrics").body.decode()
        wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        pattern = re.compile(rf"^{re.escape(name)}\{{([^}}]*)\}} (\S+)$", re.M)
        for found in pattern.finditer(text):
            got = ",".join(sorted(found.group(1).split(",")))
            if got == wanted:
                return float(found.group(2))
        raise AssertionError(f"{self.name}: no {name}{{{wanted}}} in /metrics")

    def ask(self, text: str, *, key: str = "k", model: str = "assistant", **extra: Any) -> Answer:
        """One chat completion through the OpenAI SDK."""
        raw = sdk_client(self.url, key, 15).chat.completions.with_raw_response.create(
            model=model, messages=[{"role": "user", "content": text}], **extra
        )
        content = raw.parse().choices[0].message.content or ""
        return Answer(content, {k.lower(): v for k, v in raw.headers.items()})


@contextmanager
def replicas(
    directory: Path,
    config: Mapping[str, Any],
    env: dict[str, str] | None = None,
    count: int = REPLICAS,
) -> Iterator[list[Replica]]:
    """`count` gateway processes on one config file (written to `directory`), started at
    once; each is terminated when the block ends."""
    path = write_config(directory, config)
    with ExitStack() as stack:
        started = [
            stack.enter_context(
                spawn_gateway(
                    directory, path, name=f"replica-{i}", env={**ADMIN_ENV, **(env or {})}
                )
            )
            for i in range(1, count + 1)
        ]
        yield [
            Replica(
                f"replica {i}", server.proc, listening(server, READY_TIMEOUT).url, server.log_path
            )
            for i, server in enumerate(started, 1)
        ]


def ready_replicas(
    factory: pytest.TempPathFactory,
    name: str,
    config: Mapping[str, Any],
    env: dict[str, str] | None = None,
    *,
    semantic: bool = False,
) -> Iterator[list[Replica]]:
    """For a module's fixture: `replicas` in a directory of their own, once all are ready."""
    with replicas(factory.mktemp(name), config, env) as group:
        wait_ready(group, semantic=semantic)
        yield group


def wait_ready(group: list[Replica], *, semantic: bool = False) -> None:
    """Until every replica's /readyz says ready (and, with `semantic`, its embedder is in)."""
    wait_each(
        group,
        partial(_ready, semantic=semantic),
        READY_TIMEOUT,
        lambda r: f"{r.name} not ready: {r.readyz().body!r}\n{r.output()}",
    )


def _ready(replica: Replica, semantic: bool) -> bool:
    if replica.proc.poll() is not None:
        raise AssertionError(f"{replica.name} exited:\n{replica.output()}")
    reply = replica.readyz()
    if reply.status != 200:
        return False
    body = reply.json()
    return bool(body["status"] == "ready" and (not semantic or body["cache"]["semantic"]))


def wait_for(
    check: Callable[[], object], timeout: float, message: Callable[[], str], poll: float = 0.02
) -> None:
    """Until `check()` is truthy; fails with `message()` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout} s: {message()}")
        time.sleep(poll)


def wait_each(
    group: list[Replica],
    check: Callable[[Replica], object],
    timeout: float,
    message: Callable[[Replica], str],
    poll: float = 0.02,
) -> None:
    """`wait_for` each replica in turn (the timeout applies to each)."""
    for replica in group:
        wait_for(partial(check, replica), timeout, partial(message, replica), poll)


def upstream_calls(fake: FakeUpstream, upstream_model: str) -> int:
    """Requests the fake received for one upstream model (within its history)."""
    return sum(1 for r in fake.received if r["body"].get("model") == upstream_model)


def base_config(
    fake_url: str, keys: dict[str, str] | None = None, server: Json | None = None, **sections: Any
) -> Json:
    """server, auth and the fake provider, with `sections` laid over them (deep_merge);
    `keys`: tenant -> name of its key's variable."""
    auth: Json = {"admin_key_env": "GATEWAY_ADMIN_KEY"}
    if keys:
        auth["keys"] = [{"env": env, "tenant": t} for t, env in keys.items()]
    timeouts = {"connect": 2, "read": 10, "total": 15}
    config = {
        "server": {"access_log": False, "watch_config": False, **(server or {})},
        "auth": auth,
        "providers": {"fake": {"type": "openai", "base_url": fake_url, "timeouts": timeouts}},
    }
    return deep_merge(config, sections)

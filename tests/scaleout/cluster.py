"""Three gateway replicas, each a real `python -m gateway serve` process, sharing one real
redis-server: starting them, asking them, reading their readiness, admin API and metrics.

The replicas run from one config file (written by each test module) in front of the fake
upstream, which runs in the test process (tests/conftest.py), so tests count what it
receives. `RedisProcess` is a redis-server a test may kill and start again on the same port.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from gateway.testing.fake_upstream import FakeUpstream, Knobs, ScriptedReply
from tests.clients import sdk_client
from tests.processes import free_port, stop
from tests.redis_server import redis_server_path, wait_until_ready
from tests.resilience.test_redis_breakers import ADMIN_KEY, gateway_process, listening_url

REPLICAS = 3
READY_TIMEOUT = 60.0  # MiniLM loads in a few seconds per process; three share two cores

# Answers the fake gives while a test must not leave new cache entries behind: the cache only
# stores complete answers (finish_reason "stop"), so polls that miss do not fill the cache.
UNCACHEABLE_CONTENT = "fresh from the upstream (truncated, so never cached)"
UNCACHEABLE = Knobs(replies=[ScriptedReply(content=UNCACHEABLE_CONTENT, finish_reason="length")])


def require_redis_server() -> None:
    if redis_server_path() is None:
        pytest.skip("redis-server is not on PATH (CI installs it: apt-get install redis-server)")


# --- plain HTTP ----------------------------------------------------------------------------

_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: dict[str, str]  # lower-cased names
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def http(
    method: str,
    url: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
) -> Reply:
    data = None if body is None else json.dumps(body).encode()
    sent = {"Content-Type": "application/json"} if data is not None else {}
    request = urllib.request.Request(url, data=data, method=method, headers=sent | (headers or {}))
    try:
        with _opener.open(request, timeout=timeout) as resp:
            return Reply(resp.status, _lower(resp.headers.items()), resp.read())
    except urllib.error.HTTPError as err:
        with err:
            return Reply(err.code, _lower(err.headers.items()), err.read())


def _lower(items: Any) -> dict[str, str]:
    return {k.lower(): v for k, v in items}


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
        return Answer(content, _lower(raw.headers.items()))


@contextmanager
def replicas(
    directory: Path, config_text: str, env: dict[str, str] | None = None, count: int = REPLICAS
) -> Iterator[list[Replica]]:
    """`count` gateway processes on one config file (written to `directory`), started at
    once; each is terminated when the block ends."""
    config = directory / "gateway.yaml"
    config.write_text(config_text, encoding="utf-8")
    with ExitStack() as stack:
        started = []
        with pytest.MonkeyPatch.context() as patch:  # the keys' variables, for the children only
            for name, value in (env or {}).items():
                patch.setenv(name, value)
            for i in range(1, count + 1):
                log = directory / f"replica-{i}.log"
                started.append((i, stack.enter_context(gateway_process(config, log)), log))
        yield [
            Replica(f"replica {i}", proc, listening_url(proc, log, timeout=READY_TIMEOUT), log)
            for i, proc, log in started
        ]


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


def base_config(fake_url: str, keys: dict[str, str] | None = None, server: str = "") -> str:
    """server, auth and the fake provider; `keys`: tenant -> name of its key's variable."""
    auth = "auth: {admin_key_env: GATEWAY_ADMIN_KEY}"
    if keys:
        lines = "".join(f"\n    - {{env: {env}, tenant: {t}}}" for t, env in keys.items())
        auth = f"auth:\n  admin_key_env: GATEWAY_ADMIN_KEY\n  keys:{lines}"
    return f"""
server: {{access_log: false, watch_config: false{server}}}
{auth}
providers:
  fake: {{type: openai, base_url: "{fake_url}", timeouts: {{connect: 2, read: 10, total: 15}}}}
"""


# --- a redis-server that can be killed and started again -----------------------------------


class RedisProcess:
    """redis-server on a fixed loopback port; nothing persisted, so a restart starts empty
    (as a crashed Redis without persistence does)."""

    def __init__(self) -> None:
        executable = redis_server_path()
        assert executable is not None
        self._executable = executable
        self._workdir = tempfile.TemporaryDirectory(prefix="gateway-scaleout-redis-")
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> None:
        args = [self._executable, "--port", str(self.port), "--bind", "127.0.0.1"]
        args += ["--save", "", "--appendonly", "no", "--dir", self._workdir.name]
        log = Path(self._workdir.name) / "redis.log"
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        wait_until_ready(self.proc, self.url, log, timeout)

    def kill(self) -> None:
        """SIGKILL: Redis crashes, as far as its clients can tell."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def close(self) -> None:
        if self.proc is not None:
            stop(self.proc)
        self._workdir.cleanup()

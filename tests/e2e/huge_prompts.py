"""What the loop-stall tests share: /healthz polled from another process (`polled`), and
twenty concurrent 3 MB prompts against a running gateway, twice, while it is polled (`burst`:
test_cache_process.py on a minimal config, test_shipped_config_large_prompts.py on the shipped
one; test_tool_guard_limits.py polls during hostile schemas). Their bounds are on `stall_p99`:
the /healthz p99 less the scheduling delay the machine gives the poller itself at the time, so
that a machine loaded by something else does not fail them (issue 34, item 3)."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import orjson

HUGE = 3 * 1024 * 1024
CONCURRENT = 20
# Each probe's wall-clock start and latency; and how late each 5 ms sleep between probes woke:
# the scheduling delay the machine gives any process now, which is the machine's, not the
# gateway's (a loaded 2-core machine adds tens of ms to everything).
POLLER = """
import http.client, json, sys, time
host, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
conn = http.client.HTTPConnection(host, port, timeout=10)
probes, oversleeps, end = [], [], time.monotonic() + seconds
print("ready", flush=True)
while time.monotonic() < end:
    at, started = time.time(), time.perf_counter()
    conn.request("GET", "/healthz")
    conn.getresponse().read()
    probes.append((at, time.perf_counter() - started))
    slept = time.perf_counter()
    time.sleep(0.005)
    oversleeps.append(time.perf_counter() - slept - 0.005)
print(json.dumps({"probes": probes, "oversleeps": oversleeps}), flush=True)
"""
# A probe is a request and its answer: two wake-ups (the gateway's, the poller's) that a loaded
# machine delays as it delays the poller's sleeps.
WAKEUPS = 2


class Probes(list[tuple[float, float]]):
    """Every /healthz probe's (started at, latency), and the poller's own `oversleeps`."""

    oversleeps: list[float]


def stall_p99(latencies: list[float], oversleeps: list[float]) -> float:
    """The p99 of /healthz that the gateway adds beyond what the machine's scheduler gives any
    process at the time: p99 of the latencies less WAKEUPS x p99 of the poller's oversleeps.
    A bound on it holds on a quiet machine and on a loaded one alike, where a bound on the
    raw p99 fails for load that is not the gateway's."""
    noise = p99(sorted(oversleeps)) if oversleeps else 0.0
    return max(0.0, p99(sorted(latencies)) - WAKEUPS * max(0.0, noise))


def huge_prompt(i: int) -> str:
    """3 MB that twenty prompts share, differing only near the end."""
    words = (
        "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "
        "incididunt ut labore et dolore magna aliqua Ünïcödé café "
    )
    body = (words * (HUGE // len(words) + 1))[:HUGE]
    return f"{body}\nQuestion {i}: what does clause {1000 + i} say? Thanks."


@contextmanager
def polled(url: str, seconds: float) -> Iterator[Probes]:
    """/healthz polled from another process (the caller's threads and garbage collections
    never delay a probe) for `seconds` from entry; the list yielded fills with every probe's
    (started at, latency) once the block has run and the poller has finished."""
    host, port = url.removeprefix("http://").split(":")
    probes = Probes()
    probes.oversleeps = []
    poller = subprocess.Popen(
        [sys.executable, "-c", POLLER, host, port, str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert poller.stdout is not None and poller.stdout.readline().strip() == "ready"
        yield probes
        lines = poller.communicate(timeout=60 + seconds)[0].strip().splitlines()
        result = json.loads(lines[-1])
        probes.extend((at, latency) for at, latency in result["probes"])
        probes.oversleeps.extend(result["oversleeps"])
    finally:
        if poller.poll() is None:
            poller.kill()
            poller.wait()


@dataclass
class Burst:
    answers: list[tuple[int, dict[str, Any], str]]  # the second round's (status, body, cache)
    probes: Probes  # every /healthz probe: (started at, latency), and the poller's oversleeps
    started: float
    ended: float

    def stall_p99(self) -> float:
        """The p99 of the probes during the burst, beyond the machine's own delays."""
        return stall_p99(self.latencies(during=True), self.probes.oversleeps)

    def latencies(self, *, during: bool) -> list[float]:
        """The probes' latencies, sorted: all of them, or only those sent during the burst."""
        return sorted(
            latency for at, latency in self.probes if not during or self.started <= at <= self.ended
        )


def burst(url: str, model: str, poll_seconds: float) -> Burst:
    """Send the twenty prompts to `model` twice (the second time exact hits), checking each
    answer echoes its own prompt's tail (the upstream's `echo_tail=80`)."""
    host, port = url.removeprefix("http://").split(":")
    bodies = [
        orjson.dumps({"model": model, "messages": [{"role": "user", "content": p}]})
        for p in (huge_prompt(i) for i in range(CONCURRENT))
    ]

    def post(body: bytes) -> tuple[int, dict[str, Any], str]:
        conn = http.client.HTTPConnection(host, int(port), timeout=120)
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = orjson.loads(resp.read())
        conn.close()
        return resp.status, data, resp.headers.get("x-gateway-cache", "")

    with polled(url, poll_seconds) as probes:
        time.sleep(0.5)  # a baseline before the burst
        started = time.time()
        for _ in range(2):
            with ThreadPoolExecutor(CONCURRENT) as pool:
                answers = list(pool.map(post, bodies))
            for i, (status, data, _) in enumerate(answers):
                assert status == 200, data
                tail = huge_prompt(i)[-80:]
                assert data["choices"][0]["message"]["content"] == f"Echo: {tail}"
        ended = time.time()
    return Burst(answers, probes, started, ended)


def p99(latencies: list[float]) -> float:
    return latencies[int(0.99 * (len(latencies) - 1))]


def summary(latencies: list[float], oversleeps: list[float] | None = None) -> str:
    text = (
        f"healthz: {len(latencies)} polls, p50 {latencies[len(latencies) // 2] * 1000:.1f} ms, "
        f"p99 {p99(latencies) * 1000:.1f} ms, max {latencies[-1] * 1000:.1f} ms"
    )
    if oversleeps:
        noise = p99(sorted(oversleeps)) * 1000
        added = stall_p99(latencies, oversleeps) * 1000
        text += f"; the poller's oversleep p99 {noise:.1f} ms, so the gateway's p99 {added:.1f} ms"
    return text

"""Issue 32, item 9: one tenant floods the gateway (the SHIPPED config: routing, the MiniLM
two-stage embedder and the judge, the cache on) with long near-duplicate prompts while another
tenant asks real users' short questions one after another, in alternated rounds with and
without the flood. Before the embedders had a lane for long texts, a short question waited for
batches of the flood's long ones: 12.6-14.3x its idle p50. Now 1.4-2.5x (median about 1.85x;
what is left is the flood's share of the event loop and the GIL, docs/RELIABILITY.md): the
issue's 2x holds in most runs; the test asserts 4x (a regression to the old queueing is 13x),
and /healthz a p99 under 100 ms during the flood. Clients and the upstream run as processes of
their own, so the test process's threads and garbage collections are not measured."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import islice
from pathlib import Path

from gateway.testing.harness.configs import write_config
from gateway.testing.harness.starters import start_fake_upstream, start_gateway
from tests.e2e import huge_prompts
from tests.e2e.huge_prompts import polled
from tests.e2e.test_shipped_config_large_prompts import shipped_config

REPO = Path(__file__).resolve().parents[2]
ATTACKER_KEY, VICTIM_KEY = "sk-gw-noisy-attacker-0123", "sk-gw-quiet-victim-01234"
ROUNDS, ASKED = 3, 20  # idle and flooded rounds, alternated; questions per round, each new
# The goal is 2x (the issue's); measured 1.4-2.5x, 3.3x once in a full-suite run on 2 cores.
# Before the long lane: 12.6-14.3x. The bound guards against that, with room for the machine.
BOUND = 4
# Real users' questions (BFCL live_simple's, vendored): distinct, of everyday lengths.
QUESTIONS = REPO / "tests/data/datasets/tools/bfcl/BFCL_v4_live_simple.json"
# The victim: short questions one after another (a JSON list on stdin); prints each latency.
VICTIM = """
import http.client, json, sys, time
host, port, key = sys.argv[1], int(sys.argv[2]), sys.argv[3]
conn = http.client.HTTPConnection(host, port, timeout=30)
took = []
for question in json.load(sys.stdin):
    body = json.dumps({"model": "auto", "messages": [{"role": "user", "content": question}],
                       "fake": {"echo_tail": 80}})
    started = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body,
                 {"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    reply = conn.getresponse()
    reply.read()
    assert reply.status == 200, reply.status
    took.append(time.perf_counter() - started)
    time.sleep(0.05)
print(json.dumps(took), flush=True)
"""
# The flood: eight clients sending 500 KB prompts that differ only at the end (near-duplicates
# of each other) back to back until stdin closes; prints the statuses it got.
FLOOD = """
import collections, http.client, json, sys, threading
host, port, key = sys.argv[1], int(sys.argv[2]), sys.argv[3]
words = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "
base = (words * (500_000 // len(words) + 1))[:500_000]
stop, statuses = threading.Event(), collections.Counter()
def flood(k):
    conn = http.client.HTTPConnection(host, port, timeout=60)
    j = 0
    while not stop.is_set():
        j += 1
        prompt = f"{base}\\nQuestion {k}-{j}: what does clause {j % 50} say? Thanks."
        body = json.dumps({"model": "auto", "messages": [{"role": "user", "content": prompt}],
                           "fake": {"echo_tail": 80}})
        conn.request("POST", "/v1/chat/completions", body,
                     {"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
        reply = conn.getresponse()
        reply.read()
        statuses[reply.status] += 1
threads = [threading.Thread(target=flood, args=(k,)) for k in range(8)]
for t in threads:
    t.start()
print("flooding", flush=True)
sys.stdin.read()
stop.set()
for t in threads:
    t.join()
print(json.dumps(statuses), flush=True)
"""


def _questions() -> list[str]:
    """The last user turn of each BFCL case under 300 characters, in file order."""
    lines = QUESTIONS.read_text(encoding="utf-8").splitlines()
    asked = [json.loads(line)["question"][0][-1]["content"] for line in lines]
    return [q for q in asked if len(q) < 300]


def _victim(url: str, questions: list[str]) -> list[float]:
    host, port = url.removeprefix("http://").split(":")
    argv = [sys.executable, "-c", VICTIM, host, port, VICTIM_KEY]
    done = subprocess.run(
        argv, input=json.dumps(questions), capture_output=True, text=True, timeout=120, check=True
    )
    return [float(x) for x in json.loads(done.stdout.strip().splitlines()[-1])]


def _p50_ms(latencies: list[float]) -> float:
    return statistics.median(latencies) * 1000


@contextmanager
def _flood(url: str) -> Iterator[Counter[str]]:
    """The attacker's eight clients flooding `url` while the block runs; the counter fills with
    the statuses they got once it has."""
    host, port = url.removeprefix("http://").split(":")
    flood = subprocess.Popen(
        [sys.executable, "-c", FLOOD, host, port, ATTACKER_KEY],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    statuses: Counter[str] = Counter()
    try:
        assert flood.stdout is not None and flood.stdout.readline().strip() == "flooding"
        time.sleep(1)  # the flood under way
        yield statuses
        statuses.update(json.loads(flood.communicate("", timeout=120)[0].strip()))
    finally:
        if flood.poll() is None:
            flood.kill()
            flood.wait()


def test_a_flood_of_long_prompts_barely_slows_another_tenants_questions(
    tmp_path: Path,
) -> None:
    questions = _questions()
    assert len(questions) >= 10 + 2 * ROUNDS * ASKED, len(questions)
    warm, asked = questions[:10], iter(questions[10:])
    with start_fake_upstream(tmp_path) as fake:
        config = shipped_config(tmp_path, f"{fake.url}/v1")
        config["auth"]["keys"] = [
            {"env": "NOISY_ATTACKER_KEY", "tenant": "attacker"},
            {"env": "NOISY_VICTIM_KEY", "tenant": "victim"},
        ]
        (tmp_path / "policies").mkdir()
        env = {
            "FAKE_UPSTREAM_KEY": "sk-fake",
            "NOISY_ATTACKER_KEY": ATTACKER_KEY,
            "NOISY_VICTIM_KEY": VICTIM_KEY,
        }
        idle: list[float] = []
        loaded: list[float] = []
        healthz: list[float] = []
        oversleeps: list[float] = []
        statuses: Counter[str] = Counter()
        with start_gateway(tmp_path, write_config(tmp_path, config), env=env, timeout=90) as gw:
            _victim(gw.url, warm)  # models loaded, connections open
            # Alternated rounds: what drifts on a shared machine weighs on both sides.
            for _ in range(ROUNDS):
                idle += _victim(gw.url, list(islice(asked, ASKED)))
                with _flood(gw.url) as flooded:
                    loaded += _victim(gw.url, list(islice(asked, ASKED)))
                    with polled(gw.url, 1) as probes:  # after: polling would slow the victim
                        pass
                statuses += flooded
                healthz += [latency for _, latency in probes]
                oversleeps += probes.oversleeps
    healthz.sort()
    summary = (
        f"victim p50 idle {_p50_ms(idle):.1f} ms, during the flood {_p50_ms(loaded):.1f} ms "
        f"({_p50_ms(loaded) / _p50_ms(idle):.2f}x); flood statuses {dict(statuses)}; "
        f"{huge_prompts.summary(healthz, oversleeps)}"
    )
    print(summary)
    assert set(statuses) == {"200"} and statuses["200"] >= 50, summary  # the flood did run
    assert _p50_ms(loaded) <= BOUND * _p50_ms(idle), summary
    assert huge_prompts.stall_p99(healthz, oversleeps) < 0.100, summary

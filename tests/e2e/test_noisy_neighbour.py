"""Issue 32, item 9: one tenant floods the gateway (the SHIPPED config: routing, the MiniLM
two-stage embedder and the judge, the cache on) with long near-duplicate prompts; another
tenant's short questions keep a p50 within twice their idle p50 (2 cores). Before the
embedders had a lane for long texts, a short question waited for batches of the flood's long
ones: 10.3-11.0x its idle p50. Clients and the upstream run as processes of their own, so
the test process's own threads and garbage collections are not measured."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from gateway.testing.harness.configs import write_config
from gateway.testing.harness.starters import start_fake_upstream, start_gateway
from tests.e2e.test_shipped_config_large_prompts import shipped_config

ATTACKER_KEY, VICTIM_KEY = "sk-gw-noisy-attacker-0123", "sk-gw-quiet-victim-01234"
ASKED = 60  # the victim's questions per phase, each asked once
# The victim: short questions one after another, each new; prints each one's latency.
VICTIM = """
import http.client, json, sys, time
host, port, key = sys.argv[1], int(sys.argv[2]), sys.argv[3]
first, count = int(sys.argv[4]), int(sys.argv[5])
conn = http.client.HTTPConnection(host, port, timeout=30)
took = []
for i in range(first, first + count):
    question = f"In one sentence, what is notable about city number {i} and its {i % 7} rivers?"
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


def _victim(url: str, first: int, count: int = ASKED) -> list[float]:
    host, port = url.removeprefix("http://").split(":")
    argv = [sys.executable, "-c", VICTIM, host, port, VICTIM_KEY, str(first), str(count)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)
    return [float(x) for x in json.loads(done.stdout.strip().splitlines()[-1])]


def _p50_ms(latencies: list[float]) -> float:
    return statistics.median(latencies) * 1000


def test_a_flood_of_long_prompts_leaves_another_tenants_p50_within_twice_idle(
    tmp_path: Path,
) -> None:
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
        with start_gateway(tmp_path, write_config(tmp_path, config), env=env, timeout=90) as gw:
            _victim(gw.url, 0, 10)  # models loaded, connections open
            idle = _victim(gw.url, 1000)
            host, port = gw.url.removeprefix("http://").split(":")
            flood = subprocess.Popen(
                [sys.executable, "-c", FLOOD, host, port, ATTACKER_KEY],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                assert flood.stdout is not None and flood.stdout.readline().strip() == "flooding"
                time.sleep(2)  # the flood under way
                loaded = _victim(gw.url, 2000)
                statuses = json.loads(flood.communicate("", timeout=120)[0].strip())
            finally:
                if flood.poll() is None:
                    flood.kill()
                    flood.wait()
    summary = (
        f"victim p50 idle {_p50_ms(idle):.1f} ms, during the flood {_p50_ms(loaded):.1f} ms "
        f"({_p50_ms(loaded) / _p50_ms(idle):.2f}x); flood statuses {statuses}"
    )
    print(summary)
    assert set(statuses) == {"200"} and statuses["200"] >= 50, summary  # the flood did run
    assert _p50_ms(loaded) <= 2 * _p50_ms(idle), summary

"""Issue 32, item 8: twenty concurrent 3 MB prompts through the SHIPPED config.yaml (routing,
tool and loop guards, knowledge bases, the MiniLM embedder and judge, the cache on) with an
external OpenAI-compatible upstream: /healthz stays responsive. The near-duplicate test in
test_cache_process.py uses a minimal config; this one keeps everything the repo ships."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import yaml

from gateway.testing.fake_upstream import FakeUpstream, Knobs
from gateway.testing.harness.configs import Json, write_config
from gateway.testing.harness.starters import start_gateway
from tests.e2e.test_cache_process import CONCURRENT, _huge_prompt

REPO = Path(__file__).resolve().parents[2]
# /healthz polled from another process; each probe's wall-clock start and latency.
POLLER = """
import http.client, json, sys, time
host, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
conn = http.client.HTTPConnection(host, port, timeout=10)
probes, end = [], time.monotonic() + seconds
print("ready", flush=True)
while time.monotonic() < end:
    at, started = time.time(), time.perf_counter()
    conn.request("GET", "/healthz")
    conn.getresponse().read()
    probes.append((at, time.perf_counter() - started))
    time.sleep(0.005)
print(json.dumps(probes), flush=True)
"""


def shipped_config(tmp_path: Path, upstream: str) -> Json:
    """The repo's config.yaml with its OpenAI-compatible providers pointed at `upstream`, its
    files under `tmp_path` and the cache on for every model."""
    config: Json = yaml.safe_load((REPO / "config.yaml").read_text(encoding="utf-8"))
    for provider in config["providers"].values():
        if provider["type"] == "openai":
            provider["base_url"] = upstream
            provider["api_key_env"] = "FAKE_UPSTREAM_KEY"
    config["server"]["max_body_bytes"] = 16 * 1024 * 1024
    config["cache"]["store"]["path"] = str(tmp_path / "cache.sqlite3")
    config["cache"]["defaults"]["enabled"] = True
    config["responses"]["store"]["path"] = str(tmp_path / "responses.sqlite3")
    config["policies"]["dir"] = str(tmp_path / "policies")
    for base in config.get("knowledge_bases", {}).values():
        base["path"] = str(tmp_path / "kb")
    return config


def test_shipped_config_huge_prompts_do_not_stall_the_event_loop(
    tmp_path: Path, fake_upstream: FakeUpstream
) -> None:
    """Twenty concurrent 3 MB prompts to `auto` (routing: features and the sticky conversation
    key read the whole prompt; the upstream body is serialised) and again (exact hits), while
    /healthz is polled: its p99 over the burst stays under 150 ms (2 cores). Measured 55-100 ms
    after the fix, 447 ms at most and few probes answered before it; the issue's goal is 100 ms,
    the bound leaves room for a loaded CI machine (docs/RELIABILITY.md)."""
    fake_upstream.defaults = Knobs(echo_tail=80)
    (tmp_path / "policies").mkdir()
    config = write_config(tmp_path, shipped_config(tmp_path, fake_upstream.url))
    env = {"FAKE_UPSTREAM_KEY": "sk-fake"}
    with start_gateway(tmp_path, config, env=env, timeout=60) as gateway:
        host, port = gateway.url.removeprefix("http://").split(":")
        bodies = [
            orjson.dumps({"model": "auto", "messages": [{"role": "user", "content": p}]})
            for p in (_huge_prompt(i) for i in range(CONCURRENT))
        ]
        poller = subprocess.Popen(
            [sys.executable, "-c", POLLER, host, port, "15"], stdout=subprocess.PIPE, text=True
        )
        try:
            assert poller.stdout is not None and poller.stdout.readline().strip() == "ready"
            time.sleep(0.5)
            burst = time.time()

            def post(body: bytes) -> tuple[int, dict[str, Any], str]:
                conn = http.client.HTTPConnection(host, int(port), timeout=120)
                conn.request(
                    "POST", "/v1/chat/completions", body, {"Content-Type": "application/json"}
                )
                resp = conn.getresponse()
                data = orjson.loads(resp.read())
                conn.close()
                return resp.status, data, resp.headers.get("x-gateway-cache", "")

            for _ in range(2):
                with ThreadPoolExecutor(CONCURRENT) as pool:
                    answers = list(pool.map(post, bodies))
                for i, (status, data, _) in enumerate(answers):
                    assert status == 200, data
                    tail = _huge_prompt(i)[-80:]
                    assert data["choices"][0]["message"]["content"] == f"Echo: {tail}"
            burst_end = time.time()
            probes = json.loads(poller.communicate(timeout=60)[0].strip().splitlines()[-1])
        finally:
            if poller.poll() is None:
                poller.kill()
                poller.wait()
    # Only the probes sent while the prompts were in flight: idle time would dilute the p99.
    latencies = sorted(latency for at, latency in probes if burst <= at <= burst_end)
    assert len(latencies) >= 20, len(latencies)  # a stalled loop answers few probes
    p99 = latencies[int(0.99 * (len(latencies) - 1))]
    print(
        f"healthz: {len(latencies)} polls, p50 {latencies[len(latencies) // 2] * 1000:.1f} ms, "
        f"p99 {p99 * 1000:.1f} ms, max {latencies[-1] * 1000:.1f} ms; "
        f"caches {[cache for *_, cache in answers]}"
    )
    assert p99 < 0.150, f"/healthz p99 {p99 * 1000:.1f} ms"

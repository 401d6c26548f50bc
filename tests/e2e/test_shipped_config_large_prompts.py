"""Issue 32, item 8: twenty concurrent 3 MB prompts through the SHIPPED config.yaml (routing,
tool and loop guards, knowledge bases, the MiniLM embedder and judge, the cache on) with an
external OpenAI-compatible upstream: /healthz stays responsive. The near-duplicate test in
test_cache_process.py uses a minimal config; this one keeps everything the repo ships."""

from __future__ import annotations

from pathlib import Path

import yaml

from gateway.testing.fake_upstream import FakeUpstream, Knobs
from gateway.testing.harness.configs import Json, write_config
from gateway.testing.harness.starters import start_gateway
from tests.e2e.huge_prompts import burst, summary

REPO = Path(__file__).resolve().parents[2]


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
        done = burst(gateway.url, "auto", 15)
    # Only the probes sent while the prompts were in flight: idle time would dilute the p99.
    latencies = done.latencies(during=True)
    assert len(latencies) >= 20, len(latencies)  # a stalled loop answers few probes
    described = summary(latencies, done.probes.oversleeps)
    print(f"{described}; caches {[cache for *_, cache in done.answers]}")
    assert done.stall_p99() < 0.150, described

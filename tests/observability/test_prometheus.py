"""The dashboards and alert rules against a REAL Prometheus scraping a real gateway.

A gateway (in-process, loopback port) with a cached model, a routed alias, a knowledge base,
a flaky model with a fallback, a model whose provider is down, the tool-call and loop guards,
history compression and a tenant with a tiny rate limit gets two rounds of traffic (each also
asks for a config reload, refused: the test's config comes from text, not a file);
Prometheus scrapes it every second and evaluates deploy/alerts.yml. Then every PromQL
expression of every dashboard panel must parse and return data, and every alert rule must
parse and evaluate. Skipped where the prometheus binary is missing (.ci/run installs the
Debian package).
"""

from __future__ import annotations

import asyncio
import math
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gateway.config import build_settings, parse_config
from gateway.testing.fake_retriever import FakeRetriever
from gateway.testing.fake_upstream import FakeUpstream, Knobs
from gateway.testing.harness.configs import dump_yaml, openai_provider
from gateway.testing.harness.inprocess import GatewayServer, ServerThread, running_gateway
from gateway.testing.harness.prometheus import (
    Prometheus,
    prometheus_path,
    prometheus_server,
    promtool_path,
    scrape_config,
)
from tests.chat import function_tool, long_conversation, repeated_calls
from tests.e2e.helpers import handbook, request
from tests.observability.promql import ALERTS, ROOT, alert_rules, dashboard_exprs, substitute

Json = dict[str, Any]

pytestmark = pytest.mark.skipif(
    prometheus_path() is None,
    reason="prometheus is not installed (CI installs it: apt-get install prometheus)",
)

# Dashboard expressions allowed to return no data here, each with the reason no traffic of
# the test can produce it. Keep this list short: everything else must show data.
NO_DATA_ALLOWED: dict[str, str] = {}

TRANSFER_ARGS = {"amount": {"type": "number"}, "to": {"type": "string"}}
TOOLS = [function_tool("transfer", TRANSFER_ARGS, ["amount", "to"], additionalProperties=False)]
GOOD_CALL = {"name": "transfer", "arguments": {"amount": 10, "to": "Bob"}}
BAD_CALL = {"name": "transfer", "arguments": {"amount": "lots", "to": "Bob"}}
HALLUCINATED_CALL = {"name": "transfer_money", "arguments": {"amount": 10}}
RETURNS_QUESTION = "Can items be returned for a refund within 30 days of delivery?"

# API keys (tenant "obs" sends the traffic, "tiny" has a tiny rate limit) and the admin key.
KEY, TINY_KEY, ADMIN_KEY = "sk-obs-traffic", "sk-obs-tiny", "obs-admin-key"
ENV = {"OBS_KEY": KEY, "OBS_TINY_KEY": TINY_KEY, "OBS_ADMIN_KEY": ADMIN_KEY}


def gateway_config(fake_url: str, retriever_url: str) -> Json:
    def model(name: str, **more: Any) -> Json:
        return {"name": name, "provider": "fake", "upstream_model": f"{name}-up", **more}

    compression = {
        "enabled": True,
        "max_turns": 8,
        "keep_turns": 2,
        "summarizer_model": "summarizer",
    }
    return {
        "server": {"access_log": False},
        "auth": {
            "admin_key_env": "OBS_ADMIN_KEY",
            "keys": [
                {"env": "OBS_KEY", "tenant": "obs"},
                {"env": "OBS_TINY_KEY", "tenant": "tiny"},
            ],
        },
        # tiny: one request, then 429 for 10 s
        "rate_limits": {"tenants": {"tiny": {"requests_per_second": 0.1, "burst": 1}}},
        "providers": {
            "fake": openai_provider(fake_url, (1, 5, 10)),
            # in an outage: the fake answers its model with 503 (see `observed`)
            "dead": openai_provider(fake_url, (0.5, 1, 2)),
        },
        "models": [
            model(
                "cheap",
                pricing={"input_per_million": 0.15, "output_per_million": 0.6},
                # near misses reach the guards; every hit verified (a semantic one gives
                # the verification panels a verdict; exact ones are the judge's controls)
                cache={
                    "enabled": True,
                    "similarity_threshold": 0.5,
                    "verify": {"sample_rate": 1.0, "exact_hits": True},
                },
            ),
            model("strong", pricing={"input_per_million": 2.5, "output_per_million": 10}),
            model("flaky", fallbacks=["cheap"]),
            model("streamer"),
            {"name": "broken", "provider": "dead"},
            model("helpdesk"),
            model("summarizer"),
            model("vectors", kind="embedding"),
        ],
        "cache": {"store": {"type": "memory"}, "embedder": {"type": "hash"}},
        "routing": {
            "aliases": {
                "auto": {
                    "tiers": [{"model": "cheap", "max_score": 0.5}, {"model": "strong"}],
                    "escalate": {"tools": 1},
                }
            }
        },
        "knowledge_bases": {"handbook": handbook(retriever_url)},
        "resilience": {
            "retry": {"attempts": 2, "initial_backoff_ms": 1, "max_backoff_ms": 5},
            "breaker": {"failures": 2, "reset_seconds": 600},
            "deadline_seconds": 10,
        },
        "guard": {
            "tools": {"enabled": True, "repair_attempts": 1, "on_failure": "strip"},
            "loops": {"action": "finalize", "max_identical_calls": 3},
            "compression": compression,
        },
        "degradation": {"unavailable": {"mode": "error"}},
    }


def _chat(model: str, text: str, **fields: Any) -> Json:
    return {"model": model, "messages": [{"role": "user", "content": text}], **fields}


def traffic_round(gw: GatewayServer) -> list[int]:
    """One round of requests touching every metric family; returns the statuses."""
    unique = uuid.uuid4().hex[:8]
    auth, tiny, admin = ({"Authorization": f"Bearer {key}"} for key in (KEY, TINY_KEY, ADMIN_KEY))
    bodies: list[tuple[str, Json]] = [
        # cache: a miss, then the same question again (stored in the background first)
        ("/v1/chat/completions", _chat("cheap", "What is a semantic cache?")),
        ("/v1/chat/completions", _chat("cheap", "How far is it to the station, 5 km?")),
        # plain, streamed (usage and time to first token) and a stream the upstream breaks
        ("/v1/chat/completions", _chat("strong", f"Tell me about {unique}")),
        (
            "/v1/chat/completions",
            _chat(
                "strong", f"Stream {unique}", stream=True, stream_options={"include_usage": True}
            ),
        ),
        ("/v1/chat/completions", _chat("streamer", "cut", stream=True, fake={"cut_after": 2})),
        # a routed alias, a simple prompt: the cheap tier, routing savings
        ("/v1/chat/completions", _chat("auto", f"hi, how are you? {unique}")),
        # resilience: retries then a fallback; a provider that is down (503, level 4)
        ("/v1/chat/completions", _chat("flaky", f"flaky {unique}")),
        ("/v1/chat/completions", _chat("broken", "anyone there?")),
        # knowledge base: grounded (level 1) and too little found (level 2)
        ("/v1/chat/completions", _chat("helpdesk", RETURNS_QUESTION)),
        ("/v1/chat/completions", _chat("helpdesk", "What is the capital of Peru?")),
        # tool-call guard: repaired (repair tokens), stripped (a problem left)
        (
            "/v1/chat/completions",
            _chat(
                "strong",
                "Send Bob 10 euros.",
                tools=TOOLS,
                fake={"replies": [{"tool_calls": [BAD_CALL]}, {"tool_calls": [GOOD_CALL]}]},
            ),
        ),
        (
            "/v1/chat/completions",
            _chat(
                "strong",
                "Send Bob 10 euros.",
                tools=TOOLS,
                fake={"replies": [{"tool_calls": [HALLUCINATED_CALL]}]},
            ),
        ),
        # agent loop stopped; a long history compressed by the summarizer
        (
            "/v1/chat/completions",
            {
                "model": "strong",
                "messages": repeated_calls("Send Bob 10 euros.", GOOD_CALL, "failed", 3),
                "tools": TOOLS,
            },
        ),
        ("/v1/chat/completions", {"model": "strong", "messages": long_conversation(10)}),
        # embeddings, and a model nobody configured (404, model "none")
        ("/v1/embeddings", {"model": "vectors", "input": ["hello", "world"]}),
        ("/v1/chat/completions", _chat("no-such-model", "hello")),
    ]

    async def send() -> list[int]:
        statuses = []
        # first (so the scrape that sees the round's last chat request sees these too):
        # the tiny tenant's burst of 1, then 429s; a config reload, refused as `invalid`
        # because the settings' source "<t>" is not a file (422, the running config stays)
        for i in range(3):
            body = _chat("strong", f"tiny tenant {i} {unique}")
            resp = await request("POST", gw.url + "/v1/chat/completions", body=body, headers=tiny)
            statuses.append(resp.status)
        resp = await request("POST", gw.url + "/admin/reload", headers=admin)
        assert resp.status == 422 and "(invalid)" in resp.json()["error"]["message"], resp.text
        for path, body in bodies:
            resp = await request("POST", gw.url + path, body=body, headers=auth)
            statuses.append(resp.status)
        await asyncio.sleep(0.3)  # the cache stores in the background
        # an exact hit (a control for the judge), a semantic one (a verdict) and a near miss
        for text in (
            "What is a semantic cache?",
            "what is a semantic cache",
            "How far is it to the station, 50 km?",
        ):
            body = _chat("cheap", text)
            resp = await request("POST", gw.url + "/v1/chat/completions", body=body, headers=auth)
            statuses.append(resp.status)
        return statuses

    return asyncio.run(send())


def _chat_requests(gw: GatewayServer) -> float:
    text = asyncio.run(request("GET", gw.url + "/metrics")).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "gateway_requests"
        for sample in family.samples
        if sample.labels.get("endpoint") == "chat"
    )


def _wait_for_scrape_of(prom: Prometheus, gw: GatewayServer, timeout: float = 20.0) -> None:
    """Until Prometheus has scraped the gateway's current chat request count."""
    expected = _chat_requests(gw)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        query = 'sum(gateway_requests_total{endpoint="chat"}) or sum(up{job="gateway"}) * 0'
        result = prom.query(query)["data"]["result"]
        if result and float(result[0]["value"][1]) == expected:
            return
        time.sleep(0.2)
    raise AssertionError(f"Prometheus did not scrape {expected} chat requests:\n{prom.log()}")


@pytest.fixture(scope="module")
def observed(
    server_thread: ServerThread, fake: FakeUpstream
) -> Iterator[tuple[Prometheus, GatewayServer]]:
    """Prometheus scraping a gateway that has had two rounds of traffic."""
    fake.reset()
    fake.per_model["flaky-up"] = Knobs(status=500)
    fake.per_model["broken"] = Knobs(status=503)
    retriever = server_thread.call(FakeRetriever().start())
    text = dump_yaml(gateway_config(fake.url, retriever.url))
    settings = build_settings(parse_config(text), "<t>", ENV)
    try:
        with running_gateway(server_thread, settings) as gw:
            config = scrape_config(f"127.0.0.1:{gw.port}", [str(ALERTS)])
            with prometheus_server(config) as prom:
                _wait_for_scrape_of(prom, gw)  # the first scrape, before any traffic
                statuses = traffic_round(gw)
                assert {503, 404, 429, 200} <= set(statuses), statuses
                _wait_for_scrape_of(prom, gw)
                traffic_round(gw)  # counters that exist now grow: rates are not zero
                _wait_for_scrape_of(prom, gw)
                yield prom, gw
    finally:
        fake.reset()
        server_thread.call(retriever.stop())


def _values(result: Json) -> list[float]:
    data = result["data"]
    if data["resultType"] == "scalar":
        return [float(data["result"][1])]
    return [float(sample["value"][1]) for sample in data["result"]]


@pytest.mark.parametrize(
    ("board", "title", "expr"), dashboard_exprs(), ids=[f"{b}:{t}" for b, t, _ in dashboard_exprs()]
)
def test_every_dashboard_expression_returns_data(
    observed: tuple[Prometheus, GatewayServer], board: str, title: str, expr: str
) -> None:
    prom, _ = observed
    query = substitute(expr)
    result = prom.query(query)
    assert result.get("status") == "success", f"{board} {title!r}: {result}\n{query}"
    if expr in NO_DATA_ALLOWED:
        return
    values = _values(result)
    assert values, f"{board} {title!r} shows no data:\n{query}"
    assert any(not math.isnan(v) for v in values), f"{board} {title!r}: only NaN\n{query}"


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: r["alert"])
def test_every_alert_expression_evaluates(
    observed: tuple[Prometheus, GatewayServer], rule: Json
) -> None:
    prom, _ = observed
    result = prom.query(rule["expr"])
    assert result.get("status") == "success", f"{rule['alert']}: {result}"


def test_prometheus_loaded_the_rules_and_the_open_breaker_alert_is_raised(
    observed: tuple[Prometheus, GatewayServer],
) -> None:
    prom, _ = observed
    groups = prom.api("/api/v1/rules")["data"]["groups"]
    rules = {rule["name"]: rule for group in groups for rule in group["rules"]}
    assert set(rules) == {rule["alert"] for rule in alert_rules()}
    deadline = time.monotonic() + 10
    while True:
        groups = prom.api("/api/v1/rules")["data"]["groups"]
        rules = {rule["name"]: rule for group in groups for rule in group["rules"]}
        unhealthy = {n: r.get("lastError") for n, r in rules.items() if r["health"] != "ok"}
        assert not unhealthy, unhealthy
        alerts = prom.api("/api/v1/alerts")["data"]["alerts"]
        open_breakers = {
            a["labels"]["breaker"]
            for a in alerts
            if a["labels"]["alertname"] == "GatewayUpstreamBreakerOpen"
            and a["state"] in ("pending", "firing")
        }
        if {"dead/broken", "fake/flaky-up"} <= open_breakers:
            return
        assert time.monotonic() < deadline, f"breaker alerts: {alerts}\n{prom.log()}"
        time.sleep(0.5)


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = promtool_path()
    if tool is None:
        pytest.skip("promtool is not installed (CI installs it: apt-get install prometheus)")
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=60)


def test_promtool_checks_the_rules() -> None:
    done = _promtool("check", "rules", str(ALERTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in done.stdout


def test_promtool_checks_the_shipped_scrape_config(tmp_path: Path) -> None:
    """deploy/prometheus.yml, with its rule file (mounted in docker-compose) read from here."""
    config = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    assert config["scrape_configs"][0]["static_configs"][0]["targets"] == ["gateway:8080"]
    config["rule_files"] = [str(ALERTS)]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    done = _promtool("check", "config", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_checks_the_test_config(tmp_path: Path) -> None:
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(scrape_config("127.0.0.1:8080", [str(ALERTS)])))
    done = _promtool("check", "config", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_the_cache_precision_alert_waits_for_enough_verdicts_and_15m(
    tmp_path: Path,
) -> None:
    """Precision under budget fires after 15 minutes, only for a model with 100 verdicts or
    more (a fresh model's wide interval does not page), never for one within budget."""
    rule = next(r for r in alert_rules() if r["alert"] == "GatewayCachePrecisionBelowBudget")

    def model(name: str, lower: float, verified: int) -> list[Json]:
        labels = f'job="gateway",instance="a:8080",model="{name}"'
        return [
            {
                "series": f'gateway_cache_precision_estimate{{{labels},bound="lower"}}',
                "values": f"{lower}x40",
            },
            {"series": f"gateway_cache_error_budget{{{labels}}}", "values": "0.05x40"},
            {"series": f"gateway_cache_verified_hits{{{labels}}}", "values": f"{verified}x40"},
        ]

    def annotations(name: str, value: str) -> Json:
        return {
            key: text.replace("{{ $labels.model }}", name).replace(
                "{{ $value | humanizePercentage }}", value
            )
            for key, text in rule["annotations"].items()
        }

    firing = {
        "exp_labels": {
            "severity": "warning",
            "model": "wrong",
            "instance": "a:8080",
            "job": "gateway",
        },
        "exp_annotations": annotations("wrong", "90%"),
    }
    series = model("wrong", 0.9, 150) + model("fresh", 0.5, 20) + model("good", 0.97, 500)
    tests = {
        "rule_files": [str(ALERTS)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": "10m", "alertname": rule["alert"], "exp_alerts": []},
                    {"eval_time": "20m", "alertname": rule["alert"], "exp_alerts": [firing]},
                ],
            }
        ],
    }
    path = tmp_path / "cache_precision_test.yml"
    path.write_text(yaml.safe_dump(tests))
    done = _promtool("test", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr

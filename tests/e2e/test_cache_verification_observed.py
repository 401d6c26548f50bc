"""What operators see of the verified cache, over real sockets: the counters (at 0 from the
start), the shadow calls' tokens and cost, the scrape-time precision gauges, the `verification`
block of GET /admin/cache/stats, and `gateway cache stats --url`.

The fake upstream answers every question with a fixed usage (10 in, 5 out); a verdict
disagrees when the upstream's answer changed between the cached call and the shadow call."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.cache.verify.estimate import wilson
from gateway.cli import main
from gateway.http.keys import CACHE as CACHE_KEY
from gateway.testing.fake_upstream import FakeUpstream, Knobs
from gateway.testing.harness.configs import write_config
from gateway.testing.harness.fake_settings import (
    FAKE_PROVIDER_KEY,
    FAKE_PROVIDER_KEY_ENV,
    fake_config,
    settings_for,
)
from gateway.testing.harness.inprocess import GatewayServer, ServerThread, running_gateway
from tests.e2e.helpers import poll_until, request

Json = dict[str, Any]
ADMIN_ENV, ADMIN_KEY = "VERIFY_OBS_ADMIN_KEY", "verify-obs-admin"
PRICE_IN, PRICE_OUT = 2.0, 8.0  # per million tokens
BUDGET = 0.05
MODELS = [
    {
        "name": "fake-model",
        "provider": "fake",
        "pricing": {"input_per_million": PRICE_IN, "output_per_million": PRICE_OUT},
    },
    {"name": "plain", "provider": "fake", "cache": {"enabled": False}},
]
VERIFYING = {
    "store": {"type": "memory"},
    "embedder": {"type": "hash"},
    "defaults": {
        "enabled": True,
        # every hit verified: each semantic hit below is a verdict
        "verify": {
            "sample_rate": 1.0,
            "exact_hits": True,
            "max_error_rate": BUDGET,
            "max_per_minute": 1000,
        },
    },
}


def _config(fake_url: str) -> Json:
    return {
        "models": MODELS,
        "cache": VERIFYING,
        "auth": {"admin_key_env": ADMIN_ENV},
    }


@pytest.fixture
def verifying(server_thread: ServerThread, fake_upstream: FakeUpstream) -> Iterator[GatewayServer]:
    settings = settings_for(fake_upstream.url, _config(fake_upstream.url), {ADMIN_ENV: ADMIN_KEY})
    with running_gateway(server_thread, settings) as gateway:
        yield gateway


def _ask(gw: GatewayServer, text: str) -> Json:
    body = {"model": "fake-model", "messages": [{"role": "user", "content": text}]}
    resp = asyncio.run(request("POST", gw.url + "/v1/chat/completions", body=body))
    assert resp.status == 200, resp.text
    return dict(resp.headers)


def _settle(gw: GatewayServer, server_thread: ServerThread) -> None:
    cache = gw.app[CACHE_KEY]
    assert cache is not None
    server_thread.call(cache.flush())
    server_thread.call(cache.verifier.flush())


def _samples(gw: GatewayServer) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = asyncio.run(request("GET", gw.url + "/metrics")).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _value(samples: dict[Any, float], name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def _stats(gw: GatewayServer) -> Json:
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    resp = asyncio.run(request("GET", gw.url + "/admin/cache/stats", headers=headers))
    assert resp.status == 200, resp.text
    stats: Json = resp.json()
    return stats


def _one_agreeing_one_disagreeing(
    gw: GatewayServer, server_thread: ServerThread, fake: FakeUpstream
) -> None:
    """A semantic hit the upstream answers the same again (agree), and one whose answer
    changed after it was cached (disagree); each shadow call done before the upstream
    changes. (An exact hit's verdict is a control for the judge, not a hit's.) The
    disagreeing one is asked twice (does the upstream disagree with itself?): three calls."""
    _ask(gw, "What is the boiling point of water at sea level?")
    fake.per_model["fake-model"] = Knobs(content="Paris has been the capital since 508 AD.")
    _ask(gw, "Which city is the capital of France?")
    _settle(gw, server_thread)
    fake.per_model.clear()
    hit = _ask(gw, "what is the boiling point of water at sea level")
    assert hit["x-gateway-cache"] == "hit-semantic"
    _wait_for_shadow_calls(gw, server_thread, 1)
    fake.per_model["fake-model"] = Knobs(content="Lyon, the city of lights, without a doubt.")
    assert _ask(gw, "which city is the capital of France")["x-gateway-cache"] == "hit-semantic"
    _wait_for_shadow_calls(gw, server_thread, 3)


def _wait_for_shadow_calls(gw: GatewayServer, server_thread: ServerThread, count: int) -> None:
    def answered() -> float | None:
        _settle(gw, server_thread)  # the verdicts in flight too
        name = "gateway_cache_shadow_calls_total"
        return _value(_samples(gw), name, model="fake-model", outcome="answered")

    assert poll_until(lambda: answered() == count, timeout=10), _samples(gw)


def test_counters_exist_at_zero_and_no_estimate_before_a_verdict(verifying: GatewayServer) -> None:
    samples = _samples(verifying)
    for name in ("gateway_cache_verifications_total", "gateway_cache_explorations_total"):
        for result in ("agree", "disagree"):
            assert _value(samples, name, model="fake-model", result=result) == 0.0
    assert _value(samples, "gateway_cache_verification_cost_total", model="fake-model") == 0.0
    # a model whose cache is off has none of them
    assert not any(labels and ("model", "plain") in labels for _, labels in samples)
    assert not any(name == "gateway_cache_precision_estimate" for name, _ in samples)
    assert _stats(verifying)["verification"] == {}  # no lookup yet: nothing seen


def test_verdicts_tokens_cost_and_gauges(
    verifying: GatewayServer, server_thread: ServerThread, fake_upstream: FakeUpstream
) -> None:
    _one_agreeing_one_disagreeing(verifying, server_thread, fake_upstream)
    samples = _samples(verifying)
    model = {"model": "fake-model"}
    name = "gateway_cache_verifications_total"
    assert _value(samples, name, **model, result="agree") == 1.0
    assert _value(samples, name, **model, result="disagree") == 1.0
    tokens = "gateway_guard_tokens_total"
    purpose = {**model, "purpose": "cache_verification"}
    assert _value(samples, tokens, **purpose, direction="input") == 30.0  # 3 calls x 10
    assert _value(samples, tokens, **purpose, direction="output") == 15.0
    cost = _value(samples, "gateway_cache_verification_cost_total", **model)
    assert cost == pytest.approx(3 * (10 * PRICE_IN + 5 * PRICE_OUT) / 1e6)
    # The shadow calls are not the clients' spend.
    assert _value(samples, "gateway_cost_total", **model) == pytest.approx(
        2 * (10 * PRICE_IN + 5 * PRICE_OUT) / 1e6
    )  # the two misses only
    lower, _ = wilson(0.5, 2.0)
    estimate = "gateway_cache_precision_estimate"
    assert _value(samples, estimate, **model, bound="point") == pytest.approx(0.5)
    assert _value(samples, estimate, **model, bound="lower") == pytest.approx(lower, abs=1e-9)
    assert _value(samples, "gateway_cache_verified_hits", **model) == 2.0
    assert _value(samples, "gateway_cache_error_budget", **model) == BUDGET
    effective = _value(samples, "gateway_cache_effective_threshold", **model)
    assert effective is not None and not math.isnan(effective)

    state = _stats(verifying)["verification"]["fake-model"]
    assert state["effective_threshold"] == pytest.approx(effective)
    assert state["max_error_rate"] == BUDGET and state["sample_rate"] == 1.0
    precision = state["precision"]
    assert (precision["verified"], precision["disagreements"]) == (2, 1)
    assert precision["point"] == pytest.approx(0.5) and precision["lower"] < 1 - BUDGET
    assert state["within_budget"] is False
    assert state["explored"] == {"verified": 0, "agreeing": 0}


def test_the_cli_prints_a_block_per_model(
    verifying: GatewayServer,
    server_thread: ServerThread,
    fake_upstream: FakeUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _one_agreeing_one_disagreeing(verifying, server_thread, fake_upstream)
    config = {**fake_config(fake_upstream.url), **_config(fake_upstream.url)}
    path = write_config(tmp_path, config)
    monkeypatch.setenv(ADMIN_ENV, ADMIN_KEY)
    monkeypatch.setenv(FAKE_PROVIDER_KEY_ENV, FAKE_PROVIDER_KEY)
    assert main(["cache", "stats", "--config", str(path), "--url", verifying.url]) == 0
    out = capsys.readouterr().out
    block = out[out.index("verification:") :]
    assert "  fake-model:" in block
    assert "precision 0.500 [" in block and "on 2 verdicts (1 disagreeing" in block
    assert "budget 5.0% wrong (lower bound >= 0.950): within budget: NO" in block
    assert "explored 0 held-back candidates" in block
    assert "per tenant (each moves only its own threshold):" in block
    assert "precision 0.500 on 2 verdicts (1 disagreeing)" in block  # the one tenant's own
    assert '"entries": 2' in out  # the store's stats first

    monkeypatch.setenv(ADMIN_ENV, "not-the-key")  # refused: says so, exits 1
    assert main(["cache", "stats", "--config", str(path), "--url", verifying.url]) == 1
    assert "answered 401" in capsys.readouterr().err

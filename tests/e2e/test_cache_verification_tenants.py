"""Verification is per tenant (issue 32), over real sockets with the real OpenAI SDK: one
tenant's wrong verdicts move only its own threshold and estimate; a shadow call is charged to
the tenant whose hit it verifies (its rate-limit minute and its cost metrics) and sends no
more than that hit's request; a hot request's hit is not verified at all.

Fixtures and helpers as tests/e2e/test_cache_verification_observed.py (hash embedder, every
hit verified, the fake upstream's usage 10 in and 5 out)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.http.keys import LIMITER
from gateway.ratelimit.memory import MemoryBackend
from gateway.testing.fake_upstream import FakeUpstream, Knobs
from gateway.testing.harness.fake_settings import (
    FAKE_PROVIDER_KEY,
    FAKE_PROVIDER_KEY_ENV,
    fake_config,
)
from gateway.testing.harness.inprocess import GatewayServer, ServerThread, running_gateway
from gateway.util.tokens import estimate_prompt_tokens
from tests.clients import sdk_client
from tests.e2e.helpers import poll_until, request, settings_from_files
from tests.e2e.test_cache_verification_observed import (
    ADMIN_ENV,
    ADMIN_KEY,
    MODELS,
    PRICE_IN,
    PRICE_OUT,
    VERIFYING,
    _samples,
    _settle,
    _value,
)

Json = dict[str, Any]
TENANTS = ("victim", "twin", "attacker")
KEYS = {f"VERIFY_TENANT_{t.upper()}": f"sk-{t}" for t in TENANTS}
CALL_COST = (10 * PRICE_IN + 5 * PRICE_OUT) / 1e6  # one upstream call of the fake's usage


@pytest.fixture
def tenants(
    server_thread: ServerThread, fake_upstream: FakeUpstream, tmp_path: Path
) -> Iterator[GatewayServer]:
    config = {
        **fake_config(fake_upstream.url),
        "models": MODELS,
        # Every hit verified, none favoured: with exploration the chance of a hit away from the
        # threshold is under 1, and how many of the attacker's hits became verdicts was random.
        "cache": {
            **VERIFYING,
            "defaults": {
                **VERIFYING["defaults"],
                "verify": {**VERIFYING["defaults"]["verify"], "explore": 1.0},
            },
        },
        "auth": {
            "admin_key_env": ADMIN_ENV,
            "keys": [{"env": env, "tenant": t} for env, t in zip(KEYS, TENANTS, strict=True)],
        },
        "rate_limits": {"default": {"tokens_per_minute": 1_000_000}},
    }
    policies = {"per-tenant": {"match": {"tenants": ["*"]}, "metrics": {"per_tenant": True}}}
    environ = {**KEYS, ADMIN_ENV: ADMIN_KEY, FAKE_PROVIDER_KEY_ENV: FAKE_PROVIDER_KEY}
    settings = settings_from_files(tmp_path, config, policies, environ)
    with running_gateway(server_thread, settings) as gateway:
        yield gateway


def _ask(gw: GatewayServer, tenant: str, text: str, **params: Any) -> str:
    """The x-gateway-cache header of one chat request of `tenant`."""
    raw = sdk_client(gw.url, f"sk-{tenant}").chat.completions.with_raw_response.create(
        model="fake-model", messages=[{"role": "user", "content": text}], **params
    )
    raw.parse()
    return str(raw.headers.get("x-gateway-cache"))


def _shadow_calls(gw: GatewayServer, outcome: str) -> float:
    name = "gateway_cache_shadow_calls_total"
    return _value(_samples(gw), name, model="fake-model", outcome=outcome) or 0.0


def _minute(gw: GatewayServer, tenant: str) -> float:
    """Tokens on the tenant's rate-limit minute (this one and the one before)."""
    backend = gw.app[LIMITER]._backend
    assert isinstance(backend, MemoryBackend)
    state = backend._tenants[tenant]
    return state.current + state.previous


def _stats(gw: GatewayServer) -> Json:
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    resp = asyncio.run(request("GET", gw.url + "/admin/cache/stats", headers=headers))
    assert resp.status == 200, resp.text
    verification: Json = resp.json()["verification"]["fake-model"]
    return verification


QUESTION = "What is the boiling point of water at sea level?"
PARAPHRASE = "what is the boiling point of water at sea level"


def test_a_shadow_call_is_charged_to_its_tenant_and_bounded_by_the_hit(
    tenants: GatewayServer, server_thread: ServerThread, fake_upstream: FakeUpstream
) -> None:
    """The victim's hit is verified; its twin sends the same bytes hot (temperature 0.9:
    varies by nature, not verified). What the victim has more on its minute and in its cost
    is the shadow call, exactly."""
    for tenant, temperature in (("victim", 0.1), ("twin", 0.9)):
        assert _ask(tenants, tenant, QUESTION, temperature=temperature) == "miss"
    _settle(tenants, server_thread)
    fake_upstream.received.clear()
    for tenant, temperature in (("victim", 0.1), ("twin", 0.9)):
        assert _ask(tenants, tenant, PARAPHRASE, temperature=temperature) == "hit-semantic"

    def done() -> bool:
        _settle(tenants, server_thread)
        return _shadow_calls(tenants, "answered") == 1 and _shadow_calls(tenants, "varies") == 1

    assert poll_until(done, timeout=10), _samples(tenants)
    messages = [{"role": "user", "content": PARAPHRASE}]
    charged = estimate_prompt_tokens(messages)  # before the call; the rest after it
    assert _minute(tenants, "victim") - _minute(tenants, "twin") == max(charged, 10) + 5
    samples = _samples(tenants)
    cost = {t: _value(samples, "gateway_tenant_cost_total", tenant=t) for t in TENANTS[:2]}
    assert cost["twin"] == pytest.approx(CALL_COST)  # its miss only
    assert cost["victim"] == pytest.approx(2 * CALL_COST)  # its miss and its shadow call
    # The shadow call: the served request's messages and parameters, one plain answer,
    # its length bounded by the cached answer's (5 tokens: the floor, 256).
    (shadow,) = [
        r["body"] for r in fake_upstream.received if r["path"].endswith("/chat/completions")
    ]
    assert shadow["messages"] == messages and shadow["temperature"] == 0.1
    assert shadow["max_tokens"] == 256 and "stream" not in shadow and "n" not in shadow
    served = {"model": "fake-model", "messages": messages, "temperature": 0.1}
    assert len(orjson.dumps(shadow)) <= len(orjson.dumps(served)) + len(b',"max_tokens":256')


def test_a_shadow_call_the_model_refuses_for_max_tokens_is_sent_again_with_the_other_limit(
    tenants: GatewayServer, server_thread: ServerThread, fake_upstream: FakeUpstream
) -> None:
    """A reasoning model refuses max_tokens (OpenAI's 400, param max_tokens). A shadow call for
    a client that set no limit adds one: refused, it is sent once more with
    max_completion_tokens, and the model's next shadow call uses that at once."""
    fake_upstream.per_model["fake-model"] = Knobs(unsupported=["max_tokens"])
    assert _ask(tenants, "victim", QUESTION) == "miss"
    _settle(tenants, server_thread)
    for round in (1, 2):  # the same paraphrase twice: each hit verified
        fake_upstream.received.clear()
        assert _ask(tenants, "victim", PARAPHRASE) == "hit-semantic"

        def answered(round: int = round) -> bool:
            _settle(tenants, server_thread)
            return _shadow_calls(tenants, "answered") == round

        assert poll_until(answered, timeout=10), _samples(tenants)
        sent = [r["body"] for r in fake_upstream.received if r["path"].endswith("/completions")]
        limits = [[f for f in ("max_tokens", "max_completion_tokens") if f in b] for b in sent]
        # the first: refused, then sent again; the second: the limit the model takes, at once
        expected = (
            [["max_tokens"], ["max_completion_tokens"]]
            if round == 1
            else [["max_completion_tokens"]]
        )
        assert limits == expected, limits
        assert sent[-1]["max_completion_tokens"] == 256


def test_one_tenants_wrong_verdicts_leave_another_tenants_threshold_and_estimate(
    tenants: GatewayServer, server_thread: ServerThread, fake_upstream: FakeUpstream
) -> None:
    """The attacker's hits all disagree with what the upstream says now (and says again when
    asked twice): its threshold rises. The victim's paraphrase still hits, and its own
    threshold and estimate are what its own verdict says."""
    fake_upstream.per_model["fake-model"] = Knobs(content="Paris has been the capital since 508.")
    names = [
        "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
        "juliett", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo",
        "sierra", "tango", "uniform", "victor", "whiskey", "xray", "yankee", "zulu",
    ]  # fmt: skip
    questions = [
        template.format(name)
        for template in (
            "Where does the courier {} deliver parcels on Sunday?",
            "Which warehouse does the courier {} load the morning van at?",
        )
        for name in names
    ]
    for question in questions:
        _ask(tenants, "attacker", question)
    assert _ask(tenants, "victim", "Which city is the capital of France?") == "miss"
    _settle(tenants, server_thread)
    fake_upstream.per_model["fake-model"] = Knobs(content="Lyon, the city of lights, no doubt.")
    for question in questions:
        _ask(tenants, "attacker", question.lower().rstrip("?"))
        _settle(tenants, server_thread)
    stats = _stats(tenants)
    attacker, configured = stats["tenants"]["attacker"], stats["configured_threshold"]
    assert attacker["precision"]["disagreements"] >= 30, attacker
    assert attacker["effective_threshold"] > configured, attacker
    # the victim: untouched by all of it
    assert (
        "victim" not in stats["tenants"] or stats["tenants"]["victim"]["precision"]["verified"] == 0
    )
    fake_upstream.per_model["fake-model"] = Knobs(content="Paris has been the capital since 508.")
    assert _ask(tenants, "victim", "which city is the capital of France") == "hit-semantic"
    _settle(tenants, server_thread)
    assert poll_until(lambda: "victim" in _stats(tenants)["tenants"], timeout=10)
    after = _stats(tenants)
    victim, attacker_now = after["tenants"]["victim"], after["tenants"]["attacker"]
    assert victim["effective_threshold"] == configured
    assert victim["precision"]["verified"] <= 1 and victim["precision"]["disagreements"] == 0
    # Each tenant's own figures in /metrics (the policy opts every tenant in): what its hits
    # are decided by, and what the per-tenant alert reads.
    samples = _samples(tenants)

    def own(name: str, tenant: str, **labels: str) -> float | None:
        return _value(
            samples, f"gateway_tenant_cache_{name}", tenant=tenant, model="fake-model", **labels
        )

    assert own("effective_threshold", "attacker") == attacker_now["effective_threshold"]
    assert own("effective_threshold", "victim") == configured
    assert own("verified_hits", "attacker") == attacker_now["precision"]["verified"]
    assert own("error_budget", "attacker") == pytest.approx(attacker_now["max_error_rate"])
    lower = own("precision_estimate", "attacker", bound="lower")
    assert lower is not None and lower < 1 - attacker_now["max_error_rate"]  # the alert's case

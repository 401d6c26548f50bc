"""Policies end to end: a gateway loaded from config.yaml and policies/*.yaml on disk (the way
`gateway serve` loads them), the real OpenAI SDK as the client, the fake upstream and the fake
retriever behind it. Each test shows one section of a policy changing what one tenant (or one
model) gets while another tenant keeps config.yaml's behaviour.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.http.keys import CACHE
from gateway.testing.fake_retriever import FakeRetriever
from gateway.testing.fake_upstream import FakeUpstream, Knobs
from gateway.testing.harness.inprocess import GatewayServer, ServerThread, running_gateway
from gateway.testing.harness.metrics import metric_value
from tests.chat import function_tool
from tests.clients import sdk_client
from tests.e2e.helpers import (
    assert_raw_error,
    handbook,
    last_upstream_body,
    request,
    settings_from_files,
    upstream_requests,
)

Json = dict[str, Any]
ADMIN_KEY = "policy-test-admin-key"
TENANTS = [
    "basic",
    "no-cache",
    "loose",
    "cache-fan",
    "vip",
    "no-kb",
    "strict-kb",
    "kb-anywhere",
    "loud",
    "busy",
]
KEYS = {tenant: f"sk-policy-{tenant}" for tenant in TENANTS}
ENVIRON = {f"POLICY_KEY_{i}": KEYS[t] for i, t in enumerate(TENANTS)}
ENVIRON["POLICY_TEST_ADMIN"] = ADMIN_KEY
DEFAULT_DISCLAIMER = "From general knowledge, not the handbook."
STRICT_DISCLAIMER = "Strict mode: the handbook did not cover this well enough."
RETURNS_QUESTION = "Can items be returned for a refund within 30 days of delivery?"
HALLUCINATED = {"name": "transfer_money", "arguments": {"amount": 10, "to": "Bob"}}
TRANSFER_ARGS = {"amount": {"type": "number"}, "to": {"type": "string"}}
TOOLS = [function_tool("transfer", TRANSFER_ARGS, ["amount", "to"])]


def config(fake_url: str, retriever_url: str) -> Json:
    def model(name: str, **more: Any) -> Json:
        return {"name": name, "provider": "fake", "upstream_model": f"{name}-up", **more}

    return {
        "server": {"access_log": False, "watch_config": False},
        "auth": {
            "admin_key_env": "POLICY_TEST_ADMIN",
            "keys": [{"env": f"POLICY_KEY_{i}", "tenant": t} for i, t in enumerate(TENANTS)],
        },
        "providers": {"fake": {"type": "openai", "base_url": fake_url}},
        "models": [
            model("cached", cache={"enabled": True}),
            # every semantic hit verified: the shadow call is optional work, shed under load
            model("verified", cache={"enabled": True, "verify": {"sample_rate": 1.0}}),
            model("small", pricing={"input_per_million": 1000, "output_per_million": 2000}),
            model("large"),
            model("helpdesk"),
            model("fragile"),
            model("tool-strict"),
        ],
        "cache": {"store": {"type": "memory"}, "embedder": {"type": "hash"}},
        "routing": {
            "aliases": {
                "auto": {"tiers": [{"model": "small", "max_score": 0.5}, {"model": "large"}]}
            }
        },
        "knowledge_bases": {"handbook": handbook(retriever_url, breaker={"failures": 1000})},
        "resilience": {"retry": {"attempts": 1}, "breaker": {"failures": 1000}},
        "degradation": {
            "disclaimer": {"en": DEFAULT_DISCLAIMER},
            "unavailable": {"mode": "answer", "retry_after_seconds": 7},
        },
    }


POLICIES: dict[str, Json] = {
    "everyone": {
        "description": "Every request gets a few more agent rounds.",
        "match": {"tenants": ["*"], "models": ["*"]},
        "guard": {"loops": {"max_rounds": 12}},
    },
    "no-cache": {"match": {"tenants": ["no-cache"]}, "cache": {"enabled": False}},
    "loose": {
        "description": "A looser semantic bar.",
        "match": {"tenants": ["loose"]},
        "cache": {"similarity_threshold": 0.5},
    },
    "cache-fan": {
        "match": {"tenants": ["cache-fan"], "models": ["small"]},
        "cache": {"enabled": True, "semantic": False},
    },
    "vip": {
        "description": "VIPs are counted on their own.",
        "match": {"tenants": ["vip"]},
        "metrics": {"per_tenant": True},
    },
    "vip-routing": {
        "description": "VIPs always get the strong tier of auto.",
        "match": {"tenants": ["vip"], "models": ["auto"]},
        "routing": {"aliases": {"auto": {"tiers": [{"model": "large"}]}}},
    },
    "no-kb": {"match": {"tenants": ["no-kb"]}, "knowledge_base": {"base": "none"}},
    "strict-kb": {
        "match": {"tenants": ["strict-kb"], "models": ["helpdesk"]},
        "knowledge_base": {"min_score": 0.99},
        "degradation": {"disclaimer": {"en": STRICT_DISCLAIMER}},
    },
    "kb-anywhere": {"match": {"tenants": ["kb-anywhere"]}, "knowledge_base": {"base": "handbook"}},
    "loud": {
        "description": "No polite level-4 answers for this tenant.",
        "match": {"tenants": ["loud"]},
        "degradation": {"unavailable": {"mode": "error"}},
    },
    "strict-tools": {
        "match": {"models": ["tool-strict"]},
        "guard": {"tools": {"on_failure": "error", "repair_attempts": 0}},
    },
    "busy": {"match": {"tenants": ["busy"]}, "overload": {"max_in_flight": 1}},
}


@pytest.fixture(scope="module")
def retriever(server_thread: ServerThread) -> Iterator[FakeRetriever]:
    fake = server_thread.call(FakeRetriever().start())
    yield fake
    server_thread.call(fake.stop())


@pytest.fixture(scope="module")
def policy_gateway(
    server_thread: ServerThread,
    fake: FakeUpstream,
    retriever: FakeRetriever,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[GatewayServer]:
    settings = settings_from_files(
        tmp_path_factory.mktemp("policies"),
        config(fake.url, retriever.url),
        POLICIES,
        ENVIRON,
    )
    assert [p.name for p in settings.policies.policies] == sorted(POLICIES)
    with running_gateway(server_thread, settings) as server:
        cache = server.app[CACHE]
        assert cache is not None
        server_thread.call(cache.wait_ready(), timeout=60)
        yield server


@pytest.fixture
def pgw(
    policy_gateway: GatewayServer,
    fake_upstream: FakeUpstream,
    retriever: FakeRetriever,
    server_thread: ServerThread,
) -> GatewayServer:
    """The policy gateway with a fresh fake upstream, retriever and an empty cache."""
    retriever.reset()
    server_thread.call(policy_gateway.fresh_state(breakers=False))
    return policy_gateway


def client(gw: GatewayServer, tenant: str) -> openai.OpenAI:
    return sdk_client(gw.url, KEYS[tenant])


def ask(gw: GatewayServer, tenant: str, text: str, model: str = "small", **kw: Any) -> Any:
    """The raw SDK response (headers and the parsed completion)."""
    return client(gw, tenant).chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": text}], **kw
    )


def content(raw: Any) -> str:
    return str(raw.parse().choices[0].message.content)


def settle(gw: GatewayServer, server_thread: ServerThread) -> None:
    """Cache writes happen in the background: wait for them."""
    server_thread.call(gw.settle_cache())


def metrics_text(gw: GatewayServer) -> str:
    return asyncio.run(request("GET", gw.url + "/metrics")).text


def admin(gw: GatewayServer, path: str, key: str | None = ADMIN_KEY) -> Any:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return asyncio.run(request("GET", gw.url + path, headers=headers))


# --- cache ------------------------------------------------------------------------------------


def test_the_cache_is_on_for_one_tenant_and_off_for_another(
    pgw: GatewayServer, fake_upstream: FakeUpstream, server_thread: ServerThread
) -> None:
    question = "What is the refund policy for opened items?"
    first = ask(pgw, "basic", question, model="cached")
    assert first.headers["x-gateway-cache"] == "miss"
    settle(pgw, server_thread)
    second = ask(pgw, "basic", question, model="cached")
    assert second.headers["x-gateway-cache"] == "hit-exact"
    assert content(second) == content(first)
    assert len(upstream_requests(fake_upstream)) == 1

    for _ in range(2):
        off = ask(pgw, "no-cache", question, model="cached")
        assert "x-gateway-cache" not in off.headers, "the policy turned the cache off"
        settle(pgw, server_thread)
    assert len(upstream_requests(fake_upstream)) == 3, "both of no-cache's asks went upstream"


def test_a_policy_turns_the_cache_on_for_a_model_that_has_it_off(
    pgw: GatewayServer, fake_upstream: FakeUpstream, server_thread: ServerThread
) -> None:
    question = "Which plan includes priority support?"
    for _ in range(2):
        assert "x-gateway-cache" not in ask(pgw, "basic", question).headers
        settle(pgw, server_thread)
    assert ask(pgw, "cache-fan", question).headers["x-gateway-cache"] == "miss"
    settle(pgw, server_thread)
    assert ask(pgw, "cache-fan", question).headers["x-gateway-cache"] == "hit-exact"
    assert len(upstream_requests(fake_upstream)) == 3
    other = ask(pgw, "cache-fan", question, model="large")
    assert "x-gateway-cache" not in other.headers, "the policy names only the model small"


def test_a_policy_lowers_the_similarity_threshold(
    pgw: GatewayServer, server_thread: ServerThread
) -> None:
    # The hash embedder puts these two at a cosine of about 0.78: under config.yaml's (the
    # embedder's calibrated) 0.95, over the loose tenant's 0.5.
    original, paraphrase = "How do I reset my password?", "How can I reset my password?"
    for tenant in ("basic", "loose"):
        assert ask(pgw, tenant, original, model="cached").headers["x-gateway-cache"] == "miss"
    settle(pgw, server_thread)
    strict = ask(pgw, "basic", paraphrase, model="cached")
    assert strict.headers["x-gateway-cache"] == "miss"
    assert 0.5 < float(strict.headers["x-gateway-cache-similarity"]) < 0.95
    loose = ask(pgw, "loose", paraphrase, model="cached")
    assert loose.headers["x-gateway-cache"] == "hit-semantic"
    assert 0.5 < float(loose.headers["x-gateway-cache-similarity"]) < 0.95
    assert content(loose) == f"Echo: {original}", "the answer to the first question"


def test_a_policy_alone_can_turn_the_cache_on(
    server_thread: ServerThread,
    fake_upstream: FakeUpstream,
    retriever: FakeRetriever,
    tmp_path: Path,
) -> None:
    """No model of config.yaml enables the cache; a policy does, for one tenant. The cache
    must then exist (a policy is documented to turn it on: policies/examples/)."""
    data = config(fake_upstream.url, retriever.url)
    data["models"][0]["cache"] = {"enabled": False}
    policy = {"match": {"tenants": ["basic"]}, "cache": {"enabled": True, "semantic": False}}
    settings = settings_from_files(tmp_path, data, {"cache-on": policy}, ENVIRON)
    with running_gateway(server_thread, settings) as gw:
        question = "Is the cache on for me?"
        first = ask(gw, "basic", question)
        assert first.headers.get("x-gateway-cache") == "miss", (
            "the policy enables the cache for tenant basic, but no cache was built "
            f"(headers: {dict(first.headers)})"
        )


# --- routing ----------------------------------------------------------------------------------


def test_routing_tiers_of_an_alias_change_for_one_tenant(
    pgw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    basic = ask(pgw, "basic", "hi", model="auto")
    assert "model=small; tier=0" in basic.headers["x-gateway-route"]
    assert last_upstream_body(fake_upstream)["model"] == "small-up"
    vip = ask(pgw, "vip", "hi", model="auto")
    assert "model=large; tier=0" in vip.headers["x-gateway-route"], "one tier: large"
    assert last_upstream_body(fake_upstream)["model"] == "large-up"
    assert vip.parse().model == "large-up"


# --- knowledge bases and degradation ----------------------------------------------------------


def test_knowledge_base_none_or_a_base_by_policy(
    pgw: GatewayServer, retriever: FakeRetriever, fake_upstream: FakeUpstream
) -> None:
    grounded = ask(pgw, "basic", RETURNS_QUESTION, model="helpdesk")
    assert grounded.headers["x-gateway-level"] == "1"
    assert grounded.headers["x-gateway-knowledge-base"] == "handbook"
    assert grounded.parse().model_extra["sources"][0]["source"] == "handbook/returns.md"
    assert len(retriever.received) == 1

    off = ask(pgw, "no-kb", RETURNS_QUESTION, model="helpdesk")
    assert "x-gateway-level" not in off.headers
    assert "x-gateway-knowledge-base" not in off.headers
    assert len(retriever.received) == 1, "no retrieval for a tenant whose policy says none"
    assert content(off) == f"Echo: {RETURNS_QUESTION}"
    assert "Sources:" not in str(last_upstream_body(fake_upstream)["messages"])

    anywhere = ask(pgw, "kb-anywhere", RETURNS_QUESTION, model="small")
    assert anywhere.headers["x-gateway-level"] == "1", "small has no base but the policy has"
    assert anywhere.headers["x-gateway-knowledge-base"] == "handbook"
    assert "x-gateway-level" not in ask(pgw, "basic", RETURNS_QUESTION).headers


def test_a_policy_min_score_turns_level_1_into_level_2_with_its_disclaimer(
    pgw: GatewayServer, retriever: FakeRetriever
) -> None:
    # The returns passage scores 0.96 for this question: over config.yaml's 0.3, under 0.99.
    assert ask(pgw, "basic", RETURNS_QUESTION, model="helpdesk").headers["x-gateway-level"] == "1"
    strict = ask(pgw, "strict-kb", RETURNS_QUESTION, model="helpdesk")
    assert strict.headers["x-gateway-level"] == "2"
    assert strict.headers["x-gateway-degraded"] == "general-knowledge"
    assert content(strict) == f"{STRICT_DISCLAIMER}\n\nEcho: {RETURNS_QUESTION}"
    assert "sources" not in (strict.parse().model_extra or {})
    # Another tenant's level-2 answer carries config.yaml's disclaimer.
    general = ask(pgw, "basic", "What is the capital of Peru?", model="helpdesk")
    assert general.headers["x-gateway-level"] == "2"
    assert content(general).startswith(DEFAULT_DISCLAIMER + "\n\n")


def test_unavailable_mode_error_for_one_tenant_an_answer_for_another(
    pgw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.per_model["fragile-up"] = Knobs(status=500)
    answered = ask(pgw, "basic", "hello", model="fragile")
    assert answered.status_code == 200
    assert answered.headers["x-gateway-level"] == "4"
    assert answered.headers["retry-after"] == "7"
    assert "temporarily unavailable" in content(answered)
    with pytest.raises(openai.InternalServerError) as info:
        ask(pgw, "loud", "hello", model="fragile")
    assert info.value.status_code == 503
    assert info.value.response.headers["retry-after"] == "7"
    assert isinstance(info.value.body, dict) and set(info.value.body) >= {"message", "code"}


# --- the tool-call guard ----------------------------------------------------------------------


def test_a_model_policy_changes_what_the_tool_guard_does(
    pgw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    knobs = {"fake": {"replies": [{"tool_calls": [HALLUCINATED]}]}}
    call: Json = {
        "messages": [{"role": "user", "content": "Send Bob 10 euros."}],
        "tools": TOOLS,
        "extra_body": knobs,
    }
    stripped = client(pgw, "basic").chat.completions.with_raw_response.create(model="small", **call)
    assert stripped.headers["x-gateway-tool-guard"] == "stripped"
    assert not stripped.parse().choices[0].message.tool_calls
    assert len(upstream_requests(fake_upstream)) == 3, "the answer and config's two repairs"

    fake_upstream.received.clear()
    with pytest.raises(openai.APIStatusError) as info:
        client(pgw, "basic").chat.completions.create(model="tool-strict", **call)
    assert info.value.status_code == 502
    assert info.value.code == "invalid_tool_call"
    assert "transfer_money" in info.value.message
    assert len(upstream_requests(fake_upstream)) == 1, "repair_attempts: 0 for tool-strict"


# --- metrics ----------------------------------------------------------------------------------


def test_per_tenant_metrics_only_for_the_opted_in_tenant(pgw: GatewayServer) -> None:
    before = metrics_text(pgw)
    requests_before = metric_value(
        before, "gateway_tenant_requests_total", tenant="vip", status_class="2xx"
    )
    cost_before = metric_value(before, "gateway_tenant_cost_total", tenant="vip")
    for tenant in ("vip", "basic", "loose", "vip"):
        ask(pgw, tenant, f"a question from {tenant}")
    with pytest.raises(openai.NotFoundError):
        ask(pgw, "vip", "x", model="no-such-model")
    text = metrics_text(pgw)
    assert (
        metric_value(text, "gateway_tenant_requests_total", tenant="vip", status_class="2xx")
        == requests_before + 2
    )
    assert metric_value(text, "gateway_tenant_requests_total", tenant="vip", status_class="4xx")
    assert metric_value(text, "gateway_tenant_cost_total", tenant="vip") > cost_before
    tenants = {
        sample.labels["tenant"]
        for family in text_string_to_metric_families(text)
        if family.name.startswith("gateway_tenant_")
        for sample in family.samples
    }
    assert tenants == {"vip"}, f"only the opted-in tenant has series: {tenants}"


# --- overload shedding ------------------------------------------------------------------------


def test_overload_sheds_retrieval_past_max_in_flight(
    pgw: GatewayServer, fake_upstream: FakeUpstream, retriever: FakeRetriever
) -> None:
    fake_upstream.per_model["helpdesk-up"] = Knobs(latency_ms=800)
    shed_before = metric_value(metrics_text(pgw), "gateway_shed_total", work="retrieval")

    def one(delay: float) -> Any:
        time.sleep(delay)
        return ask(pgw, "busy", RETURNS_QUESTION, model="helpdesk")

    with ThreadPoolExecutor(3) as pool:
        # The first is in flight (waiting on the slow upstream) when the other two arrive.
        replies = list(pool.map(one, [0.0, 0.3, 0.3]))
    first, *late = replies
    assert "x-gateway-shed" not in first.headers
    assert first.headers["x-gateway-level"] == "1"
    for reply in late:
        assert reply.headers["x-gateway-shed"] == "retrieval"
        assert reply.headers["x-gateway-level"] == "3"
        assert reply.headers["x-gateway-degraded"] == "retrieval-unavailable"
        assert content(reply) == f"{DEFAULT_DISCLAIMER}\n\nEcho: {RETURNS_QUESTION}"
    assert len(retriever.received) == 1, "the shed requests did not search"
    text = metrics_text(pgw)
    assert metric_value(text, "gateway_shed_total", work="retrieval") == shed_before + 2
    # Alone again, the busy tenant is grounded as usual.
    fake_upstream.per_model.clear()
    alone = ask(pgw, "busy", RETURNS_QUESTION, model="helpdesk")
    assert "x-gateway-shed" not in alone.headers and alone.headers["x-gateway-level"] == "1"


def test_overload_sheds_the_verification_of_a_cache_hit_not_the_hit(
    pgw: GatewayServer, fake_upstream: FakeUpstream, server_thread: ServerThread
) -> None:
    stored, paraphrase = (
        "Which city is the capital of France?",
        "which city is the capital of France",
    )

    def shadow_calls(outcome: str) -> float:
        text = metrics_text(pgw)
        name = "gateway_cache_shadow_calls_total"
        return metric_value(text, name, model="verified", outcome=outcome)

    def asked(text: str) -> int:
        return sum(
            r["body"]["messages"][-1]["content"] == text
            for r in upstream_requests(fake_upstream)
            if r["body"].get("model") == "verified-up"
        )

    first = ask(pgw, "busy", stored, model="verified")
    assert first.headers["x-gateway-cache"] == "miss"
    settle(pgw, server_thread)
    shed, answered = shadow_calls("shed"), shadow_calls("answered")
    fake_upstream.per_model["small-up"] = Knobs(latency_ms=800)

    def one(delay: float, text: str, model: str) -> Any:
        time.sleep(delay)
        return ask(pgw, "busy", text, model=model)

    with ThreadPoolExecutor(2) as pool:
        # A slow request is in flight when the hit arrives: past max_in_flight 1.
        slow = pool.submit(one, 0.0, "slow one", "small")
        hit = pool.submit(one, 0.3, paraphrase, "verified").result()
        slow.result()
    assert hit.headers["x-gateway-cache"] == "hit-semantic"
    assert content(hit) == content(first)
    assert shadow_calls("shed") == shed + 1 and shadow_calls("answered") == answered
    settle(pgw, server_thread)
    assert asked(paraphrase) == 0, "a shed verification made no upstream call"
    # Alone again, the hit is verified: the shadow call goes upstream.
    fake_upstream.per_model.clear()
    again = ask(pgw, "busy", paraphrase, model="verified")
    assert again.headers["x-gateway-cache"] == "hit-semantic"
    cache = pgw.app[CACHE]
    assert cache is not None
    server_thread.call(cache.verifier.flush())
    assert shadow_calls("answered") == answered + 1 and asked(paraphrase) == 1


def test_concurrency_of_tenants_without_an_overload_policy_sheds_nothing(
    pgw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.per_model["helpdesk-up"] = Knobs(latency_ms=400)
    with ThreadPoolExecutor(3) as pool:
        replies = list(
            pool.map(lambda _: ask(pgw, "basic", RETURNS_QUESTION, model="helpdesk"), range(3))
        )
    assert all("x-gateway-shed" not in r.headers for r in replies)
    assert all(r.headers["x-gateway-level"] == "1" for r in replies)


# --- /admin/policies --------------------------------------------------------------------------


def test_admin_policies_lists_the_loaded_policies(pgw: GatewayServer) -> None:
    resp = admin(pgw, "/admin/policies")
    assert resp.status == 200
    listed = {p["name"]: p for p in resp.json()["policies"]}
    assert set(listed) == set(POLICIES)
    assert listed["vip-routing"]["match"] == {"tenants": ["vip"], "models": ["auto"]}
    assert listed["vip-routing"]["sets"] == ["routing.aliases.auto.tiers"]
    assert listed["vip"]["description"] == "VIPs are counted on their own."
    assert listed["vip"]["source"].endswith("vip.yaml")


def test_admin_policies_explains_the_winner_first(pgw: GatewayServer) -> None:
    resp = admin(pgw, "/admin/policies?tenant=vip&model=auto")
    assert resp.status == 200
    body = resp.json()
    assert (body["tenant"], body["model"]) == ("vip", "auto")
    names = [p["name"] for p in body["policies"]]
    assert names == ["vip-routing", "vip", "everyone"], "the winner first"
    winner = body["policies"][0]
    assert winner["why"] == "tenant 'vip' exactly, model 'auto' exactly"
    assert winner["rank"] == [2, 2]
    assert winner["source"].endswith("vip-routing.yaml")
    assert body["policies"][1]["why"] == "tenant 'vip' exactly, any model"
    assert body["policies"][2]["why"] == "any tenant, any model"
    assert body["origin"] == {
        "guard.loops.max_rounds": "everyone",
        "metrics.per_tenant": "vip",
        "routing.aliases.auto.tiers": "vip-routing",
    }
    effective = body["effective"]
    assert [t["model"] for t in effective["routing"]["aliases"]["auto"]["tiers"]] == ["large"]
    assert effective["metrics"] == {"per_tenant": True}
    assert effective["guard"]["loops"]["max_rounds"] == 12
    assert effective["guard"]["tools"]["repair_attempts"] == 2, "config.yaml's, not overridden"

    strict = admin(pgw, "/admin/policies?tenant=basic&model=tool-strict").json()
    assert [p["name"] for p in strict["policies"]] == ["strict-tools", "everyone"]
    assert strict["policies"][0]["why"] == "any tenant, model 'tool-strict' exactly"
    assert strict["effective"]["guard"]["tools"]["on_failure"] == "error"

    tenant_only = admin(pgw, "/admin/policies?tenant=busy&model=")
    assert tenant_only.status == 200
    assert [p["name"] for p in tenant_only.json()["policies"]] == ["busy", "everyone"]
    nobody = admin(pgw, "/admin/policies?tenant=someone-else&model=large").json()
    assert [p["name"] for p in nobody["policies"]] == ["everyone"]


@pytest.mark.parametrize(
    "query",
    ["?tenant=vip", "?model=auto", "?tenant=&model=auto"],
    ids=["no-model", "no-tenant", "empty-tenant"],
)
def test_admin_policies_refuses_a_half_query(pgw: GatewayServer, query: str) -> None:
    resp = admin(pgw, "/admin/policies" + query)
    assert_raw_error(resp, 400, code="invalid_query")


def test_admin_policies_needs_the_admin_key(pgw: GatewayServer) -> None:
    for key in (None, "wrong-key", KEYS["vip"]):
        for path in ("/admin/policies", "/admin/policies?tenant=vip&model=auto"):
            resp = admin(pgw, path, key)
            error = assert_raw_error(resp, 401)
            assert "vip-routing" not in resp.text and "policies" not in error["message"].lower()

"""Routing an alias by task complexity, end to end with the OpenAI SDK: the header, the model
the upstream was actually asked for, escalation, stickiness, breakers, and what it cost."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from gateway.http.keys import BREAKERS, RUNTIME_REF
from gateway.testing.fake_upstream import FakeUpstream
from gateway.testing.harness.fake_settings import settings_of
from gateway.testing.harness.inprocess import GatewayServer, ServerThread, running_gateway
from tests.clients import sdk_client
from tests.e2e.helpers import poll_until, request, upstream_requests

Json = dict[str, Any]
SIMPLE = "hi, how are you?"
HARD = (
    "Prove step by step that the square root of 2 is irrational, then analyse and compare two "
    "different proofs, and derive a general rule for square roots of non-square integers."
)
TIERS = [{"model": "cheap", "keep_quality": 0.95}, {"model": "strong"}]
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def rgw(server_thread: ServerThread, fake: FakeUpstream) -> Iterator[GatewayServer]:
    def priced(name: str, input_price: float, output_price: float) -> Json:
        pricing = {"input_per_million": input_price, "output_per_million": output_price}
        return {
            "name": name,
            "provider": "fake",
            "upstream_model": f"{name}-up",
            "pricing": pricing,
        }

    auto = {"tiers": TIERS, "escalate": {"tools": 1, "tenants": {}}}
    settings = settings_of(
        {
            "server": {"access_log": False},
            "providers": {"fake": {"type": "openai", "base_url": fake.url}},
            "models": [priced("cheap", 0.15, 0.6), priced("strong", 2.5, 10)],
            "routing": {"aliases": {"auto": auto}},
        }
    )
    with running_gateway(server_thread, settings) as server:
        router = server.app[RUNTIME_REF].current.router
        assert poll_until(lambda: router.ready, timeout=60), "exemplars embedded"
        yield server


def ask(gw: GatewayServer, messages: list[Json], **kw: Any) -> Any:
    client = sdk_client(gw.url, "k")
    return client.chat.completions.with_raw_response.create(model="auto", messages=messages, **kw)


def route_header(raw: Any) -> dict[str, str]:
    return dict(part.split("=", 1) for part in raw.headers["x-gateway-route"].split("; "))


def test_a_simple_request_goes_to_the_cheap_tier(rgw: GatewayServer, fake_upstream: FakeUpstream):
    raw = ask(rgw, [{"role": "user", "content": SIMPLE}])
    route = route_header(raw)
    assert (route["alias"], route["model"], route["tier"], route["reason"]) == (
        "auto",
        "cheap",
        "0",
        "score",
    )
    assert upstream_requests(fake_upstream)[-1]["body"]["model"] == "cheap-up"


@pytest.mark.parametrize(
    "prompt",
    [HARD, "请一步一步推导并证明勾股定理，然后分析比较三种不同的证明方法的优缺点。"],  # noqa: RUF001
)
def test_a_hard_request_goes_to_the_strong_tier(
    rgw: GatewayServer, fake_upstream: FakeUpstream, prompt: str
) -> None:
    raw = ask(rgw, [{"role": "user", "content": prompt}])
    route = route_header(raw)
    router = rgw.app[RUNTIME_REF].current.router
    [cut] = router.thresholds.cuts(router.settings.routing.aliases["auto"], router.scorer.variant)
    assert route["model"] == "strong" and float(route["score"]) > cut
    assert upstream_requests(fake_upstream)[-1]["body"]["model"] == "strong-up"


def test_tools_escalate(rgw: GatewayServer, fake_upstream: FakeUpstream) -> None:
    raw = ask(rgw, [{"role": "user", "content": SIMPLE}], tools=TOOLS)
    route = route_header(raw)
    assert route["model"] == "strong" and route["reason"] == "escalated:tools"


def test_an_escalated_conversation_stays_escalated(rgw: GatewayServer, fake_upstream: Any):
    first = [{"role": "user", "content": HARD + " (conversation 17)"}]
    assert route_header(ask(rgw, first))["model"] == "strong"
    follow_up = [*first, {"role": "assistant", "content": "..."}, {"role": "user", "content": "ok"}]
    route = route_header(ask(rgw, follow_up))
    assert route["model"] == "strong" and route["reason"] == "sticky"


def test_an_open_breaker_moves_up(rgw: GatewayServer, fake_upstream: FakeUpstream) -> None:
    breaker = rgw.app[BREAKERS].get("fake/cheap-up")
    breaker.force_open()
    try:
        raw = ask(rgw, [{"role": "user", "content": SIMPLE + " (moved)"}])
    finally:
        breaker.reset()
    route = route_header(raw)
    assert route["model"] == "strong" and route["reason"] == "moved-up"


def test_models_list_the_alias(rgw: GatewayServer) -> None:
    client = sdk_client(rgw.url, "k")
    cards = {m.id: m.owned_by for m in client.models.list()}
    assert cards["auto"] == "gateway-router"


def test_cost_and_savings_are_metered(rgw: GatewayServer, fake_upstream: FakeUpstream) -> None:
    ask(rgw, [{"role": "user", "content": SIMPLE + " (cost)"}])
    text = asyncio.run(request("GET", rgw.url + "/metrics")).text
    assert 'gateway_cost_total{model="cheap"}' in text
    assert 'gateway_saved_cost_total{by="routing",model="auto"}' in text
    assert (
        'gateway_routing_decisions_total{alias="auto",model="cheap",reason="score",tier="0"}'
        in text
    )


def test_an_alias_without_a_usable_tier_is_a_clear_404(
    server_thread: ServerThread, fake: FakeUpstream
) -> None:
    fake_provider = {"type": "openai", "base_url": fake.url, "api_key_env": "UNSET_FOR_THIS_TEST"}
    settings = settings_of(
        {
            "providers": {"fake": fake_provider, "demo": {"type": "demo"}},
            "models": [
                {"name": "cheap", "provider": "fake"},
                {"name": "strong", "provider": "fake"},
                {"name": "d", "provider": "demo"},
            ],
            "routing": {"aliases": {"auto": {"tiers": TIERS}}},
        }
    )
    with running_gateway(server_thread, settings) as gw:
        client = sdk_client(gw.url, "k")
        assert "auto" not in {m.id for m in client.models.list()}
        with pytest.raises(openai.NotFoundError) as info:
            client.chat.completions.create(
                model="auto", messages=[{"role": "user", "content": "x"}]
            )
        assert "routed alias 'auto'" in info.value.message
        assert "tiers cheap and strong are configured" in info.value.message
        assert "environment variable UNSET_FOR_THIS_TEST is not set" in info.value.message


def test_a_responses_request_is_routed_like_a_chat_one(
    rgw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    # A question of its own: stickiness keeps an earlier test's conversation on its tier
    question = "hello there, what time is it?"
    raw = sdk_client(rgw.url, "k").responses.with_raw_response.create(model="auto", input=question)
    assert route_header(raw)["model"] == "cheap"
    assert raw.parse().model == "cheap"  # the tier the alias routed to
    assert upstream_requests(fake_upstream)[-1]["body"]["model"] == "cheap-up"


def drivers_of(route: dict[str, str]) -> list[tuple[str, float]]:
    terms = [term.rsplit(":", 1) for term in route["drivers"].split(",")]
    return [(name, float(value)) for name, value in terms]


def test_the_header_says_the_loss_what_moved_it_and_the_nearest_exemplar(
    rgw: GatewayServer, fake_upstream: FakeUpstream
) -> None:
    proof = "Prove step by step that the square root of 2 is irrational, then compare two proofs."
    raw = {prompt: ask(rgw, [{"role": "user", "content": prompt}]) for prompt in (proof, "hi!")}
    hard, simple = route_header(raw[proof]), route_header(raw["hi!"])
    for route in (hard, simple):
        assert route["reason"] == "score" and route["loss"] == route["score"]
        drivers = drivers_of(route)
        assert 1 <= len(drivers) <= 3 and "bias" not in dict(drivers)
        assert [abs(v) for _, v in drivers] == sorted((abs(v) for _, v in drivers), reverse=True)
        similarity, difficulty = (float(x) for x in route["nearest"].split("/"))
        assert 0 < similarity <= 1 and 0 <= difficulty <= 1
    assert (hard["model"], simple["model"]) == ("strong", "cheap")
    assert float(hard["loss"]) > float(simple["loss"])
    # Why: the proof's largest term pushes towards the strong tier, the greeting's towards the
    # cheap one, and each one's nearest exemplar is of its kind.
    assert drivers_of(hard)[0][1] > 0 > drivers_of(simple)[0][1]
    assert float(hard["nearest"].split("/")[1]) > float(simple["nearest"].split("/")[1])


def test_the_header_stays_ascii_for_a_prompt_that_is_not(rgw: GatewayServer, fake_upstream: Any):
    raw = ask(rgw, [{"role": "user", "content": "请一步一步证明根号 2 是无理数，并比较两种证明。"}])  # noqa: RUF001
    header = raw.headers["x-gateway-route"]
    assert header.isascii() and "drivers=" in header and "nearest=" in header

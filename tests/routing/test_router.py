"""Tier choice: score ranges, escalation floors, stickiness and breaker-aware moves."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import ConfigError, ModelRoute, build_settings, parse_config
from gateway.context import RequestContext
from gateway.routing.model import shipped_model
from gateway.routing.router import Router, tier_for
from gateway.routing.scorer import Score

CONFIG = """
providers: {d: {type: demo}}
models:
  - {name: small, provider: d}
  - {name: medium, provider: d}
  - {name: large, provider: d}
routing:
  aliases:
    auto:
      tiers: [{model: small, max_score: 0.02}, {model: medium, max_score: 0.05}, {model: large}]
      escalate:
        tools: 1
        images: 2
        long_context_tokens: 50
        long_context_tier: 2
        tenants: {vip: 2}
    down:
      tiers: [{model: small, max_score: 0.02}, {model: medium, max_score: 0.05}, {model: large}]
      when_open: down
    forgetful:
      tiers: [{model: small, max_score: 0.02}, {model: large}]
      sticky: false
"""
# Cuts for the features-only variant (no embedder here): "hi" predicts a loss under 0.01, HARD
# about 0.07.
SETTINGS = build_settings(parse_config(CONFIG), "<t>", {})
HARD = "Prove step by step, then analyse and compare and derive the general formula."


def router(open_models: set[str] = frozenset()) -> Router:  # type: ignore[assignment]
    def can_answer(route: ModelRoute) -> bool:
        return route.name not in open_models

    return Router(SETTINGS, None, can_answer)


def ctx(tenant: str = "t") -> RequestContext:
    return RequestContext(request_id="r", endpoint="chat", tenant=tenant)


def body(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "auto", "messages": [{"role": "user", "content": text}], **extra}


def test_tier_for_uses_the_score_ranges() -> None:
    config = SETTINGS.routing.aliases["auto"]
    thresholds = router().thresholds
    scores = (0.0, 0.02, 0.021, 0.05, 0.051, 1.0)
    tiers = [tier_for(config, Score(s, {}), thresholds) for s in scores]
    assert tiers == [0, 0, 1, 1, 2, 2]


async def test_simple_and_hard_prompts() -> None:
    r = router()
    simple = await r.decide(ctx(), "auto", body("hi"))
    assert (simple.model, simple.reason) == ("small", "score")
    hard = await r.decide(ctx(), "auto", body(HARD))
    assert hard.tier > simple.tier and hard.score > simple.score


@pytest.mark.parametrize(
    ("request_body", "tenant", "tier", "reason"),
    [
        (body("hi", tools=[{"type": "function", "function": {"name": "f"}}]), "t", 1, "tools"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "hi"},
                            {"type": "image_url", "image_url": {"url": "data:,"}},
                        ],
                    }
                ]
            },
            "t",
            2,
            "images",
        ),
        (  # a long conversation whose last turn is simple: the context escalates it
            {
                "model": "auto",
                "messages": [
                    {"role": "user", "content": "word " * 300},
                    {"role": "assistant", "content": "ok"},
                    {"role": "user", "content": "hi"},
                ],
            },
            "t",
            2,
            "long_context",
        ),
        (body("hi"), "vip", 2, "tenant"),
    ],
    ids=["tools", "images", "long-context", "tenant"],
)
async def test_escalation_floors(
    request_body: dict[str, Any], tenant: str, tier: int, reason: str
) -> None:
    decision = await router().decide(ctx(tenant), "auto", request_body)
    assert decision.tier == tier and decision.reason == f"escalated:{reason}"


async def test_an_escalated_conversation_does_not_drop_back() -> None:
    r = router()
    first = body(HARD)
    assert (await r.decide(ctx(), "auto", first)).tier >= 1
    follow = {
        "messages": [
            *first["messages"],
            {"role": "assistant", "content": "x"},
            {"role": "user", "content": "thanks"},
        ]
    }
    decision = await r.decide(ctx(), "auto", follow)
    assert decision.reason == "sticky" and decision.tier >= 1
    other_tenant = await r.decide(ctx("someone-else"), "auto", follow)
    assert other_tenant.reason == "score", "stickiness is per tenant and conversation"


async def test_stickiness_can_be_turned_off() -> None:
    r = router()
    first = body(HARD)
    await r.decide(ctx(), "forgetful", first)
    follow = {
        "messages": [
            *first["messages"],
            {"role": "assistant", "content": "x"},
            {"role": "user", "content": "thanks"},
        ]
    }
    assert (await r.decide(ctx(), "forgetful", follow)).model == "small"


async def test_open_breakers_move_up_or_down_per_policy() -> None:
    up = await router({"small"}).decide(ctx(), "auto", body("hi"))
    assert (up.model, up.reason) == ("medium", "moved-up")
    down = await router({"large"}).decide(ctx(), "down", body(HARD * 3))
    assert (down.model, down.reason) == ("medium", "moved-down")
    nothing = await router({"small", "medium", "large"}).decide(ctx(), "auto", body("hi"))
    assert nothing.model == "small", "nothing can answer: the scored tier, level 4 follows"


def test_weights_come_from_policy() -> None:
    text = CONFIG + "  scoring: {weights: {reasoning: 0}}\n"
    settings = build_settings(parse_config(text), "<t>", {})
    assert Router(settings, None, lambda _: True).scorer.weights["reasoning"] == 0
    bad = CONFIG + "  scoring: {weights: {nonsense: 1}}\n"
    with pytest.raises(ValueError, match="nonsense"):
        Router(build_settings(parse_config(bad), "<t>", {}), None, lambda _: True)


def test_the_scoring_profile_comes_from_config() -> None:
    text = CONFIG + "  scoring: {profile: learned, weights: {reasoning: 0}, neighbours: 4}\n"
    scorer = Router(build_settings(parse_config(text), "<t>", {}), None, lambda _: True).scorer
    features_only = shipped_model().variants["features"]
    assert scorer.weights == {
        "bias": features_only.bias,
        **features_only.weights,
        "exemplars": 0.0,
        "embedding": 0.0,
        "reasoning": 0,
    }
    assert scorer.neighbours == 4 and router().scorer.profile == "learned"
    for bad in ("maths", "general", "word-problems"):  # the old profiles were replaced
        text = CONFIG + f"  scoring: {{profile: {bad}}}\n"
        with pytest.raises(ConfigError, match=r"routing\.scoring\.profile \(line 23\).*'learned'"):
            build_settings(parse_config(text), "<t>", {})

"""`gateway route`'s explanation: the tier a prompt scores into, and, when that tier's provider is
disabled (an unset key variable), where a request would go instead or that it gets a 404."""

from __future__ import annotations

from gateway.config import Settings, build_settings, parse_config
from gateway.routing.explain import explain

CONFIG = """
providers:
  d: {type: demo}
  keyed: {type: openai, base_url: "http://127.0.0.1:9/v1", api_key_env: EXPLAIN_TEST_KEY}
models:
  - {name: small, provider: d}
  - {name: big, provider: keyed}
  - {name: big-too, provider: keyed}
cache: {embedder: {type: hash}}
routing:
  aliases:
    mixed: {tiers: [{model: small, max_score: 0.5}, {model: big}]}
    keyed-only: {tiers: [{model: big, max_score: 0.5}, {model: big-too}]}
"""
HARD = "Prove step by step, then analyse and compare and derive the general formula."


def settings(environ: dict[str, str]) -> Settings:
    return build_settings(parse_config(CONFIG), "<t>", environ)


async def test_a_served_tier_is_all_it_says() -> None:
    text = await explain(settings({"EXPLAIN_TEST_KEY": "sk-1"}), HARD, "mixed")
    assert text.endswith("mixed -> tier 1: big")


async def test_a_disabled_tier_names_the_variable_and_where_a_request_goes() -> None:
    text = await explain(settings({}), HARD, "mixed")
    lines = text.splitlines()[-3:]
    assert lines[0] == "mixed -> tier 1: big"
    assert "big is not served" in lines[1] and "EXPLAIN_TEST_KEY is not set" in lines[1]
    assert lines[2] == "  a request now goes to tier 0: small (moved-down)"


async def test_an_alias_with_no_served_tier_says_it_is_a_404_and_names_the_served_ones() -> None:
    text = await explain(settings({}), "hi", "keyed-only")
    last = text.splitlines()[-1]
    assert last == (
        "  no tier of keyed-only is served: a request now gets a 404 (routed aliases served: mixed)"
    )

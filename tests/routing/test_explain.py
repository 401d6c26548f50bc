"""`gateway route`'s explanation: the tier a prompt scores into, and, when that tier's provider is
disabled (an unset key variable), where a request would go instead or that it gets a 404."""

from __future__ import annotations

import math
from dataclasses import asdict

from gateway.config import Settings, build_settings, parse_config
from gateway.config.routing import ScoringConfig
from gateway.routing.explain import explain
from gateway.routing.features import extract
from gateway.routing.model import VOTE_ONLY
from gateway.routing.scorer import ComplexityScorer

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
    mixed: {tiers: [{model: small, keep_quality: 0.95}, {model: big}]}
    keyed-only: {tiers: [{model: big, keep_quality: 0.95}, {model: big-too}]}
"""
# Hard for the vote-only model (the hash embedder has no fitted head): long, with numbers
# and relations between them, as the word problems where the cheap model loses are.
HARD = (
    "A train leaves at 3 pm travelling 60 km/h; a second leaves the same station at 4 pm at "
    "80 km/h. Each stops for 10 minutes every 100 km. When and where does the second catch the "
    "first? Prove your answer step by step, then derive the general formula for n trains."
)
ARITHMETIC = "What is 3 * 4 + 2?"


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


def section(text: str, header: str, end: str) -> list[str]:
    """The lines after the one starting with `header`, up to the one starting with `end`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    stop = next(i for i in range(start + 1, len(lines)) if lines[i].startswith(end))
    return lines[start + 1 : stop]


async def test_the_loss_comes_first_with_what_it_means() -> None:
    text = await explain(settings({}), HARD, "mixed")
    first, meaning = text.splitlines()[0], " ".join(text.splitlines()[1:3])
    assert first.startswith("score: ") and first.endswith(", the predicted quality loss:")
    assert 0 <= float(first.split()[1].rstrip(",")) <= 1
    assert "cheap model answers wrong where the strong one answers right" in meaning
    assert "reference pair (Mixtral-8x7B cheap, GPT-4 strong)" in meaning


async def test_terms_are_largest_first_signed_with_each_features_count() -> None:
    prompt = HARD + " Then compute 3 * 4 + 12 / 6."
    text = await explain(settings({}), prompt, "mixed")
    terms = section(text, "terms (log-odds", "  sum ")
    values = [abs(float(line.split()[1])) for line in terms]
    assert values == sorted(values, reverse=True)
    assert all(line.split()[1][0] in "+-" for line in terms)
    counts = asdict(extract({"messages": [{"role": "user", "content": prompt}]}))
    counted = [line.split() for line in terms if "count" in line]
    assert counted, "some feature moved the score"
    for name, _, word, count in counted:
        assert word == "count" and int(count) == counts[name] > 0


async def test_a_feature_the_model_gives_no_term_is_still_shown_with_its_count() -> None:
    quiet = CONFIG + "  scoring: {weights: {math: 0}}\n"
    text = await explain(build_settings(parse_config(quiet), "<t>", {}), ARITHMETIC, "mixed")
    assert not any(line.split()[0] == "math" for line in section(text, "terms", "  sum "))
    math = extract({"messages": [{"role": "user", "content": ARITHMETIC}]}).math
    [unused] = [line for line in text.splitlines() if "counted, no term in this model: " in line]
    assert math > 0 and f"math {math}" in unused.split(": ", 1)[1].split(", ")


async def test_the_cuts_are_shown_before_the_tier() -> None:
    lines = (await explain(settings({}), "hi", "mixed")).splitlines()
    cut = ComplexityScorer(ScoringConfig()).calibration(VOTE_ONLY).cut_for_kept(0.95)
    assert lines[-2:] == [
        f"cuts: tier 0 (small) up to {cut:.3f} (keep_quality 0.95 for vote); tier 1 (big) the rest",
        "mixed -> tier 0: small",
    ]


MINILM = CONFIG.replace("cache: {embedder: {type: hash}}", "cache: {embedder: {type: minilm}}")
PROOF = "Prove that the square root of 2 is irrational, then compare two different proofs."


async def test_with_minilm_the_voters_are_the_nearest_exemplars_nearest_first() -> None:
    minilm = build_settings(parse_config(MINILM), "<t>", {"EXPLAIN_TEST_KEY": "sk-1"})
    text = await explain(minilm, PROOF, "mixed")
    assert "scored by: minilm" in text
    voters = section(text, "nearest exemplars, the voters", "cuts: ")
    similarities = [float(line.split()[0]) for line in voters]
    assert len(voters) > 1 and similarities == sorted(similarities, reverse=True)
    assert all(0 <= float(line.split()[1]) <= 1 for line in voters)
    assert "square root of 2 is irrational" in voters[0], "the shipped proof exemplar is nearest"
    simple = await explain(minilm, "hi!", "mixed")
    assert text.endswith("mixed -> tier 1: big") and simple.endswith("mixed -> tier 0: small")


async def test_the_terms_add_up_to_the_loss_and_its_rank_among_the_reference_prompts() -> None:
    text = await explain(settings({}), HARD, "mixed")
    loss = float(text.splitlines()[0].split()[1].rstrip(","))
    terms = section(text, "terms (log-odds", "  sum ")
    total = sum(float(line.split()[1]) for line in terms)
    [line] = [line for line in text.splitlines() if line.startswith("  sum ")]
    assert line.split()[-1] == f"{loss:.3f}" and abs(1 / (1 + math.exp(-total)) - loss) < 0.005
    share, _ = ComplexityScorer(ScoringConfig()).calibration(VOTE_ONLY).at(loss)
    [rank] = [line for line in text.splitlines() if "of the reference prompts score at" in line]
    assert abs(int(rank.split("%")[0]) - 100 * share) <= 1.5  # the loss shown is rounded

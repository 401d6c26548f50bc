"""`gateway route "prompt"`: why a prompt would go where it goes, for people tuning the routing
policy: the predicted quality loss, the log-odds terms that make it (largest first, with the
counts behind them), the exemplars that voted, and the tier with its cuts. Breakers and
stickiness are left out: this is about the prompt; a tier whose provider is disabled is not,
since a request would not go there either.

The score is the one a running gateway gives the same request (its `x-gateway-route`): the
same features of the same body, the turn the router embeds, embedded by the stage that embeds
requests (a two-stage embedder's quick one, once loaded), against exemplars embedded as the
router embeds them, and the escalation the alias's rules give."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from gateway.config import AliasConfig, Settings
from gateway.routing.calibration import EVERYTHING, NOTHING, Calibration
from gateway.routing.features import SCORED, Features, extract
from gateway.routing.model import FEATURES_ONLY, VOTE_ONLY
from gateway.routing.router import available_tier, escalation_floor, tier_for
from gateway.routing.scorer import ComplexityScorer, Score
from gateway.routing.thresholds import Thresholds
from gateway.util.maths import logistic
from gateway.wire import last_user_text

MEANING = (
    "  the chance that the cheap model answers wrong where the strong one answers right, "
    "for the\n  reference pair (Mixtral-8x7B cheap, GPT-4 strong): an estimate for your models"
)
FEATURES_ONLY_TEXT = (
    "the features-only model (no embedding: no embedder, or the exemplars not embedded yet)"
)
TEXT = 70  # characters of an exemplar's text shown


async def explain(
    settings: Settings, request: str | dict[str, Any], alias: str, tenant: str | None = None
) -> str:
    """`request`: a prompt (a request of that one user turn), or a chat request body as a
    client sends it. `tenant`: whose policies apply (None: config.yaml's alias)."""
    from gateway.cache.factory import new_embedder
    from gateway.embedding.two_stage import TwoStageEmbedder, settled

    body = request if isinstance(request, dict) else _one_turn(alias, request)
    aliases = settings.routing.aliases
    if tenant is not None:
        aliases = settings.policies.resolve(tenant, alias).routing.aliases
    config = aliases[alias]
    features = extract(body)
    text = last_user_text(body)
    scorer = ComplexityScorer(settings.routing.scoring)
    embedder = new_embedder(settings.file.cache.embedder)
    try:
        await embedder.start()
        await settled(embedder)  # as a started gateway embeds: the quick stage, if any
        await scorer.prepare(embedder)
        score = scorer.score(features, None if text is None else await embedder.embed(text))
        stage = embedder.quick_state if isinstance(embedder, TwoStageEmbedder) else None
    finally:
        await embedder.close()
    thresholds = Thresholds(scorer.calibration)
    variant = score.variant
    tier = tier_for(config, score, thresholds)
    floor, why = escalation_floor(config, features, tenant)
    lines = [f"score: {score.value:.3f}, the predicted quality loss:", MEANING]
    lines += _rank(score.value, scorer.calibration(variant))
    lines.append(f"scored by: {variant}, {_variant(variant)}")
    if stage is not None:
        quick = "its int8 quick stage" if stage == "on" else "the model alone (no quick stage)"
        lines.append(f"  the last user turn embedded by {embedder.name}: {quick}, as requests are")
    lines += _terms(score, features)
    lines += _voters(score)
    lines.append(_cuts(config, thresholds.cuts(config, variant), variant))
    escalated = f" (escalated from tier {tier}: {why})" if floor > tier else ""
    tier = max(tier, floor)
    lines.append(f"{alias} -> tier {tier}: {config.tiers[tier].model}{escalated}")
    lines += _served(settings, alias, tier)
    return "\n".join(lines)


def _one_turn(alias: str, prompt: str) -> dict[str, Any]:
    return {"model": alias, "messages": [{"role": "user", "content": prompt}]}


def _variant(name: str) -> str:
    if name == FEATURES_ONLY:
        return FEATURES_ONLY_TEXT
    if name == VOTE_ONLY:
        return "the model on features and the exemplar vote (no head was fitted on this embedder)"
    return f"the model fitted on {name} embeddings (features, embedding head, exemplar vote)"


def _rank(value: float, calibration: Calibration) -> list[str]:
    """Where the loss falls among the reference prompts the variant was calibrated on."""
    share, _ = calibration.at(value)
    return [
        f"  {share:.0%} of the reference prompts score at or below it; they are",
        f"  {calibration.reference}",
    ]


def _terms(score: Score, features: Features) -> list[str]:
    """Each term with its sign (log-odds: + pushes towards the strong tier), largest |value|
    first, the feature's count beside it; then what the logistic makes of their sum, and the
    features counted that this model gives no term."""
    counts = {name: count for name, count in asdict(features).items() if name in SCORED}
    terms = sorted(score.parts.items(), key=lambda term: -abs(term[1]))
    width = max((len(name) for name, _ in terms), default=0)
    lines = ["terms (log-odds; + pushes towards the strong tier, - towards the cheap one):"]
    for name, value in terms:
        count = f"   count {counts[name]}" if name in counts else ""
        lines.append(f"  {name:<{width}}  {value:+.3f}{count}")
    total = sum(value for _, value in terms)
    lines.append(f"  {'sum':<{width}}  {total:+.3f} -> logistic {logistic(total):.3f}")
    unused = [f"{name} {n}" for name, n in counts.items() if n and name not in score.parts]
    if unused:
        lines.append(f"  counted, no term in this model: {', '.join(unused)}")
    return lines


def _voters(score: Score) -> list[str]:
    if not score.neighbours:
        return ["no exemplar voted (no embedding, or the model gives the vote no weight)"]
    lines = ['nearest exemplars, the voters of "exemplars" (similarity, difficulty, text):']
    lines += [
        f"  {n.similarity:.3f}  {n.difficulty:.2f}  {_shortened(n.text)}" for n in score.neighbours
    ]
    return lines


def _shortened(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= TEXT else flat[: TEXT - 3] + "..."


def _cuts(config: AliasConfig, cuts: tuple[float, ...], variant: str) -> str:
    """Which losses each tier takes (a request goes to the first whose cut holds its score),
    and how a cut set in user terms came out for the variant that scored it."""
    ranges = []
    for index, (tier, cut) in enumerate(zip(config.tiers, cuts, strict=False)):
        takes = {NOTHING: "takes nothing", EVERYTHING: "takes every score"}.get(cut)
        said = f"{tier.threshold[0]} {tier.threshold[1]:g}" if tier.threshold else ""
        how = f" ({said} for {variant})" if said and not said.startswith("max_score") else ""
        ranges.append(f"tier {index} ({tier.model}) {takes or f'up to {cut:.3f}'}{how}")
    last = len(config.tiers) - 1
    ranges.append(f"tier {last} ({config.tiers[last].model}) the rest")
    return f"cuts: {'; '.join(ranges)}"


def _served(settings: Settings, alias: str, tier: int) -> list[str]:
    """What a request would meet when the tier's model is not served (its provider disabled,
    say for an unset key variable): the tier it moves to, or the 404 and why."""
    config = settings.routing.aliases[alias]
    route = settings.routes[config.tiers[tier].model]
    if route.disabled_reason is None:
        return []
    lines = [f"  {route.name} is not served: its {route.disabled_reason}"]
    moved, how = available_tier(config, tier, settings.routes, lambda _: True)
    if how is None:
        others = [a for a in settings.served_aliases() if a != alias]
        served = f" (routed aliases served: {', '.join(others)})" if others else ""
        lines.append(f"  no tier of {alias} is served: a request now gets a 404{served}")
    else:
        lines.append(f"  a request now goes to tier {moved}: {config.tiers[moved].model} ({how})")
    return lines

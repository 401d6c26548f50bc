"""`gateway route "prompt"`: the features, score parts and tier a prompt would get, for people
tuning the routing policy. Breakers and stickiness are left out: this is about the prompt; a
tier whose provider is disabled is not, since a request would not go there either."""

from __future__ import annotations

from dataclasses import asdict

from gateway.config import Settings
from gateway.routing.features import extract
from gateway.routing.router import available_tier, tier_for
from gateway.routing.scorer import ComplexityScorer


async def explain(settings: Settings, prompt: str, alias: str) -> str:
    from gateway.cache.factory import new_embedder

    config = settings.routing.aliases[alias]
    body = {"model": alias, "messages": [{"role": "user", "content": prompt}]}
    features = extract(body)
    scorer = ComplexityScorer(settings.routing.scoring)
    embedder = new_embedder(settings.file.cache.embedder)
    try:
        await scorer.prepare(embedder)
        score = scorer.score(features, await embedder.embed(prompt))
    finally:
        await embedder.close()
    tier = tier_for(config, score.value)
    lines = ["features:"]
    lines += [f"  {name}: {value}" for name, value in asdict(features).items() if value]
    lines.append("score parts:")
    lines += [f"  {name}: {value:+.3f}" for name, value in score.parts.items()]
    if score.neighbours:
        lines.append("nearest exemplars:")
        lines += [
            f"  {n.similarity:.3f}  difficulty {n.difficulty:.2f}  " + " ".join(n.text.split())[:70]
            for n in score.neighbours
        ]
    lines.append(f"score: {score.value:.3f}")
    lines.append(f"{alias} -> tier {tier}: {config.tiers[tier].model}")
    lines += _served(settings, alias, tier)
    return "\n".join(lines)


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

"""`gateway route --explain ALIAS [--prompts FILE]`: what an alias's thresholds mean.
For each tier, how its cut is set, the score cut that gives for each scoring variant, and the
share of the calibration's reference prompts it would send there with the quality kept; with
`--prompts`, the share of your own prompts each tier would take, scored as the gateway would
score them (the configured embedder, its variant)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

from gateway.config import AliasConfig, Settings
from gateway.routing.calibration import Calibration
from gateway.routing.features import extract
from gateway.routing.router import tier_for
from gateway.routing.thresholds import Thresholds, describe_cut, tier_cut

PAIR = "Mixtral-8x7B cheap, GPT-4 strong"


class PromptsError(ValueError):
    """A prompts file that cannot be read: says which line and why."""


def describe_alias(
    alias: str,
    config: AliasConfig,
    calibrations: Mapping[str, Calibration],
    in_use: str | None = None,
) -> list[str]:
    """The tiers of `alias`, each with its cut per variant and what that cut does on the
    variant's reference data. `in_use`: the variant the configured embedder scores with."""
    lines = [
        f"{alias}: {len(config.tiers)} tiers, cheapest first. A request goes to the first tier "
        "whose cut",
        "its score (the predicted quality loss) is at or below; each scoring variant has its "
        "own cut",
        "(<-: the variant of the configured embedder).",
    ]
    thresholds = Thresholds(calibrations.__getitem__)
    cuts = {variant: thresholds.cuts(config, variant) for variant in calibrations}
    width = max((len(v) for v in calibrations), default=0)
    for n, tier in enumerate(config.tiers):
        threshold = tier.threshold
        if threshold is None:
            lines.append(f"  tier {n} {tier.model}: the rest")
            for variant, calibration in calibrations.items():
                below = cuts[variant][n - 1] if n else None
                share = 1.0 - (calibration.at(below)[0] if below is not None else 0.0)
                mark = _mark(variant, in_use)
                lines.append(f"    {variant:<{width}}  takes {share:6.1%}{mark}")
            continue
        kind, value = threshold
        lines.append(f"  tier {n} {tier.model}: {kind} {value:g}")
        if not calibrations:
            lines.append(f"    cut {describe_cut(tier_cut(tier, None))} (no calibration)")
        for variant, calibration in calibrations.items():
            cut = cuts[variant][n]
            share, kept = calibration.at(cut)
            lower = calibration.at(cuts[variant][n - 1])[0] if n else 0.0
            lines.append(
                f"    {variant:<{width}}  cut {describe_cut(cut):<5}  takes {share - lower:6.1%}"
                f"  (this tier and cheaper {share:6.1%}, kept {kept:6.1%})" + _mark(variant, in_use)
            )
    lines += _about(calibrations)
    return lines


def describe_prompts(
    config: AliasConfig, tiers: Sequence[int], variant: str, source: str
) -> list[str]:
    """The share of the prompts each tier took."""
    counts = Counter(tiers)
    total = len(tiers)
    lines = [f"your prompts: {total} from {source}, scored by the {variant} variant"]
    for n, tier in enumerate(config.tiers):
        share = counts[n] / total if total else 0.0
        lines.append(f"  tier {n} {tier.model}: {counts[n]} ({share:.1%})")
    lines.append(
        "  (by score alone: escalation for tools, images, long context or tenant, and "
        "stickiness, can only move a request up)"
    )
    return lines


def read_prompts(path: Path) -> list[str]:
    """One prompt per line, or JSON Lines with a "prompt" field (the file's first non-blank
    line decides). Blank lines are skipped."""
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptsError(f"{path}: {exc}") from None
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise PromptsError(f"{path}: no prompts (one a line, or JSON Lines with a 'prompt')")
    if not lines[0][1].lstrip().startswith("{"):
        return [line.strip() for _, line in lines]
    prompts = []
    for n, line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PromptsError(f"{path}, line {n}: not JSON ({exc.msg})") from None
        prompt = record.get("prompt") if isinstance(record, dict) else None
        if not isinstance(prompt, str) or not prompt.strip():
            raise PromptsError(f'{path}, line {n}: no "prompt" string')
        prompts.append(prompt)
    return prompts


async def explain_alias(settings: Settings, alias: str, prompts_path: Path | None) -> str:
    """The report for `alias` as configured, with the real scorer and embedder."""
    from gateway.cache.factory import new_embedder
    from gateway.routing.scorer import ComplexityScorer

    config = settings.routing.aliases[alias]
    prompts = read_prompts(prompts_path) if prompts_path is not None else None
    scorer = ComplexityScorer(settings.routing.scoring)
    calibrations = {name: scorer.calibration(name) for name in scorer.model.variants}
    thresholds = Thresholds(scorer.calibration)
    thresholds.check({alias: config}, calibrations)
    embedder = new_embedder(settings.file.cache.embedder)
    try:
        in_use = scorer.model.variant_for(embedder.name).name
        lines = describe_alias(alias, config, calibrations, in_use) + _unserved(settings, config)
        if prompts is None:
            return "\n".join(lines)
        await scorer.prepare(embedder)
        vectors = await embedder.embed_many(prompts) if scorer.prepared else None
    finally:
        await embedder.close()
    tiers = []
    for n, prompt in enumerate(prompts):
        body = {"model": alias, "messages": [{"role": "user", "content": prompt}]}
        score = scorer.score(extract(body), None if vectors is None else vectors[n])
        tiers.append(tier_for(config, score, thresholds))
    return "\n".join(
        [*lines, "", *describe_prompts(config, tiers, scorer.variant, str(prompts_path))]
    )


def _unserved(settings: Settings, config: AliasConfig) -> list[str]:
    """Tiers a request would not reach today (their provider disabled, as for an unset key)."""
    lines = []
    for n, tier in enumerate(config.tiers):
        reason = settings.routes[tier.model].disabled_reason
        if reason is not None:
            lines.append(f"note: tier {n} {tier.model} is not served now: its {reason}")
    return lines


def _mark(variant: str, in_use: str | None) -> str:
    return "   <-" if variant == in_use else ""


def _about(calibrations: Mapping[str, Calibration]) -> list[str]:
    references = sorted({c.reference for c in calibrations.values()})
    if not references:
        return ["no calibration: keep_quality and cheap_share cannot be resolved"]
    lines = [
        "takes: the share of the reference prompts a tier gets; kept: the quality kept relative",
        "  to always-strong when those at or below the cut go cheap. Both are measured for the",
        f"  reference pair ({PAIR}): for your models, an estimate.",
    ]
    lines += [f"reference: {reference}" for reference in references]
    return lines

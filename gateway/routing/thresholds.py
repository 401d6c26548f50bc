"""Each tier's score cut, from however the alias sets it: `max_score` as it is, `keep_quality`
and `cheap_share` through the calibration of the scoring variant that scored the request (each
variant's scores spread differently, so the same 95 % is a different cut for each).

Resolved once per (alias tiers, variant) and kept: policies may give a request its own
alias tiers, and routing has well under a millisecond.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from gateway.config import AliasConfig, TierConfig
from gateway.routing.calibration import EVERYTHING, NOTHING, Calibration

log = logging.getLogger("gateway.routing")
CalibrationOf = Callable[[str], Calibration]  # a scoring variant's calibration
_MEMO_LIMIT = 4096


def needs_calibration(config: AliasConfig) -> bool:
    """Whether some tier sets its cut in user terms (keep_quality or cheap_share)."""
    return any(t.max_score is None for t in config.tiers[:-1])


def tier_cut(tier: TierConfig, calibration: Calibration | None) -> float:
    """One tier's cut (the last tier's is EVERYTHING)."""
    threshold = tier.threshold
    if threshold is None:
        return EVERYTHING
    kind, value = threshold
    if kind == "max_score":
        return value
    if calibration is None:
        raise ValueError(f"{kind} needs the scorer's calibration, and there is none")
    if kind == "keep_quality":
        return calibration.cut_for_kept(value)
    return calibration.cut_for_share(value)


def resolve_cuts(config: AliasConfig, calibration: Calibration | None) -> tuple[float, ...]:
    """The score cut of each tier but the last, cheapest first: a request goes to the first
    tier whose cut its score is at or below. A ValueError when the cuts do not ascend (a
    `keep_quality` tier above a `max_score` one whose cut the calibration puts lower, say)."""
    cuts = tuple(tier_cut(tier, calibration) for tier in config.tiers[:-1])
    for n in range(1, len(cuts)):
        if cuts[n] < cuts[n - 1]:
            raise ValueError(
                f"tiers must go from cheap to strong: tier {n - 1} ({_said(config, n - 1)}) "
                f"gives the cut {describe_cut(cuts[n - 1])}, above tier {n}'s "
                f"({_said(config, n)}: {describe_cut(cuts[n])})"
                + (f" on {calibration.reference}" if calibration is not None else "")
            )
    return cuts


def describe_cut(cut: float) -> str:
    if cut == NOTHING:
        return "none (nothing goes here)"
    if cut == EVERYTHING:
        return "all (every score goes here)"
    return f"{cut:.3f}"


def _said(config: AliasConfig, n: int) -> str:
    threshold = config.tiers[n].threshold
    assert threshold is not None
    return f"{threshold[0]} {threshold[1]:g}"


class Thresholds:
    """The cuts an alias's tiers have for a scoring variant, resolved once and kept."""

    def __init__(self, calibration_of: CalibrationOf | None) -> None:
        self._calibration_of = calibration_of
        self._memo: dict[tuple[int, str], tuple[AliasConfig, tuple[float, ...]]] = {}

    def calibration(self, variant: str) -> Calibration | None:
        return None if self._calibration_of is None else self._calibration_of(variant)

    def cuts(self, config: AliasConfig, variant: str) -> tuple[float, ...]:
        key = (id(config), variant)
        found = self._memo.get(key)
        if found is None or found[0] is not config:  # an id reused by another config
            if len(self._memo) >= _MEMO_LIMIT:
                self._memo.clear()
            found = self._memo[key] = (config, self._resolve(config, variant))
        return found[1]

    def check(self, aliases: Mapping[str, AliasConfig], variants: Iterable[str]) -> None:
        """Resolve every alias for every variant now, so a bad combination fails at start-up
        (or `gateway check`) with the alias named, not at a request."""
        variants = tuple(variants)
        for alias, config in aliases.items():
            for variant in variants if needs_calibration(config) else ("",):
                try:
                    resolve_cuts(config, self.calibration(variant) if variant else None)
                except ValueError as exc:
                    on = f" (scored by the {variant} variant)" if variant else ""
                    raise ValueError(f"routing.aliases.{alias}{on}: {exc}") from None

    def _resolve(self, config: AliasConfig, variant: str) -> tuple[float, ...]:
        calibration = self.calibration(variant) if needs_calibration(config) else None
        try:
            return resolve_cuts(config, calibration)
        except ValueError as exc:
            # Only a policy can get here (start-up checked config.yaml's aliases): route
            # rather than fail the request, on cuts made to ascend.
            log.error("routing: %s; each cut raised to the one before it", exc)
            cuts = [tier_cut(tier, calibration) for tier in config.tiers[:-1]]
            return tuple(max(cuts[: n + 1]) for n in range(len(cuts)))

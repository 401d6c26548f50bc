"""What routing decided for a request: a plain value the request context carries, with no
dependency on the router (so gateway/context.py and the router do not import each other)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.config import Pricing


@dataclass(frozen=True, slots=True)
class RouteDecision:
    alias: str
    model: str  # the tier's model, a configured public name
    tier: int
    score: float
    reason: str  # score, escalated:<why>, sticky, moved-up, moved-down
    parts: dict[str, float] = field(default_factory=dict)
    strongest_pricing: Pricing | None = None  # what always-strong would have cost

    def header(self) -> str:
        return (
            f"alias={self.alias}; model={self.model}; tier={self.tier}; "
            f"score={self.score:.3f}; reason={self.reason}"
        )

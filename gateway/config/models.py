"""The `models:` section: public model names, their deployments, fallbacks, pricing and cache."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gateway.config.base import Strict
from gateway.config.cache import CachePolicyOverride


class Pricing(Strict):
    input_per_million: float = Field(0.0, ge=0, description="Price of 1M input tokens.")
    output_per_million: float = Field(0.0, ge=0, description="Price of 1M output tokens.")


class DeploymentConfig(Strict):
    """One place a model is served from; a model with several balances between them."""

    provider: str
    upstream_model: str | None = Field(None, description="Default: the model's upstream_model.")
    weight: float = Field(1.0, gt=0, le=1000, description="Share of traffic, relative.")


class ModelConfig(Strict):
    name: str = Field(min_length=1, max_length=128, description="Public name clients send.")
    provider: str | None = Field(None, description="Shorthand for one deployment.")
    upstream_model: str | None = Field(None, description="Name the upstream knows; default: name.")
    deployments: list[DeploymentConfig] = Field(default_factory=list)
    fallbacks: list[str] = Field(
        default_factory=list, description="Models tried in order when this one cannot answer."
    )
    deadline_seconds: float | None = Field(
        None, gt=0, le=3600, description="Default: resilience.deadline_seconds."
    )
    kind: Literal["chat", "embedding"] = "chat"
    aliases: list[str] = Field(default_factory=list)
    cache: CachePolicyOverride = Field(default_factory=CachePolicyOverride)
    pricing: Pricing | None = None

    @model_validator(mode="after")
    def _one_way_to_deploy(self) -> ModelConfig:
        if (self.provider is None) == (not self.deployments):
            raise ValueError("give either provider (one deployment) or deployments, not both")
        return self

    def deployment_list(self) -> list[DeploymentConfig]:
        if self.provider is not None:
            return [DeploymentConfig(provider=self.provider, upstream_model=self.upstream_model)]
        return self.deployments

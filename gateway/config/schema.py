"""The config file's top-level shape: server, auth, providers, models, and the sections
defined beside it (cache, resilience, degradation, knowledge bases)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gateway.config.base import Strict
from gateway.config.cache import CacheConfig, CachePolicyOverride
from gateway.config.guard import GuardConfig
from gateway.config.knowledge import KnowledgeBaseConfig
from gateway.config.limits import RateLimitsConfig
from gateway.config.resilience import DegradationConfig, ResilienceConfig
from gateway.config.routing import RoutingConfig


class ServerConfig(Strict):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, description="Larger bodies get 413.")
    access_log: bool = Field(True, description="One JSON line per request on stderr.")
    tune_gc: bool = Field(
        True, description="Freeze start-up objects and collect less often (lower p99 under load)."
    )
    log_prompts: bool = Field(False, description="Put prompt text in the access log.")
    watch_config: bool = Field(
        True, description="Reload when the config file changes (also: SIGHUP, POST /admin/reload)."
    )
    drain_seconds: float = Field(
        0.0,
        ge=0,
        le=600,
        description="SIGTERM: report not ready this long before refusing connections "
        "(a balancer's health-check interval or two).",
    )
    shutdown_timeout_seconds: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="SIGTERM: the longest requests in flight may take to finish; streams still "
        "running then end with an SSE error event.",
    )


class PoliciesConfig(Strict):
    dir: str = Field(
        "policies", description="Directory of policy files (*.yaml), relative to this file."
    )


class ApiKeyConfig(Strict):
    env: str = Field(description="Name of the environment variable that holds the key.")
    tenant: str = Field(min_length=1, max_length=64)


class AuthConfig(Strict):
    anonymous_tenant: str = Field(
        "local", description="Tenant of every caller when no keys are configured."
    )
    keys: list[ApiKeyConfig] = Field(default_factory=list)
    admin_key_env: str | None = Field(
        "GATEWAY_ADMIN_KEY", description="Environment variable with the admin key."
    )
    metrics_key_env: str | None = Field(
        None,
        description="Environment variable with a key /metrics then requires (Prometheus: "
        "authorization: {credentials: ...}); unset: /metrics is open, like /healthz.",
    )


class TimeoutConfig(Strict):
    connect: float = Field(5.0, gt=0)
    read: float = Field(60.0, gt=0, description="Longest silence between two reads.")
    total: float = Field(300.0, gt=0)


class ProviderConfig(Strict):
    type: Literal["openai", "demo"] = "openai"
    base_url: str | None = None
    api_key_env: str | None = Field(
        None, description="Environment variable with the provider key; unset disables it."
    )
    headers: dict[str, str] = Field(default_factory=dict)
    timeouts: TimeoutConfig = Field(default_factory=TimeoutConfig)
    max_connections: int = Field(100, ge=1, le=10_000)
    stream_usage: bool = Field(
        True, description="Ask the upstream for usage on streams, to account tokens."
    )

    @model_validator(mode="after")
    def _openai_needs_url(self) -> ProviderConfig:
        if self.type == "openai" and not self.base_url:
            raise ValueError("an 'openai' provider needs base_url")
        if self.base_url and not self.base_url.startswith(("http://", "https://")):
            raise ValueError("base_url must start with http:// or https://")
        return self


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


class ConfigFile(Strict):
    server: ServerConfig = Field(default_factory=ServerConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    providers: dict[str, ProviderConfig]
    models: list[ModelConfig] = Field(min_length=1)
    cache: CacheConfig = Field(default_factory=CacheConfig)
    resilience: ResilienceConfig = Field(default_factory=ResilienceConfig)
    degradation: DegradationConfig = Field(default_factory=DegradationConfig)
    knowledge_bases: dict[str, KnowledgeBaseConfig] = Field(default_factory=dict)
    guard: GuardConfig = Field(default_factory=GuardConfig)
    routing: RoutingConfig = Field(default_factory=RoutingConfig)
    rate_limits: RateLimitsConfig = Field(default_factory=RateLimitsConfig)
    policies: PoliciesConfig = Field(default_factory=PoliciesConfig)

    @model_validator(mode="after")
    def _cross_references(self) -> ConfigFile:
        kinds: dict[str, str] = {}
        for i, model in enumerate(self.models):
            for deployment in model.deployment_list():
                if deployment.provider not in self.providers:
                    raise ValueError(
                        f"models[{i}]: unknown provider {deployment.provider!r}; "
                        f"defined: {sorted(self.providers)}"
                    )
            for public in (model.name, *model.aliases):
                if public in kinds:
                    raise ValueError(f"models[{i}]: name or alias {public!r} is used twice")
                kinds[public] = model.kind
        for i, model in enumerate(self.models):
            for fallback in model.fallbacks:
                if fallback not in kinds:
                    raise ValueError(f"models[{i}].fallbacks: unknown model {fallback!r}")
                if fallback in (model.name, *model.aliases):
                    raise ValueError(f"models[{i}].fallbacks: a model cannot fall back to itself")
                if kinds[fallback] != model.kind:
                    raise ValueError(
                        f"models[{i}].fallbacks: {fallback!r} is {kinds[fallback]}, "
                        f"not {model.kind}"
                    )
        tenants_by_env: dict[str, str] = {}
        for key in self.auth.keys:
            if key.env in tenants_by_env:
                raise ValueError(f"auth.keys: environment variable {key.env!r} is listed twice")
            tenants_by_env[key.env] = key.tenant
        self._check_attachments(kinds)
        self._check_routing(kinds)
        summarizer = self.guard.compression.summarizer_model
        if summarizer is not None and kinds.get(summarizer) != "chat":
            raise ValueError(
                f"guard.compression.summarizer_model: {summarizer!r} is not a chat model"
            )
        return self

    def _check_routing(self, kinds: dict[str, str]) -> None:
        for alias, config in self.routing.aliases.items():
            where = f"routing.aliases.{alias}"
            if alias in kinds:
                raise ValueError(f"{where}: {alias!r} is already a model name or alias")
            for tier in config.tiers:
                if kinds.get(tier.model) != "chat":
                    raise ValueError(
                        f"{where}.tiers: {tier.model!r} is not a configured chat model"
                    )

    def _check_attachments(self, kinds: dict[str, str]) -> None:
        """Each model or tenant gets at most one knowledge base, and only chat models get one."""
        owner: dict[tuple[str, str], str] = {}
        for name, kb in self.knowledge_bases.items():
            targets = [("model", m) for m in kb.attach.models]
            targets += [("tenant", t) for t in kb.attach.tenants]
            for target in targets:
                if target[0] == "model" and kinds.get(target[1]) != "chat":
                    raise ValueError(
                        f"knowledge_bases.{name}.attach.models: {target[1]!r} is not a chat model"
                    )
                if target in owner:
                    raise ValueError(
                        f"knowledge_bases.{name}.attach: {target[0]} {target[1]!r} is already "
                        f"attached to {owner[target]!r}"
                    )
                owner[target] = name

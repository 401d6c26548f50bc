"""config.yaml as a whole: every top-level section, each defined in the module of its name,
and the checks that cross sections (references between models, aliases, knowledge bases)."""

from __future__ import annotations

from pydantic import Field, model_validator

from gateway.config.auth import AuthConfig
from gateway.config.base import EntryProblem, Strict
from gateway.config.cache import CacheConfig, VerifyOverride
from gateway.config.degradation import DegradationConfig
from gateway.config.guard import GuardConfig
from gateway.config.knowledge_bases import KnowledgeBaseConfig
from gateway.config.models import DeploymentConfig, ModelConfig
from gateway.config.providers import ProviderConfig
from gateway.config.rate_limits import RateLimitsConfig
from gateway.config.redis import RedisConfig, SharedRedis, resolve
from gateway.config.resilience import ResilienceConfig
from gateway.config.responses import ResponsesConfig
from gateway.config.routing import RoutingConfig
from gateway.config.server import ServerConfig


class PoliciesConfig(Strict):
    dir: str = Field(
        "policies", description="Directory of policy files (*.yaml), relative to this file."
    )


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
    responses: ResponsesConfig = Field(
        default_factory=ResponsesConfig,
        description="Stored Responses (POST /v1/responses with store: true): where, how long.",
    )
    redis: RedisConfig = Field(
        default_factory=RedisConfig,
        description="The Redis that parts with `type: redis` share state in (docs/DEPLOY.md).",
    )
    policies: PoliciesConfig = Field(default_factory=PoliciesConfig)

    def shared_redis(self) -> SharedRedis:
        """Where each part that shares state keeps it: one server, a prefix per part."""
        parts = {
            "cache": self.cache.store.as_written("cache.store", ":cache"),
            "breakers": self.resilience.breaker_storage.as_written("resilience.breaker_storage"),
            "rate_limits": self.rate_limits.storage.as_written("rate_limits.storage"),
            "responses": self.responses.store.as_written("responses.store", ":responses"),
        }
        return resolve(self.redis, self.redis.model_fields_set, parts)

    @model_validator(mode="after")
    def _one_redis(self) -> ConfigFile:
        self.shared_redis()  # raises when old per-part fields disagree
        return self

    @model_validator(mode="after")
    def _cross_references(self) -> ConfigFile:
        kinds: dict[str, str] = {}
        for i, model in enumerate(self.models):
            for where, deployment in _deployments(model):
                if deployment.provider not in self.providers:
                    raise EntryProblem(
                        ("models", i, *where),
                        f"unknown provider {deployment.provider!r}; "
                        f"defined: {sorted(self.providers)}",
                    )
            for where, public in _public_names(model):
                if public in kinds:
                    raise EntryProblem(
                        ("models", i, *where), f"name or alias {public!r} is used twice"
                    )
                kinds[public] = model.kind
        for i, model in enumerate(self.models):
            for k, fallback in enumerate(model.fallbacks):
                at = ("models", i, "fallbacks", k)
                if fallback not in kinds:
                    raise EntryProblem(at, f"unknown model {fallback!r}")
                if fallback in (model.name, *model.aliases):
                    raise EntryProblem(at, "a model cannot fall back to itself")
                if kinds[fallback] != model.kind:
                    raise EntryProblem(at, f"{fallback!r} is {kinds[fallback]}, not {model.kind}")
        tenants_by_env: dict[str, str] = {}
        for i, key in enumerate(self.auth.keys):
            if key.env in tenants_by_env:
                raise EntryProblem(
                    ("auth", "keys", i, "env"), f"environment variable {key.env!r} is listed twice"
                )
            tenants_by_env[key.env] = key.tenant
        self._check_attachments(kinds)
        self._check_routing(kinds)
        self._check_judges(kinds)
        summarizer = self.guard.compression.summarizer_model
        if summarizer is not None and kinds.get(summarizer) != "chat":
            raise EntryProblem(
                ("guard", "compression", "summarizer_model"), f"{summarizer!r} is not a chat model"
            )
        return self

    def _check_judges(self, kinds: dict[str, str]) -> None:
        """A verification judge model must be a chat model. (A policy naming one that is not
        served gets the default judge: pipeline.py `_judge_call`.)"""
        places: list[tuple[tuple[str | int, ...], VerifyOverride | None]] = [
            (("cache", "defaults", "verify", "judge_model"), self.cache.defaults.verify)
        ]
        places += [
            (("models", i, "cache", "verify", "judge_model"), model.cache.verify)
            for i, model in enumerate(self.models)
        ]
        for at, verify in places:
            judge = verify.judge_model if verify is not None else None
            if judge is not None and kinds.get(judge) != "chat":
                raise EntryProblem(at, f"{judge!r} is not a configured chat model")

    def _check_routing(self, kinds: dict[str, str]) -> None:
        for alias, config in self.routing.aliases.items():
            if alias in kinds:
                raise EntryProblem(
                    ("routing", "aliases", alias), f"{alias!r} is already a model name or alias"
                )
            for n, tier in enumerate(config.tiers):
                if kinds.get(tier.model) != "chat":
                    raise EntryProblem(
                        ("routing", "aliases", alias, "tiers", n, "model"),
                        f"{tier.model!r} is not a configured chat model",
                    )

    def _check_attachments(self, kinds: dict[str, str]) -> None:
        """Each model or tenant gets at most one knowledge base, and only chat models get one."""
        owner: dict[tuple[str, str], str] = {}
        for name, kb in self.knowledge_bases.items():
            targets = [("model", "models", n, m) for n, m in enumerate(kb.attach.models)]
            targets += [("tenant", "tenants", n, t) for n, t in enumerate(kb.attach.tenants)]
            for kind, field, n, target in targets:
                at = ("knowledge_bases", name, "attach", field, n)
                if kind == "model" and kinds.get(target) != "chat":
                    raise EntryProblem(at, f"{target!r} is not a chat model")
                if (kind, target) in owner:
                    raise EntryProblem(
                        at, f"{kind} {target!r} is already attached to {owner[kind, target]!r}"
                    )
                owner[kind, target] = name


def _deployments(model: ModelConfig) -> list[tuple[tuple[str | int, ...], DeploymentConfig]]:
    """Each deployment with where it is written: the `provider:` shorthand or an entry."""
    if model.provider is not None:
        return [(("provider",), d) for d in model.deployment_list()]
    return [(("deployments", j, "provider"), d) for j, d in enumerate(model.deployments)]


def _public_names(model: ModelConfig) -> list[tuple[tuple[str | int, ...], str]]:
    names: list[tuple[tuple[str | int, ...], str]] = [(("name",), model.name)]
    return names + [(("aliases", k), alias) for k, alias in enumerate(model.aliases)]

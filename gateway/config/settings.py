"""The frozen runtime settings built from a validated ConfigFile.

The only place environment variables are read: keys are resolved here once per (re)load, and
models are indexed by every public name for the request path.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from pydantic import SecretStr

from gateway.config.cache import CachePolicy
from gateway.config.degradation import DegradationConfig
from gateway.config.environment import refuse_placeholders
from gateway.config.file import ConfigFile
from gateway.config.guard import GuardConfig
from gateway.config.knowledge_bases import KnowledgeBaseConfig
from gateway.config.models import ModelConfig, Pricing
from gateway.config.policy_set import PolicySet
from gateway.config.providers import ProviderConfig, TimeoutConfig
from gateway.config.resilience import ResilienceConfig
from gateway.config.routing import RoutingConfig
from gateway.config.server import ServerConfig


@dataclass(frozen=True, slots=True)
class ProviderSettings:
    name: str
    type: str
    base_url: str | None
    api_key: SecretStr | None
    headers: Mapping[str, str]
    timeouts: TimeoutConfig
    max_connections: int
    stream_usage: bool
    disabled_reason: str | None = None
    native: frozenset[str] = frozenset()  # endpoints it serves itself (config/providers.py)
    api_key_env: str | None = None  # the variable the key came from: named in fixes, not read


@dataclass(frozen=True, slots=True)
class Deployment:
    """One (provider, upstream model) pair; its circuit breaker is keyed by `key`."""

    provider: str
    upstream_model: str
    weight: float = 1.0

    @property
    def key(self) -> str:
        return f"{self.provider}/{self.upstream_model}"


@dataclass(frozen=True, slots=True)
class ModelRoute:
    """Where one public model name goes."""

    name: str
    provider: str  # the first usable deployment's, for labels and listings
    upstream_model: str
    kind: str
    cache: CachePolicy
    pricing: Pricing | None = None
    deployments: tuple[Deployment, ...] = ()  # usable ones only (provider enabled)
    fallbacks: tuple[str, ...] = ()
    deadline_seconds: float | None = None
    knowledge_base: str | None = None
    disabled_reason: str | None = None


@dataclass(frozen=True, slots=True)
class Settings:
    """The validated, environment-resolved configuration the running gateway uses."""

    source: str
    file: ConfigFile
    providers: Mapping[str, ProviderSettings]
    routes: Mapping[str, ModelRoute]  # every public name and alias -> its route
    tenant_by_key_hash: Mapping[str, str]
    admin_key_hash: str | None
    metrics_key_hash: str | None
    policies: PolicySet
    kb_by_tenant: Mapping[str, str] = field(default_factory=dict)
    kb_secrets: Mapping[str, SecretStr] = field(default_factory=dict)  # knowledge base -> token
    loaded_at: int = field(default_factory=lambda: int(time.time()))

    @property
    def server(self) -> ServerConfig:
        return self.file.server

    @property
    def resilience(self) -> ResilienceConfig:
        return self.file.resilience

    @property
    def degradation(self) -> DegradationConfig:
        return self.file.degradation

    @property
    def routing(self) -> RoutingConfig:
        return self.file.routing

    @property
    def guard(self) -> GuardConfig:
        return self.file.guard

    @property
    def knowledge_bases(self) -> Mapping[str, KnowledgeBaseConfig]:
        return self.file.knowledge_bases

    @property
    def anonymous(self) -> bool:
        return not self.file.auth.keys

    def served_models(self, kind: str | None = None) -> list[ModelRoute]:
        """Routes with a usable deployment, one per public name (aliases included)."""
        return [
            route
            for route in self.routes.values()
            if (kind is None or route.kind == kind) and route.disabled_reason is None
        ]

    def served_aliases(self) -> list[str]:
        """Routed aliases with at least one tier whose model is servable."""
        return [
            alias
            for alias, config in self.routing.aliases.items()
            if any(self.routes[t.model].disabled_reason is None for t in config.tiers)
        ]

    def secrets(self) -> list[str]:
        """Every secret value in force, so error messages and logs can be scrubbed of them:
        keys, and the values of extra headers (which may carry tokens)."""
        keys = [p.api_key for p in self.providers.values() if p.api_key]
        values = [k.get_secret_value() for k in (*keys, *self.kb_secrets.values())]
        headers = [p.headers for p in self.providers.values()]
        headers += [kb.headers for kb in self.knowledge_bases.values()]
        values += [v for h in headers for v in h.values() if len(v) >= 8]
        return values


def hash_key(key: str) -> str:
    # surrogatepass: a header with bytes that are not UTF-8 is still a (wrong) key, not a crash
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def build_settings(
    file: ConfigFile,
    source: str,
    environ: Mapping[str, str] | None = None,
    policies: PolicySet | None = None,
) -> Settings:
    env = os.environ if environ is None else environ
    providers = {name: _provider_settings(name, p, env) for name, p in file.providers.items()}
    kb_by_model = {m: n for n, kb in file.knowledge_bases.items() for m in kb.attach.models}
    routes: dict[str, ModelRoute] = {}
    for model in file.models:
        route = _route(model, file, providers, kb_by_model)
        for public in (model.name, *model.aliases):
            routes[public] = _renamed(route, public, kb_by_model.get(public, route.knowledge_base))
    tenant_by_key_hash = {hash_key(env[k.env]): k.tenant for k in file.auth.keys if env.get(k.env)}
    admin_env, metrics_env = file.auth.admin_key_env, file.auth.metrics_key_env
    admin_key = env.get(admin_env) if admin_env else None
    metrics_key = env.get(metrics_env) if metrics_env else None
    refuse_placeholders(file, env)  # replace-me, sk-...: first, as several may be alike
    _check_distinct_keys(file, env)
    kb_secrets = {
        name: SecretStr(env[kb.api_key_env])
        for name, kb in file.knowledge_bases.items()
        if kb.api_key_env and env.get(kb.api_key_env)
    }
    return Settings(
        source=source,
        file=file,
        providers=providers,
        routes=routes,
        tenant_by_key_hash=tenant_by_key_hash,
        admin_key_hash=hash_key(admin_key) if admin_key else None,
        metrics_key_hash=hash_key(metrics_key) if metrics_key else None,
        kb_by_tenant={t: n for n, kb in file.knowledge_bases.items() for t in kb.attach.tenants},
        kb_secrets=kb_secrets,
        policies=policies or PolicySet(file),
    )


def _check_distinct_keys(file: ConfigFile, env: Mapping[str, str]) -> None:
    """Each tenant key, the admin key and the metrics key must differ: a shared value would
    make one tenant another, or a tenant an admin. Names the variables, never the values."""
    named = [(k.env, f"tenant {k.tenant!r}") for k in file.auth.keys]
    for special, role in (
        (file.auth.admin_key_env, "admin"),
        (file.auth.metrics_key_env, "metrics"),
    ):
        if special:
            named.append((special, role))
    seen: dict[str, str] = {}
    for variable, role in named:
        value = env.get(variable)
        if not value:
            continue
        other = seen.get(value)
        if other is not None and other != variable:
            raise ValueError(
                f"auth: {other} and {variable} ({role}) hold the same key; every tenant, the "
                "admin and /metrics each need their own"
            )
        seen[value] = variable


def _route(
    model: ModelConfig,
    file: ConfigFile,
    providers: Mapping[str, ProviderSettings],
    kb_by_model: Mapping[str, str],
) -> ModelRoute:
    configured = [
        Deployment(d.provider, d.upstream_model or model.upstream_model or model.name, d.weight)
        for d in model.deployment_list()
    ]
    usable = tuple(d for d in configured if providers[d.provider].disabled_reason is None)
    primary = (usable or configured)[0]
    disabled = None
    if not usable:
        reasons = {f"'{d.provider}' ({providers[d.provider].disabled_reason})" for d in configured}
        disabled = "provider " + ", ".join(sorted(reasons)) + " is disabled"
    return ModelRoute(
        name=model.name,
        provider=primary.provider,
        upstream_model=primary.upstream_model,
        kind=model.kind,
        cache=file.cache.policy_for(model.cache),
        pricing=model.pricing,
        deployments=usable,
        fallbacks=tuple(model.fallbacks),
        deadline_seconds=model.deadline_seconds,
        knowledge_base=kb_by_model.get(model.name),
        disabled_reason=disabled,
    )


def _renamed(route: ModelRoute, public: str, knowledge_base: str | None) -> ModelRoute:
    return replace(route, name=public, knowledge_base=knowledge_base)


def _provider_settings(name: str, p: ProviderConfig, env: Mapping[str, str]) -> ProviderSettings:
    key = env.get(p.api_key_env) if p.api_key_env else None
    disabled = None
    if p.api_key_env and not key:
        disabled = f"environment variable {p.api_key_env} is not set"
    return ProviderSettings(
        name=name,
        type=p.type,
        base_url=p.base_url.rstrip("/") if p.base_url else None,
        api_key=SecretStr(key) if key else None,
        headers=dict(p.headers),
        timeouts=p.timeouts,
        max_connections=p.max_connections,
        stream_usage=p.stream_usage,
        disabled_reason=disabled,
        native=frozenset(p.native),
        api_key_env=p.api_key_env,
    )

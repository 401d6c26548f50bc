"""One policy file (`policies/*.yaml`): which requests it matches and what it changes for them.

A policy is an overlay: every section is the same model as in config.yaml (or the model's own
cache block), and only the fields a policy writes change; the rest fall through to the less
specific policies and then to config.yaml. How overlays stack: gateway/config/policy_set.py.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from gateway.config.base import Strict
from gateway.config.cache import CachePolicyOverride
from gateway.config.degradation import DegradationConfig
from gateway.config.guard import GuardConfig
from gateway.config.rate_limits import RateLimitConfig
from gateway.config.responses import StorageQuotaConfig
from gateway.config.routing import AliasConfig

NO_KNOWLEDGE_BASE = "none"
Work = Literal["retrieval", "compression", "verification"]


class PolicyMatch(Strict):
    """Both lists must match: a tenant from `tenants` asking for a model from `models`.
    Entries are names or globs (`*`, `?`, `[abc]`); `*` matches everything."""

    tenants: list[str] = Field(default_factory=lambda: ["*"], min_length=1)
    models: list[str] = Field(
        default_factory=lambda: ["*"],
        min_length=1,
        description="As clients send them: model names and aliases (e.g. auto).",
    )


class PolicyRouting(Strict):
    aliases: dict[str, AliasConfig] = Field(
        default_factory=dict, description="Aliases of config.yaml to route differently."
    )


class KnowledgePolicy(Strict):
    base: str | None = Field(
        None, description="A knowledge base of config.yaml, or 'none' for no retrieval."
    )
    min_chunks: int | None = Field(None, ge=1, le=50, description="Level 1 needs this many...")
    min_score: float | None = Field(None, ge=-1, le=1, description="...scoring at least this.")


class ByokConfig(Strict):
    """Bring your own key: the caller's provider key in the `x-gateway-provider-key` header
    is sent to these providers for that request only; it is never stored, cached or logged."""

    enabled: bool = False
    providers: list[str] = Field(
        default_factory=list,
        description="Providers the caller's key goes to; such requests use no other provider.",
    )


class OverloadConfig(Strict):
    """Optional work skipped while this process is busy, before anything is refused."""

    max_in_flight: int | None = Field(
        None, ge=1, description="Requests in flight on this process above which to skip."
    )
    skip: list[Work] = Field(
        default_factory=lambda: list[Work](["retrieval", "compression", "verification"]),
        description="retrieval: answer ungrounded (with the disclaimer); compression: send "
        "the history as it is; verification: no shadow calls to verify cache hits.",
    )


class MetricsPolicy(Strict):
    per_tenant: bool = Field(
        False,
        description="Also count requests and cost under the tenant's name (gateway_tenant_*).",
    )


class PolicyFile(Strict):
    """The shape of a policy file. Everything but `match` is optional."""

    description: str | None = None
    match: PolicyMatch = Field(default_factory=PolicyMatch)
    cache: CachePolicyOverride | None = None
    routing: PolicyRouting | None = None
    guard: GuardConfig | None = None
    knowledge_base: KnowledgePolicy | None = None
    degradation: DegradationConfig | None = None
    rate_limits: RateLimitConfig | None = Field(
        None, description="Per tenant: a policy that sets it cannot narrow models."
    )
    byok: ByokConfig | None = Field(
        None, description="Per tenant: a policy that sets it cannot narrow models."
    )
    storage: StorageQuotaConfig | None = Field(
        None,
        description="Per tenant: the stored responses it may keep (responses.quotas in "
        "config.yaml); a policy that sets it cannot narrow models.",
    )
    overload: OverloadConfig | None = None
    metrics: MetricsPolicy | None = None


# The sections a policy can set, with the model each validates against once merged.
SECTIONS: dict[str, type[Strict]] = {
    "cache": CachePolicyOverride,
    "routing": PolicyRouting,
    "guard": GuardConfig,
    "knowledge_base": KnowledgePolicy,
    "degradation": DegradationConfig,
    "rate_limits": RateLimitConfig,
    "byok": ByokConfig,
    "storage": StorageQuotaConfig,
    "overload": OverloadConfig,
    "metrics": MetricsPolicy,
}
# Decided before the request body is read, so they can depend on the tenant only.
TENANT_SECTIONS = frozenset({"rate_limits", "byok", "storage"})
# Old spellings of sections, one name per concept since: accepted with a warning.
RENAMED_SECTIONS = {"rate_limit": "rate_limits", "knowledge": "knowledge_base"}


def policy_json_schema() -> dict[str, Any]:
    """JSON Schema of a policy file. Nothing inside a section is required: a policy writes
    only what it changes."""
    schema = PolicyFile.model_json_schema()
    _drop_required(schema)
    draft = "https://json-schema.org/draft/2020-12/schema"
    return {"$schema": draft, **schema, "title": "Gateway policy (policies/*.yaml)"}


def _drop_required(node: Any) -> None:
    if isinstance(node, dict):
        node.pop("required", None)
        for value in node.values():
            _drop_required(value)
    elif isinstance(node, list):
        for value in node:
            _drop_required(value)

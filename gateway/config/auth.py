"""The `auth:` section: API keys and the tenants they stand for, the admin and metrics keys."""

from __future__ import annotations

from pydantic import Field

from gateway.config.base import Strict


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

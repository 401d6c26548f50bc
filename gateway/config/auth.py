"""The `auth:` section: API keys and the tenants they stand for, the admin and metrics keys, and
whether callers without a key are let in beyond loopback (`anonymous`)."""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from gateway.config.base import EntryProblem, Strict


class ApiKeyConfig(Strict):
    env: str = Field(description="Name of the environment variable that holds the key.")
    tenant: str = Field(min_length=1, max_length=64)


class AuthConfig(Strict):
    anonymous_tenant: str = Field(
        "local", description="Tenant of every caller when no keys are configured."
    )
    anonymous: bool = Field(
        False,
        description="With no keys: let callers without a key in on an address other machines "
        "reach (0.0.0.0, a LAN address). Off, `gateway serve` refuses to listen there without "
        "keys; on loopback (127.0.0.1, localhost) no key is needed either way.",
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

    @model_validator(mode="after")
    def _anonymous_or_keys(self) -> Self:
        if self.anonymous and self.keys:
            raise EntryProblem(
                ("anonymous",),
                "true lets callers in without a key, but keys are listed, and with "
                "keys every request needs one; remove one of the two",
            )
        return self

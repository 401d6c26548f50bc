"""The `providers:` section: the upstreams, their keys, timeouts and connection pools."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gateway.config.base import Strict

NativeEndpoint = Literal["completions", "responses"]


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
    native: list[NativeEndpoint] = Field(
        default_factory=list,
        description="OpenAI endpoints besides chat completions this upstream serves itself "
        "(completions, responses): requests only they can answer (echo, logprobs, built-in "
        "tools) are passed to it as they came. Empty: the gateway translates to chat.",
    )

    @model_validator(mode="after")
    def _openai_needs_url(self) -> ProviderConfig:
        if self.type == "openai" and not self.base_url:
            raise ValueError("an 'openai' provider needs base_url")
        if self.base_url and not self.base_url.startswith(("http://", "https://")):
            raise ValueError("base_url must start with http:// or https://")
        if self.type == "demo" and self.native:
            raise ValueError("the demo provider serves chat completions only: no 'native'")
        return self

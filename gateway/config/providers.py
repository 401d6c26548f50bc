"""The `providers:` section: the upstreams, their keys, timeouts and connection pools."""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, model_validator

from gateway.config.base import Strict

NativeEndpoint = Literal["completions", "responses"]
# A version segment of an API path: v1, v2, v1beta, v1alpha1 (OpenAI, vLLM, Ollama, Groq, Azure's
# v1 API: .../openai/v1; Gemini's OpenAI endpoint: /v1beta/openai).
_VERSION_SEGMENT = re.compile(r"^v\d+[a-z0-9]*$", re.IGNORECASE)


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

    def unversioned_base_url(self) -> str | None:
        """What to say when an 'openai' provider's base_url has no version segment (/v1) in
        its path: the gateway appends /chat/completions to it as written, and most servers
        answer under /v1, so a bare host is usually a 404. Only a warning: a server may serve
        the API at its root."""
        if self.type != "openai" or not self.base_url:
            return None
        url = self.base_url.rstrip("/")
        parts = urlsplit(url)
        if any(_VERSION_SEGMENT.match(s) for s in parts.path.split("/")):
            return None
        path = parts.path.rstrip("/")
        if "/openai/deployments/" in f"{path}/":  # Azure OpenAI's older, per-deployment API
            fixed = parts._replace(path="/openai/v1").geturl()
            fix = f"use Azure's v1 API, {fixed}, with the deployment's name as upstream_model"
        else:
            fix = f"use {parts._replace(path=path + '/v1').geturl()}"
        return (
            f"base_url {url} has no version segment such as /v1, so chat requests go to "
            f"{url}/chat/completions; OpenAI-compatible servers (OpenAI, vLLM, Ollama, Azure "
            f"OpenAI's v1 API) answer under /v1: {fix} (if this server does serve "
            "/chat/completions there, leave it)"
        )

"""The `resilience:` section: retries, breakers, deadlines."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gateway.config.base import Strict
from gateway.config.redis import StorageSection


class RetryConfig(Strict):
    attempts: int = Field(
        3, ge=1, le=10, description="Tries per deployment, the first included, before moving on."
    )
    initial_backoff_ms: float = Field(200, ge=0, le=60_000)
    max_backoff_ms: float = Field(5_000, ge=0, le=300_000)
    max_retry_after_seconds: float = Field(
        10, ge=0, description="A longer Retry-After moves on to the next deployment instead."
    )


class BreakerConfig(Strict):
    failures: int = Field(5, ge=1, le=1000, description="Consecutive failures that open it.")
    reset_seconds: float = Field(
        30, gt=0, le=3600, description="How long it stays open before one trial request."
    )
    slow_call_seconds: float | None = Field(
        None, gt=0, description="A success slower than this (to the first byte) is a failure."
    )


class BreakerStorageConfig(StorageSection):
    type: Literal["memory", "redis"] = Field(
        "memory", description="redis: replicas share breaker state (pybreaker's Redis storage)."
    )


class ResilienceConfig(Strict):
    retry: RetryConfig = Field(default_factory=RetryConfig)
    breaker: BreakerConfig = Field(default_factory=BreakerConfig)
    breaker_storage: BreakerStorageConfig = Field(default_factory=BreakerStorageConfig)
    deadline_seconds: float = Field(
        120, gt=0, le=3600, description="Longest a request may take to its first byte, in all."
    )
    attempt_timeout_seconds: float | None = Field(
        None,
        gt=0,
        le=3600,
        description="Longest one attempt may take to its first byte, so that a slow upstream "
        "leaves time in the deadline for fallbacks (default: the rest of the deadline).",
    )
    probe_seconds: float = Field(
        60,
        ge=0,
        le=86_400,
        description="How often each provider's health is probed (GET /models with its key; "
        "shown per provider in /readyz): at start, then every this many seconds. 0: never.",
    )

"""Per-tenant rate limits (`gateway.ratelimit` enforces them) and where their counters live.

Each limit is optional; a tenant with none set is not limited. Tokens per minute count the
estimated prompt tokens when a request is admitted plus the completion tokens the upstream
reports afterwards, over a *sliding* minute: the weighted sum of the previous and the current
fixed minute (the previous one weighted by how much of it the sliding minute still covers).
That needs two counters per tenant rather than a log of every request, and unlike a fixed
window it does not let a tenant spend twice its budget across a minute boundary.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from gateway.config.base import Strict
from gateway.config.redis import StorageSection


class RateLimitConfig(Strict):
    requests_per_second: float | None = Field(
        None, gt=0, le=1_000_000, description="Token bucket refill rate, in requests per second."
    )
    burst: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="Token bucket size: requests admitted at once after a pause "
        "(default: requests_per_second rounded up).",
    )
    concurrent: int | None = Field(
        None, ge=1, le=1_000_000, description="Requests in flight at once."
    )
    tokens_per_minute: int | None = Field(
        None,
        ge=1,
        description="Estimated prompt plus reported completion tokens over a sliding minute.",
    )

    @model_validator(mode="after")
    def _burst_needs_rate(self) -> RateLimitConfig:
        if self.burst is not None and self.requests_per_second is None:
            raise ValueError("burst needs requests_per_second")
        return self

    @property
    def bucket_size(self) -> int:
        """The token bucket's capacity (0 when there is no requests-per-second limit)."""
        if self.requests_per_second is None:
            return 0
        return self.burst if self.burst is not None else math.ceil(self.requests_per_second)

    @property
    def unlimited(self) -> bool:
        return (
            self.requests_per_second is None
            and self.concurrent is None
            and self.tokens_per_minute is None
        )


class RateLimitStorageConfig(StorageSection):
    type: Literal["memory", "redis"] = Field(
        "memory", description="redis: replicas share one budget per tenant."
    )


class RateLimitsConfig(Strict):
    """The `rate_limits:` section: per-tenant budgets and where they are kept."""

    storage: RateLimitStorageConfig = Field(default_factory=RateLimitStorageConfig)
    default: RateLimitConfig = Field(
        default_factory=RateLimitConfig, description="Every tenant's limits unless listed."
    )
    tenants: dict[str, RateLimitConfig] = Field(
        default_factory=dict, description="Tenant -> its own limits (replacing the default)."
    )

    def for_tenant(self, tenant: str) -> RateLimitConfig:
        return self.tenants.get(tenant, self.default)

"""The `responses:` section: where stored Responses (`store: true`, the default) are kept, for
how long, and how much of them each tenant may keep. They are what `previous_response_id`,
`GET /v1/responses/{id}` and its `input_items` read back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Self

from pydantic import Field, model_validator

from gateway.config.base import Strict
from gateway.config.redis import StorageSection

DAY = 86_400
DEFAULT_TTL_SECONDS = 30 * DAY  # what OpenAI keeps a stored response for
MIB = 1024 * 1024
# Defaults (issue 32): a tenant's share, one response's cap, the whole store's own bounds.
DEFAULT_MAX_RESPONSES = 10_000
DEFAULT_MAX_BYTES = 256 * MIB
DEFAULT_MAX_RESPONSE_BYTES = 8 * MIB  # twice the default request body (server.max_body_bytes)
DEFAULT_MAX_ENTRIES = 100_000
DEFAULT_STORE_MAX_BYTES = 2048 * MIB


@dataclass(frozen=True, slots=True)
class Quota:
    """What one tenant may keep stored; None: no limit of that kind."""

    max_responses: int | None = None
    max_bytes: int | None = None


class ResponseStoreConfig(StorageSection):
    type: Literal["sqlite", "memory", "redis"] = Field(
        "sqlite",
        description="sqlite: a file, kept across restarts; memory: this process only, lost on "
        "restart; redis: shared by every replica (the server: redis.url).",
    )
    path: str = Field(
        "data/responses.sqlite3", description="sqlite: the file (WAL mode), relative to this file."
    )
    max_entries: int | None = Field(
        DEFAULT_MAX_ENTRIES,
        ge=1,
        description="sqlite and memory: past this many stored responses (all tenants) the "
        "oldest go first. null: only the TTL and the quotas bound the count.",
    )
    max_bytes: int | None = Field(
        DEFAULT_STORE_MAX_BYTES,
        ge=1024,
        description="sqlite and memory: the bytes all stored responses may take together; past "
        "it new ones are refused (a full store, like a full disk). null: unbounded.",
    )

    @model_validator(mode="after")
    def _bounded_where_it_applies(self) -> Self:
        if self.type == "redis":
            for name in ("max_entries", "max_bytes"):
                if name in self.model_fields_set and getattr(self, name) is not None:
                    raise ValueError(
                        f"{name}: a Redis store is bounded by ttl_seconds, "
                        "max_response_bytes and the server's maxmemory policy; remove it or "
                        "use type: sqlite"
                    )
        return self


class StorageQuotaConfig(Strict):
    """What one tenant may keep stored (every store type; Redis counts it for all replicas)."""

    max_responses: int | None = Field(
        DEFAULT_MAX_RESPONSES,
        ge=1,
        description="Stored responses a tenant may keep at once; null: no count limit.",
    )
    max_bytes: int | None = Field(
        DEFAULT_MAX_BYTES,
        ge=1024,
        description="Bytes of stored responses a tenant may keep at once (the rows as "
        "written); null: no byte limit.",
    )

    def quota(self) -> Quota:
        return Quota(self.max_responses, self.max_bytes)


class StorageQuotasConfig(Strict):
    default: StorageQuotaConfig = Field(
        default_factory=StorageQuotaConfig, description="Every tenant's, unless named below."
    )
    tenants: dict[str, StorageQuotaConfig] = Field(
        default_factory=dict, description="Tenant -> its own quota (replacing the default)."
    )

    def of(self, tenant: str) -> StorageQuotaConfig:
        return self.tenants.get(tenant, self.default)

    def for_tenant(self, tenant: str) -> Quota:
        return self.of(tenant).quota()


class ResponsesConfig(Strict):
    ttl_seconds: int = Field(
        DEFAULT_TTL_SECONDS,
        ge=60,
        le=3650 * DAY,
        description="How long a stored response can be retrieved or continued (default 30 "
        "days, as OpenAI keeps them).",
    )
    store: ResponseStoreConfig = Field(default_factory=ResponseStoreConfig)
    max_response_bytes: int = Field(
        DEFAULT_MAX_RESPONSE_BYTES,
        ge=1024,
        description="One stored response at most (its row: the Response, its input items "
        "and the turns it added); a larger one is answered and not stored.",
    )
    quotas: StorageQuotasConfig = Field(
        default_factory=StorageQuotasConfig,
        description="Per tenant: how many stored responses, and how many bytes of them, it "
        "may keep (sqlite and memory stores).",
    )

"""The `responses:` section: where stored Responses (`store: true`, the default) are kept, and
for how long. They are what `previous_response_id`, `GET /v1/responses/{id}` and its
`input_items` read back."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, model_validator

from gateway.config.base import Strict
from gateway.config.redis import StorageSection

DAY = 86_400
DEFAULT_TTL_SECONDS = 30 * DAY  # what OpenAI keeps a stored response for


class ResponseStoreConfig(StorageSection):
    type: Literal["sqlite", "memory", "redis"] = Field(
        "sqlite",
        description="sqlite: a file, kept across restarts; memory: this process only, lost on "
        "restart; redis: shared by every replica (the server: redis.url).",
    )
    path: str = Field("data/responses.sqlite3", description="sqlite: the file (WAL mode).")
    max_entries: int | None = Field(
        None,
        ge=1,
        description="sqlite and memory: past this many stored responses the oldest go first. "
        "Unset: only the TTL bounds the store.",
    )

    @model_validator(mode="after")
    def _bounded_where_it_applies(self) -> Self:
        if self.type == "redis" and self.max_entries is not None:
            raise ValueError(
                "max_entries: a Redis store is bounded by ttl_seconds and the server's "
                "maxmemory policy, not by a count; remove it or use type: sqlite"
            )
        return self


class ResponsesConfig(Strict):
    ttl_seconds: int = Field(
        DEFAULT_TTL_SECONDS,
        ge=60,
        le=3650 * DAY,
        description="How long a stored response can be retrieved or continued (default 30 "
        "days, as OpenAI keeps them).",
    )
    store: ResponseStoreConfig = Field(default_factory=ResponseStoreConfig)

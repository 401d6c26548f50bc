"""Where stored Responses live: the store the handlers use for `store: true`,
`previous_response_id`, `GET /v1/responses/{id}`, its `input_items` and `DELETE`, kept per
tenant for `responses.ttl_seconds`; built from the `responses:` section.

The interface and its rules (tenant in the key, puts that never fail the request, 503 in an
outage, read-your-writes) are in backend.py; the backends are embedded_store.py (SQLite, the
default) and redis_store.py (shared by replicas).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from gateway.config.redis import RedisTarget
from gateway.config.responses import Quota, ResponsesConfig
from gateway.responses.backend import (
    Chain,
    Clock,
    Json,
    OnFailure,
    ResponseStore,
    StoredResponse,
    StoreUnavailable,
)
from gateway.responses.embedded_store import EmbeddedResponseStore
from gateway.responses.redis_store import RedisResponseStore

__all__ = [
    "ID_PREFIX",
    "Chain",
    "Json",
    "ResponseStore",
    "StoreUnavailable",
    "StoredResponse",
    "build_response_store",
    "new_response_id",
]

ID_PREFIX = "resp_"
_ID_BYTES = 24  # 48 hex characters


def new_response_id() -> str:
    """ "resp_" and 48 hex characters of os.urandom: unguessable, and they say nothing about
    who made them or when."""
    return ID_PREFIX + os.urandom(_ID_BYTES).hex()


def build_response_store(
    config: ResponsesConfig,
    shared: RedisTarget | None,
    *,
    clock: Clock = time.time,
    on_failure: OnFailure | None = None,
    quotas: Callable[[str], Quota] | None = None,
) -> ResponseStore:
    """The store `responses:` describes. `shared`: `ConfigFile.shared_redis().target(
    "responses")`, None unless `responses.store.type` is redis. `on_failure` is told each
    failed operation ("put", "get", "delete"), for a metric. `quotas`: each tenant's, read
    when it stores (the running config's policies); by default config.yaml's."""
    store = config.store
    if store.type == "redis":
        if shared is None:
            raise ValueError("a redis response store needs its Redis (ConfigFile.shared_redis)")
        return RedisResponseStore(
            shared.url,
            shared.namespace,
            config.ttl_seconds,
            on_failure=on_failure,
            max_response_bytes=config.max_response_bytes,
            quotas=quotas or config.quotas.for_tenant,
        )
    return EmbeddedResponseStore(
        None if store.type == "memory" else store.path,
        config.ttl_seconds,
        max_entries=store.max_entries,
        max_bytes=store.max_bytes,
        max_response_bytes=config.max_response_bytes,
        quotas=quotas or config.quotas.for_tenant,
        clock=clock,
        on_failure=on_failure,
    )

"""What every response store shares (gateway/responses/store.py is the front): the stored
response, keys, encoding, the writes in flight, and what a failure does. A backend
(embedded_store.py, redis_store.py) only reads, writes and removes blobs by key.

Tenants are part of the key: a row is found by SHA-256 of (tenant, id), so another tenant's
id is looked up under a key that does not exist and gets exactly what an unknown id gets; the
store itself holds no tenant names and no ids in its keys.

A put never fails the request: the response has been sent, so a store that is away is logged
(one warning per interval) and counted, and the response is simply not kept. A get or delete
in an outage is a 503 the client can retry, never a "not found" it would believe.

Read-your-writes within a process: a response is readable from the moment `put` is called,
before its write has landed, so a client continuing at once finds it (the row is encoded when
`put` is called: later changes to the caller's dicts are not stored).
"""

from __future__ import annotations

import hashlib
import logging
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson

from gateway.errors import GatewayError
from gateway.observability.logthrottle import ThrottledWarnings

Json = dict[str, Any]
Clock = Callable[[], float]
OnFailure = Callable[[str], None]  # called with "put", "get" or "delete"

log = logging.getLogger("gateway.responses")


@dataclass(frozen=True, slots=True)
class StoredResponse:
    # The Response object as the client got it ("id" inside, "resp_...").
    response: Json
    # This request's input items, each with an "id" (what GET .../input_items lists).
    input_items: list[Json]
    # Chat-form messages of the whole conversation through this response's output,
    # instructions excluded (what previous_response_id continues).
    conversation: list[Json]


class StoreUnavailable(GatewayError):
    """The store did not answer: the client retries, rather than being told "not found"."""

    status = 503
    type = "server_error"
    code = "store_unavailable"

    def __init__(self) -> None:
        super().__init__(
            "Stored responses are unavailable right now; retry the request.",
            headers={"Retry-After": "1"},
        )


def row_key(tenant: str, response_id: str) -> bytes:
    """The key a tenant's response is kept under (a JSON pair, so no separator is ambiguous)."""
    return hashlib.sha256(orjson.dumps([tenant, response_id])).digest()


def encode(stored: StoredResponse) -> bytes:
    """One orjson blob per response, whatever its size (nothing is cut)."""
    return orjson.dumps(
        {
            "response": stored.response,
            "input_items": stored.input_items,
            "conversation": stored.conversation,
        }
    )


def decode(blob: bytes) -> StoredResponse:
    row = orjson.loads(blob)
    return StoredResponse(row["response"], row["input_items"], row["conversation"])


class ResponseStore(ABC):
    """The interface the handlers use, and what every backend shares: keys, encoding, the
    writes in flight, and how a failure is reported. A backend reads, writes and removes
    blobs by key, raising one of its `outages` when its storage is away."""

    outages: ClassVar[tuple[type[Exception], ...]] = ()

    def __init__(
        self, ttl_seconds: int, *, clock: Clock = time.time, on_failure: OnFailure | None = None
    ) -> None:
        self.ttl_seconds = ttl_seconds
        self._clock = clock
        self._on_failure = on_failure
        self._writing: dict[bytes, bytes] = {}  # key -> blob, while its write is in flight
        self.failures: Counter[str] = Counter()  # operation -> failures since start
        self._warnings = ThrottledWarnings(log)

    # --- lifecycle (backends) ----------------------------------------------------------------

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...

    # --- the interface -----------------------------------------------------------------------

    async def put(self, tenant: str, stored: StoredResponse) -> None:
        """Keep `stored` for ttl_seconds. Never raises for a store that is away (nor for a
        response that cannot be encoded): that is logged and counted, and it is not kept."""
        try:
            blob = encode(stored)
        except orjson.JSONEncodeError as exc:
            self._failed("put", exc)
            return
        key = row_key(tenant, stored.response["id"])
        self._writing[key] = blob
        try:
            await self._write(key, blob, self._clock() + self.ttl_seconds)
        except self.outages as exc:
            self._failed("put", exc)
            return
        finally:
            deleted_meanwhile = self._writing.pop(key, None) is None
        if deleted_meanwhile:  # a delete that may have reached the storage before this write
            try:
                await self._remove(key, self._clock())
            except self.outages as exc:
                self._failed("put", exc)

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        """The response, or None when it is unknown, expired, deleted or another tenant's (the
        four are indistinguishable). Raises StoreUnavailable when the store does not answer."""
        key = row_key(tenant, response_id)
        blob = self._writing.get(key)
        if blob is None:
            try:
                blob = await self._read(key, self._clock())
            except self.outages as exc:
                self._failed("get", exc)
                raise StoreUnavailable() from exc
        return None if blob is None else decode(blob)

    async def delete(self, tenant: str, response_id: str) -> bool:
        """True when it was there (False in the same cases `get` gives None). Raises
        StoreUnavailable when the store does not answer."""
        key = row_key(tenant, response_id)
        in_flight = self._writing.pop(key, None) is not None
        try:
            removed = await self._remove(key, self._clock())
        except self.outages as exc:
            self._failed("delete", exc)
            raise StoreUnavailable() from exc
        return removed or in_flight

    # --- shared state (gateway/state/shared.py): local backends do not share ---------------

    @property
    def shared(self) -> bool:
        return False

    @property
    def redis_up(self) -> bool:
        return False

    async def probe_redis(self) -> None:
        """Only a Redis backend has anything to probe."""
        return None

    # --- what a backend provides -------------------------------------------------------------

    @abstractmethod
    async def _write(self, key: bytes, blob: bytes, expires_at: float) -> None: ...

    @abstractmethod
    async def _read(self, key: bytes, now: float) -> bytes | None:
        """The live row's blob, or None."""

    @abstractmethod
    async def _remove(self, key: bytes, now: float) -> bool:
        """Remove the row; True when it was live."""

    def _failed(self, operation: str, exc: BaseException) -> None:
        self.failures[operation] += 1
        if self._on_failure is not None:
            self._on_failure(operation)
        self._warn(operation, exc)

    def _warn(self, operation: str, exc: BaseException) -> None:
        meanwhile = "the response is not kept" if operation == "put" else "answered 503"
        self._warnings.warning(
            "stored responses: %s failed, %s: %r", operation, meanwhile, exc, key=operation
        )

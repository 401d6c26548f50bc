"""What every response store shares (gateway/responses/store.py is the front): the stored
response, keys, encoding, the writes in flight, and what a failure does. A backend
(embedded_store.py, redis_store.py) only reads, writes and removes blobs by key.

Tenants are part of the key: a row is found by SHA-256 of (tenant, id), so another tenant's
id is looked up under a key that does not exist and gets exactly what an unknown id gets; the
store itself holds no tenant names and no ids in its keys.

A put never fails the request: the response has been sent, so a store that is away is logged
(one warning per interval) and counted, and the response is simply not kept (`put` says so,
and the handler answers `store: false`). After a failed write the store is not writable for
`WRITE_PAUSE` seconds: `admit` refuses an explicit `store: true` up front (503), so a full or
failing disk costs each client a clear error, not an id it cannot continue. A get or delete
in an outage is a 503 the client can retry, never a "not found" it would believe.

Owners and limits (issue 32): each row is charged to its tenant (an owner hash, never the
name) in count and bytes; a backend that can (embedded_store.py) refuses a row that would take
its tenant past its `Quota`, atomically with the write. A conversation is a chain: a row keeps
only the turns its own request added and the id of the response it continued (`previous`), so
a chain of n turns stores n segments, not 1 + 2 + ... + n of them; `history` walks it back,
decoding large rows off the event loop.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson

from gateway.config.responses import Quota
from gateway.errors import GatewayError, NotFound, echo
from gateway.observability.logthrottle import ThrottledWarnings
from gateway.util import offload

Json = dict[str, Any]
Clock = Callable[[], float]
OnFailure = Callable[[str], None]  # called with "put", "get" or "delete"

log = logging.getLogger("gateway.responses")

WRITE_PAUSE = 10.0  # seconds after a failed write during which `store: true` is refused
OFFLOAD_BYTES = 256 * 1024  # rows larger than this are encoded and decoded off the loop
MAX_CHAIN = 100_000  # a walk never follows more rows than this (ids are new: no cycles)


NO_QUOTA = Quota()


@dataclass(frozen=True, slots=True)
class StoredResponse:
    # The Response object as the client got it ("id" inside, "resp_...").
    response: Json
    # This request's input items, each with an "id" (what GET .../input_items lists).
    input_items: list[Json]
    # Chat-form messages this response added, through its output, instructions excluded:
    # the whole conversation when `previous` is None, else only this request's turns
    # (`ResponseStore.history` joins the chain).
    conversation: list[Json]
    # The id of the response this one continued (previous_response_id), or None.
    previous: str | None = None


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


class StoreNotWritable(GatewayError):
    """A recent write failed (a full or failing disk, Redis away): a request that asked for
    storage explicitly is refused before any upstream call, and may go on without it."""

    status = 503
    type = "server_error"
    code = "store_unavailable"

    def __init__(self, retry_after: int) -> None:
        super().__init__(
            "Responses cannot be stored right now (the response store is failing); retry "
            "later, or send store: false to be answered without storing.",
            param="store",
            headers={"Retry-After": str(retry_after)},
        )


class StorageQuotaExceeded(GatewayError):
    """The tenant keeps as many stored responses, or bytes of them, as its quota allows."""

    status = 403
    type = "insufficient_quota"
    code = "storage_quota_exceeded"

    def __init__(self, what: str) -> None:
        super().__init__(
            f"Your stored responses have reached their quota ({what}). Delete stored "
            "responses (DELETE /v1/responses/{id}), let them expire, or send store: false.",
            param="store",
        )


class StoredResponseTooLarge(GatewayError):
    status = 413
    type = "invalid_request_error"
    code = "stored_response_too_large"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"A stored response may hold at most {limit} bytes and this request alone is "
            "larger; send store: false to be answered without storing it.",
            param="store",
        )


class ConversationBroken(NotFound):
    """An earlier response of the chain is gone (deleted): what the previous response
    continued cannot be rebuilt."""

    def __init__(self, response_id: str) -> None:
        super().__init__(
            f"Previous response with id {echo(response_id)} continues a response that was "
            "deleted or has expired; its conversation cannot be continued.",
            param="previous_response_id",
            code="previous_response_not_found",
        )


class QuotaRefused(Exception):
    """A backend refused a row: over its tenant's quota, or the store's own bound."""


def owner_key(tenant: str) -> bytes:
    """Who a row is charged to: a hash, so the store holds no tenant names."""
    return hashlib.sha256(orjson.dumps(["owner", tenant])).digest()[:16]


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
            "previous": stored.previous,
        }
    )


def decode(blob: bytes) -> StoredResponse:
    row = orjson.loads(blob)  # rows from before chains have no "previous": whole conversations
    return StoredResponse(
        row["response"], row["input_items"], row["conversation"], row.get("previous")
    )


def approx_bytes(value: Any, limit: int = OFFLOAD_BYTES) -> int:
    """The text a JSON value holds, counted until `limit` (whether encoding is worth a
    thread hop, without encoding it)."""
    total, todo = 0, [value]
    while todo and total < limit:
        node = todo.pop()
        if isinstance(node, str):
            total += len(node)
        elif isinstance(node, dict):
            todo.extend(node.values())
            total += len(node)
        elif isinstance(node, list):
            todo.extend(node)
            total += len(node)
    return total


@dataclass(frozen=True, slots=True)
class Chain:
    """A conversation rebuilt from its chain: the chat messages in order, and the ids of
    the rows it was read from, newest first (a continuation keeps them alive as long as
    itself)."""

    conversation: list[Json]
    ids: list[str]


class ResponseStore(ABC):
    """The interface the handlers use, and what every backend shares: keys, encoding, the
    writes in flight, and how a failure is reported. A backend reads, writes and removes
    blobs by key, raising one of its `outages` when its storage is away."""

    outages: ClassVar[tuple[type[Exception], ...]] = ()

    def __init__(
        self,
        ttl_seconds: int,
        *,
        clock: Clock = time.time,
        on_failure: OnFailure | None = None,
        max_response_bytes: int | None = None,
        quotas: Callable[[str], Quota] | None = None,
    ) -> None:
        self.ttl_seconds = ttl_seconds
        self.max_response_bytes = max_response_bytes
        self._quotas = quotas or (lambda tenant: NO_QUOTA)
        self._clock = clock
        self._on_failure = on_failure
        self._writing: dict[bytes, bytes] = {}  # key -> blob, while its write is in flight
        self.failures: Counter[str] = Counter()  # operation -> failures since start
        self.refused: Counter[str] = Counter()  # why -> rows not kept for a limit
        self._paused_until = 0.0  # time.monotonic() before which writes are not tried
        self._warnings = ThrottledWarnings(log)

    # --- lifecycle (backends) ----------------------------------------------------------------

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...

    # --- limits ------------------------------------------------------------------------------

    def quota(self, tenant: str) -> Quota:
        return self._quotas(tenant)

    def usage(self, tenant: str) -> tuple[int, int]:
        """(responses, bytes) the tenant keeps now; (0, 0) where the backend does not count."""
        return (0, 0)

    def admit(self, tenant: str, size: int, *, explicit: bool) -> bool:
        """Whether a request of about `size` bytes may be stored, asked before any upstream
        call. No: raises the reason when the client asked for storage explicitly (`store:
        true`), else False (answered, not stored, the Response says `store: false`)."""
        problem = self._problem(tenant, size)
        if problem is None:
            return True
        if explicit:
            raise problem
        self.refused[problem.code or "refused"] += 1
        return False

    def _problem(self, tenant: str, size: int) -> GatewayError | None:
        paused = self._paused_until - time.monotonic()
        if paused > 0:
            return StoreNotWritable(max(1, int(paused + 0.999)))
        if self.max_response_bytes is not None and size > self.max_response_bytes:
            return StoredResponseTooLarge(self.max_response_bytes)
        quota = self.quota(tenant)
        count, used = self.usage(tenant)
        if quota.max_responses is not None and count >= quota.max_responses:
            return StorageQuotaExceeded(f"{count} of {quota.max_responses} responses")
        if quota.max_bytes is not None and used + size > quota.max_bytes:
            return StorageQuotaExceeded(f"{used} of {quota.max_bytes} bytes used")
        return None

    # --- the interface -----------------------------------------------------------------------

    async def put(self, tenant: str, stored: StoredResponse, lineage: Sequence[str] = ()) -> bool:
        """Keep `stored` for ttl_seconds, and the rows of `lineage` (the ids its conversation
        was read from) at least as long. True when kept. Never raises for a store that is away,
        a response that cannot be encoded, or one over a limit: that is logged and counted,
        and it is not kept."""
        parts = (stored.response, stored.input_items, stored.conversation)
        try:
            blob = await offload.run(approx_bytes(parts) < OFFLOAD_BYTES, encode, stored)
        except orjson.JSONEncodeError as exc:
            self._failed("put", exc)
            return False
        if self.max_response_bytes is not None and len(blob) > self.max_response_bytes:
            self.refused["stored_response_too_large"] += 1
            return False
        key = row_key(tenant, stored.response["id"])
        ancestors = [row_key(tenant, rid) for rid in lineage]
        self._writing[key] = blob
        expires_at = self._clock() + self.ttl_seconds
        try:
            await self._write(key, blob, expires_at, owner_key(tenant), self.quota(tenant))
            if ancestors:
                await self._touch(ancestors, expires_at)
        except QuotaRefused:
            self.refused["storage_quota_exceeded"] += 1
            return False
        except self.outages as exc:
            self._paused_until = time.monotonic() + WRITE_PAUSE
            self._failed("put", exc)
            return False
        finally:
            deleted_meanwhile = self._writing.pop(key, None) is None
        self._paused_until = 0.0
        if deleted_meanwhile:  # a delete that may have reached the storage before this write
            try:
                await self._remove(key, self._clock())
            except self.outages as exc:
                self._failed("put", exc)
        return True

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
        if blob is None:
            return None
        return await offload.run(len(blob) < OFFLOAD_BYTES, decode, blob)

    async def history(self, tenant: str, response_id: str) -> Chain | None:
        """The whole conversation through `response_id`, joined from its chain; None when the
        response itself is unknown (as `get`). Raises ConversationBroken when an earlier row
        of the chain is gone, StoreUnavailable when the store does not answer."""
        segments: list[list[Json]] = []
        ids: list[str] = []
        current: str | None = response_id
        while current is not None:
            stored = await self.get(tenant, current)
            if stored is None:
                if not ids:
                    return None
                raise ConversationBroken(response_id)
            segments.append(stored.conversation)
            ids.append(current)
            current = stored.previous
            if len(ids) >= MAX_CHAIN and current is not None:
                raise ConversationBroken(response_id)
        conversation = [message for segment in reversed(segments) for message in segment]
        return Chain(conversation, ids)

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
    async def _write(
        self, key: bytes, blob: bytes, expires_at: float, owner: bytes, quota: Quota
    ) -> None:
        """Keep the row; raise QuotaRefused when it would take `owner` past `quota` (a
        backend that counts per owner) or the store past its own bound."""

    async def _touch(self, keys: list[bytes], expires_at: float) -> None:
        """Keep these rows until at least `expires_at` (a chain lives as long as its tip)."""
        return None

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

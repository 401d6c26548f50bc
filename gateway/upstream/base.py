"""The interface every provider adapter implements.

Bodies are OpenAI-format dicts in and out: an adapter for another wire format translates at
this boundary, so nothing outside `upstream/` knows a provider's URL or payload shape.

`key`, when given, is a caller's own provider key (bring your own key): it replaces the
configured one for that call only, and a provider that rejects it is the caller's problem (a
401), not the provider's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from typing import Any

from pydantic import SecretStr

from gateway.config import ProviderSettings
from gateway.errors import InvalidRequest

Json = dict[str, Any]


class Provider(ABC):
    def __init__(self, settings: ProviderSettings) -> None:
        self.settings = settings
        # Whether any HTTP answer came since this provider was configured: until one has, a
        # refused connection is a wrong base_url (a configuration fault), not an outage.
        self.answered = False

    @property
    def name(self) -> str:
        return self.settings.name

    @abstractmethod
    async def chat(self, body: Json, key: SecretStr | None = None) -> Json:
        """One chat completion. Raises a GatewayError (mapped status) on any failure."""

    @abstractmethod
    def stream(self, body: Json, key: SecretStr | None = None) -> AsyncIterator[list[Json]]:
        """Chat completion chunks as they arrive, in batches (the chunks one network read
        completed, so the relay answers one read with one write), ending at `[DONE]`.

        The request is sent on the first `__anext__`: failures before the first chunk raise
        there, so the caller can still answer with a plain HTTP error (or fall back). A stream
        that breaks or ends without `[DONE]` raises an UpstreamError mid-iteration.
        """

    @abstractmethod
    async def embeddings(self, body: Json, key: SecretStr | None = None) -> Json:
        """One embeddings call."""

    async def native(self, endpoint: str, body: Json, key: SecretStr | None = None) -> Json:
        """One plain call to an OpenAI endpoint the upstream serves itself (`completions`,
        `responses`: its provider's `native` list), the answer relayed as it came."""
        raise self._not_native(endpoint)

    async def native_stream(
        self, endpoint: str, body: Json, key: SecretStr | None = None
    ) -> AsyncIterator[list[Json]]:
        """That endpoint's stream: its events as JSON objects, in batches as `stream` gives
        chunks, each with its SSE `event:` name under `upstream.native.EVENT` when it had one."""
        raise self._not_native(endpoint)
        yield []  # unreachable: it makes this an async generator, as callers expect

    def _not_native(self, endpoint: str) -> InvalidRequest:
        return InvalidRequest(
            f"The provider '{self.name}' does not serve /v1/{endpoint} itself.",
            code="native_unsupported",
        )

    async def listed_models(self) -> list[str] | None:
        """The model ids the provider lists (a cheap call with the configured key, to probe
        its health: upstream/health.py), or None when it lists none. Raises a GatewayError as
        `chat` does, so a rejected key or a wrong address shows."""
        return None

    async def close(self) -> None:  # noqa: B027 - optional hook; most adapters hold nothing
        """Release connections. In-flight requests on a shared session finish first."""

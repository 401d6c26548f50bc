"""A knowledge base reached over HTTP: an external retriever speaking the contract in
docs/KNOWLEDGE.md (`POST {url}` with the query, answered by scored passages).

Every failure becomes RetrievalFailed with a short reason, so the request degrades to level 3
instead of failing. Inside the circuit breaker's block failures are raised as UpstreamError /
UpstreamTimeout, whose status tells the breaker whether they count (5xx, 429, timeouts, broken
or unreadable answers do; other 4xx do not). Reasons never carry the token or response bodies.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import aiohttp
import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.config.knowledge_bases import KnowledgeBaseConfig
from gateway.errors import GatewayError, UpstreamError, UpstreamTimeout
from gateway.rag.base import Passage, RetrievalFailed
from gateway.resilience.breaker import Breaker, BreakerOpen
from gateway.upstream.http_client import make_client_session

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger("gateway.rag.http")

_MAX_BODY = 8 * 2**20  # top_k <= 50 passages of a few kB each; anything far larger is wrong
_MAX_CONNECTIONS = 64
_MAX_REASON = 200


class _Result(BaseModel):
    model_config = ConfigDict(extra="ignore")
    text: str
    score: float = Field(ge=-1, le=1, allow_inf_nan=False)
    source: str
    title: str | None = None


class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore")
    results: list[_Result]


class HttpKnowledgeBase:
    def __init__(
        self, name: str, config: KnowledgeBaseConfig, token: str | None, breaker: Breaker
    ) -> None:
        assert config.url, "validated by config"
        self.name = name
        self._url = config.url
        self._timeout = config.timeout_seconds
        self._token = token
        self._breaker = breaker
        headers = {"Content-Type": "application/json", **config.headers}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._headers = headers
        self._session: aiohttp.ClientSession | None = None

    @property
    def breaker(self) -> Breaker:
        return self._breaker

    async def start(self) -> None:
        """Nothing to open yet: the session is made on first use, on the loop that uses it."""

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def search(self, query: str, vector: np.ndarray | None, top_k: int) -> list[Passage]:
        try:
            with self._breaker.attempt():
                return await self._bounded_search(query, top_k)
        except BreakerOpen:
            raise RetrievalFailed("circuit breaker open") from None
        except GatewayError as exc:
            raise RetrievalFailed(self._scrub(exc.message)) from None
        except Exception:
            log.exception("knowledge base %s: unexpected error", self.name)
            raise RetrievalFailed("internal error") from None

    async def _bounded_search(self, query: str, top_k: int) -> list[Passage]:
        """The call with its deadline, network failures raised as GatewayErrors."""
        try:
            async with asyncio.timeout(self._timeout):
                return await self._post(query, top_k)
        except TimeoutError:  # ours, or aiohttp's (which subclass it)
            raise UpstreamTimeout(f"timed out after {self._timeout} s") from None
        except aiohttp.ClientPayloadError:
            raise UpstreamError("response broken off") from None
        except aiohttp.ClientConnectorError:
            raise UpstreamError("cannot connect") from None
        except aiohttp.ClientError as exc:
            raise UpstreamError(f"connection failed ({type(exc).__name__})") from None

    async def _post(self, query: str, top_k: int) -> list[Passage]:
        body = orjson.dumps({"query": query, "top_k": top_k, "knowledge_base": self.name})
        async with self._client().post(self._url, data=body, headers=self._headers) as resp:
            if not 200 <= resp.status < 300:
                # 4xx keep their status (only 429 counts for the breaker); the rest are 502s.
                status = resp.status if 400 <= resp.status < 500 else None
                raise UpstreamError(f"HTTP {resp.status}", status=status)
            raw = await _read_capped(resp)
        passages = _parse(raw)
        passages.sort(key=lambda p: p.score, reverse=True)
        return passages[:top_k]

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            # The asyncio deadline is the real bound; the session's timeouts are a backstop.
            self._session = make_client_session(
                connect_timeout=self._timeout,
                total_timeout=self._timeout,
                max_connections=_MAX_CONNECTIONS,
            )
        return self._session

    def _scrub(self, reason: str) -> str:
        if self._token:
            reason = reason.replace(self._token, "***")
        return reason[:_MAX_REASON]


async def _read_capped(resp: aiohttp.ClientResponse) -> bytes:
    if resp.content_length is not None and resp.content_length > _MAX_BODY:
        raise UpstreamError("invalid response: body too large")
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_any():
        size += len(chunk)
        if size > _MAX_BODY:
            raise UpstreamError("invalid response: body too large")
        chunks.append(chunk)
    return b"".join(chunks)


def _parse(raw: bytes) -> list[Passage]:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise UpstreamError("invalid response: not JSON") from None
    try:
        answer = _Answer.model_validate(data)
    except ValidationError as exc:
        # Locations and messages only: pydantic's full text would quote the body.
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise UpstreamError(f"invalid response: {where}: {first['msg']}") from None
    return [
        Passage(text=r.text, score=r.score, source=r.source, title=r.title) for r in answer.results
    ]

"""The official OpenAI SDK, sync and async, behind one synchronous interface.

Each test that takes the `sdk` fixture runs once with `openai.OpenAI` and once with
`openai.AsyncOpenAI` (driven on a private event loop), so both clients are covered without
writing every test twice.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import openai
from openai.types import CreateEmbeddingResponse, Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk

T = TypeVar("T")


@dataclass
class StreamResult:
    """What a streamed call delivered: the chunks received, then the error if one was raised
    (at the start, as an HTTP status error, or mid-stream, as the SDK's APIError)."""

    chunks: list[ChatCompletionChunk]
    error: openai.APIError | None
    headers: dict[str, str]
    # Seconds from the call to the arrival of each chunk, to tell streaming from buffering.
    arrivals: list[float]


@dataclass
class RawCompletion:
    completion: ChatCompletion
    headers: dict[str, str]


class Sdk(ABC):
    kind: str

    @abstractmethod
    def chat(self, **kwargs: Any) -> ChatCompletion: ...

    @abstractmethod
    def chat_raw(self, **kwargs: Any) -> RawCompletion: ...

    @abstractmethod
    def stream(self, **kwargs: Any) -> StreamResult: ...

    @abstractmethod
    def first_chunk_then_close(self, **kwargs: Any) -> ChatCompletionChunk:
        """Start a stream, read one chunk, and close the connection: a client that leaves."""

    @abstractmethod
    def embed(self, **kwargs: Any) -> CreateEmbeddingResponse: ...

    @abstractmethod
    def models(self) -> list[Model]: ...

    @abstractmethod
    def retrieve(self, name: str) -> Model: ...

    @abstractmethod
    def close(self) -> None: ...


class SyncSdk(Sdk):
    kind = "sync"

    def __init__(self, base_url: str, api_key: str, timeout: float) -> None:
        self.client = openai.OpenAI(
            base_url=base_url + "/v1", api_key=api_key, max_retries=0, timeout=timeout
        )

    def chat(self, **kwargs: Any) -> ChatCompletion:
        reply: ChatCompletion = self.client.chat.completions.create(**kwargs)
        return reply

    def chat_raw(self, **kwargs: Any) -> RawCompletion:
        raw = self.client.chat.completions.with_raw_response.create(**kwargs)
        return RawCompletion(raw.parse(), dict(raw.headers))

    def stream(self, **kwargs: Any) -> StreamResult:
        result = StreamResult([], None, {}, [])
        started = time.perf_counter()
        try:
            with self.client.chat.completions.create(stream=True, **kwargs) as stream:
                result.headers = dict(stream.response.headers)
                for chunk in stream:
                    result.arrivals.append(time.perf_counter() - started)
                    result.chunks.append(chunk)
        except openai.APIError as err:
            result.error = err
        return result

    def first_chunk_then_close(self, **kwargs: Any) -> ChatCompletionChunk:
        with self.client.chat.completions.create(stream=True, **kwargs) as stream:
            chunk: ChatCompletionChunk = next(iter(stream))
            return chunk

    def embed(self, **kwargs: Any) -> CreateEmbeddingResponse:
        return self.client.embeddings.create(**kwargs)

    def models(self) -> list[Model]:
        return list(self.client.models.list())

    def retrieve(self, name: str) -> Model:
        return self.client.models.retrieve(name)

    def close(self) -> None:
        self.client.close()


class AsyncSdk(Sdk):
    kind = "async"

    def __init__(self, base_url: str, api_key: str, timeout: float) -> None:
        self._loop = asyncio.new_event_loop()
        self.client = openai.AsyncOpenAI(
            base_url=base_url + "/v1", api_key=api_key, max_retries=0, timeout=timeout
        )

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run_until_complete(coro)

    def chat(self, **kwargs: Any) -> ChatCompletion:
        reply: ChatCompletion = self._run(self.client.chat.completions.create(**kwargs))
        return reply

    def chat_raw(self, **kwargs: Any) -> RawCompletion:
        async def go() -> RawCompletion:
            raw = await self.client.chat.completions.with_raw_response.create(**kwargs)
            return RawCompletion(raw.parse(), dict(raw.headers))

        return self._run(go())

    def stream(self, **kwargs: Any) -> StreamResult:
        async def go() -> StreamResult:
            result = StreamResult([], None, {}, [])
            started = time.perf_counter()
            try:
                stream = await self.client.chat.completions.create(stream=True, **kwargs)
                async with stream:
                    result.headers = dict(stream.response.headers)
                    async for chunk in stream:
                        result.arrivals.append(time.perf_counter() - started)
                        result.chunks.append(chunk)
            except openai.APIError as err:
                result.error = err
            return result

        return self._run(go())

    def first_chunk_then_close(self, **kwargs: Any) -> ChatCompletionChunk:
        async def go() -> ChatCompletionChunk:
            stream = await self.client.chat.completions.create(stream=True, **kwargs)
            async with stream:
                chunk: ChatCompletionChunk = await anext(aiter(stream))
                return chunk

        return self._run(go())

    def embed(self, **kwargs: Any) -> CreateEmbeddingResponse:
        return self._run(self.client.embeddings.create(**kwargs))

    def models(self) -> list[Model]:
        async def go() -> list[Model]:
            return [model async for model in self.client.models.list()]

        return self._run(go())

    def retrieve(self, name: str) -> Model:
        return self._run(self.client.models.retrieve(name))

    def close(self) -> None:
        self._run(self.client.close())
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()


def make_sdk(kind: str, base_url: str, api_key: str = "client-key", timeout: float = 10.0) -> Sdk:
    return (SyncSdk if kind == "sync" else AsyncSdk)(base_url, api_key, timeout)

"""Any OpenAI-compatible upstream: OpenAI, DeepSeek, DashScope compatible mode, vLLM, Ollama...

They differ only in configuration (base URL, key, extra headers), so this one adapter serves
them all.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractContextManager, asynccontextmanager
from typing import Any

import aiohttp
import orjson
from pydantic import SecretStr

from gateway.config import ProviderSettings
from gateway.errors import GatewayError, InvalidUpstreamAnswer, UpstreamError
from gateway.reply import sse
from gateway.upstream import errors, native, shapes
from gateway.upstream.base import Json, Provider
from gateway.upstream.http_client import make_session
from gateway.upstream.shapes import (
    Problem,
    chunk_problem,
    completion_problem,
    embeddings_problem,
    has_choice,
    native_problem,
)
from gateway.util import offload

_MAX_ERROR_BODY = 64 * 1024
_PROBE_TIMEOUT = aiohttp.ClientTimeout(total=10)  # a health probe, not a request's call


class OpenAICompatible(Provider):
    def __init__(self, settings: ProviderSettings, secrets: list[str]) -> None:
        super().__init__(settings)
        assert settings.base_url, "validated by config"
        self._base_url = settings.base_url
        self._secrets = secrets
        self._session: aiohttp.ClientSession | None = None
        headers = {"Content-Type": "application/json", **settings.headers}
        if settings.api_key:
            headers["Authorization"] = f"Bearer {settings.api_key.get_secret_value()}"
        self._headers = headers

    @property
    def session(self) -> aiohttp.ClientSession:
        # Created lazily so it binds to the running event loop.
        if self._session is None:
            self._session = make_session(self.settings)
        return self._session

    async def chat(self, body: Json, key: SecretStr | None = None) -> Json:
        data = await self._post_json("/chat/completions", body, key)
        return self._shaped(data, completion_problem, key)

    async def embeddings(self, body: Json, key: SecretStr | None = None) -> Json:
        data = await self._post_json("/embeddings", body, key)
        return self._shaped(data, embeddings_problem, key, field="data")

    async def listed_models(self) -> list[str] | None:
        with self._network_errors():
            async with self.session.get(
                self._base_url + "/models", headers=self._headers, timeout=_PROBE_TIMEOUT
            ) as resp:
                self.answered = True
                if resp.status == 404:
                    return None  # serves no list (or the base_url is wrong: chat will tell)
                if resp.status >= 400:
                    raise await self._error(resp, {}, None)
                data = errors.parse_json(self.name, await resp.read())
        listed = data.get("data")
        if not isinstance(listed, list):
            return None
        return [str(m["id"]) for m in listed if isinstance(m, dict) and "id" in m]

    async def stream(self, body: Json, key: SecretStr | None = None) -> AsyncIterator[list[Json]]:
        async with self._event_stream("/chat/completions", body, key) as resp:
            reader = sse.EventReader()  # fed here: no async generator per read
            pieces, ended = resp.content.iter_any(), False
            # Chunks without a choice (Azure's prompt-filter chunk) are held until one has a
            # choice: a stream that ends with none fails before the first byte, while it can
            # still be retried and fallen back from.
            held: list[Json] | None = []
            while not ended:
                piece = await anext(pieces, None)
                ended = piece is None  # then the reader gives what the stream left open
                events = reader.end() if piece is None else reader.feed(piece)
                if events:
                    batch, done, error = self._batch(events, key)
                    if held is not None and error is None:
                        held += batch
                        batch = []
                        if any(map(has_choice, held)):
                            batch, held = held, None
                    if batch:  # what arrived before a bad event still goes out
                        yield batch
                    if error is not None:
                        raise error
                    if done and held is not None:
                        raise self._unexpected(
                            Problem(shapes.EMPTY_STREAM, "the stream ended before any choice")
                        )
                    if done:
                        return
        raise UpstreamError(
            f"provider '{self.name}' ended the stream before [DONE]", code="upstream_stream_cut"
        )

    async def native(self, endpoint: str, body: Json, key: SecretStr | None = None) -> Json:
        data = await self._post_json(native.PATHS[endpoint], body, key)
        return self._shaped(
            data,
            lambda answer: native_problem(endpoint, answer),
            key,
            field=shapes.native_field(endpoint),
        )

    async def native_stream(
        self, endpoint: str, body: Json, key: SecretStr | None = None
    ) -> AsyncIterator[list[Json]]:
        async with self._event_stream(native.PATHS[endpoint], body, key) as resp:
            reader = native.NamedEventReader()
            pieces, ended = resp.content.iter_any(), False
            # A completions stream, like a chat one, must have a choice before [DONE]; events
            # without one are held until one does (a Responses stream always opens with
            # response.created).
            held: list[Json] | None = [] if endpoint == "completions" else None
            while not ended:
                piece = await anext(pieces, None)
                ended = piece is None
                events = reader.end() if piece is None else reader.feed(piece)
                batch, done, error = self._native_batch(endpoint, events, key)
                if held is not None and error is None:
                    held += batch
                    batch = []
                    if any(map(has_choice, held)):
                        batch, held = held, None
                if batch:
                    yield batch
                if error is not None:
                    raise error
                if done and held is not None:
                    raise self._unexpected(
                        Problem(shapes.EMPTY_STREAM, "the stream ended before any choice")
                    )
                if done:
                    return
        raise UpstreamError(
            f"provider '{self.name}' ended the stream before its end", code="upstream_stream_cut"
        )

    def _native_batch(
        self, endpoint: str, events: list[tuple[str | None, bytes]], key: SecretStr | None
    ) -> tuple[list[Json], bool, GatewayError | None]:
        """As `_batch`, for a native stream: its events (names kept), whether it ended, the
        error of a bad or failed event (the events before it are still sent)."""
        batch: list[Json] = []
        for name, data in events:
            if data.strip() == b"[DONE]":
                return batch, True, None
            try:
                event = errors.parse_json(self.name, data)
            except UpstreamError as err:
                return batch, False, err
            if native.is_error(endpoint, event):
                return (
                    batch,
                    False,
                    errors.from_stream_event(self.name, data, self._secrets_with(key)),
                )
            if name is not None:
                event[native.EVENT] = name
            batch.append(event)
            if native.ends(endpoint, event):
                return batch, True, None
        return batch, False, None

    @asynccontextmanager
    async def _event_stream(
        self, path: str, body: Json, key: SecretStr | None
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """The upstream's answer to a streamed request, once it is known to be an event stream
        (an error status or another content type raises); network failures while it is read
        are mapped too."""
        with self._network_errors():
            async with self.session.post(
                self._base_url + path, data=await _encode(body), headers=self._headers_with(key)
            ) as resp:
                self.answered = True
                if resp.status >= 400:
                    raise await self._error(resp, body, key)
                if not resp.headers.get("Content-Type", "").startswith("text/event-stream"):
                    raise InvalidUpstreamAnswer(
                        f"provider '{self.name}' did not answer with an event stream",
                        shapes.CONTENT_TYPE,
                    )
                yield resp

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _post_json(self, path: str, body: Json, key: SecretStr | None) -> Json:
        with self._network_errors():
            async with self.session.post(
                self._base_url + path, data=await _encode(body), headers=self._headers_with(key)
            ) as resp:
                self.answered = True
                if resp.status >= 400:
                    raise await self._error(resp, body, key)
                content_type = resp.headers.get("Content-Type", "")
                if not shapes.is_json_type(content_type):
                    raise InvalidUpstreamAnswer(
                        f"provider '{self.name}' answered with Content-Type "
                        f"{content_type[:60]!r} instead of JSON",
                        shapes.CONTENT_TYPE,
                    )
                raw = await resp.read()
        return errors.parse_json(self.name, raw)

    def _headers_with(self, key: SecretStr | None) -> dict[str, str]:
        if key is None:
            return self._headers
        return {**self._headers, "Authorization": f"Bearer {key.get_secret_value()}"}

    def _network_errors(self) -> AbstractContextManager[None]:
        return errors.network_errors(
            self.name, base_url=self._base_url, never_answered=not self.answered
        )

    async def _error(
        self, resp: aiohttp.ClientResponse, body: Json, key: SecretStr | None
    ) -> Exception:
        raw = await resp.content.read(_MAX_ERROR_BODY)
        return errors.from_response(
            self.name,
            resp.status,
            raw,
            resp.headers,
            self._secrets_with(key),
            callers_key=key is not None,
            model=body.get("model"),
            key_env=self.settings.api_key_env,
        )

    def _batch(
        self, events: list[bytes], key: SecretStr | None
    ) -> tuple[list[Json], bool, UpstreamError | None]:
        """The chunks of one read's events; whether [DONE] came; the error of a bad event
        (the chunks before it are still sent)."""
        batch: list[Json] = []
        for data in events:
            if not data.startswith(b"{") and data.strip() == b"[DONE]":
                return batch, True, None
            try:
                batch.append(self._chunk(data, key))
            except UpstreamError as err:
                return batch, False, err
        return batch, False, None

    def _chunk(self, data: bytes, key: SecretStr | None) -> Json:
        # Once per streamed chunk: parsed here, checked here (not through parse_json, _shaped).
        try:
            parsed: Any = orjson.loads(data)
        except orjson.JSONDecodeError:
            parsed = None
        # Not a dict: parse_json raises what it raises for a plain answer (not JSON, or not
        # an object).
        chunk: Json = parsed if type(parsed) is dict else errors.parse_json(self.name, data)
        if "error" in chunk and "choices" not in chunk:
            raise errors.from_stream_event(self.name, data, self._secrets_with(key))
        problem = chunk_problem(chunk)
        if problem is not None:
            raise self._unexpected(problem)
        return chunk

    def _shaped(
        self,
        data: Json,
        problem_of: Callable[[Json], Problem | None],
        key: SecretStr | None,
        field: str = "choices",
    ) -> Json:
        if shapes.is_error_object(data, field):
            raise errors.error_in_200(self.name, data, self._secrets_with(key))
        problem = problem_of(data)
        if problem is not None:
            raise self._unexpected(problem)
        return data

    def _unexpected(self, problem: Problem) -> InvalidUpstreamAnswer:
        return InvalidUpstreamAnswer(
            f"provider '{self.name}' answered in an unexpected shape: {problem.detail}",
            problem.reason,
        )

    def _secrets_with(self, key: SecretStr | None) -> list[str]:
        """What messages are scrubbed of: the configured secrets and the caller's own key."""
        return self._secrets if key is None else [*self._secrets, key.get_secret_value()]


# Request bodies whose text is longer than this are serialised off the event loop: orjson takes
# ~13 ms for a 3 MB prompt, and twenty of them in a row stall /healthz (issue 32).
INLINE_ENCODE_CHARS = 65_536


async def _encode(body: Json) -> bytes:
    """The request body as JSON bytes: in place when small, on the offload thread when its
    messages hold more text than INLINE_ENCODE_CHARS. The bytes are sent as they are (one
    transport write; aiohttp's ResourceWarning about raw bodies over 1 MiB concerns the copy,
    ~1 ms for 3 MB, not the serialisation)."""
    return await offload.run(_text_chars(body) <= INLINE_ENCODE_CHARS, orjson.dumps, body)


def _text_chars(body: Json) -> int:
    """A cheap size of a request: the characters of its messages' (or input's) text, by
    message and part, never by character."""
    total = 0
    for field in ("messages", "input", "prompt"):
        value = body.get(field)
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, str):
                total += len(item)
            elif isinstance(item, dict):
                content = item.get("content")
                if isinstance(content, str):
                    total += len(content)
                elif isinstance(content, list):
                    for part in content:
                        if isinstance(part, dict):
                            for v in part.values():  # text, or an image's data URL
                                if isinstance(v, dict):
                                    v = v.get("url")
                                if isinstance(v, str):
                                    total += len(v)
                        elif isinstance(part, str):
                            total += len(part)
    tools = body.get("tools")
    if isinstance(tools, list) and len(tools) > 64:  # many tools: a large schema body
        total += INLINE_ENCODE_CHARS + 1
    return total

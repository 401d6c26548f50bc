"""The Responses API for the end-to-end tests: the OpenAI SDK's `responses` resource behind one
synchronous interface (sync or async client, as tests/e2e/sdk.py does for chat), and a reader
of the raw event stream.

The stream reader is the tests' own, not `gateway.reply.sse`: it checks the gateway's framing
(each event an `event: <type>` line, a `data: <json>` line and a blank line).
"""

from __future__ import annotations

import json
from collections.abc import Coroutine
from typing import Any, TypeVar

from openai.types.responses import Response, ResponseStreamEvent

from tests.e2e.sdk import AsyncSdk, Sdk, SyncSdk

Json = dict[str, Any]
T = TypeVar("T")


class Responses:
    """`client.responses` of a tests/e2e/sdk.py client, every call returning its result."""

    def __init__(self, sdk: Sdk) -> None:
        assert isinstance(sdk, SyncSdk | AsyncSdk)
        self.sdk = sdk
        self.resource: Any = sdk.client.responses

    def _run(self, call: Any) -> Any:
        if isinstance(self.sdk, AsyncSdk):
            coro: Coroutine[Any, Any, Any] = call
            return self.sdk._run(coro)
        return call

    def create(self, **kwargs: Any) -> Response:
        response: Response = self._run(self.resource.create(**kwargs))
        return response

    def create_raw(self, **kwargs: Any) -> tuple[Json, dict[str, str]]:
        """The Response as the JSON the gateway sent, and the response headers."""
        raw = self._run(self.resource.with_raw_response.create(**kwargs))
        return json.loads(raw.text), dict(raw.headers)

    def parse(self, **kwargs: Any) -> Any:
        return self._run(self.resource.parse(**kwargs))

    def stream(self, **kwargs: Any) -> list[ResponseStreamEvent]:
        """Every event of `create(stream=True)`, as the SDK parsed them."""
        if isinstance(self.sdk, AsyncSdk):

            async def go() -> list[ResponseStreamEvent]:
                stream = await self.resource.create(stream=True, **kwargs)
                async with stream:
                    return [event async for event in stream]

            return self.sdk._run(go())
        with self.resource.create(stream=True, **kwargs) as stream:
            return list(stream)

    def stream_helper(self, **kwargs: Any) -> Response:
        """The final Response of the SDK's `responses.stream()` helper, which rebuilds the
        response from the events and refuses inconsistent ones."""
        if isinstance(self.sdk, AsyncSdk):

            async def go() -> Response:
                async with self.resource.stream(**kwargs) as stream:
                    async for _ in stream:
                        pass
                    final: Response = await stream.get_final_response()
                    return final

            return self.sdk._run(go())
        with self.resource.stream(**kwargs) as stream:
            for _ in stream:
                pass
            final: Response = stream.get_final_response()
            return final

    def retrieve(self, response_id: str) -> Response:
        response: Response = self._run(self.resource.retrieve(response_id))
        return response

    def delete(self, response_id: str) -> None:
        self._run(self.resource.delete(response_id))

    def input_items(self, response_id: str, **kwargs: Any) -> list[Any]:
        page = self._run(self.resource.input_items.list(response_id, **kwargs))
        return list(page.data)


def parse_events(raw: bytes) -> list[Json]:
    """The events of a Responses stream, checking its framing: UTF-8, each event an `event:`
    line naming the data's `type` and one `data:` line, events separated by a blank line, no
    `[DONE]` (the Responses API has none)."""
    text = raw.decode("utf-8")
    assert text.endswith("\n\n"), f"the stream does not end with a complete event: {text[-80:]!r}"
    events = []
    for block in text[:-2].split("\n\n"):
        lines = block.split("\n")
        assert len(lines) == 2, f"an event is an event: line and a data: line: {block!r}"
        name, data = lines
        assert name.startswith("event: ") and data.startswith("data: "), f"bad event: {block!r}"
        event = json.loads(data[len("data: ") :])
        assert event["type"] == name[len("event: ") :], f"event name and type differ: {block!r}"
        events.append(event)
    return events


def output_text(response: Json) -> str:
    """The text of a Response's message items, as the SDK's `output_text` joins it."""
    return "".join(
        part.get("text", "")
        for item in response.get("output") or []
        if item.get("type") == "message"
        for part in item.get("content") or []
        if part.get("type") == "output_text"
    )


def function_calls(response: Json) -> list[Json]:
    return [item for item in response.get("output") or [] if item.get("type") == "function_call"]

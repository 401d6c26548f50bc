"""A fake external retriever speaking the HTTP knowledge-base contract (docs/KNOWLEDGE.md), with
fault knobs, for tests and benchmarks.

Run it alone with `python -m gateway.testing.fake_retriever --port 9100` (the endpoint is then
`http://127.0.0.1:9100/search`), or in-process with `FakeRetriever`. It searches a small
in-memory corpus: a passage's score is the word overlap of query and text (the cosine of their
word sets, in [0, 1]); passages sharing no word with the query are not returned.

Knobs (see `Knobs`) are set with `POST /_fake/config {...}`: only the fields given change, the
others keep their values. `POST /_fake/reset` restores the defaults and the default corpus and
forgets the requests; `GET /_fake/requests` returns the bodies and headers received. Every
instance has its own state.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections import deque
from typing import Any

import orjson
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.testing.cli import run_fake

Json = dict[str, Any]

_WORD = re.compile(r"\w+")


class Document(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str
    source: str
    title: str | None = None


DEFAULT_CORPUS = [
    Document(
        source="handbook/returns.md",
        title="Returns",
        text="Items can be returned within 30 days of delivery for a full refund.",
    ),
    Document(
        source="handbook/shipping.md",
        title="Shipping",
        text="Orders ship within two business days; express delivery takes one day.",
    ),
    Document(
        source="handbook/warranty.md",
        title="Warranty",
        text="Every device carries a two year warranty covering manufacturing defects.",
    ),
    Document(
        source="handbook/support.md",
        title=None,
        text="Support is reachable by email around the clock and by phone on weekdays.",
    ),
]


class Knobs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    latency_ms: float = Field(0, ge=0)  # before answering
    status: int | None = Field(None, ge=400, le=599)  # answer with this HTTP error status
    error_body: str = '{"error": {"message": "fake retriever error"}}'  # with `status`
    fail_every_n: int | None = Field(None, ge=1)  # only every n-th search gets `status` (503)
    malformed: bool = False  # a 200 whose body is not JSON
    wrong_shape: bool = False  # a 200 with JSON that is not the contract's
    results: list[Any] | None = None  # answer these, as given (any JSON), instead of searching
    documents: list[Document] = Field(default_factory=lambda: list(DEFAULT_CORPUS))


class FakeRetriever:
    def __init__(self, host: str = "127.0.0.1", port: int = 0, history: int = 1000) -> None:
        self.host, self.port = host, port
        self.knobs = Knobs()
        self.received: deque[Json] = deque(maxlen=history)
        self.searches = 0  # since the last reset; `fail_every_n` counts these
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        """The search endpoint, as a knowledge base's `url`."""
        return f"http://{self.host}:{self.port}/search"

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/search", self._search)
        app.router.add_post("/_fake/config", self._configure)
        app.router.add_get("/_fake/requests", self._requests)
        app.router.add_post("/_fake/reset", self._reset)
        return app

    async def start(self) -> FakeRetriever:
        self._runner = web.AppRunner(self.app(), handler_cancellation=True, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port).start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()

    async def __aenter__(self) -> FakeRetriever:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def configure(self, **knobs: Any) -> None:
        """Change the given knobs only (validated as in `POST /_fake/config`)."""
        update = Knobs.model_validate(knobs)
        self.knobs = self.knobs.model_copy(
            update={name: getattr(update, name) for name in update.model_fields_set}
        )

    def reset(self) -> None:
        self.knobs = Knobs()
        self.received.clear()
        self.searches = 0

    # --- handlers ---------------------------------------------------------------------------

    async def _search(self, request: web.Request) -> web.Response:
        raw = await request.read()
        self.searches += 1
        knobs = self.knobs  # as they were when the request arrived
        try:
            body: Any = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = raw.decode(errors="replace")
        self.received.append({"path": request.path, "headers": dict(request.headers), "body": body})
        if knobs.latency_ms:
            await asyncio.sleep(knobs.latency_ms / 1000)
        if knobs.fail_every_n is not None:
            if self.searches % knobs.fail_every_n == 0:
                return _error(knobs.status or 503, knobs.error_body)
        elif knobs.status is not None:
            return _error(knobs.status, knobs.error_body)
        if knobs.malformed:
            return web.Response(body=b'{"results": [{"text": ', content_type="application/json")
        if knobs.wrong_shape:
            return web.json_response({"data": [{"content": "not the contract", "rank": 1}]})
        if knobs.results is not None:
            return web.json_response({"results": knobs.results})
        if not _valid_query(body):
            return _error(400, '{"error": {"message": "expected {query: str, top_k: int >= 1}"}}')
        hits = search(knobs.documents, body["query"], body["top_k"])
        return web.json_response({"results": hits})

    async def _configure(self, request: web.Request) -> web.Response:
        data = await request.json()
        if not isinstance(data, dict):
            return web.json_response({"error": "expected an object of knobs"}, status=400)
        try:
            self.configure(**data)
        except ValidationError as exc:
            text = exc.json(include_url=False)
            return web.Response(status=400, text=text, content_type="application/json")
        return web.json_response({"ok": True})

    async def _requests(self, request: web.Request) -> web.Response:
        return web.json_response(list(self.received))

    async def _reset(self, request: web.Request) -> web.Response:
        self.reset()
        return web.json_response({"ok": True})


def search(documents: list[Document], query: str, top_k: int) -> list[Json]:
    """Best first: the cosine of the word sets (1.0: same words), ties by source."""
    words = _words(query)
    scored = []
    for doc in documents:
        doc_words = _words(doc.text)
        overlap = len(words & doc_words)
        if overlap:
            score = overlap / math.sqrt(len(words) * len(doc_words))
            scored.append((round(score, 6), doc))
    scored.sort(key=lambda hit: (-hit[0], hit[1].source))
    return [
        {"text": doc.text, "score": score, "source": doc.source, "title": doc.title}
        for score, doc in scored[:top_k]
    ]


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def _valid_query(body: Any) -> bool:
    return (
        isinstance(body, dict)
        and isinstance(body.get("query"), str)
        and isinstance(body.get("top_k"), int)
        and not isinstance(body.get("top_k"), bool)
        and body["top_k"] >= 1
    )


def _error(status: int, body: str) -> web.Response:
    content_type = "application/json" if body.lstrip().startswith("{") else "text/plain"
    return web.Response(status=status, text=body, content_type=content_type)


def main() -> None:
    async def start(host: str, port: int) -> str:
        fake = await FakeRetriever(host, port).start()
        return f"fake retriever listening on {fake.url}"

    run_fake("A fake external retriever.", 9100, start)


if __name__ == "__main__":
    main()

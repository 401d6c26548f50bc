"""A raw HTTP/1.1 client over a plain socket, and the contract every gateway answer must meet.

Raw bytes, not aiohttp or the SDK: header values with CR/LF or non-ASCII bytes, bodies that are
not UTF-8, a Content-Length that lies, framing the client libraries refuse to produce. Each
exchange is one connection (`Connection: close`), so one bad request cannot spoil the next.
"""

from __future__ import annotations

import base64
import json
import socket
import struct
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.e2e.helpers import (
    LEAK_MARKERS,
    assert_conforms,
    assert_openai_error,
    parse_sse,
    sse_json,
)
from tests.reliability.streams import (
    Conforms,
    check_response_stream,
    check_stored_answer,
    completion_chunk_conforms,
)

Header = tuple[bytes, bytes]


@dataclass(frozen=True)
class Reply:
    status: int
    headers: list[tuple[str, str]]
    body: bytes  # de-chunked
    raw: bytes

    def header(self, name: str) -> str | None:
        wanted = name.lower()
        return next((v for k, v in self.headers if k.lower() == wanted), None)

    @property
    def content_type(self) -> str:
        return (self.header("content-type") or "").split(";")[0].strip().lower()

    def describe(self) -> str:
        return f"HTTP {self.status} {self.headers!r}\n{self.body[:600]!r}"


@dataclass(frozen=True)
class Sent:
    """What was sent, for failure messages (shrunk by hypothesis to the smallest)."""

    method: bytes
    path: bytes
    headers: Sequence[Header]
    body: bytes | None
    framing: str = "content-length"
    notes: tuple[str, ...] = field(default_factory=tuple)

    def describe(self) -> str:
        body = b"" if self.body is None else self.body
        shown = body[:300] + (b"..." if len(body) > 300 else b"")
        return (
            f"{self.method.decode('latin-1')} {self.path!r} framing={self.framing} "
            f"headers={list(self.headers)!r} body({len(body)} bytes)={shown!r} {self.notes}"
        )


def build_request(
    sent: Sent, host: bytes = b"127.0.0.1", keep_alive: bool = False
) -> tuple[bytes, bool]:
    """The bytes on the wire, and whether the client should half-close after sending (a body
    shorter than its Content-Length: the server then sees the end of the stream)."""
    lines = [sent.method + b" " + sent.path + b" HTTP/1.1", b"Host: " + host]
    lines += [name + b": " + value for name, value in sent.headers]
    if not keep_alive:
        lines.append(b"Connection: close")
    body = sent.body
    half_close = False
    if body is not None:
        if sent.framing == "chunked":
            lines.append(b"Transfer-Encoding: chunked")
            pieces = [body[i : i + 7000] for i in range(0, len(body), 7000)]
            body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
        elif sent.framing == "short-length":  # announces more than it sends
            lines.append(b"Content-Length: %d" % (len(body) + 50))
            half_close = True
        elif sent.framing == "no-length":  # a body with neither length nor chunking
            pass
        else:
            lines.append(b"Content-Length: %d" % len(body))
    head = b"\r\n".join(lines) + b"\r\n\r\n"
    return head + (body or b""), half_close


def exchange(port: int, sent: Sent, timeout: float = 20.0) -> Reply | None:
    """Send one request, read until the server closes. None: it closed without a word."""
    data, half_close = build_request(sent)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(data)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered (413) and closed before reading it all
        received = bytearray()
        while True:
            try:
                piece = sock.recv(65536)
            except ConnectionResetError:
                break
            if not piece:
                break
            received += piece
    if not received:
        return None
    return parse_reply(bytes(received), to_head=sent.method.upper() == b"HEAD")


class KeepAlive:
    """One connection for several requests, each answer read by its framing; when the server
    closes, the next request opens a new connection (`reconnects` counts them)."""

    def __init__(self, port: int, timeout: float = 20.0) -> None:
        self.port, self.timeout = port, timeout
        self.reconnects = 0
        self._sock: socket.socket | None = None
        self._file: Any = None

    def __enter__(self) -> KeepAlive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._sock is not None:
            self._file.close()
            self._sock.close()
            self._sock = self._file = None

    def send(self, sent: Sent) -> Reply | None:
        """The answer, or None when the server closed the connection instead."""
        assert sent.framing in ("content-length", "chunked"), "only framings that keep a connection"
        data, _ = build_request(sent, keep_alive=True)
        try:
            self.open().sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close()
            return None
        return self.read(sent.method.upper() == b"HEAD")

    def open(self) -> socket.socket:
        """The connection's socket, connecting when there is none (a pipeline writes to it)."""
        if self._sock is None:
            self._sock = socket.create_connection(("127.0.0.1", self.port), timeout=self.timeout)
            self._file = self._sock.makefile("rb")
            self.reconnects += 1
        return self._sock

    def read(self, to_head: bool = False) -> Reply | None:
        """The next answer on the connection, or None when the server closed it."""
        if self._sock is None:
            return None
        try:
            reply = self._read(to_head)
        except (BrokenPipeError, ConnectionResetError):
            reply = None
        if reply is None or (reply.header("connection") or "").lower() == "close":
            self.close()
        return reply

    def _read(self, to_head: bool) -> Reply | None:
        head = bytearray()
        while not head.endswith(b"\r\n\r\n"):
            line = self._file.readline(65537)
            if not line:
                return None
            head += line
            if head.startswith(b"HTTP/1.1 1") and head.endswith(b"\r\n\r\n"):
                head.clear()  # an interim answer (100 Continue)
        reply = parse_reply(bytes(head), to_head=True)
        body = b""
        if to_head:
            pass
        elif "chunked" in (reply.header("transfer-encoding") or "").lower():
            raw = bytearray()
            while True:
                size_line = self._file.readline(1024)
                raw += size_line
                size = int(size_line.split(b";")[0], 16)
                raw += self._file.read(size + 2)
                if size == 0:
                    break
            body = dechunk(bytes(raw))
        else:
            body = self._file.read(int(reply.header("content-length") or 0))
        return Reply(reply.status, reply.headers, body, bytes(head) + body)


def parse_reply(raw: bytes, to_head: bool = False) -> Reply:
    while raw.startswith(b"HTTP/1.1 1"):  # interim answers (100 Continue): the next one counts
        raw = raw.partition(b"\r\n\r\n")[2]
    head, sep, rest = raw.partition(b"\r\n\r\n")
    assert sep, f"no end of the response head: {raw[:300]!r}"
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    version, status, *_ = status_line.split(" ", 2)
    assert version.startswith("HTTP/1."), status_line
    headers = []
    for line in header_lines:
        name, _, value = line.partition(":")
        headers.append((name.strip(), value.strip()))
    reply = Reply(int(status), headers, b"", raw)
    encoding = (reply.header("transfer-encoding") or "").lower()
    if to_head:
        body = b""
    elif "chunked" in encoding:
        body = dechunk(rest)
    elif reply.header("content-length") is not None:
        length = int(reply.header("content-length") or 0)
        assert len(rest) >= length, f"body shorter than its Content-Length ({len(rest)}<{length})"
        body = rest[:length]
    else:
        body = rest
    return Reply(reply.status, headers, body, raw)


def dechunk(data: bytes) -> bytes:
    out = bytearray()
    while True:
        size_line, sep, data = data.partition(b"\r\n")
        assert sep, "a chunked body that does not end with its last chunk"
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return bytes(out)
        out += data[:size]
        assert data[size : size + 2] == b"\r\n", "a chunk without its CRLF"
        data = data[size + 2 :]


# --- gateway bugs found by the fuzzing, each with its own failing test -----------------------

# name -> (a test that fails until the bug is fixed, how to recognise it in a violation).
# The fuzz tests count these instead of failing on them again, so that they keep exploring;
# remove an entry once its test passes.
KNOWN_BUGS: dict[str, tuple[str, Callable[[Reply, str, Sent], bool]]] = {
    # name: (the regression test that pins it, a matcher for what the fuzz sees).
}
KNOWN_SEEN: Counter[str] = Counter()
KNOWN_EXAMPLES: dict[str, str] = {}  # the first answer of each, for the curious (-s)
KNOWN_BUG: Any = type("KnownBugSeen", (), {"__repr__": lambda self: "KNOWN_BUG"})()
"""What check_reply returns for an answer showing a known bug: the caller checks no further."""


def _utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def known_bug(reply: Reply, problem: str, sent: Sent) -> str | None:
    for name, (_, matches) in KNOWN_BUGS.items():
        if matches(reply, problem, sent):
            KNOWN_SEEN[name] += 1
            KNOWN_EXAMPLES.setdefault(
                name, f"{problem[:300]}\n{reply.describe()}\n{sent.describe()}"
            )
            return name
    return None


# --- the contract -------------------------------------------------------------------------

# What the gateway may answer. 500 is never one of them: an unexpected exception is a bug.
ALLOWED_STATUSES = frozenset(
    {200, 400, 401, 403, 404, 405, 408, 409, 413, 415, 417, 422, 429, 431, 502, 503, 504}
)
RESPONSE_SCHEMAS = {
    "chat": "CreateChatCompletionResponse",
    "embeddings": "CreateEmbeddingResponse",
    "models": "ListModelsResponse",
    "model": "Model",
    "responses": "Response",
    "completions": "CreateCompletionResponse",
}


def check_reply(
    reply: Reply | None, sent: Sent, endpoint: str, *, strict_schema: bool = True
) -> Any:
    """Every answer: an allowed status, a request id, a non-empty body with no HTML or
    traceback; an error is exactly an OpenAI error (ErrorResponse); a 200 validates against its
    response schema, a stream chunk by chunk up to [DONE]. Returns the parsed body (a list of
    events for a stream; None for HEAD; KNOWN_BUG for an answer showing a known bug)."""
    if reply is None and sent.framing == "short-length":
        # The client half-closed mid-body: asyncio closes the server side of the connection on
        # that end of stream, so there may be nobody left to answer to. Allowed; alive is
        # checked by the caller.
        return None
    assert reply is not None, "the gateway closed the connection without an answer\n" + (
        f"sent: {sent.describe()}"
    )
    try:
        return _check(reply, sent, endpoint, strict_schema)
    except AssertionError as exc:
        if known_bug(reply, str(exc), sent):
            return KNOWN_BUG
        raise AssertionError(f"{exc}\ngot: {reply.describe()}\nsent: {sent.describe()}") from None


def _check(reply: Reply, sent: Sent, endpoint: str, strict_schema: bool) -> Any:
    assert reply.status in ALLOWED_STATUSES, f"unexpected status {reply.status}"
    # A request too broken to parse never reaches the middleware that assigns request ids.
    # (A HEAD's answer has no body to show it, but it may come anyway: look at the raw bytes.)
    unparsable = b'"malformed_http_request"' in reply.raw or (
        sent.method == b"HEAD" and reply.status == 400 and sent.framing == "no-length"
    )
    assert reply.header("x-request-id") or unparsable, "no x-request-id"
    if sent.method == b"HEAD":
        return None
    assert reply.body, "an empty body"
    text = reply.body.decode("utf-8", errors="replace").lower()
    for marker in LEAK_MARKERS:
        assert marker not in text, f"{marker!r} in the body"
    if reply.status >= 400:
        try:
            assert_openai_error(
                reply.status, dict(reply.headers), reply.body, expected_status=reply.status
            )
            assert_conforms(json.loads(reply.body), "ErrorResponse")
        except (AssertionError, ValueError) as exc:
            raise AssertionError(f"not an OpenAI error: {exc}") from None
        return json.loads(reply.body)
    conforms = _strictly if strict_schema else lenient(_strictly)
    if reply.content_type == "text/event-stream":
        if endpoint == "responses":
            return check_response_stream(reply.body, conforms)
        if endpoint == "completions":
            chunk = completion_chunk_conforms
            return check_stream(reply.body, strict_schema=strict_schema, chunk=chunk)
        assert endpoint == "chat", "a stream from " + endpoint
        return check_stream(reply.body, strict_schema=strict_schema)
    assert reply.content_type == "application/json", reply.content_type
    data = json.loads(reply.body)
    if endpoint == "embeddings":
        data = _base64_as_floats(data)
    if endpoint == "responses-stored":
        check_stored_answer(data, sent.method, sent.path, conforms)
    schema = RESPONSE_SCHEMAS.get(endpoint)
    if schema is not None:
        conforms(data, schema)
    return data


PASSED_THROUGH: Counter[str] = Counter()
"""Answers relayed although they break the response schema (counted where that is allowed)."""


def _strictly(data: Any, schema: str) -> None:
    assert_conforms(data, schema)


def lenient(check: Conforms) -> Conforms:
    """`check`, counting a violation in PASSED_THROUGH instead of failing."""

    def counted(data: Any, schema: str) -> None:
        try:
            check(data, schema)
        except AssertionError as exc:
            PASSED_THROUGH[str(exc).split(";")[0][:120]] += 1

    return counted


def check_stream(
    body: bytes,
    context: str = "",
    *,
    strict_schema: bool = True,
    chunk: Conforms = _strictly,
) -> list[Any]:
    """An SSE stream of chunks (chat ones unless `chunk` checks another kind), at most one
    error event (last), then [DONE]."""
    conforms = chunk if strict_schema else lenient(chunk)
    try:
        events, done = sse_json(parse_sse(body))
    except (AssertionError, ValueError) as exc:
        raise AssertionError(f"bad SSE framing: {exc}" + context) from None
    assert done, "the stream does not end with [DONE]" + context
    for i, event in enumerate(events):
        if "error" in event:
            assert i == len(events) - 1, "events after an error event" + context
            try:
                assert_conforms(event, "ErrorResponse")
            except AssertionError as exc:
                raise AssertionError(f"{exc}" + context) from None
            # The stream's 500: an exception the gateway did not expect, after the headers.
            code = event["error"].get("code")
            assert code != "internal_error", f"an internal error mid-stream: {event}" + context
            continue
        try:
            conforms(event, "CreateChatCompletionStreamResponse")
        except AssertionError as exc:
            raise AssertionError(f"chunk {i}: {exc}" + context) from None
    return events


def headers_of(pairs: Iterable[tuple[str | bytes, str | bytes]]) -> list[Header]:
    return [
        (k.encode() if isinstance(k, str) else k, v.encode() if isinstance(v, str) else v)
        for k, v in pairs
    ]


def _base64_as_floats(data: Any) -> Any:
    """The schema describes only float embeddings: a base64 one (little-endian float32s) is
    checked here and replaced by its floats for the schema."""
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return data
    out = []
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("embedding"), str):
            raw = base64.b64decode(item["embedding"], validate=True)
            assert len(raw) % 4 == 0, f"base64 embedding of {len(raw)} bytes"
            item = {**item, "embedding": list(struct.unpack(f"<{len(raw) // 4}f", raw))}
        out.append(item)
    return {**data, "data": out}

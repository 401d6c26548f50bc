"""Slow and idle clients against the real gateway on a loopback socket, on asyncio's loop and
on uvloop (the loop `gateway serve` runs): raw sockets dribble headers, stall a body, sit idle
or fill the connection cap, while other clients are served.

Bounds on how long something takes are generous multiples of the configured timeout (they
hold under load); the lower bounds are exact (a timer never fires early)."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvloop

from gateway.http.keys import CONNECTIONS, METRICS
from gateway.testing.fake_upstream import FakeUpstream
from gateway.testing.harness.fake_settings import fake_config, settings_for
from gateway.testing.harness.inprocess import GatewayServer, ServerThread, running_gateway

HEADER_TIMEOUT = 1.0
BODY_TIMEOUT = 1.0
IDLE_TIMEOUT = 1.5
MAX_CONNECTIONS = 8
PATIENCE = 15.0  # the most any bound may take here, under any load
HEALTH = b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n"


@pytest.fixture(scope="module", params=["asyncio", "uvloop"])
def loop_thread(request: pytest.FixtureRequest) -> Iterator[ServerThread]:
    thread = ServerThread(uvloop.new_event_loop) if request.param == "uvloop" else ServerThread()
    yield thread
    thread.close()


@pytest.fixture(scope="module")
def upstream(loop_thread: ServerThread) -> Iterator[FakeUpstream]:
    fake = loop_thread.call(FakeUpstream().start())
    yield fake
    loop_thread.call(fake.stop())


@pytest.fixture(scope="module")
def bounded(loop_thread: ServerThread, upstream: FakeUpstream) -> Iterator[GatewayServer]:
    server = {
        **fake_config(upstream.url)["server"],
        "access_log": False,
        "header_timeout_seconds": HEADER_TIMEOUT,
        "body_timeout_seconds": BODY_TIMEOUT,
        "idle_timeout_seconds": IDLE_TIMEOUT,
        "max_connections": MAX_CONNECTIONS,
    }
    with running_gateway(loop_thread, settings_for(upstream.url, {"server": server})) as gw:
        yield gw


def connect(gw: GatewayServer) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", gw.port), timeout=PATIENCE)
    return sock


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the gateway sends until it closes the connection (a reset counts too)."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def one_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Read one response with a Content-Length body (what the gateway sends here)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "closed mid-body"
        body += chunk
    return int(lines[0].split()[1]), headers, body


def parse(raw: bytes) -> tuple[str, dict[str, str], Any]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return lines[0], headers, json.loads(body)


def counter(gw: GatewayServer, name: str, **labels: str) -> float:
    value = gw.app[METRICS].registry.get_sample_value(name, labels or None)
    return value or 0.0


def served_meanwhile(gw: GatewayServer, stop: threading.Event, served: list[int]) -> None:
    """Another client: one request per connection, again and again, until `stop`."""
    while not stop.is_set():
        with connect(gw) as sock:
            sock.sendall(HEALTH)
            served.append(one_response(sock)[0])
        time.sleep(0.05)


def test_a_client_dribbling_headers_gets_408_and_is_closed_while_others_are_served(
    bounded: GatewayServer,
) -> None:
    before = counter(bounded, "gateway_client_timeouts_total", phase="headers")
    stop, served = threading.Event(), list[int]()
    other = threading.Thread(target=served_meanwhile, args=(bounded, stop, served))
    other.start()
    try:
        with connect(bounded) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\nX-Slow: ")
            started = time.monotonic()
            sock.settimeout(0.2)
            received = b""
            while time.monotonic() - started < PATIENCE:  # one byte every 0.2 s, no end
                try:
                    sock.sendall(b"a")
                    chunk = sock.recv(65536)
                except TimeoutError:
                    continue
                except (BrokenPipeError, ConnectionResetError):
                    break
                if not chunk:
                    break
                received += chunk
            lived = time.monotonic() - started
    finally:
        stop.set()
        other.join(PATIENCE)
    assert HEADER_TIMEOUT - 0.05 <= lived < PATIENCE, lived
    if received:  # the 408 arrives unless the reset of the next byte overtook it
        status, headers, body = parse(received)
        assert status == "HTTP/1.1 408 Request Timeout", received
        assert headers["connection"] == "close" and headers["content-type"] == "application/json"
        assert body["error"]["code"] == "request_timeout"
    assert served and set(served) == {200}, served
    assert counter(bounded, "gateway_client_timeouts_total", phase="headers") == before + 1


def test_headers_sent_slowly_but_within_the_timeout_are_served(bounded: GatewayServer) -> None:
    with connect(bounded) as sock:
        for piece in (b"GET /healthz HTTP/1.1\r\n", b"Host: gw\r\n", b"\r\n"):
            sock.sendall(piece)
            time.sleep(HEADER_TIMEOUT / 4)
        assert one_response(sock)[0] == 200


def test_idle_connections_are_closed_after_the_idle_timeout(bounded: GatewayServer) -> None:
    """Never a request, or one and then nothing: closed without a response, at the timeout."""
    silent = [connect(bounded) for _ in range(3)]
    kept = [connect(bounded) for _ in range(3)]
    for sock in kept:
        sock.sendall(HEALTH)
        assert one_response(sock)[0] == 200
    started = time.monotonic()
    for sock in silent + kept:
        assert read_until_closed(sock) == b""
        sock.close()
    assert IDLE_TIMEOUT * 0.5 <= time.monotonic() - started < PATIENCE


def test_a_stalled_body_gets_408(bounded: GatewayServer) -> None:
    before = counter(bounded, "gateway_client_timeouts_total", phase="body")
    with connect(bounded) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json"
            b"\r\nContent-Length: 200\r\n\r\n" + b'{"model": "fake-model", '
        )
        started = time.monotonic()
        status, _, body = one_response(sock)
        waited = time.monotonic() - started
    assert status == 408 and json.loads(body)["error"]["code"] == "request_timeout"
    assert BODY_TIMEOUT - 0.05 <= waited < PATIENCE, waited
    assert counter(bounded, "gateway_client_timeouts_total", phase="body") == before + 1


def test_a_stream_longer_than_every_client_timeout_is_not_cut(bounded: GatewayServer) -> None:
    """The bounds are about the client sending and idling, never about an answer it reads."""
    body = json.dumps(
        {
            "model": "fake-model",
            "stream": True,
            "messages": [{"role": "user", "content": "one two three four five six"}],
            "fake": {"chunk_delay_ms": 600},  # ~4 s in all: past each timeout above
        }
    ).encode()
    with connect(bounded) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json"
            b"\r\nConnection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n"
        )
        sock.sendall(body)
        raw = read_until_closed(sock)
    assert raw.startswith(b"HTTP/1.1 200"), raw[:300]
    assert b"data: [DONE]" in raw and b"request_timeout" not in raw
    assert b"six" in raw


def test_past_the_cap_new_connections_get_503_and_those_open_are_served(
    bounded: GatewayServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "gateway")
    connections = bounded.app[CONNECTIONS]
    before = counter(bounded, "gateway_connections_refused_total", reason="max_connections")
    held = [connect(bounded) for _ in range(MAX_CONNECTIONS)]
    for sock in held:  # each one served once: all are open on the gateway's side now
        sock.sendall(HEALTH)
        assert one_response(sock)[0] == 200
    assert connections.open == MAX_CONNECTIONS
    refusals = []
    for _ in range(3):
        with connect(bounded) as sock:
            sock.sendall(HEALTH)
            refusals.append(read_until_closed(sock))
    for sock in held:  # still served, on the same connections
        sock.sendall(HEALTH)
        assert one_response(sock)[0] == 200
    for raw in refusals:
        status, headers, body = parse(raw)
        assert status == "HTTP/1.1 503 Service Unavailable", raw
        assert headers["connection"] == "close" and headers["retry-after"] == "1"
        assert body["error"]["code"] == "too_many_connections"
    refused = counter(bounded, "gateway_connections_refused_total", reason="max_connections")
    assert refused == before + 3
    lines = [r for r in caplog.records if "connection cap reached" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    held.pop().close()
    deadline = time.monotonic() + PATIENCE
    while connections.open == MAX_CONNECTIONS and time.monotonic() < deadline:
        time.sleep(0.01)
    with connect(bounded) as sock:  # a freed place is taken again
        sock.sendall(HEALTH)
        assert one_response(sock)[0] == 200
    for sock in held:
        sock.close()


def responses_until_closed(sock: socket.socket) -> list[tuple[str, dict[str, str], bytes]]:
    """Every response on the connection, in order, until the gateway closes it."""
    raw, replies = read_until_closed(sock), []
    while raw:
        head, _, rest = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers["content-length"])
        replies.append((lines[0], headers, rest[:length]))
        raw = rest[length:]
    return replies


BROKEN = {
    "header without a colon": b"GET /healthz HTTP/1.1\r\nHost: gw\r\nBroken Header\r\n\r\n",
    "bad method": b"G@T /healthz HTTP/1.1\r\nHost: gw\r\n\r\n",
    "bad version": b"GET /healthz HTTP/9.Z\r\nHost: gw\r\n\r\n",
    "bad content length": b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
    b"Content-Length: ten\r\n\r\n",
}


@pytest.mark.parametrize("broken", list(BROKEN))
def test_a_bad_request_in_a_pipeline_is_answered_after_the_good_ones_before_it(
    bounded: GatewayServer, broken: str
) -> None:
    with connect(bounded) as sock:
        sock.sendall(HEALTH + HEALTH + BROKEN[broken] + HEALTH)
        replies = responses_until_closed(sock)
    statuses = [status for status, _, _ in replies]
    assert statuses == ["HTTP/1.1 200 OK"] * 2 + ["HTTP/1.1 400 Bad Request"], replies
    _, headers, body = replies[-1]
    assert headers["content-type"] == "application/json" and headers["connection"] == "close"
    assert json.loads(body)["error"]["code"] == "malformed_http_request"


def test_a_pipeline_whose_bodies_hold_blank_lines_keeps_its_framing(
    bounded: GatewayServer,
) -> None:
    """Pipelines are parsed a head at a time: a body with CRLFCRLF in it is still one body."""
    body = b"not json\r\n\r\nGET /healthz HTTP/1.1\r\n\r\n"
    post = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    close = b"GET /healthz HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n"
    with connect(bounded) as sock:
        sock.sendall(HEALTH + post + post + close)
        replies = responses_until_closed(sock)
    assert [status.split()[1] for status, _, _ in replies] == ["200", "400", "400", "200"]
    assert json.loads(replies[1][2])["error"]["code"] == "invalid_json"


def test_a_client_that_stops_reading_a_long_stream_is_held_by_backpressure(
    bounded: GatewayServer, upstream: FakeUpstream
) -> None:
    """A reader that stalls holds the gateway's writes (nothing piles up in its buffer beyond
    the transport's high-water mark), is not cut by any client timeout, and gets the whole
    stream when it reads again."""
    words = 2_000_000  # 10 MB of content, 11 MB of SSE: more than the sockets' buffers hold
    upstream.defaults = upstream.defaults.model_copy(
        update={"content": "word " * words, "words_per_chunk": 500}
    )
    body = json.dumps(
        {"model": "fake-model", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    ).encode()
    try:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
            sock.settimeout(PATIENCE)
            sock.connect(("127.0.0.1", bounded.port))
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n"
                b"Content-Type: application/json\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\n\r\n"
                + body
            )
            first = sock.recv(4096)
            time.sleep(max(HEADER_TIMEOUT, BODY_TIMEOUT, IDLE_TIMEOUT) * 1.5)  # stalled
            (handler,) = _handlers(bounded)
            assert handler.transport is not None, "the stream ended while its reader stalled"
            buffered = handler.transport.get_write_buffer_size()
            raw = first + read_until_closed(sock)
    finally:
        upstream.reset()
    assert buffered <= 1024 * 1024, f"{buffered} bytes buffered for a reader that stalled"
    assert raw.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in raw[-64:]
    assert raw.count(b"word") == words


def _handlers(gw: GatewayServer) -> list[Any]:
    runner = gw._runner  # the gateway's own connections, to read their write buffers
    assert runner is not None and runner.server is not None
    return list(runner.server.connections)

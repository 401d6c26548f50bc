"""SIGTERM with requests in flight (gateway/server/shutdown.py), on a real gateway process.

Every request in flight when the shutdown timeout ends gets a complete HTTP response: a stream
that has started ends with an SSE error event (`server_shutting_down`) and its end; a stream
still waiting for its upstream's first byte gets its headers (200, text/event-stream), the same
error event and end; a plain request gets a 503 OpenAI error with Retry-After. Requests that
finished before are untouched. The process exits 0 within drain + timeout + 1 s of the signal.
Clients read raw bytes (tests/reliability/rawhttp.py), so a bare disconnect shows as one.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from gateway.server.shutdown import ANSWER_SECONDS, EXIT_WITHIN_SECONDS, Drain
from gateway.testing.fake_upstream import FakeUpstream, Knobs
from gateway.testing.harness.configs import openai_provider, write_config
from gateway.testing.harness.process import Server
from gateway.testing.harness.starters import start_gateway
from tests.e2e.helpers import parse_sse, sse_json
from tests.reliability.rawhttp import Reply, Sent, exchange

DRAIN, TIMEOUT = 0.5, 2.0  # server.drain_seconds, server.shutdown_timeout_seconds
BUDGET = DRAIN + TIMEOUT + EXIT_WITHIN_SECONDS  # the promise: exit within drain + timeout + 1 s
NEVER = 600_000  # ms: an upstream that does not answer within the test
MODELS = {
    "quick": Knobs(),  # answers at once
    "dribble": Knobs(chunk_delay_ms=200),  # streams a word every 0.2 s
    "silent": Knobs(first_byte_ms=NEVER),  # stream headers, then no first chunk
    "pondering": Knobs(latency_ms=NEVER),  # no answer at all (plain or stream)
}
LONG = " ".join(f"w{i}" for i in range(200))  # 40 s of `dribble`


@pytest.fixture
def upstream(fake_upstream: FakeUpstream) -> FakeUpstream:
    fake_upstream.per_model.update({f"up-{name}": knobs for name, knobs in MODELS.items()})
    return fake_upstream


@pytest.fixture
def gateway(tmp_path: Path, upstream: FakeUpstream) -> Iterator[Server]:
    config = {
        "server": {
            "access_log": False,
            "watch_config": False,
            "drain_seconds": DRAIN,
            "shutdown_timeout_seconds": TIMEOUT,
        },
        "providers": {"fake": openai_provider(upstream.url, timeouts=(2, 120, 300))},
        "models": [
            {"name": name, "provider": "fake", "upstream_model": f"up-{name}"} for name in MODELS
        ],
    }
    server = start_gateway(tmp_path, write_config(tmp_path, config))
    try:
        yield server
    finally:
        server.stop()


def port_of(server: Server) -> int:
    return int(server.url.rsplit(":", 1)[1])


def post(path: str, body: dict[str, Any]) -> Sent:
    headers = [(b"Content-Type", b"application/json")]
    return Sent(b"POST", path.encode(), headers, json.dumps(body).encode())


def chat(model: str, text: str, stream: bool) -> Sent:
    messages = [{"role": "user", "content": text}]
    return post("/v1/chat/completions", {"model": model, "stream": stream, "messages": messages})


def bodies(upstream: FakeUpstream) -> list[dict[str, Any]]:
    """The request bodies the fake upstream received (the gateway's, translated to chat)."""
    return [r["body"] for r in list(upstream.received)]


def in_upstream(upstream: FakeUpstream, model: str) -> bool:
    return any(body.get("model") == f"up-{model}" for body in bodies(upstream))


async def sigterm_and_wait(
    server: Server, clients: dict[str, Any], ready: Callable[[set[str]], bool]
) -> tuple[float, int, dict[str, Reply | None]]:
    """Start `clients` (name -> Sent) on their own connections (`Connection: close`); once
    `ready(the names of those answered)`, SIGTERM. The seconds from the signal to the exit,
    the exit status, and each client's reply (None: the connection closed without one)."""
    port = port_of(server)
    calls = {
        name: asyncio.create_task(asyncio.to_thread(exchange, port, sent, 60))
        for name, sent in clients.items()
    }
    deadline = time.monotonic() + 15
    while not ready({name for name, call in calls.items() if call.done()}):
        assert time.monotonic() < deadline, "the requests did not all reach their stage"
        await asyncio.sleep(0.02)
    signalled = time.monotonic()
    server.send_signal(signal.SIGTERM)
    try:
        status = await asyncio.to_thread(server.proc.wait, BUDGET + 10)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running {BUDGET + 10} s after SIGTERM:\n{server.tail()}")
    exited = time.monotonic() - signalled
    replies = {name: await call for name, call in calls.items()}
    return exited, status, replies


def events_of(reply: Reply | None) -> tuple[list[dict[str, Any]], bool]:
    """A chat or legacy-completions stream's JSON events and whether it ended with [DONE]."""
    assert reply is not None, "the connection closed without a response"
    assert (reply.status, reply.content_type) == (200, "text/event-stream"), reply.describe()
    return sse_json(parse_sse(reply.body))


def assert_ended_by_shutdown(events: list[dict[str, Any]], done: bool) -> None:
    assert done, "the stream does not end with data: [DONE]"
    assert "error" in events[-1], events[-1:]
    error = events[-1]["error"]
    assert (error["type"], error["code"]) == ("server_error", "server_shutting_down"), error
    assert error["message"]
    assert sum("error" in e for e in events) == 1, events


def text_of(events: list[dict[str, Any]]) -> str:
    choices = [c for e in events for c in e.get("choices") or []]
    return "".join((c.get("delta") or {}).get("content") or "" for c in choices)


def assert_503_shutting_down(reply: Reply | None) -> None:
    assert reply is not None, "the connection closed without a response"
    assert reply.status == 503, reply.describe()
    assert reply.content_type == "application/json", reply.describe()
    assert reply.header("retry-after") == "1", reply.describe()
    error = json.loads(reply.body)["error"]
    assert (error["type"], error["code"]) == ("server_error", "server_shutting_down"), error


def test_sigterm_answers_every_request_in_flight_and_exits_within_the_budget(
    gateway: Server, upstream: FakeUpstream
) -> None:
    clients = {
        "stream finished": chat("quick", "a short one", stream=True),
        "stream running": chat("dribble", LONG, stream=True),
        "stream before its first byte": chat("silent", "are you there?", stream=True),
        "plain finished": chat("quick", "a plain one", stream=False),
        "plain waiting": chat("pondering", "take your time", stream=False),
    }
    started = time.monotonic()

    def ready(answered: set[str]) -> bool:
        # the quick ones are done, the running stream is some words in, the others wait
        waiting = all(in_upstream(upstream, m) for m in ("silent", "pondering", "dribble"))
        finished = answered == {"stream finished", "plain finished"}
        return waiting and finished and time.monotonic() - started > 1.5

    exited, status, replies = asyncio.run(sigterm_and_wait(gateway, clients, ready))
    output = gateway.output()
    print(f"SIGTERM -> exit {status} in {exited:.2f} s (budget {BUDGET} s)")
    assert status == 0, output
    assert exited <= BUDGET, f"exited {exited:.2f} s after SIGTERM, budget {BUDGET} s"
    assert exited >= DRAIN + TIMEOUT, "the requests in flight were not given their timeout"
    assert "gateway draining: 3 requests in flight" in output, output
    assert "ending 3 requests in flight with server_shutting_down" in output, output

    events, done = events_of(replies["stream finished"])
    assert done and not any("error" in e for e in events)
    assert text_of(events) == "Echo: a short one"

    events, done = events_of(replies["stream running"])
    assert_ended_by_shutdown(events, done)
    said = text_of(events)
    assert 3 <= len(said.split()) < 40 and f"Echo: {LONG}".startswith(said), said

    reply = replies["stream before its first byte"]
    events, done = events_of(reply)
    assert_ended_by_shutdown(events, done)
    assert len(events) == 1, events  # its headers, the error event, [DONE]
    assert reply is not None and reply.header("x-request-id"), reply.describe()

    plain = replies["plain finished"]
    assert plain is not None and plain.status == 200, plain
    assert json.loads(plain.body)["choices"][0]["message"]["content"] == "Echo: a plain one"

    assert_503_shutting_down(replies["plain waiting"])


def responses_events(reply: Reply | None) -> list[dict[str, Any]]:
    """The Responses event stream: `event: NAME` + `data: {...}` blocks, no [DONE]."""
    assert reply is not None, "the connection closed without a response"
    assert (reply.status, reply.content_type) == (200, "text/event-stream"), reply.describe()
    text = reply.body.decode()
    assert text.endswith("\n\n"), text[-200:]
    events = []
    for block in text[:-2].split("\n\n"):
        name, data = block.split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert name == f"event: {event['type']}", block
        events.append(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events


def assert_response_failed(events: list[dict[str, Any]]) -> None:
    error, failed = events[-2:]
    assert (error["type"], error["code"]) == ("error", "server_shutting_down"), error
    assert failed["type"] == "response.failed", failed
    assert failed["response"]["status"] == "failed", failed
    assert failed["response"]["error"]["code"] == "server_error", failed


def test_responses_and_completions_streams_and_sdk_clients_get_their_own_ending(
    gateway: Server, upstream: FakeUpstream
) -> None:
    def responses(model: str) -> Sent:
        return post("/v1/responses", {"model": model, "input": LONG, "stream": True})

    def completions(model: str) -> Sent:
        return post("/v1/completions", {"model": model, "prompt": LONG, "stream": True})

    clients = {
        "responses running": responses("dribble"),
        "responses before its first byte": responses("silent"),
        "completions running": completions("dribble"),
        "completions before its first byte": completions("pondering"),
    }
    sdk = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0)
    seen: dict[str, BaseException] = {}

    def sdk_call(name: str, stream: bool) -> None:
        try:
            messages = [{"role": "user", "content": name}]
            if stream:
                for _ in sdk.chat.completions.create(
                    model="silent", messages=messages, stream=True
                ):
                    pass
            else:
                sdk.chat.completions.create(model="pondering", messages=messages)
        except BaseException as exc:  # what the SDK raised is the point
            seen[name] = exc

    async def run() -> tuple[float, int, dict[str, Reply | None]]:
        calls = [
            asyncio.to_thread(sdk_call, "sdk stream", True),
            asyncio.to_thread(sdk_call, "sdk plain", False),
        ]
        sdk_calls = asyncio.gather(*calls)
        started = time.monotonic()

        def ready(answered: set[str]) -> bool:
            assert not answered, answered
            prompts = [str(b.get("messages")) for b in bodies(upstream)]
            sdk_in = sum("sdk " in p for p in prompts) == 2
            return sdk_in and len(prompts) >= 6 and time.monotonic() - started > 1.5

        result = await sigterm_and_wait(gateway, clients, ready)
        await sdk_calls
        return result

    exited, status, replies = asyncio.run(run())
    print(f"SIGTERM -> exit {status} in {exited:.2f} s (budget {BUDGET} s)")
    assert status == 0, gateway.output()
    assert exited <= BUDGET, f"exited {exited:.2f} s after SIGTERM, budget {BUDGET} s"

    events = responses_events(replies["responses running"])
    assert_response_failed(events)
    assert any(e["type"] == "response.output_text.delta" for e in events), events[:4]

    events = responses_events(replies["responses before its first byte"])
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "error",
        "response.failed",
    ], events
    assert_response_failed(events)

    events, done = events_of(replies["completions running"])
    assert_ended_by_shutdown(events, done)
    assert {e["object"] for e in events[:-1]} == {"text_completion"}, events[:3]
    assert "".join(c["text"] for e in events[:-1] for c in e["choices"]).startswith("Echo: w0")

    events, done = events_of(replies["completions before its first byte"])
    assert_ended_by_shutdown(events, done)
    assert len(events) == 1, events

    # The SDK's view: an API error carrying the code, never a connection error.
    streamed = seen["sdk stream"]
    assert isinstance(streamed, openai.APIError), repr(streamed)
    assert not isinstance(streamed, openai.APIConnectionError), repr(streamed)
    assert streamed.code == "server_shutting_down", repr(streamed)
    plain = seen["sdk plain"]
    assert isinstance(plain, openai.APIStatusError), repr(plain)
    assert (plain.status_code, plain.code) == (503, "server_shutting_down"), repr(plain)
    assert plain.response.headers["retry-after"] == "1"


# --- Drain alone: the order of the ending, and a request that cannot answer -----------------


def test_a_request_that_cannot_write_its_answer_is_cut_after_the_answer_time() -> None:
    """A request ended at the timeout whose answer does not go out (a client that does not
    read: its write blocks) is cancelled for good ANSWER_SECONDS later; one that finished is
    left alone; the ending is over once none runs."""
    drain = Drain()
    answered: list[str] = []

    async def request(name: str, work: float, answer: float) -> None:
        task = drain.enter()
        try:
            await asyncio.sleep(work)
            answered.append(f"{name} finished")
        except asyncio.CancelledError:
            assert drain.ended(task)  # the shutdown's: taken back, so it may answer
            await asyncio.sleep(answer)  # writing the answer
            answered.append(f"{name} answered")
        finally:
            drain.leave(task)

    async def run() -> tuple[float, list[BaseException | None]]:
        tasks = [
            asyncio.create_task(request("quick", 0.01, 0)),
            asyncio.create_task(request("slow", 60, 0)),
            asyncio.create_task(request("stuck", 60, 60)),
        ]
        await asyncio.sleep(0)  # each is in
        started = time.monotonic()
        async with drain.ending(0.2):
            await asyncio.wait(tasks)  # what runner.cleanup does: wait for the handlers
        took = time.monotonic() - started
        return took, [t.exception() if not t.cancelled() else None for t in tasks]

    took, failures = asyncio.run(run())
    assert answered == ["quick finished", "slow answered"]
    assert failures == [None, None, None]  # the stuck one was cancelled, nothing raised
    assert drain.expired and not drain.requests
    assert took >= 0.2 + ANSWER_SECONDS, took  # given the timeout, then the answer's time


def test_a_cancellation_by_the_client_is_not_taken_for_the_shutdowns() -> None:
    drain = Drain()

    async def run() -> bool:
        async def request() -> bool:
            task = drain.enter()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                return drain.ended(task)
            return True

        task = asyncio.create_task(request())
        await asyncio.sleep(0)
        task.cancel()  # as aiohttp does when the client goes
        return await task

    assert asyncio.run(run()) is False

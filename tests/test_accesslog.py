"""One JSON line per request, with what ops need and without what they must not see."""

import contextlib
import io
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from gateway.context import RequestContext
from gateway.observability.accesslog import AccessLog, _line
from gateway.testing.fake_upstream import FakeUpstream
from gateway.testing.harness.fake_settings import settings_for
from gateway.testing.harness.inprocess import GatewayServer, ServerThread, running_gateway
from tests.clients import sdk_client

SECRET_PROMPT = "my card number is 4111 1111 1111 1111"


def _run(
    server_thread: ServerThread, fake: FakeUpstream, extra: dict[str, Any] | None = None
) -> Iterator[tuple[GatewayServer, io.BytesIO, AccessLog]]:
    sink = io.BytesIO()
    log = AccessLog(sink)
    with running_gateway(server_thread, settings_for(fake.url, extra), log) as server:
        yield server, sink, log


def _lines(sink: io.BytesIO, log: AccessLog, server_thread: ServerThread) -> list[dict]:
    async def flush() -> None:
        log.flush()

    server_thread.call(flush())
    return [json.loads(line) for line in sink.getvalue().splitlines()]


@pytest.fixture
def logged(
    server_thread: ServerThread, fake_upstream: FakeUpstream
) -> Iterator[tuple[GatewayServer, io.BytesIO, AccessLog]]:
    yield from _run(server_thread, fake_upstream)


def test_one_line_per_request_with_the_facts_and_no_prompt(
    logged: tuple[GatewayServer, io.BytesIO, AccessLog], server_thread: ServerThread
) -> None:
    server, sink, log = logged
    client = sdk_client(server.url, "k")
    client.chat.completions.create(
        model="mapped",
        messages=[{"role": "user", "content": SECRET_PROMPT}],
        extra_headers={"x-request-id": "trace-123"},
    )
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    ok, missing = _lines(sink, log, server_thread)
    assert ok["request_id"] == "trace-123" and ok["status"] == 200
    assert (ok["tenant"], ok["model"], ok["served_model"]) == ("local", "mapped", "mapped")
    assert (ok["upstream"], ok["upstream_model"]) == ("fake", "upstream-name")
    assert ok["prompt_tokens"] == 10 and ok["completion_tokens"] == 5
    assert ok["latency_ms"] > 0 and ok["upstream_ms"] > 0
    assert missing["status"] == 404 and missing["error"] == "model_not_found"
    raw = sink.getvalue().decode()
    assert "4111" not in raw and "sk-fake-provider-secret" not in raw


def test_a_long_model_name_is_logged_cut(
    logged: tuple[GatewayServer, io.BytesIO, AccessLog], server_thread: ServerThread
) -> None:
    server, sink, log = logged
    with pytest.raises(openai.NotFoundError):
        sdk_client(server.url, "k").chat.completions.create(
            model="m" * 50_000, messages=[{"role": "user", "content": "x"}]
        )
    (line,) = _lines(sink, log, server_thread)
    assert line["model"].startswith("m" * 256) and "(50000 characters)" in line["model"]
    assert len(sink.getvalue()) < 4096


def test_prompts_are_logged_only_when_asked(
    server_thread: ServerThread, fake_upstream: FakeUpstream
) -> None:
    for server, sink, log in _run(server_thread, fake_upstream, {"server": {"log_prompts": True}}):
        client = sdk_client(server.url, "k")
        client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": SECRET_PROMPT}]
        )
        (line,) = _lines(sink, log, server_thread)
        assert line["prompt"] == SECRET_PROMPT


def test_a_cache_miss_says_why_in_the_log_line() -> None:
    ctx = RequestContext(request_id="r", endpoint="chat", tenant="t")
    ctx.cache_result, ctx.cache_near_miss = "miss", "qualifier"
    line = _line(ctx, "POST", "/v1/chat/completions")
    assert (line["cache"], line["cache_near_miss"]) == ("miss", "qualifier")
    assert "cache_exact_only" not in line
    ctx.cache_near_miss, ctx.cache_exact_only = None, "long-text"
    line = _line(ctx, "POST", "/v1/chat/completions")
    assert line["cache_exact_only"] == "long-text" and "cache_near_miss" not in line


PROBES = ("/healthz", "/readyz", "/metrics")


def _probe_then_chat(server: GatewayServer) -> None:
    for path in PROBES:
        with contextlib.suppress(urllib.error.HTTPError):  # a 503 /readyz is a probe too
            urllib.request.urlopen(server.url + path, timeout=10).close()
    sdk_client(server.url, "k").chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "hi"}]
    )


def test_probes_stay_out_of_the_log_by_default_and_requests_do_not(
    logged: tuple[GatewayServer, io.BytesIO, AccessLog], server_thread: ServerThread
) -> None:
    server, sink, log = logged
    _probe_then_chat(server)
    assert [line["path"] for line in _lines(sink, log, server_thread)] == ["/v1/chat/completions"]


def test_probes_are_logged_when_asked(
    server_thread: ServerThread, fake_upstream: FakeUpstream
) -> None:
    for server, sink, log in _run(server_thread, fake_upstream, {"server": {"log_probes": True}}):
        _probe_then_chat(server)
        paths = [line["path"] for line in _lines(sink, log, server_thread)]
        assert paths == [*PROBES, "/v1/chat/completions"]

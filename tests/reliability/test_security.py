"""Security review of the gateway: one test per property, over real sockets.

The gateway runs in-process on a loopback port (harness/inprocess.py), in front of the shared
fake upstream (which records the path, headers and body of every call it gets) and, for the
error-echo checks, a second fake whose fault hook quotes the credentials it was sent. Raw
sockets are used wherever the bytes matter (control characters, folded or oversized headers,
un-normalised paths, a Content-Length that lies).

Tests named `test_was_finding_*` (and the /metrics one) are the review's findings, fixed in
the gateway since; each docstring says what was wrong. Every test checks a property that
holds now.

Findings, all fixed (see each test):
  F1 upstream error `type`, `code` and `param` are passed to the client unscrubbed: a provider
     key or a caller's own key echoed there leaks into the error body and the access log.
  F2 a header line aiohttp cannot parse is quoted whole in the 400 body and in the
     `aiohttp.server` ERROR log, keys included (Authorization, x-gateway-provider-key).
  F3 a chunked body is never charged to tokens_per_minute (the prompt estimate is taken from
     Content-Length only, and reported prompt tokens are never recorded).
  F4 every fresh x-gateway-provider-key string got a fresh rate-limit bucket: a tenant with
     BYOK escaped its limits by minting key strings (now a key is limited within the tenant).
  F5 key collisions are accepted at load: an admin key equal to a tenant key makes that tenant
     an admin; two tenants with one key silently become one.
  F6 /metrics and /readyz answered anyone: tenant names and the config file's absolute path
     (now /readyz names the file only, and auth.metrics_key_env protects /metrics).
  F7 the SQLite cache (every tenant's prompts and answers) is created with the process umask
     (world-readable under the usual 022).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import logging
import os
import socket
import sqlite3
import stat
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
from aiohttp import web

from gateway.cache.embedded_store import EmbeddedStore
from gateway.config.loading import ConfigError
from gateway.http import auth
from gateway.http.keys import CACHE
from gateway.observability.accesslog import AccessLog
from gateway.testing.fake_upstream import FakeUpstream, Knobs, Received
from gateway.testing.harness.fake_settings import settings_for
from gateway.testing.harness.inprocess import GatewayServer, ServerThread, running_gateway
from tests.e2e.helpers import (
    RawResponse,
    assert_openai_error,
    assert_raw_error,
    request,
    settings_from_files,
    upstream_requests,
)

Json = dict[str, Any]
MAX_BODY = 65536

# Every secret the gateway holds or sees; none may show anywhere but where it is owed.
PROVIDER_KEY = "sk-prov-SECRET-a1b2c3d4e5"
HEADER_TOKEN = "hdr-SECRET-f6g7h8i9j0"
ECHO_PROVIDER_KEY = "sk-echo-SECRET-k1l2m3n4"
ADMIN_KEY = "adm-SECRET-o5p6q7r8s9"
METRICS_KEY = "mtr-SECRET-m1n2o3p4"
BYOK_KEY = "sk-byok-SECRET-b8c9d0e1"
TENANT_KEYS = {
    "team-a": "sk-gw-a-SECRET-t0u1v2w3",
    "team-b": "sk-gw-b-SECRET-x4y5z6a7",
    "tpm-sized": "sk-gw-tpm1-SECRET-0001",
    "tpm-chunked": "sk-gw-tpm2-SECRET-0002",
    "rps-byok": "sk-gw-rps1-SECRET-0003",
    "rps-xff": "sk-gw-rps2-SECRET-0004",
}
SECRETS = {
    "provider key": PROVIDER_KEY,
    "provider header token": HEADER_TOKEN,
    "echo provider key": ECHO_PROVIDER_KEY,
    "admin key": ADMIN_KEY,
    "own (BYOK) key": BYOK_KEY,
    **{f"gateway key of {t}": k for t, k in TENANT_KEYS.items()},
}
KEY_A, KEY_B = TENANT_KEYS["team-a"], TENANT_KEYS["team-b"]


def env_name(tenant: str) -> str:
    return "SEC_KEY_" + tenant.upper().replace("-", "_")


ENVIRON = {
    "SEC_PROVIDER": PROVIDER_KEY,
    "SEC_ECHO": ECHO_PROVIDER_KEY,
    "SEC_ADMIN": ADMIN_KEY,
    "SEC_METRICS": METRICS_KEY,
    **{env_name(t): k for t, k in TENANT_KEYS.items()},
}


def config(fake_url: str, echo_url: str, cache_path: Path) -> Json:
    timeouts = {"connect": 2, "read": 5, "total": 10}
    tpm, rps = {"tokens_per_minute": 2000}, {"requests_per_second": 0.01, "burst": 1}
    return {
        "server": {"watch_config": False, "max_body_bytes": MAX_BODY},
        "auth": {
            "admin_key_env": "SEC_ADMIN",
            "metrics_key_env": "SEC_METRICS",
            "keys": [{"env": env_name(t), "tenant": t} for t in TENANT_KEYS],
        },
        "providers": {
            "fake": {
                "type": "openai",
                "base_url": fake_url,
                "api_key_env": "SEC_PROVIDER",
                "headers": {"X-Provider-Token": HEADER_TOKEN},
                "timeouts": timeouts,
            },
            "echo": {
                "type": "openai",
                "base_url": echo_url,
                "api_key_env": "SEC_ECHO",
                "timeouts": timeouts,
            },
        },
        "models": [
            {
                "name": "chat",
                "provider": "fake",
                "upstream_model": "chat-up",
                "aliases": ["chat-alias"],
                "cache": {"enabled": True, "semantic": True, "similarity_threshold": 0.9},
            },
            {"name": "plain", "provider": "fake", "upstream_model": "plain-up"},
            {"name": "echo-model", "provider": "echo", "upstream_model": "echo-up"},
            {
                "name": "embed",
                "provider": "fake",
                "upstream_model": "embed-up",
                "kind": "embedding",
            },
        ],
        "cache": {
            "store": {"type": "sqlite", "path": str(cache_path)},
            "embedder": {"type": "hash"},
        },
        "rate_limits": {
            "tenants": {"tpm-sized": tpm, "tpm-chunked": tpm, "rps-byok": rps, "rps-xff": rps}
        },
        "resilience": {"retry": {"attempts": 1}, "breaker": {"failures": 1000}},
        "degradation": {"unavailable": {"mode": "error"}},
    }


POLICIES = {
    "own-keys": {
        "description": "These tenants may bring their own provider key.",
        "match": {"tenants": ["team-a", "rps-byok"]},
        "byok": {"enabled": True, "providers": ["fake", "echo"]},
    },
    "team-a-metrics": {"match": {"tenants": ["team-a"]}, "metrics": {"per_tenant": True}},
}


# --- an upstream that quotes the credentials it was sent ----------------------------------


def quote_credentials(got: Received) -> web.Response:
    """A fault for the fake upstream: every chat call is answered with an OpenAI error body
    whose every field quotes the Authorization header it received (status from the body's
    `echo_status`, default 400)."""
    said = got.request.headers.get("Authorization", "")
    error = {
        "message": f"rejected {said}",
        "type": f"type {said}",
        "code": f"code {said}",
        "param": f"param {said}",
    }
    return web.json_response({"error": error}, status=int(got.body.get("echo_status", 400)))


# --- the gateway under review -------------------------------------------------------------


@dataclass
class Secured:
    server: GatewayServer
    thread: ServerThread
    sink: io.BytesIO
    log: AccessLog
    cache_path: Path
    config_path: Path
    echo: FakeUpstream
    seen: list[str] = field(default_factory=list)  # every response: status, headers, body

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def port(self) -> int:
        return self.server.port

    def call(
        self,
        method: str,
        path: str,
        *,
        key: str | None = None,
        body: bytes | Json | None = None,
        headers: dict[str, str] | None = None,
        chunked: bool = False,
    ) -> RawResponse:
        sent = dict(headers or {})
        if key is not None:
            sent["Authorization"] = f"Bearer {key}"
        if isinstance(body, bytes):
            sent.setdefault("Content-Type", "application/json")
        resp = asyncio.run(
            request(method, self.url + path, body=body, headers=sent, chunked=chunked)
        )
        self.seen.append(f"{method} {path} -> {resp.status} {dict(resp.headers)}\n{resp.text}")
        return resp

    def chat(self, key: str, text: str, model: str = "chat", **extra: Any) -> RawResponse:
        headers = extra.pop("headers", None)
        body = {"model": model, "messages": [{"role": "user", "content": text}], **extra}
        return self.call("POST", "/v1/chat/completions", key=key, body=body, headers=headers)

    def settle(self) -> None:
        self.thread.call(self.server.settle_cache())

    def access_log(self) -> bytes:
        async def flush() -> None:
            self.log.flush()

        self.thread.call(flush())
        return self.sink.getvalue()

    def access_lines(self) -> list[Json]:
        """Every access-log line as JSON; a raw newline inside a line would break one."""
        raw = self.access_log()
        assert raw == b"" or raw.endswith(b"\n")
        lines = raw.split(b"\n")[:-1]
        parsed = []
        for line in lines:
            assert line.startswith(b'{"ts":'), f"not one JSON object per line: {line[:200]!r}"
            parsed.append(json.loads(line))
        return parsed


@pytest.fixture(scope="module")
def secured_gateway(
    server_thread: ServerThread, fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Secured]:
    root = tmp_path_factory.mktemp("security")
    cache_path = root / "cache" / "cache.sqlite3"
    echo = server_thread.call(FakeUpstream(fault=quote_credentials).start())
    settings = settings_from_files(
        root / "conf", config(fake.url, echo.url, cache_path), POLICIES, ENVIRON
    )
    sink = io.BytesIO()
    log = AccessLog(sink)
    server = server_thread.call(GatewayServer(settings, log).start())
    cache = server.app[CACHE]
    assert cache is not None
    server_thread.call(cache.wait_ready())
    assert cache.embedder_ready, cache.embedder_error
    try:
        yield Secured(
            server, server_thread, sink, log, cache_path, root / "conf" / "config.yaml", echo
        )
    finally:
        server_thread.call(server.stop())
        server_thread.call(echo.stop())


@pytest.fixture
def sec(secured_gateway: Secured, fake_upstream: FakeUpstream) -> Secured:
    """The gateway with a fresh fake upstream, closed breakers and an empty cache."""
    secured_gateway.thread.call(secured_gateway.server.fresh_state())
    secured_gateway.seen.clear()
    secured_gateway.echo.received.clear()
    return secured_gateway


# --- helpers --------------------------------------------------------------------------------


def leaks(texts: dict[str, str | bytes], secrets: dict[str, str] = SECRETS) -> list[str]:
    """`<secret> in <where>` for every secret found in every text."""
    found = []
    for where, text in texts.items():
        data = text.encode() if isinstance(text, str) else text
        found += [f"{name} in {where}" for name, s in secrets.items() if s.encode() in data]
    return found


def server_logs(caplog: pytest.LogCaptureFixture) -> str:
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    return "\n".join(formatter.format(record) for record in caplog.records)


@dataclass(frozen=True)
class Raw:
    status: int
    headers: dict[str, list[str]]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


def raw_http(port: int, data: bytes, *, timeout: float = 5.0) -> Raw:
    """Send bytes as they are; read one response (by its Content-Length). A hang fails the
    test with a socket timeout."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        received = b""
        while b"\r\n\r\n" not in received:
            piece = sock.recv(65536)
            assert piece, f"connection closed without a response: {received!r}"
            received += piece
        head, _, body = received.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        headers: dict[str, list[str]] = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers.setdefault(name.strip().lower().decode("latin-1"), []).append(
                value.strip().decode("latin-1")
            )
        length = int(headers.get("content-length", ["0"])[0])
        while len(body) < length:
            piece = sock.recv(65536)
            if not piece:
                break
            body += piece
        return Raw(status, headers, body)


def raw_request(
    method: str,
    path: str,
    headers: list[tuple[str, bytes]] | None = None,
    body: bytes = b"",
) -> bytes:
    """One request as bytes, headers exactly as given (Connection: close)."""
    lines = [f"{method} {path} HTTP/1.1".encode(), b"Host: gateway", b"Connection: close"]
    lines += [name.encode() + b": " + value for name, value in headers or []]
    if body or method == "POST":
        lines += [b"Content-Type: application/json", f"Content-Length: {len(body)}".encode()]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def chat_body(text: str = "hi", model: str = "plain") -> bytes:
    return json.dumps({"model": model, "messages": [{"role": "user", "content": text}]}).encode()


# =============================================================================================
# 1. Keys never appear where they are not owed
# =============================================================================================


def test_no_key_appears_in_responses_logs_metrics_admin_output_or_the_cache(
    sec: Secured, fake_upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    """Successes, streams, own-key (BYOK) calls, failures whose upstream message quotes the
    provider key, its header token and the caller's own key, refused keys, every admin read,
    /metrics and /readyz: no secret in any response (headers included, x-request-id echo
    too), in the logs at DEBUG, in the access log, or in the cache database's files."""
    caplog.set_level(logging.DEBUG)
    own = {"x-gateway-provider-key": BYOK_KEY}
    assert sec.chat(KEY_A, "hello there", headers={"x-request-id": "client-req-1"}).status == 200
    assert sec.seen[-1].count("client-req-1") == 1  # echoed once, in the header
    assert sec.chat(KEY_A, "hello with my key", headers=own).status == 200
    assert sec.chat(KEY_A, "stream with my key", headers=own, stream=True).status == 200
    assert sec.chat(KEY_B, "hello from b").status == 200
    embed = {"model": "embed", "input": "x"}
    assert sec.call("POST", "/v1/embeddings", key=KEY_A, body=embed, headers=own).status == 200
    sec.settle()
    assert sec.chat(KEY_A, "hello with my key", headers=own).headers["x-gateway-cache"] == (
        "hit-exact"
    )

    # The upstream quotes what it holds: the gateway's key and header token, and the caller's
    # own key when the caller sent one (a key the gateway never saw it cannot know to hide).
    echoed = f"bad key {PROVIDER_KEY}, token {HEADER_TOKEN}"
    for status, kind in [(400, "json"), (401, "json"), (429, "json"), (500, "json"), (500, "text")]:
        for headers, message in (({}, echoed), (own, f"{echoed}, own key {BYOK_KEY}")):
            knobs = {"status": status, "error_body": kind, "error_message": message}
            resp = sec.chat(
                KEY_A, f"fail {status} {kind} {bool(headers)}", headers=headers, fake=knobs
            )
            assert_raw_error(resp, resp.status)
    for headers, message in (({}, echoed), (own, f"{echoed}, own key {BYOK_KEY}")):
        knobs = {"stream_error_after": 1, "error_message": message}
        resp = sec.chat(KEY_A, f"cut {bool(headers)}", headers=headers, stream=True, fake=knobs)
        assert '"error"' in resp.text

    assert sec.chat(ADMIN_KEY, "the admin key is no gateway key").status == 401
    assert sec.chat(KEY_A + "x", "nearly a key").status == 401
    assert sec.call("GET", "/admin/config", key=KEY_A).status == 401
    for path in (
        "/admin/config",
        "/admin/policies",
        "/admin/policies?tenant=team-a&model=chat",
        "/admin/breakers",
        "/admin/cache/stats",
    ):
        assert sec.call("GET", path, key=ADMIN_KEY).status == 200, path
    for path in ("/metrics", "/readyz", "/healthz", "/v1/models"):
        sec.call("GET", path, key=KEY_A)

    sec.settle()
    rows = sqlite3.connect(sec.cache_path).execute("SELECT * FROM entries").fetchall()
    assert rows, "answers were stored"
    places: dict[str, str | bytes] = {
        "a response": "\n".join(sec.seen),
        "the access log": sec.access_log(),
        "the server logs": server_logs(caplog),
        "a cache row": repr(rows),
    }
    for file in sec.cache_path.parent.iterdir():  # the database, its WAL and shared memory
        places[f"cache file {file.name}"] = file.read_bytes()
    assert not leaks(places)
    # Upstreams get the provider key and header token (and the own key when sent), never a
    # gateway key or the admin key.
    gateway_keys = {n: s for n, s in SECRETS.items() if n.startswith("gateway") or n == "admin key"}
    assert not leaks({"an upstream call": json.dumps(list(fake_upstream.received))}, gateway_keys)


def test_was_finding_upstream_error_type_code_and_param_are_not_scrubbed_of_keys(
    sec: Secured,
) -> None:
    """F1 (medium). gateway/upstream/errors.py from_response: only the upstream's `message` is
    scrubbed (line 35); its `type`, `code` and `param` are copied into the client's error body
    as they came (429: lines 41-42; other 4xx: lines 65-67), and `code` also becomes the access
    log's `error` field (gateway/http/render.py error(), line 36). An upstream
    (or a proxy in front of it) that quotes the Authorization header in one of those fields
    hands the gateway's provider key, or the caller's own key, to the client and to the log.
    Should: scrub every string field (type, code, param, message) with the same secrets, or
    keep only `message` and use the gateway's own type/code."""
    own = {"x-gateway-provider-key": BYOK_KEY}
    bodies = {}
    for status in (400, 429):
        for headers in ({}, own):
            resp = sec.chat(
                KEY_A, f"echo {status}", model="echo-model", echo_status=status, headers=headers
            )
            assert resp.status >= 400
            assert_raw_error(resp, resp.status)
            bodies[f"the {status} body ({'own key' if headers else 'gateway key'})"] = resp.text
    assert len(sec.echo.received) == 4
    sent = [r["headers"]["Authorization"] for r in sec.echo.received]
    assert f"Bearer {ECHO_PROVIDER_KEY}" in sent and f"Bearer {BYOK_KEY}" in sent
    found = leaks({**bodies, "the access log": sec.access_log()})
    assert not found, f"keys echoed by the upstream reach: {found}"


def test_was_finding_a_malformed_header_line_is_echoed_and_logged_with_its_key(
    sec: Secured, caplog: pytest.LogCaptureFixture
) -> None:
    """F2 (low-medium). A header line aiohttp's parser refuses (a control character such as a
    stray \\x01 or \\x7f after the key, or a lone CR from a key read out of a CRLF file) never
    reaches gateway/http/middleware.py: aiohttp answers 400 text/plain whose body quotes the
    whole raw line, and logs `Error handling request` at ERROR on `aiohttp.server` with the
    BadHttpMessage traceback, which quotes the line again. So the admin key, a tenant key or a
    caller's own provider key lands in the server log in clear (and is reflected in a body any
    intermediary may log). Nothing in gateway/ filters that logger (gateway/cli.py only calls
    logging.basicConfig). Should: a logging.Filter on `aiohttp.server` (installed by the CLI
    and build_app) that drops or redacts BadHttpMessage/LineTooLong records, and a 400 that does
    not quote request bytes (e.g. a custom RequestHandler.handle_error or a front proxy); the
    answer stays a clean 400 either way (checked here too)."""
    caplog.set_level(logging.DEBUG)
    bodies = {}
    cases = [
        ("Authorization", b"Bearer " + ADMIN_KEY.encode() + b"\x01"),
        ("Authorization", b"Bearer " + KEY_A.encode() + b"\x7f"),
        ("x-gateway-provider-key", BYOK_KEY.encode() + b"\rX"),
    ]
    for i, (name, value) in enumerate(cases):
        data = raw_request("POST", "/v1/chat/completions", [(name, value)], chat_body())
        resp = raw_http(sec.port, data)
        assert resp.status == 400, (name, value, resp.status, resp.text)  # clean, no 500, no hang
        bodies[f"the 400 body for bad {name} line #{i + 1}"] = resp.text
    assert sec.call("GET", "/healthz").status == 200
    found = leaks({**bodies, "the server logs": server_logs(caplog)})
    assert not found, f"keys from unparsable header lines reach: {found}"


# =============================================================================================
# 2. Tenants never share cache entries, and cannot learn of each other's
# =============================================================================================


def cache_rows(sec: Secured) -> list[tuple[str, str, str]]:
    """(tenant, text, response) of every entry, read from the SQLite file itself."""
    sec.settle()
    db = sqlite3.connect(sec.cache_path)
    try:
        rows = db.execute("SELECT tenant, text, response FROM entries").fetchall()
    finally:
        db.close()
    return [
        (tenant, text, bytes(response).decode() if isinstance(response, bytes) else response)
        for tenant, text, response in rows
    ]


def content(resp: RawResponse) -> str:
    assert resp.status == 200, resp.text
    text: str = resp.json()["choices"][0]["message"]["content"]
    return text


def test_tenant_b_never_gets_tenant_a_cached_answer_exact_or_semantic(
    sec: Secured, fake_upstream: FakeUpstream
) -> None:
    """The fake's answers name the request's `user` (a field outside the cache scope), so an
    answer served from another tenant's entry would show it."""
    fake_upstream.defaults = Knobs(echo_user=True)
    question = "What are the opening hours of the city museum on Sundays"
    paraphrase = question + " please"
    first = sec.chat(KEY_A, question, user="alice-of-a")
    assert first.headers["x-gateway-cache"] == "miss"
    sec.settle()
    again = sec.chat(KEY_A, question, user="alice-of-a")
    assert again.headers["x-gateway-cache"] == "hit-exact"
    near = sec.chat(KEY_A, paraphrase, user="alice-of-a")
    assert near.headers["x-gateway-cache"] == "hit-semantic", "the semantic tier works for A"
    assert "alice-of-a" in content(near)
    calls = len(upstream_requests(fake_upstream))

    b_near = sec.chat(KEY_B, paraphrase, user="bob-of-b")
    assert b_near.headers["x-gateway-cache"] == "miss"
    b_exact = sec.chat(KEY_B, question, user="bob-of-b")
    b_stream = sec.chat(KEY_B, question.upper(), user="bob-of-b", stream=True)
    for resp in (b_near, b_exact):
        assert "alice" not in content(resp)
    assert b_stream.status == 200 and "alice" not in b_stream.text
    assert len(upstream_requests(fake_upstream)) >= calls + 1
    rows = cache_rows(sec)
    assert {tenant for tenant, _, response in rows if "alice" in response} == {"team-a"}
    assert {tenant for tenant, _, response in rows if "bob" in response} == {"team-b"}


def test_cache_purge_and_stats_are_admin_only(sec: Secured) -> None:
    assert sec.chat(KEY_A, "keep this answer").headers["x-gateway-cache"] == "miss"
    sec.settle()
    for key in (KEY_B, KEY_A, None):
        for body in ({}, {"tenant": "team-a"}, {"tenant": "team-a", "model": "chat"}):
            resp = sec.call("POST", "/admin/cache/purge", key=key, body=body)
            assert_raw_error(resp, 401, code="invalid_api_key")
        assert_raw_error(sec.call("GET", "/admin/cache/stats", key=key), 401)
    assert sec.chat(KEY_A, "keep this answer").headers["x-gateway-cache"] == "hit-exact"
    # The admin narrowing to another tenant leaves A's entry too.
    purged = sec.call("POST", "/admin/cache/purge", key=ADMIN_KEY, body={"tenant": "team-b"})
    assert purged.json() == {"purged": 0}
    assert sec.chat(KEY_A, "keep this answer").headers["x-gateway-cache"] == "hit-exact"


async def timed_asks(url: str, asks: list[tuple[str, str]]) -> list[tuple[float, str]]:
    """(seconds, x-gateway-cache) of each (key, prompt), one keep-alive session per key."""
    sessions: dict[str, aiohttp.ClientSession] = {}
    out = []
    try:
        for key, prompt in asks:
            session = sessions.get(key)
            if session is None:
                session = sessions[key] = aiohttp.ClientSession()
                async with session.get(url + "/healthz") as warm:
                    await warm.read()
            body = {"model": "chat", "messages": [{"role": "user", "content": prompt}]}
            started = time.perf_counter()
            async with session.post(
                url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
            ) as resp:
                await resp.read()
                assert resp.status == 200
            out.append((time.perf_counter() - started, resp.headers.get("x-gateway-cache", "")))
    finally:
        for session in sessions.values():
            await session.close()
    return out


def test_cache_timing_does_not_reveal_another_tenants_prompts(
    sec: Secured, fake_upstream: FakeUpstream
) -> None:
    """With a 30 ms upstream a hit is visibly faster than a miss. B asking A's cached prompts
    must look like B asking prompts nobody asked (same distribution, by medians), and unlike
    A's own hits."""
    fake_upstream.defaults = Knobs(latency_ms=30)
    n = 10
    a_prompts = [f"Tenant A private question number {i} about invoice {7000 + i}" for i in range(n)]
    new_prompts = [f"Never asked question number {i} about parcel {9000 + i}" for i in range(n)]
    asyncio.run(timed_asks(sec.url, [(KEY_A, p) for p in a_prompts]))
    sec.settle()
    plan = []
    for a_prompt, new_prompt in zip(a_prompts, new_prompts, strict=True):
        plan += [(KEY_A, a_prompt), (KEY_B, a_prompt), (KEY_B, new_prompt)]
    results = asyncio.run(timed_asks(sec.url, plan))
    a_hits, b_on_a, b_new = results[0::3], results[1::3], results[2::3]
    assert {kind for _, kind in a_hits} == {"hit-exact"}
    assert {kind for _, kind in b_on_a} == {"miss"} == {kind for _, kind in b_new}
    hit = statistics.median(t for t, _ in a_hits)
    probe = statistics.median(t for t, _ in b_on_a)
    baseline = statistics.median(t for t, _ in b_new)
    timings = (
        f"A hit {hit * 1000:.1f} ms, B on A's {probe * 1000:.1f} ms, B new {baseline * 1000:.1f}"
    )
    assert 0.67 < probe / baseline < 1.5, timings
    assert probe > hit + 0.02 and probe >= 0.028, timings


def test_was_finding_the_cache_database_is_readable_by_other_users(tmp_path: Path) -> None:
    """F7 (low). gateway/cache/embedded_store.py _open_db, lines 213-214: the directory and the
    SQLite file (plus -wal/-shm) holding every tenant's prompts and answers are created with
    the process umask, so under the usual 022 any local user can read every tenant's
    conversations. Should: create the directory 0700 and the files 0600 (os.open/chmod, or
    os.umask(0o077) around the connect)."""
    path = tmp_path / "store" / "cache.sqlite3"
    previous = os.umask(0o022)
    try:
        store = EmbeddedStore(str(path), max_entries=10, approximate_above=10)

        async def open_close() -> None:
            await store.open()
            await store.close()

        asyncio.run(open_close())
    finally:
        os.umask(previous)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [path.parent, *path.parent.iterdir()]}
    readable = {name: oct(mode) for name, mode in modes.items() if mode & 0o077}
    assert not readable, f"group/other may read the cache: {readable}"


# =============================================================================================
# 3. The admin API: only the admin key, on every route and method
# =============================================================================================

ADMIN_PATHS = [
    "/admin/config",
    "/admin/policies",
    "/admin/policies?tenant=team-a&model=chat",
    "/admin/cache/stats",
    "/admin/cache/purge",
    "/admin/reload",
    "/admin/breakers",
    "/admin/breakers/fake/chat-up/open",
    "/admin/breakers/fake/chat-up/reset",
    "/admin/no-such-route",
]
ADMIN_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
BAD_ADMIN_CREDENTIALS = {
    "missing": None,
    "wrong": "Bearer wrong-admin-key",
    "tenant key": f"Bearer {KEY_A}",
    "own provider key": f"Bearer {BYOK_KEY}",
    "scheme only": "Bearer",
    "empty token": "Bearer ",
    "basic": "Basic " + base64.b64encode(f"admin:{ADMIN_KEY}".encode()).decode(),
    "no scheme": ADMIN_KEY,
    "other scheme": f"Token {ADMIN_KEY}",
    "tab separator": f"Bearer\t{ADMIN_KEY}",
    "key plus a char": f"Bearer {ADMIN_KEY}x",
    "key minus a char": f"Bearer {ADMIN_KEY[:-1]}",
    "key prefix": f"Bearer {ADMIN_KEY[:4]}",
    "key twice": f"Bearer {ADMIN_KEY} {ADMIN_KEY}",
    "very long": "Bearer " + "A" * 7000,
}


async def admin_sweep(url: str) -> list[tuple[str, str, str, int, str, bytes]]:
    out = []
    async with aiohttp.ClientSession() as session:
        for cred_name, authorization in BAD_ADMIN_CREDENTIALS.items():
            headers = {"Authorization": authorization} if authorization is not None else {}
            for path in ADMIN_PATHS:
                for method in ADMIN_METHODS:
                    body = b"{}" if method in ("POST", "PUT", "PATCH") else None
                    send = {**headers, "Content-Type": "application/json"} if body else headers
                    async with session.request(method, url + path, data=body, headers=send) as resp:
                        raw = await resp.read()
                        out.append((cred_name, method, path, resp.status, resp.content_type, raw))
    return out


def test_admin_routes_refuse_every_bad_credential_with_an_openai_401(sec: Secured) -> None:
    """Missing, wrong, tenant, own-provider, malformed (scheme only, Basic, no scheme, another
    scheme, tab), near-miss (one char more or less, a prefix) and very long keys, on every
    admin route and every method (unknown routes and methods included: the key is checked
    before the router's 404/405, so nothing about the admin API shows without it)."""
    results = asyncio.run(admin_sweep(sec.url))
    assert len(results) == len(BAD_ADMIN_CREDENTIALS) * len(ADMIN_PATHS) * len(ADMIN_METHODS)
    for cred_name, method, path, status, content_type, raw in results:
        where = f"{method} {path} with {cred_name} key"
        assert status == 401, f"{where}: {status} {raw[:200]!r}"
        if method != "HEAD":
            error = assert_openai_error(
                status, {"Content-Type": content_type}, raw, expected_status=401
            )
            assert error["code"] == "invalid_api_key", where
            assert ADMIN_KEY not in error["message"] and KEY_A not in error["message"]
    # The right key works (the sweep would prove nothing otherwise).
    assert sec.call("GET", "/admin/config", key=ADMIN_KEY).status == 200


ADMIN_PATH_SPELLINGS = [
    "/admin/config",
    "/%61dmin/config",
    "/admin%2Fconfig",
    "//admin/config",
    "/admin//config",
    "/./admin/config",
    "/admin/./config",
    "/x/../admin/config",
    "/v1/../admin/config",
    "/ADMIN/config",
    "/admin/config/",
    "/admin/config;x",
    "/admin/config%00",
    "/admin/breakers/fake/chat-up/%6fpen",
]
PUBLIC_PATH_SPELLINGS = [
    "/v1/chat/completions",
    "/v1/chat/completions/",
    "//v1/chat/completions",
    "/v1/chat//completions",
    "/v1/chat/%63ompletions",
    "/v1%2Fchat%2Fcompletions",
    "/v1/./chat/completions",
    "/v1/x/../chat/completions",
    "/V1/chat/completions",
    "/v1/chat/completions;x",
]


def test_no_spelling_of_a_path_skips_the_key_check(sec: Secured) -> None:
    """The middleware decides which check applies from request.path, the router from its own
    matching: a path the router accepts but the middleware misclassifies would skip
    authentication. Raw bytes, since HTTP clients normalise paths."""
    for path in ADMIN_PATH_SPELLINGS:
        for method in ("GET", "POST"):
            for key in (None, KEY_A):
                headers = [("Authorization", f"Bearer {key}".encode())] if key else []
                body = b"{}" if method == "POST" else b""
                resp = raw_http(sec.port, raw_request(method, path, headers, body))
                assert resp.status in (400, 401, 404, 405), (path, method, key, resp.status)
                assert "loaded_at" not in resp.text and "breakers" not in resp.text, path
    for path in PUBLIC_PATH_SPELLINGS:
        resp = raw_http(sec.port, raw_request("POST", path, [], chat_body()))
        assert resp.status in (400, 401, 404, 405), (path, resp.status, resp.text[:200])
    for path in ("/v1/models", "/v1/models/", "//v1/models", "/v1/models/chat", "/v1/%6dodels"):
        resp = raw_http(sec.port, raw_request("GET", path))
        assert resp.status in (401, 404), (path, resp.status)


def test_the_admin_key_is_compared_by_digest(sec: Secured, monkeypatch: pytest.MonkeyPatch) -> None:
    """Constant time: gateway/http/auth.py check_admin compares `hash_key(token)` with the stored
    `admin_key_hash` using `!=`, and tenant_for looks `hash_key(token)` up in a dict of
    digests. `!=` on str may stop at the first differing character, but both sides are
    64-character SHA-256 hex digests: the attacker controls the token, not its digest, so
    where the comparison stops says nothing about how much of the *key* matched (a prefix of
    the key does not yield a prefix of the digest). That is as good as hmac.compare_digest
    here. Checked: the stored value is the digest (never the key), and every presented token
    is hashed before it is compared, whatever its length."""
    settings = sec.server.settings
    assert settings.admin_key_hash == hashlib.sha256(ADMIN_KEY.encode()).hexdigest()
    assert ADMIN_KEY not in repr(settings.tenant_by_key_hash)
    assert all(len(digest) == 64 for digest in settings.tenant_by_key_hash)
    hashed: list[str] = []
    real_hash = auth.hash_key

    def spy(token: str) -> str:
        hashed.append(token)
        return real_hash(token)

    monkeypatch.setattr(auth, "hash_key", spy)
    for token in (ADMIN_KEY[:1], ADMIN_KEY[:-1], "x" * 5000):
        with pytest.raises(auth.AuthenticationFailed):
            auth.check_admin(settings, f"Bearer {token}")
        with pytest.raises(auth.AuthenticationFailed):
            auth.tenant_for(settings, f"Bearer {token}")
    auth.check_admin(settings, f"Bearer {ADMIN_KEY}")
    assert hashed == [t for t in (ADMIN_KEY[:1], ADMIN_KEY[:-1], "x" * 5000) for _ in (0, 1)] + [
        ADMIN_KEY
    ]


@pytest.mark.parametrize(
    ("extra", "environ"),
    [
        ({}, {"GATEWAY_ADMIN_KEY_UNUSED": ADMIN_KEY}),  # anonymous mode, admin env var unset
        ({"auth": {"admin_key_env": "SEC_EMPTY_ADMIN"}}, {"SEC_EMPTY_ADMIN": ""}),  # set, empty
        ({"auth": {"admin_key_env": None}}, {"GATEWAY_ADMIN_KEY": ADMIN_KEY}),  # none named
        (
            {"auth": {"keys": [{"env": "SEC_T", "tenant": "t"}]}},  # keyed, admin env var unset
            {"SEC_T": KEY_A},
        ),
    ],
    ids=["anonymous-unset", "empty-value", "admin-env-null", "keyed-unset"],
)
def test_the_admin_api_is_disabled_without_an_admin_key(
    server_thread: ServerThread,
    fake_upstream: FakeUpstream,
    extra: Json,
    environ: dict[str, str],
) -> None:
    settings = settings_for(fake_upstream.url, extra, environ)
    assert settings.admin_key_hash is None
    with running_gateway(server_thread, settings) as gw:
        for authorization in (None, f"Bearer {ADMIN_KEY}", f"Bearer {KEY_A}", "Bearer ", "Bearer"):
            headers = {"Authorization": authorization} if authorization else {}
            for path in ADMIN_PATHS:
                for method in ("GET", "POST"):
                    resp = asyncio.run(request(method, gw.url + path, headers=headers))
                    assert_raw_error(resp, 401, code="admin_disabled")


@pytest.mark.parametrize(
    ("environ", "collision"),
    [
        ({"SEC_ADM": "same-key-0123456789", "SEC_T1": "same-key-0123456789"}, "admin = t1"),
        (
            {
                "SEC_ADM": "admin-only-01234",
                "SEC_T1": "shared-0123456789",
                "SEC_T2": "shared-0123456789",
            },
            "t1 = t2",
        ),
    ],
    ids=["admin-key-equals-a-tenant-key", "two-tenants-one-key"],
)
def test_was_finding_key_collisions_are_accepted_at_load(
    server_thread: ServerThread,
    fake_upstream: FakeUpstream,
    environ: dict[str, str],
    collision: str,
) -> None:
    """F5 (low; a misconfiguration the gateway could refuse). gateway/config/settings.py
    build_settings, lines 164-166 and 178: `tenant_by_key_hash` is a dict built from the keys whose
    variables are set, so two tenants with the same key value silently become the last one
    (t1's callers are billed, limited and cached as t2), and nothing compares the admin key
    with the tenant keys, so a tenant whose key equals the admin key gets every admin route
    (config, purge of every tenant's cache, breakers, reload). Should: build_settings raises
    (the load and a reload are refused, naming the variables, never the values)."""
    keys = [{"env": "SEC_T1", "tenant": "t1"}, {"env": "SEC_T2", "tenant": "t2"}]
    try:
        settings = settings_for(
            fake_upstream.url, {"auth": {"admin_key_env": "SEC_ADM", "keys": keys}}, environ
        )
    except (ValueError, ConfigError):
        return  # refused at load: what should happen
    with running_gateway(server_thread, settings) as gw:
        t1_key = environ["SEC_T1"]
        config = asyncio.run(
            request("GET", gw.url + "/admin/config", headers={"Authorization": f"Bearer {t1_key}"})
        )
        tenant = settings.tenant_by_key_hash.get(hashlib.sha256(t1_key.encode()).hexdigest())
    pytest.fail(
        f"{collision}: the config was accepted; t1's key now opens /admin/config with HTTP "
        f"{config.status} and maps to tenant {tenant!r}"
    )


# =============================================================================================
# 4. Request headers cannot inject into the upstream call, the response or the access log
# =============================================================================================

INJECTION = b"X-Injected: yes"
# (header, value) pairs, raw bytes. Some are refused by aiohttp's parser (400), some reach
# the gateway's own validation (400 OpenAI error), some are accepted (200).
HOSTILE_HEADERS: list[tuple[str, bytes]] = [
    (name, value)
    for name in (
        "x-request-id",
        "x-gateway-timeout",
        "x-gateway-knowledge-base",
        "x-gateway-provider-key",
        "x-gateway-cache",
    )
    for value in (
        b"abc\nX-Injected: yes",  # bare LF
        b"abc\rX-Injected: yes",  # bare CR
        b"abc\r\n X-Injected: yes",  # obsolete line folding
        b"abc\x00X-Injected: yes",
        b"abc%0d%0aX-Injected:%20yes",  # percent-encoded: just characters
        b"abc\\r\\nX-Injected: yes",  # escaped: just characters
        "abc\u2028X-Injected: yes".encode(),  # a Unicode line separator
        b"A" * 8000,  # near aiohttp's 8190-byte line limit
        b"A" * 9000,  # over it
    )
] + [
    ("Authorization", b"Bearer " + KEY_A.encode() + b"\nX-Injected: yes"),
    ("Authorization", b"Bearer " + KEY_A.encode() + b"%0d%0aX-Injected: yes"),
    ("Authorization", b"Bearer " + b"A" * 9000),
]


def test_crlf_and_oversized_header_values_inject_nothing(
    sec: Secured, fake_upstream: FakeUpstream
) -> None:
    """Each hostile value on a chat call of tenant A (whose policy allows own keys): the answer
    is a 200 or a clean 400 (never a 5xx, never a hang); no response carries an X-Injected
    header or a header value with CR/LF; the upstream never gets X-Injected, a CR/LF in any
    header, or any of the client's headers; the x-request-id echoed is the client's only when
    it is a plain token, else the gateway's own; the access log stays one JSON object per
    line."""
    before = len(sec.access_lines())
    app_answers = 0
    for name, value in HOSTILE_HEADERS:
        headers = [("Authorization", f"Bearer {KEY_A}".encode())] if name != "Authorization" else []
        data = raw_request("POST", "/v1/chat/completions", [*headers, (name, value)], chat_body())
        resp = raw_http(sec.port, data)
        where = f"{name}: {value[:40]!r}"
        assert resp.status in (200, 400, 401, 403, 431), (where, resp.status, resp.text[:300])
        assert "x-injected" not in resp.headers, where
        for values in resp.headers.values():
            assert not any("\r" in v or "\n" in v for v in values), where
        if "x-request-id" in resp.headers:  # the gateway answered (not aiohttp's parser)
            app_answers += 1
            rid = resp.headers["x-request-id"][0]
            assert rid.startswith("req_") or rid.encode() == value, (where, rid)
            if resp.status >= 400:
                assert_openai_error(
                    resp.status,
                    {"Content-Type": resp.headers["content-type"][0]},
                    resp.body,
                    expected_status=resp.status,
                )
    assert app_answers >= 10, "enough values got past the HTTP parser to test the gateway"
    for call in upstream_requests(fake_upstream):
        sent = {k.lower(): v for k, v in call["headers"].items()}
        assert "x-injected" not in sent, sent
        assert not any("\r" in v or "\n" in v for v in sent.values()), sent
        assert set(sent) <= {
            "host",
            "content-type",
            "content-length",
            "authorization",
            "x-provider-token",
            "accept",
            "accept-encoding",
            "user-agent",
        }, sent
        assert sent["authorization"].startswith("Bearer ") and "\n" not in sent["authorization"]
    lines = sec.access_lines()[before:]
    assert len(lines) == app_answers
    assert all(set(line) >= {"request_id", "status", "path"} for line in lines)
    assert sec.call("GET", "/healthz").status == 200


def test_gateway_headers_are_validated_and_never_forwarded(
    sec: Secured, fake_upstream: FakeUpstream
) -> None:
    """Values that pass HTTP parsing but not the gateway's checks are 400 OpenAI errors; the
    upstream gets only the configured headers (provider key, X-Provider-Token), never the
    client's (Cookie, X-Forwarded-For, x-gateway-*, its Authorization)."""
    bad = {
        "x-gateway-timeout": ["nan", "inf", "-1", "0", "1e309", "3601", "5s", "9" * 5000],
        "x-gateway-knowledge-base": ["docs", "../../etc/passwd", "x" * 5000, "None"],
        "x-gateway-provider-key": ["short", "has a space", "k" * 513, "ünïcode-key-123"],
        "x-gateway-cache": ["skip", "bypass;x", "b" * 5000],
    }
    for name, values in bad.items():
        for value in values:
            resp = sec.chat(KEY_A, "validated", model="plain", headers={name: value})
            error = assert_raw_error(resp, 400, code="invalid_header")
            if name == "x-gateway-provider-key":
                assert value not in error["message"]  # an own key is never echoed
    assert not upstream_requests(fake_upstream), "refused requests never go upstream"
    client_headers = {
        "Cookie": "session=s3cr3t",
        "X-Forwarded-For": "10.0.0.1",
        "X-Real-IP": "10.0.0.2",
        "X-Api-Key": "client-extra",
        "OpenAI-Organization": "org-client",
        "x-gateway-timeout": "5",
        "x-gateway-cache": "bypass",
        "x-request-id": "client-trace-1",
    }
    resp = sec.chat(KEY_A, "forwarded?", model="plain", headers=client_headers)
    assert resp.status == 200 and resp.headers["x-request-id"] == "client-trace-1"
    assert len(resp.headers["x-request-id"]) <= 128
    long_id = sec.chat(KEY_A, "long id", model="plain", headers={"x-request-id": "a" * 129})
    assert long_id.headers["x-request-id"].startswith("req_")
    sent = upstream_requests(fake_upstream)[0]["headers"]
    assert sent["Authorization"] == f"Bearer {PROVIDER_KEY}"
    assert sent["X-Provider-Token"] == HEADER_TOKEN
    lowered = {k.lower() for k in sent}
    assert not lowered & {k.lower() for k in client_headers}, sent


def test_the_knowledge_base_header_is_a_name_never_a_url(
    sec: Secured, server_thread: ServerThread, fake_upstream: FakeUpstream
) -> None:
    """SSRF: x-gateway-knowledge-base selects among configured bases by name; a URL (here one
    of a live listener) is a 400 and nothing connects to it."""
    hits: list[str] = []

    async def record(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.json_response({"data": []})

    async def start() -> web.AppRunner:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", record)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return runner

    runner = server_thread.call(start())
    try:
        port = runner.addresses[0][1]
        for value in (
            f"http://127.0.0.1:{port}/search",
            f"127.0.0.1:{port}",
            f"//127.0.0.1:{port}",
            f"file:///etc/passwd?{port}",
        ):
            resp = sec.chat(KEY_A, "ground me", headers={"x-gateway-knowledge-base": value})
            assert_raw_error(resp, 400, code="invalid_header")
        time.sleep(0.1)
        assert hits == []
        assert not upstream_requests(fake_upstream)
    finally:
        server_thread.call(runner.cleanup())


# =============================================================================================
# 5. Size limits
# =============================================================================================


def test_oversized_bodies_are_413_with_content_length_and_chunked(sec: Secured) -> None:
    padding = "x" * (MAX_BODY + 1000)
    bodies = [
        ("/v1/chat/completions", KEY_A, {"model": "plain", "messages": [], "pad": padding}),
        ("/v1/embeddings", KEY_A, {"model": "embed", "input": padding}),
        ("/admin/cache/purge", ADMIN_KEY, {"tenant": padding}),
    ]
    for path, key, body in bodies:
        for chunked in (False, True):
            resp = sec.call("POST", path, key=key, body=body, chunked=chunked)
            assert_raw_error(resp, 413, code="request_too_large")
    assert sec.chat(KEY_A, "still serving", model="plain").status == 200


def test_a_content_length_over_the_limit_is_refused_at_once(sec: Secured) -> None:
    """A Content-Length of 10 MB with only 1 KB sent: the 413 comes back without waiting for
    (or buffering) the rest."""
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\n"
        f"Authorization: Bearer {KEY_A}\r\nContent-Type: application/json\r\n"
        "Content-Length: 10000000\r\n\r\n"
    ).encode()
    started = time.perf_counter()
    resp = raw_http(sec.port, head + b"x" * 1024, timeout=3)
    assert time.perf_counter() - started < 2
    assert resp.status == 413 and b"request_too_large" in resp.body


def test_huge_or_too_many_headers_get_a_clean_4xx_and_serving_continues(sec: Secured) -> None:
    cases = {
        "one 9 KB header": raw_request("GET", "/healthz", [("x-big", b"a" * 9000)]),
        "one 100 KB header": raw_request("GET", "/healthz", [("x-big", b"a" * 100_000)]),
        "a 9 KB Authorization": raw_request(
            "POST", "/v1/chat/completions", [("Authorization", b"Bearer " + b"k" * 9000)], b"{}"
        ),
        "500 headers": raw_request("GET", "/healthz", [(f"x-h{i}", b"v") for i in range(500)]),
        "a 20 KB URL": raw_request("GET", "/v1/models/" + "m" * 20_000),
    }
    for name, data in cases.items():
        resp = raw_http(sec.port, data)
        assert resp.status in (400, 413, 414, 431), (name, resp.status, resp.text[:200])
    # Many long lines, each under the limits, are bounded by them (<= 128 lines of 8 KB).
    many = raw_request("GET", "/healthz", [(f"x-h{i}", b"v" * 8000) for i in range(100)])
    assert raw_http(sec.port, many).status in (200, 400, 431)
    assert sec.call("GET", "/healthz").status == 200
    assert sec.chat(KEY_A, "still serving", model="plain").status == 200


# =============================================================================================
# 6. Upstream URLs come from config only
# =============================================================================================

HOSTILE_MODELS = [
    "../../admin",
    "http://evil.example/",
    "gpt-4o?x=1#",
    "%2e%2e/",
    "chat/../plain",
    "chat\r\nX-Injected: yes",
    " chat",
    "CHAT",
    "chat-up",  # the upstream name is not a public name
    "m" * 20_000,
]


def test_client_model_strings_never_reach_a_url_or_the_upstream_model_field(
    sec: Secured, fake_upstream: FakeUpstream
) -> None:
    for model in HOSTILE_MODELS:
        resp = sec.chat(KEY_B, "which model?", model=model)
        assert_raw_error(resp, 404, code="model_not_found", param="model")
        embed = sec.call("POST", "/v1/embeddings", key=KEY_B, body={"model": model, "input": "x"})
        assert_raw_error(embed, 404, code="model_not_found")
        retrieved = sec.call("GET", "/v1/models/" + quote(model[:200], safe=""), key=KEY_B)
        assert retrieved.status == 404, (model, retrieved.status)
    assert not fake_upstream.received, "no unknown model reached an upstream"
    for public, upstream in [("chat", "chat-up"), ("chat-alias", "chat-up"), ("plain", "plain-up")]:
        assert sec.chat(KEY_B, f"mapped {public}", model=public).status == 200
        assert upstream_requests(fake_upstream)[-1]["body"]["model"] == upstream
    assert (
        sec.call("POST", "/v1/embeddings", key=KEY_B, body={"model": "embed", "input": "x"}).status
        == 200
    )
    assert {r["path"] for r in fake_upstream.received} == {"/v1/chat/completions", "/v1/embeddings"}
    assert fake_upstream.received[-1]["body"]["model"] == "embed-up"


# =============================================================================================
# 7. Everything else found reading the code
# =============================================================================================


def test_was_finding_chunked_bodies_are_never_charged_to_tokens_per_minute(sec: Secured) -> None:
    """F3 (medium). gateway/http/middleware.py _admit, line 102: the prompt estimate is
    `request.content_length // 4`, which is 0 for Transfer-Encoding: chunked; and
    _settle_permit (lines 110-114) records only the upstream's completion_tokens, never its
    prompt_tokens. A tenant limited to 2000 tokens a minute is refused its second 16 KB
    (about 4000-token) prompt when it sends Content-Length, but is never charged for the same
    prompt sent chunked. Should: charge the prompt once the body is read (read_json knows its
    length) or reconcile with usage.prompt_tokens at settle time."""
    big = {"model": "plain", "messages": [{"role": "user", "content": "word " * 3200}]}
    sized_key, chunked_key = TENANT_KEYS["tpm-sized"], TENANT_KEYS["tpm-chunked"]
    sized = [sec.call("POST", "/v1/chat/completions", key=sized_key, body=big).status for _ in "12"]
    assert sized == [200, 429], "the Content-Length path is limited (control)"
    chunked = [
        sec.call("POST", "/v1/chat/completions", key=chunked_key, body=big, chunked=True).status
        for _ in "1234"
    ]
    assert chunked[0] == 200
    assert 429 in chunked, f"chunked prompts were never charged: {chunked}"


def test_was_finding_fresh_own_keys_multiply_a_tenants_request_budget(
    sec: Secured, fake_upstream: FakeUpstream
) -> None:
    """F4 (low-medium). gateway/http/middleware.py _admit, lines 99-104: a request with
    x-gateway-provider-key is admitted against `tenant:key:<hash>` only, a bucket created on
    first sight of each key. A tenant allowed 1 request per 100 s gets one more request per
    key *string* it makes up: here 3 made-up keys buy 3 more upstream calls (against a real
    provider, 3 bad-key calls from the gateway's address: enough of those gets the gateway
    itself throttled or blocked for every tenant). docs/POLICIES.md says "its own bucket
    under the tenant's limits". Should: admit a request with an own key against the tenant's
    bucket too (or cap the number of distinct own keys a tenant may use per window)."""
    key = TENANT_KEYS["rps-byok"]
    first = sec.chat(key, "first", model="plain")
    second = sec.chat(key, "second", model="plain")
    assert (first.status, second.status) == (200, 429), "the tenant's budget is spent (control)"
    statuses = [
        sec.chat(
            key,
            f"made-up key {i}",
            model="plain",
            headers={"x-gateway-provider-key": f"sk-made-up-{i}-0000000"},
        ).status
        for i in range(3)
    ]
    calls = len(upstream_requests(fake_upstream))
    assert statuses == [429, 429, 429], (
        f"made-up own keys were admitted past the tenant's limit: {statuses}, "
        f"{calls - 1} upstream calls after the budget was spent"
    )


def test_rate_limits_do_not_trust_client_address_headers(
    sec: Secured, fake_upstream: FakeUpstream
) -> None:
    """Budgets are per tenant (from the key), never per client address: X-Forwarded-For,
    X-Real-IP and Forwarded neither reset a budget nor reach the upstream."""
    key = TENANT_KEYS["rps-xff"]
    assert sec.chat(key, "first", model="plain").status == 200
    for i in range(3):
        spoof = {
            "X-Forwarded-For": f"203.0.113.{i}",
            "X-Real-IP": f"198.51.100.{i}",
            "Forwarded": f"for=192.0.2.{i}",
        }
        resp = sec.chat(key, f"spoofed {i}", model="plain", headers=spoof)
        assert_raw_error(resp, 429)
    assert len(upstream_requests(fake_upstream)) == 1
    sent = {k.lower() for k in upstream_requests(fake_upstream)[0]["headers"]}
    assert not sent & {"x-forwarded-for", "x-real-ip", "forwarded"}


FORGED = '{"ts":0,"request_id":"forged","status":200,"tenant":"team-b"}'


def test_client_strings_cannot_forge_log_lines(
    sec: Secured, caplog: pytest.LogCaptureFixture
) -> None:
    """Model names, paths, request ids and header values carrying a newline and a forged JSON
    line: the access log keeps one line per request (JSON escapes them) and no server log
    message carries a client-made newline."""
    caplog.set_level(logging.DEBUG)
    before = len(sec.access_lines())
    injected = "x\n" + FORGED
    sec.chat(KEY_A, "hi", model=injected)
    sec.chat(KEY_A, "hi", model="plain", headers={"x-gateway-cache": injected.replace("\n", " ")})
    sec.chat(KEY_A, "hi", model="chat", headers={"x-gateway-knowledge-base": "a\\n" + FORGED})
    sec.chat(KEY_A, injected, model="plain")
    for path in ("/nowhere%0a" + quote(FORGED), "/admin/%0a" + quote(FORGED)):
        resp = raw_http(sec.port, raw_request("GET", path))
        assert resp.status in (401, 404)
    lines = sec.access_lines()[before:]
    assert len(lines) == 6
    assert not any(line["request_id"] == "forged" for line in lines)
    assert lines[0]["model"] == injected  # kept, escaped
    for record in caplog.records:
        message = record.getMessage()
        assert "forged" not in message or "\n{" not in message, message


def test_probes_show_no_config_path_and_metrics_can_require_a_key(sec: Secured) -> None:
    """Was F6 (low): /readyz and /metrics answered anyone with tenant names (per-tenant
    metrics) and the absolute path of config.yaml. Now /readyz names the config file only,
    and auth.metrics_key_env makes /metrics need its key (or the admin key)."""
    assert sec.chat(KEY_A, "count me per tenant", model="plain").status == 200
    ready = sec.call("GET", "/readyz")
    assert ready.status == 200 and str(sec.config_path.parent) not in ready.text
    for key in (None, KEY_A, "wrong"):
        refused = sec.call("GET", "/metrics", key=key)
        assert refused.status == 401 and "team-a" not in refused.text
    for key in (METRICS_KEY, ADMIN_KEY):
        assert sec.call("GET", "/metrics", key=key).status == 200

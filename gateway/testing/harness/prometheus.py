"""A throwaway Prometheus (the Debian `prometheus` package's binary) on a free loopback port,
its config and TSDB in a temporary directory, and its query API."""

from __future__ import annotations

import json
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gateway.testing.harness.configs import write_yaml
from gateway.testing.harness.process import Server, answers, free_port

PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "promtool"


def prometheus_path() -> str | None:
    return PROMETHEUS if Path(PROMETHEUS).exists() else shutil.which("prometheus")


def promtool_path() -> str | None:
    return shutil.which(PROMTOOL)


def scrape_config(target: str, rule_files: list[str], interval: str = "1s") -> dict[str, Any]:
    """Scrape one target (HOST:PORT) every `interval`, evaluating `rule_files` as often."""
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
    def __init__(self, server: Server, config_path: Path) -> None:
        self.server, self.config_path = server, config_path
        self.url, self.workdir = server.url, server.workdir

    def log(self) -> str:
        return self.server.output()[-4000:]

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
def prometheus_server(config: dict[str, Any], timeout: float = 20.0) -> Iterator[Prometheus]:
    """Run Prometheus with `config` until the block ends."""
    executable = prometheus_path()
    if executable is None:
        raise FileNotFoundError("prometheus is not installed (apt-get install -y prometheus)")
    with tempfile.TemporaryDirectory(prefix="gateway-prometheus-") as tmp:
        workdir = Path(tmp)
        config_path = write_yaml(workdir / "prometheus.yml", config)
        port = free_port()
        argv = [
            executable,
            f"--config.file={config_path}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ]
        with Server("prometheus", argv, workdir) as server:
            server.wait_ready(answers(f"http://127.0.0.1:{port}", "/-/ready"), timeout)
            yield Prometheus(server, config_path)

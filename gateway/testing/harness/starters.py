"""Named starters for our own Python servers as subprocesses: the gateway (`python -m gateway
serve`), the fake upstream and fake retriever, and the bare aiohttp forwarder.

Each child imports `gateway` from `root` (this checkout unless told otherwise, so a benchmark
can measure an exported older tree) and listens on a free port (`--port 0`); it is ready once
it prints 'listening on http://...'. A starter that fails stops what it started and raises
`ServerError` with the log's tail.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from gateway.testing.harness.process import Server, pythonpath
from gateway.testing.harness.sync_http import http_ok

REPO_ROOT = Path(__file__).resolve().parents[3]
FAKE_UPSTREAM = "gateway.testing.fake_upstream"
FAKE_RETRIEVER = "gateway.testing.fake_retriever"
FORWARDER = "gateway.testing.harness.forwarder"


def python_server(
    name: str,
    workdir: Path,
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    root: Path = REPO_ROOT,
    cwd: Path | None = None,
) -> Server:
    """`python ARGV...` as a `Server`, importing `gateway` from `root`."""
    env = {"PYTHONPATH": pythonpath(root), **(env or {})}
    return Server(name, [sys.executable, *argv], workdir, env, cwd)


def listening(server: Server, timeout: float) -> Server:
    """Wait until `server` prints its URL; stop it and raise if it does not."""
    try:
        server.wait_ready(server.log_url, timeout)
    except BaseException:
        server.stop()
        raise
    return server


def ready(server: Server, timeout: float, path: str = "/readyz") -> Server:
    """Wait until `server` (already listening) answers 200 on `path`: a gateway whose embedder
    loads in the background listens long before it is ready."""
    url = server.url
    try:
        server.wait_ready(lambda: url if http_ok(url + path) else None, timeout)
    except BaseException:
        server.stop()
        raise
    return server


def spawn_gateway(
    workdir: Path,
    config: Path,
    *,
    name: str = "gateway",
    env: Mapping[str, str] | None = None,
    root: Path = REPO_ROOT,
    cwd: Path | None = None,
) -> Server:
    """`python -m gateway serve --config CONFIG --port 0`, not waited for: start several at
    once, then `listening` each."""
    argv = ["-m", "gateway", "serve", "--config", str(config), "--port", "0"]
    return python_server(name, workdir, argv, env, root, cwd)


def start_gateway(
    workdir: Path,
    config: Path,
    *,
    name: str = "gateway",
    env: Mapping[str, str] | None = None,
    root: Path = REPO_ROOT,
    cwd: Path | None = None,
    timeout: float = 60.0,
) -> Server:
    """A gateway process, once it listens (its base URL is `server.url`)."""
    server = spawn_gateway(workdir, config, name=name, env=env, root=root, cwd=cwd)
    return listening(server, timeout)


def start_fake_upstream(
    workdir: Path,
    *,
    name: str = "fake-upstream",
    module: str = FAKE_UPSTREAM,
    env: Mapping[str, str] | None = None,
    root: Path = REPO_ROOT,
    timeout: float = 30.0,
) -> Server:
    """The fake upstream (or `module`, e.g. the fake retriever) as a process; `server.url`
    is its root (add /v1 for the OpenAI API)."""
    return listening(
        python_server(name, workdir, ["-m", module, "--port", "0"], env, root), timeout
    )


def start_forwarder(
    workdir: Path,
    upstream: str,
    *,
    name: str = "forwarder",
    root: Path = REPO_ROOT,
    timeout: float = 30.0,
) -> Server:
    """The bare aiohttp forwarder in front of `upstream` (a base URL ending in /v1)."""
    argv = ["-m", FORWARDER, "--upstream", upstream, "--port", "0"]
    return listening(python_server(name, workdir, argv, root=root), timeout)


def run_gateway_cli(
    *args: str, timeout: float = 60.0, cwd: Path = REPO_ROOT, wrapper: Sequence[str] = ()
) -> subprocess.CompletedProcess[str]:
    """`python -m gateway ARGS...` as a user runs it (from the checkout unless `cwd` says
    otherwise; under `wrapper`, a command such as `unshare ...`, if given), to its end: exit
    status, stdout and stderr."""
    return subprocess.run(
        [*wrapper, sys.executable, "-m", "gateway", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": pythonpath(REPO_ROOT)},
    )

"""Several gateway processes at once (replicas sharing Redis behind nginx, or gateways on their
own configs), and the readiness that waits for the embedder.

They are started together, so their start-ups (the embedding model's load above all) overlap,
then waited for one by one; if one fails, all are stopped. A gateway listens before its
embedder has loaded (it loads in the background): a benchmark that measures the semantic tier
waits for `embedder_loaded` too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from gateway.testing.harness.process import Server, ServerError
from gateway.testing.harness.starters import listening, spawn_gateway
from gateway.testing.harness.sync_http import get_json


def start_gateways(
    workdir: Path,
    configs: Sequence[tuple[str, Path]],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 120.0,
) -> list[Server]:
    """One gateway per (name, config file), each once it listens (`server.url`)."""
    servers = [spawn_gateway(workdir, config, name=name, env=env) for name, config in configs]
    try:
        for server in servers:
            listening(server, timeout)
    except BaseException:
        for server in servers:
            server.stop()
        raise
    return servers


def embedder_loaded(server: Server, timeout: float = 600.0) -> Server:
    """Wait until `server`'s /readyz says ready with the semantic tier on (and a two-stage
    embedder's quick stage loaded or given up); a `ServerError` at once if its embedder
    failed to load."""

    def probe() -> str | None:
        try:
            body = get_json(server.url + "/readyz", timeout=5)
        except (OSError, RuntimeError, ValueError):
            return None
        cache = body.get("cache") or {}
        if cache.get("embedder_error"):
            raise ServerError(f"{server.name}: embedder failed: {cache['embedder_error']}")
        loaded = cache.get("semantic") and cache.get("quick_stage") != "loading"
        return server.url if body.get("status") == "ready" and loaded else None

    url = server.url
    server.wait_ready(probe, timeout, poll=0.25)
    server.url = url
    return server

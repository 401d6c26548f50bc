"""The `server:` section: where the gateway listens, its logs, reload and shutdown."""

from __future__ import annotations

from pydantic import Field

from gateway.config.base import Strict


class ServerConfig(Strict):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, description="Larger bodies get 413.")
    access_log: bool = Field(True, description="One JSON line per request on stderr.")
    tune_gc: bool = Field(
        True, description="Freeze start-up objects and collect less often (lower p99 under load)."
    )
    log_prompts: bool = Field(False, description="Put prompt text in the access log.")
    log_probes: bool = Field(
        False,
        description="Also log /healthz, /readyz and /metrics (probes and scrapes every few "
        "seconds) in the access log.",
    )
    watch_config: bool = Field(
        True, description="Reload when the config file changes (also: SIGHUP, POST /admin/reload)."
    )
    drain_seconds: float = Field(
        0.0,
        ge=0,
        le=600,
        description="SIGTERM: report not ready this long before refusing connections "
        "(a balancer's health-check interval or two).",
    )
    shutdown_timeout_seconds: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="SIGTERM: the longest requests in flight may take to finish; streams still "
        "running then end with an SSE error event.",
    )

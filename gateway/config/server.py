"""The `server:` section: where the gateway listens, how long it waits for slow or idle clients,
how many connections it holds, its logs, reload and shutdown."""

from __future__ import annotations

from pydantic import Field

from gateway.config.base import Strict


class ServerConfig(Strict):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, description="Larger bodies get 413.")
    # Client-side bounds only (reading a request, an idle connection): a long upstream stream
    # the client is reading is never cut by them; a slow reader is bounded by backpressure.
    header_timeout_seconds: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="From a request's first byte to the end of its headers (nginx: "
        "client_header_timeout 60 s); slower clients get 408 and the connection is closed.",
    )
    body_timeout_seconds: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="The longest silence while a request body is being read (nginx: "
        "client_body_timeout 60 s); then 408.",
    )
    idle_timeout_seconds: float = Field(
        75.0,
        gt=0,
        le=86400,
        description="A keep-alive connection with no request for this long is closed (nginx: "
        "keepalive_timeout 75 s); keep it above the idle timeout of a balancer in front.",
    )
    max_connections: int = Field(
        4096,
        ge=1,
        le=1_000_000,
        description="Client connections held at once; past it a new connection gets 503 with "
        "Retry-After and is closed, while those open are still served. Keep it below the "
        "open-file limit (ulimit -n) less the upstream connections.",
    )
    completions_max_prompts: int = Field(
        2048,
        ge=1,
        le=2048,
        description="/v1/completions: prompts in one request's list (OpenAI's own limit, "
        "2048); more get 400 too_many_prompts before any upstream call.",
    )
    completions_max_choices: int = Field(
        128,
        ge=1,
        le=262_144,
        description="/v1/completions: prompts x n, the choices one request asks for (each an "
        "upstream generation, each counted as a request by the rate limits); more get 400 "
        "too_many_choices before any upstream call. The default is OpenAI's largest n for "
        "one prompt.",
    )
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

"""Every Prometheus metric the gateway exports, created here and nowhere else.

Stages report what happened through `Metrics`; labels take only bounded values: endpoint
names from a fixed set and model/provider names from config (anything else is `other`).
"""

from __future__ import annotations

import platform

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from gateway import __version__
from gateway.context import RequestContext

# Millisecond resolution at the low end (cache hits, overhead), minutes at the top (long streams).
LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
)
OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1)
ENDPOINTS = frozenset({"chat", "embeddings", "models", "health", "metrics", "admin", "other"})
CONTENT_TYPE = CONTENT_TYPE_LATEST

# `*_created` series double the series count and no dashboard reads them.
disable_created_metrics()


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "gateway_requests",
            "Requests answered, by endpoint, served model and status class.",
            ["endpoint", "model", "status_class"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "gateway_request_duration_seconds",
            "End-to-end time from request to last byte.",
            ["endpoint", "model", "stream"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.upstream_seconds = Histogram(
            "gateway_upstream_duration_seconds",
            "Time spent waiting on the upstream.",
            ["provider", "model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.overhead_seconds = Histogram(
            "gateway_overhead_seconds",
            "End-to-end time minus upstream time (non-streamed).",
            ["endpoint"],
            buckets=OVERHEAD_BUCKETS,
            registry=r,
        )
        self.first_token_seconds = Histogram(
            "gateway_time_to_first_token_seconds",
            "Time until the first streamed chunk.",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "gateway_tokens",
            "Tokens reported by upstreams, by direction (input/output).",
            ["model", "direction"],
            registry=r,
        )
        self.in_flight = Gauge(
            "gateway_in_flight_requests", "Requests being handled now.", registry=r
        )
        self.build_info = Gauge(
            "gateway_build_info",
            "Always 1; labels name the running build.",
            ["version", "python"],
            registry=r,
        )
        self.build_info.labels(__version__, platform.python_version()).set(1)

    def observe(self, ctx: RequestContext) -> None:
        model = ctx.route.name if ctx.route else "none"
        endpoint = ctx.endpoint if ctx.endpoint in ENDPOINTS else "other"
        elapsed = ctx.elapsed()
        self.requests.labels(endpoint, model, f"{ctx.status // 100}xx").inc()
        self.request_seconds.labels(endpoint, model, "true" if ctx.stream else "false").observe(
            elapsed
        )
        if ctx.route and ctx.upstream_seconds is not None:
            self.upstream_seconds.labels(ctx.route.provider, model).observe(ctx.upstream_seconds)
            if not ctx.stream:
                self.overhead_seconds.labels(endpoint).observe(
                    max(0.0, elapsed - ctx.upstream_seconds)
                )
        if ctx.stream and ctx.first_token_seconds is not None:
            self.first_token_seconds.labels(model).observe(ctx.first_token_seconds)
        if ctx.usage:
            self.tokens.labels(model, "input").inc(_count(ctx.usage.get("prompt_tokens")))
            self.tokens.labels(model, "output").inc(_count(ctx.usage.get("completion_tokens")))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def _count(value: object) -> int:
    return value if isinstance(value, int) and value > 0 else 0

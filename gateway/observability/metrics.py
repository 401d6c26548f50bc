"""Every Prometheus metric the gateway exports, created here and nowhere else.

Stages report what happened through `Metrics`; labels take only bounded values: endpoint
names from a fixed set and model/provider names from config (anything else is `other`).
"""

from __future__ import annotations

import math
import platform
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from itertools import accumulate
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from gateway import __version__
from gateway.config import Pricing
from gateway.context import RequestContext
from gateway.resilience.breaker import STATE_VALUES, Breaker

if TYPE_CHECKING:
    from gateway.cache.verify.estimate import Kind
    from gateway.cache.verify.verifier import ModelVerification, ShadowOutcome, Verifier
    from gateway.state.shared import SharedState

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
SIMILARITY_BUCKETS = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.92, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99, 1.0)
OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1)
ENDPOINTS = frozenset(
    {
        "chat",
        "responses",
        "completions",
        "embeddings",
        "models",
        "health",
        "metrics",
        "admin",
        "other",
    }
)
CONTENT_TYPE = CONTENT_TYPE_LATEST

# `*_created` series double the series count and no dashboard reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        r = self.registry
        # What every request records: kept by the loop itself (see _LoopHistogram).
        self.requests = _LoopCounter(
            "gateway_requests",
            "Requests answered, by endpoint, served model, the upstream provider that answered "
            "(none: no upstream call) and status class.",
            ("endpoint", "model", "upstream", "status_class"),
        )
        self.request_seconds = _LoopHistogram(
            "gateway_request_duration_seconds",
            "End-to-end time from request to last byte.",
            ("endpoint", "model", "stream"),
            LATENCY_BUCKETS,
        )
        self.upstream_seconds = _LoopHistogram(
            "gateway_upstream_duration_seconds",
            "Time spent waiting on the upstream.",
            ("provider", "model"),
            LATENCY_BUCKETS,
        )
        self.overhead_seconds = _LoopHistogram(
            "gateway_overhead_seconds",
            "End-to-end time minus upstream time (non-streamed).",
            ("endpoint",),
            OVERHEAD_BUCKETS,
        )
        self.first_token_seconds = _LoopHistogram(
            "gateway_time_to_first_token_seconds",
            "Time until the first streamed chunk.",
            ("model",),
            LATENCY_BUCKETS,
        )
        self.tokens = _LoopCounter(
            "gateway_tokens",
            "Tokens reported by upstreams, by direction (input/output).",
            ("model", "direction"),
        )
        r.register(
            _LoopMetrics(
                self.requests,
                self.request_seconds,
                self.upstream_seconds,
                self.overhead_seconds,
                self.first_token_seconds,
                self.tokens,
            )
        )
        self.in_flight = Gauge(
            "gateway_in_flight_requests", "Requests being handled now.", registry=r
        )
        self.connections_open = Gauge(
            "gateway_connections_open",
            "Client connections open now (server.max_connections caps them).",
            registry=r,
        )
        self.connections_refused = Counter(
            "gateway_connections_refused",
            "Client connections refused (503, then closed): max_connections, the cap was full.",
            ["reason"],
            registry=r,
        )
        self.client_timeouts = Counter(
            "gateway_client_timeouts",
            "Requests a client was too slow to send (408): headers (header_timeout_seconds) "
            "or body (body_timeout_seconds).",
            ["phase"],
            registry=r,
        )
        # Series that exist at 0 from the start: a panel shows "0", not "No data", until the
        # first refusal or timeout.
        self.connections_refused.labels("max_connections")
        for phase in ("headers", "body"):
            self.client_timeouts.labels(phase)
        self.cache_lookups = Counter(
            "gateway_cache_lookups",
            "Cache decisions: hit_exact, hit_semantic, miss, refresh, bypass.",
            ["model", "result"],
            registry=r,
        )
        self.cache_near_misses = Counter(
            "gateway_cache_near_misses",
            "Candidates above the threshold refused by a guard.",
            ["reason"],
            registry=r,
        )
        self.cache_exact_checks = Counter(
            "gateway_cache_exact_checks",
            "Candidates too close to the threshold for the quick vectors, settled by the exact "
            "model (two-stage embedding): each cost an fp32 embedding.",
            ["model"],
            registry=r,
        )
        self.cache_similarity = Histogram(
            "gateway_cache_similarity",
            "Best cosine similarity found by semantic lookups.",
            ["model"],
            buckets=SIMILARITY_BUCKETS,
            registry=r,
        )
        self.cache_lookup_seconds = Histogram(
            "gateway_cache_lookup_duration_seconds",
            "Cache lookup time, embedding included.",
            buckets=OVERHEAD_BUCKETS,
            registry=r,
        )
        self.embedding_seconds = Histogram(
            "gateway_embedding_duration_seconds",
            "Time to embed a request's last user turn (queueing in the micro-batch included).",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.cache_entries = Gauge(
            "gateway_cache_entries", "Entries in the cache store.", registry=r
        )
        self.saved_tokens = Counter(
            "gateway_saved_tokens",
            "Upstream tokens not spent, by what saved them.",
            ["model", "direction", "by"],
            registry=r,
        )
        self.saved_cost = Counter(
            "gateway_saved_cost",
            "Upstream cost not spent (price table currency), by what saved it.",
            ["model", "by"],
            registry=r,
        )
        self.upstream_failures = Counter(
            "gateway_upstream_failures",
            "Failed upstream attempts, by deployment and reason (breaker_open: refused unsent).",
            ["deployment", "reason"],
            registry=r,
        )
        self.invalid_answers = Counter(
            "gateway_upstream_invalid_answers",
            "Upstream 200s that were not a proper answer (retried or fallen back from, never "
            "cached), by deployment and what was wrong.",
            ["deployment", "reason"],
            registry=r,
        )
        self.retries = Counter(
            "gateway_upstream_retries",
            "Attempts repeated on the same deployment after a retryable failure.",
            ["model"],
            registry=r,
        )
        self.fallbacks = Counter(
            "gateway_fallbacks",
            "Requests answered by a fallback model instead of the requested one.",
            ["model", "fallback"],
            registry=r,
        )
        self.breaker_transitions = Counter(
            "gateway_circuit_breaker_transitions",
            "Circuit breaker state changes, by breaker and new state.",
            ["breaker", "state"],
            registry=r,
        )
        self.degradations = Counter(
            "gateway_degradation",
            "Requests by degradation level: 1 grounded, 2 general knowledge, 3 retrieval "
            "unavailable, 4 no model available.",
            ["model", "level"],
            registry=r,
        )
        self.streams_broken = Counter(
            "gateway_streams_broken",
            "Streams the upstream broke after the first byte (ended with an SSE error event).",
            ["model"],
            registry=r,
        )
        self.retrieval_seconds = Histogram(
            "gateway_retrieval_duration_seconds",
            "Knowledge base retrieval time.",
            ["knowledge_base"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.retrievals = Counter(
            "gateway_retrievals",
            "Knowledge base retrievals: grounded, insufficient, failed.",
            ["knowledge_base", "outcome"],
            registry=r,
        )
        self.routing_decisions = Counter(
            "gateway_routing_decisions",
            "Requests for a routed alias, by the model chosen, its tier and why (score, "
            "escalated:<rule>, sticky, moved-up, moved-down).",
            ["alias", "model", "tier", "reason"],
            registry=r,
        )
        self.routing_score = Histogram(
            "gateway_routing_score",
            "Routing scores (predicted quality loss of the cheap tier) of requests for a "
            "routed alias.",
            ["alias"],
            # Predicted losses crowd below 0.3: finer buckets there.
            buckets=(0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.7, 1.0),
            registry=r,
        )
        self.cost = Counter(
            "gateway_cost",
            "Upstream cost spent (price-table currency), from usage or, for streams without "
            "usage, an estimate.",
            ["model"],
            registry=r,
        )
        self.byok_cost = Counter(
            "gateway_byok_cost",
            "Upstream cost of requests sent with the caller's own provider key (not the "
            "gateway's spend), by model. Never by key: every new key would be a new series "
            "(the access log's own_key attributes cost to a key).",
            ["model"],
            registry=r,
        )
        self.tenant_requests = Counter(
            "gateway_tenant_requests",
            "Requests of tenants whose policy opts in (metrics.per_tenant), by status class.",
            ["tenant", "status_class"],
            registry=r,
        )
        self.tenant_cost = Counter(
            "gateway_tenant_cost",
            "Upstream cost of tenants whose policy opts in (metrics.per_tenant), their "
            "cache verification's shadow calls included.",
            ["tenant"],
            registry=r,
        )
        self.shed = Counter(
            "gateway_shed",
            "Optional work skipped under load by policy (overload.max_in_flight), by kind.",
            ["work"],
            registry=r,
        )
        self.loop_stops = Counter(
            "gateway_loop_stops",
            "Agent loops stopped, by rule and action (finalize or error).",
            ["model", "reason", "action"],
            registry=r,
        )
        self.compressions = Counter(
            "gateway_compressions",
            "Long histories compressed: summarized, cached (summary reused), failed.",
            ["model", "result"],
            registry=r,
        )
        self.tool_calls = Counter(
            "gateway_tool_calls",
            "Answers to requests with tools, by what the tool-call guard did: ok, cleaned, "
            "repaired, stripped, passed, failed.",
            ["model", "outcome"],
            registry=r,
        )
        self.tool_call_problems = Counter(
            "gateway_tool_call_problems",
            "Problems left after repair, by kind (unknown_tool, invalid_json, schema, rule, "
            "tool_choice, policy_error).",
            ["kind"],
            registry=r,
        )
        self.tool_cleanings = Counter(
            "gateway_tool_call_cleanings",
            "Deterministic changes the tool-call guard made to arguments, by reason (type, trim, "
            "date, enum_case, empty_arguments, renamed, undeclared_stripped).",
            ["model", "reason"],
            registry=r,
        )
        self.tool_repairs = Counter(
            "gateway_tool_repairs",
            "Times a model was asked again to fix its tool calls.",
            ["model"],
            registry=r,
        )
        self.guard_tokens = Counter(
            "gateway_guard_tokens",
            "Tokens the gateway spent on a request's behalf (summaries, tool-call repairs).",
            ["model", "purpose", "direction"],
            registry=r,
        )
        self.rate_limited = Counter(
            "gateway_rate_limited",
            "Requests refused with 429 by a tenant's rate limit, by the limit that refused.",
            ["limit"],
            registry=r,
        )
        self.config_reloads = Counter(
            "gateway_config_reloads",
            "Config reloads: reloaded, unchanged, invalid (refused, the running config stays), "
            "failed (valid but could not start; the running config stays).",
            ["result"],
            registry=r,
        )
        self.response_store_failures = Counter(
            "gateway_response_store_failures",
            "Stored-response operations that failed: put (the response was not kept), get and "
            "delete (answered 503 store_unavailable).",
            ["operation"],
            registry=r,
        )
        self.cache_verifications = Counter(
            "gateway_cache_verifications",
            "Served cache hits verified by a shadow call, by verdict (agree, disagree).",
            ["model", "result"],
            registry=r,
        )
        self.cache_explorations = Counter(
            "gateway_cache_explorations",
            "Candidates the raised (effective) threshold held back, judged against the fresh "
            "answer (no extra call), by verdict (agree, disagree).",
            ["model", "result"],
            registry=r,
        )
        self.cache_shadow_calls = Counter(
            "gateway_cache_shadow_calls",
            "Hits chosen for verification, by what became of the shadow call: answered, "
            "failed, rate_limited (max_per_minute), breaker_open, shed, not_comparable "
            "(retrieval did not ground it), tenant_limited (the tenant's rate limits), "
            "oversized (larger than the hit's request), varies (answers that vary by nature: "
            "not verified, or two fresh answers disagreed); judged: a judge model's call "
            "(model: the judge).",
            ["model", "outcome"],
            registry=r,
        )
        self.cache_verification_cost = Counter(
            "gateway_cache_verification_cost",
            "Upstream cost of the shadow calls that verify cache hits (price-table currency).",
            ["model"],
            registry=r,
        )
        # Read from the cache's verifier when scraped (watch_verification); empty without one.
        self._verification = _VerificationStates()
        r.register(self._verification)
        self.redis_up = Gauge(
            "gateway_redis_up",
            "1 while a part that shares state through Redis reaches it (the cache: also "
            "synchronised); 0 while it runs on local state.",
            ["component"],
            registry=r,
        )
        self.build_info = Gauge(
            "gateway_build_info",
            "Always 1; labels name the running build.",
            ["version", "python"],
            registry=r,
        )
        self.build_info.labels(__version__, platform.python_version()).set(1)

    def _child(self, metric: Any, *labels: str) -> Any:
        """`metric.labels(*labels)`, memoized: label values are bounded, and the lookup
        (validation, a lock) showed up in the request path's profile."""
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def observe(self, ctx: RequestContext) -> None:
        model = ctx.route.name if ctx.route else "none"
        endpoint = ctx.endpoint if ctx.endpoint in ENDPOINTS else "other"
        elapsed = ctx.elapsed()
        served = ctx.served_deployment
        upstream = served.provider if served is not None else "none"
        self.requests.add((endpoint, model, upstream, _STATUS_CLASSES[ctx.status // 100]), 1)
        self.request_seconds.observe((endpoint, model, "true" if ctx.stream else "false"), elapsed)
        if ctx.route and ctx.upstream_seconds is not None:
            served = ctx.served_deployment
            provider = served.provider if served else ctx.route.provider
            self.upstream_seconds.observe((provider, model), ctx.upstream_seconds)
            if not ctx.stream:
                self.overhead_seconds.observe((endpoint,), max(0.0, elapsed - ctx.upstream_seconds))
        if ctx.stream and ctx.first_token_seconds is not None:
            self.first_token_seconds.observe((model,), ctx.first_token_seconds)
        if ctx.usage:
            self.tokens.add((model, "input"), _count(ctx.usage.get("prompt_tokens")))
            self.tokens.add((model, "output"), _count(ctx.usage.get("completion_tokens")))
        if ctx.cache_result is not None:
            self._observe_cache(ctx, model, ctx.cache_result.replace("-", "_"))
        if ctx.attempts:
            self._observe_resilience(ctx, model)
        if ctx.retrieval is not None and ctx.knowledge_base is not None:
            self._child(self.retrievals, ctx.knowledge_base, ctx.retrieval).inc()
            if ctx.retrieval_seconds is not None:
                self._child(self.retrieval_seconds, ctx.knowledge_base).observe(
                    ctx.retrieval_seconds
                )
        if ctx.degradation_level is not None:
            self._child(self.degradations, model, str(ctx.degradation_level)).inc()
        if ctx.rate_limited is not None:
            self._child(self.rate_limited, ctx.rate_limited).inc()
        for work in ctx.shed:
            self._child(self.shed, work).inc()
        per_tenant = ctx.policy is not None and ctx.policy.metrics.per_tenant
        if per_tenant and ctx.tenant is not None:
            self._child(self.tenant_requests, ctx.tenant, f"{ctx.status // 100}xx").inc()
        self._observe_guards(ctx, model)
        self._observe_cost(ctx, model, ctx.tenant if per_tenant else None)

    def _observe_cost(self, ctx: RequestContext, model: str, tenant: str | None) -> None:
        decision = ctx.routing
        if decision is not None:
            tier = str(decision.tier)
            self._child(self.routing_decisions, decision.alias, model, tier, decision.reason).inc()
            self._child(self.routing_score, decision.alias).observe(decision.score)
        usage = ctx.usage or _estimated_usage(ctx)
        pricing = ctx.route.pricing if ctx.route else None
        if usage is None or pricing is None or ctx.cache_result in ("hit-exact", "hit-semantic"):
            return
        spent = _cost(usage, pricing)
        if tenant is not None:
            self._child(self.tenant_cost, tenant).inc(spent)
        if ctx.byok_hash is not None:  # the caller pays its provider, not the gateway
            self._child(self.byok_cost, model).inc(spent)
            return
        self._child(self.cost, model).inc(spent)
        strongest = decision.strongest_pricing if decision else None
        if decision is not None and strongest is not None:
            saved = _cost(usage, strongest) - spent
            if saved > 0:
                self._child(self.saved_cost, decision.alias, "routing").inc(saved)

    def _observe_guards(self, ctx: RequestContext, model: str) -> None:
        if ctx.loop_stop is not None:
            action = "error" if ctx.status == 400 else "finalize"
            self._child(self.loop_stops, model, ctx.loop_stop, action).inc()
        if ctx.compression is not None:
            self._child(self.compressions, model, ctx.compression).inc()
        if ctx.tool_guard is not None:
            self._child(self.tool_calls, model, ctx.tool_guard).inc()
            for kind in ctx.tool_problems:
                self._child(self.tool_call_problems, kind).inc()
            for reason in ctx.tool_cleanings:
                self._child(self.tool_cleanings, model, reason).inc()
            if ctx.tool_repairs:
                self._child(self.tool_repairs, model).inc(ctx.tool_repairs)
        for purpose, used_model, usage in ctx.guard_usage:
            self.count_guard_tokens(used_model, purpose, usage)

    def count_guard_tokens(self, model: str, purpose: str, usage: dict[str, Any]) -> None:
        """Tokens the gateway spent on a request's behalf, as `purpose`."""
        for direction, key in (("input", "prompt_tokens"), ("output", "completion_tokens")):
            self._child(self.guard_tokens, model, purpose, direction).inc(_count(usage.get(key)))

    def _observe_resilience(self, ctx: RequestContext, model: str) -> None:
        for deployment, reason in ctx.upstream_failures:
            self._child(self.upstream_failures, deployment, reason).inc()
        for deployment, reason in ctx.invalid_answers:
            self._child(self.invalid_answers, deployment, reason).inc()
        if ctx.retries:
            self._child(self.retries, model).inc(ctx.retries)
        if ctx.fallback_model is not None and ctx.degradation_level != 4:
            self._child(self.fallbacks, model, ctx.fallback_model).inc()
        if ctx.stream_broken:
            self._child(self.streams_broken, model).inc()

    def connection_refused(self, reason: str) -> None:
        self._child(self.connections_refused, reason).inc()

    def client_timed_out(self, phase: str) -> None:
        self._child(self.client_timeouts, phase).inc()

    def config_reloaded(self, result: str) -> None:
        self._child(self.config_reloads, result).inc()

    def response_store_failed(self, operation: str) -> None:
        self._child(self.response_store_failures, operation).inc()

    def breaker_changed(self, breaker: str, state: str) -> None:
        self._child(self.breaker_transitions, breaker, state).inc()

    def watch_shared_state(self, shared: SharedState) -> None:
        """Export, at scrape time, whether each part sharing state at start reaches Redis."""
        for component in shared.components():
            self.redis_up.labels(component).set_function(partial(_up, shared, component))

    def verification_events(
        self, pricing: Callable[[str], Pricing | None]
    ) -> CacheVerificationEvents:
        """What the cache's verifier reports to (its `events`); `pricing`: the current
        config's price of a model, for the shadow calls' cost."""
        return CacheVerificationEvents(self, pricing)

    def watch_verification(
        self,
        verifier: Verifier,
        models: Iterable[str] = (),
        per_tenant: Callable[[str, str], bool] | None = None,
    ) -> None:
        """Export, at scrape time, each verifying model's precision estimate, effective
        threshold and budget; `models` (those configured to verify) get their counters at 0
        from the start. `per_tenant(tenant, model)`: whether that tenant's policy opts in to
        per-tenant metrics (its own estimate, threshold and budget: what its hits decide by)."""
        for model in models:
            for result in ("agree", "disagree"):
                self._child(self.cache_verifications, model, result)
                self._child(self.cache_explorations, model, result)
            self._child(self.cache_shadow_calls, model, "answered")
            self._child(self.cache_verification_cost, model)
        self._verification.verifier = verifier
        self._verification.per_tenant = per_tenant

    def watch_breakers(self, breakers: Iterable[Breaker]) -> None:
        """Export each breaker's state at scrape time (0 closed, 1 half-open, 2 open)."""
        self.registry.register(_BreakerStates(breakers))

    def _observe_cache(self, ctx: RequestContext, model: str, result: str) -> None:
        self._child(self.cache_lookups, model, result).inc()
        if ctx.cache_near_miss is not None:
            self._child(self.cache_near_misses, ctx.cache_near_miss).inc()
        if ctx.cache_exact_checks:
            self._child(self.cache_exact_checks, model).inc(ctx.cache_exact_checks)
        if ctx.embed_seconds is not None:
            self.embedding_seconds.observe(ctx.embed_seconds)
            if ctx.cache_similarity is not None:
                self._child(self.cache_similarity, model).observe(ctx.cache_similarity)
        if ctx.cache_lookup_seconds is not None:
            self.cache_lookup_seconds.observe(ctx.cache_lookup_seconds)
        saved = ctx.saved_usage
        if saved:
            prompt, completion = (
                _count(saved.get("prompt_tokens")),
                _count(saved.get("completion_tokens")),
            )
            self._child(self.saved_tokens, model, "input", "cache").inc(prompt)
            self._child(self.saved_tokens, model, "output", "cache").inc(completion)
            pricing = ctx.route.pricing if ctx.route else None
            if pricing is not None:
                cost = (
                    prompt * pricing.input_per_million + completion * pricing.output_per_million
                ) / 1e6
                self._child(self.saved_cost, model, "cache").inc(cost)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _LoopCounter:
    """A labelled counter that only the event loop adds to (every request, in `observe`): a
    float per label tuple, without prometheus_client's lock and per-call checks, which were
    most of what `observe` cost. Exported at scrape time (on the loop too), as
    prometheus_client's own would be."""

    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...]) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, labelnames
        self._values: dict[tuple[str, ...], float] = {}

    def add(self, labels: tuple[str, ...], amount: float) -> None:
        self._values[labels] = self._values.get(labels, 0.0) + amount

    def family(self) -> Metric:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, value in self._values.items():
            family.add_metric(labels, value)
        return family


class _LoopHistogram:
    """A labelled histogram that only the event loop observes (as `_LoopCounter`): per label
    tuple, the count in each bucket (`le`: the first bound at or above the value, as
    prometheus_client's) and the sum."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: tuple[str, ...],
        buckets: tuple[float, ...],
    ) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, labelnames
        self._bounds = (*buckets, math.inf)
        self._les = [floatToGoString(bound) for bound in self._bounds]  # type: ignore[no-untyped-call]
        self._series: dict[tuple[str, ...], list[float]] = {}  # bucket counts, then the sum

    def observe(self, labels: tuple[str, ...], value: float) -> None:
        series = self._series.get(labels)
        if series is None:
            series = self._series[labels] = [0.0] * (len(self._bounds) + 1)
        series[bisect_left(self._bounds, value)] += 1
        series[-1] += value

    def family(self) -> Metric:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, series in self._series.items():
            family.add_metric(
                labels, list(zip(self._les, accumulate(series[:-1]), strict=True)), series[-1]
            )
        return family


class _LoopMetrics(Collector):
    def __init__(self, *metrics: _LoopCounter | _LoopHistogram) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        for metric in self._metrics:
            yield metric.family()


class CacheVerificationEvents:
    """The metrics' side of `VerificationEvents` (gateway/cache/verify/verifier.py)."""

    def __init__(self, metrics: Metrics, pricing: Callable[[str], Pricing | None]) -> None:
        self._metrics = metrics
        self._pricing = pricing

    def verified(self, model: str, kind: Kind, agree: bool) -> None:
        m = self._metrics
        if kind == "control":  # the judge's calibration: in the stats, not a hit's verdict
            return
        counter = m.cache_verifications if kind == "served" else m.cache_explorations
        m._child(counter, model, "agree" if agree else "disagree").inc()

    def shadow_call(
        self,
        model: str,
        outcome: ShadowOutcome,
        usage: dict[str, Any] | None,
        tenant: str | None = None,
    ) -> None:
        m = self._metrics
        m._child(m.cache_shadow_calls, model, outcome).inc()
        if not usage:
            return
        # The call runs after the request was recorded: its tokens are counted here, and
        # its cost in the verified tenant's too (`tenant`: only one that opts in).
        m.count_guard_tokens(model, "cache_verification", usage)
        pricing = self._pricing(model)
        if pricing is not None:
            spent = _cost(usage, pricing)
            m._child(m.cache_verification_cost, model).inc(spent)
            if tenant is not None:
                m._child(m.tenant_cost, tenant).inc(spent)


class _VerificationStates(Collector):
    """Read from the verifier when scraped: it is the state, not a count of events."""

    def __init__(self) -> None:
        self.verifier: Verifier | None = None
        self.per_tenant: Callable[[str, str], bool] | None = None

    def collect(self) -> Iterator[Metric]:
        estimate = GaugeMetricFamily(
            "gateway_cache_precision_estimate",
            "Estimated precision of served semantic hits, from the verified ones (weighted): "
            "bound point or lower (95 % Wilson); only once a model has a verdict.",
            labels=["model", "bound"],
        )
        threshold = GaugeMetricFamily(
            "gateway_cache_effective_threshold",
            "The similarity a semantic hit needs now: the configured threshold, or higher "
            "where verification found it over the error budget.",
            labels=["model"],
        )
        budget = GaugeMetricFamily(
            "gateway_cache_error_budget",
            "The share of wrong hits a model's cache may serve (cache.verify.max_error_rate).",
            labels=["model"],
        )
        verified = GaugeMetricFamily(
            "gateway_cache_verified_hits",
            "Verdicts on served hits in the verification window (what the estimate rests on).",
            labels=["model"],
        )
        # Each tenant's own figures (its hits are decided by them, not by the pooled ones),
        # for tenants that opt in: the same four under gateway_tenant_*, labelled by tenant.
        pooled = (estimate, threshold, budget, verified)
        mine = tuple(
            GaugeMetricFamily(
                family.name.replace("gateway_", "gateway_tenant_", 1),
                f"{family.documentation} Per tenant, for tenants whose policy opts in "
                "(metrics.per_tenant).",
                labels=["tenant", "model", "bound"] if family is estimate else ["tenant", "model"],
            )
            for family in pooled
        )
        states = self.verifier.snapshot() if self.verifier is not None else {}
        for model, state in states.items():
            _add_verification(pooled, [], model, state)
            for tenant, own in state.tenants.items():
                if self.per_tenant is not None and self.per_tenant(tenant, model):
                    _add_verification(mine, [tenant], model, own)
        yield from (*pooled, *mine)


def _add_verification(
    families: tuple[GaugeMetricFamily, ...],
    tenant: list[str],
    model: str,
    state: ModelVerification,
) -> None:
    estimate, threshold, budget, verified = families
    served = state.served
    if served.point is not None and served.lower is not None:
        estimate.add_metric([*tenant, model, "point"], served.point)
        estimate.add_metric([*tenant, model, "lower"], served.lower)
    threshold.add_metric([*tenant, model], state.effective_threshold)
    budget.add_metric([*tenant, model], state.max_error_rate)
    verified.add_metric([*tenant, model], served.verified)


class _BreakerStates(Collector):
    def __init__(self, breakers: Iterable[Breaker]) -> None:
        self._breakers = breakers

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "gateway_circuit_breaker_state",
            "Circuit breaker state: 0 closed, 1 half-open (one trial allowed), 2 open.",
            labels=["breaker"],
        )
        for breaker in self._breakers:
            family.add_metric([breaker.name], STATE_VALUES.get(breaker.state, 2))
        yield family


def _cost(usage: dict[str, Any], pricing: Pricing) -> float:
    prompt, completion = _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
    return (prompt * pricing.input_per_million + completion * pricing.output_per_million) / 1e6


def _estimated_usage(ctx: RequestContext) -> dict[str, Any] | None:
    """For a stream whose upstream reported no usage: the local estimate."""
    if not ctx.stream or ctx.prompt_tokens_estimate is None:
        return None
    return {
        "prompt_tokens": ctx.prompt_tokens_estimate,
        "completion_tokens": (ctx.streamed_chars + 3) // 4,
    }


_STATUS_CLASSES = {n: f"{n}xx" for n in range(10)}


def _count(value: object) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def _up(shared: SharedState, component: str) -> float:
    return float(shared.up(component))

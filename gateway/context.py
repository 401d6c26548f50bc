"""The RequestContext: one per request, carried through every stage, holding what they decided."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from gateway.config import Deployment, ModelRoute

if TYPE_CHECKING:
    from pydantic import SecretStr

    from gateway.config.policy_set import Resolved
    from gateway.ratelimit import Permit
    from gateway.routing.decision import RouteDecision


@dataclass(slots=True)
class RequestContext:
    request_id: str
    endpoint: str
    started: float = field(default_factory=time.perf_counter)
    tenant: str | None = None
    requested_model: str | None = None
    policy: Resolved | None = None  # the policies that apply (gateway/config/policy_set.py)
    in_flight: int = 0  # requests running in this process when this one arrived, itself too
    shed: list[str] = field(default_factory=list)  # optional work skipped under load
    # bring your own key: the caller's provider key, for these providers, this request only
    byok_key: SecretStr | None = None
    byok_hash: str | None = None  # one-way; scopes the caller's cache, limits and cost
    byok_providers: tuple[str, ...] = ()
    route: ModelRoute | None = None
    stream: bool = False
    status: int = 200
    error_code: str | None = None
    upstream_seconds: float | None = None
    first_token_seconds: float | None = None
    usage: dict[str, Any] | None = None
    prompt: str | None = None  # kept only when the config asks to log prompts
    response_headers: dict[str, str] = field(default_factory=dict)
    # cache stage
    cache_directive: Literal["default", "refresh", "bypass"] = "default"  # from headers
    cache_result: str | None = None  # hit-exact, hit-semantic, miss, refresh, bypass
    cache_similarity: float | None = None
    cache_judge: float | None = None  # the pair judge's score: the hit's, or a miss's best
    cache_near_miss: str | None = None  # why a close candidate was refused
    cache_exact_checks: int = 0  # close calls the exact model settled (two-stage embedding)
    cache_exact_only: str | None = None  # why the semantic tier was not asked ("long-text")
    cache_lookup_seconds: float | None = None
    embed_seconds: float | None = None
    embedding: Any = None  # the last user turn's vector, computed once, reused by later stages
    saved_usage: dict[str, Any] | None = None  # usage of the upstream call a hit avoided
    replayed_headers: dict[str, str] = field(default_factory=dict)  # a hit's stored answer's
    permits: list[Permit] = field(default_factory=list)  # the rate limiter's; released at the end
    tokens_charged: int = 0  # prompt tokens the rate limiter charged on admission (estimate)
    body_bytes: int | None = None  # size of the request body, once read
    rate_limited: str | None = None  # which limit refused the request
    # routing stage
    routing: RouteDecision | None = None  # set when the request named a routed alias
    prompt_tokens_estimate: int | None = None  # for cost when a stream reports no usage
    streamed_chars: int = 0  # content characters relayed to the client
    # resilience stage
    deadline_seconds: float | None = None  # from the x-gateway-timeout header
    attempts: int = 0
    retries: int = 0
    served_deployment: Deployment | None = None  # the last one tried: the one that answered
    fallback_model: str | None = None  # set when a fallback model answered
    upstream_failures: list[tuple[str, str]] = field(default_factory=list)  # (deployment, why)
    invalid_answers: list[tuple[str, str]] = field(default_factory=list)  # (deployment, reason)
    stream_broken: bool = False
    # knowledge base stage and degradation
    knowledge_base: str | None = None
    knowledge_directive: str | None = None  # x-gateway-knowledge-base: a name, or "none"
    retrieval: str | None = None  # grounded, insufficient, failed
    retrieval_seconds: float | None = None
    sources: int | None = None
    degradation_level: int | None = None  # 1-4, when a knowledge base or level 4 was involved
    # guards
    loop_stop: str | None = None  # why the agent loop guard stepped in
    compression: str | None = None  # summarized, cached, failed
    compressed_turns: int = 0
    tool_guard: str | None = None  # what the tool-call guard did: cleaned, repaired, stripped...
    tool_repairs: int = 0
    tool_problems: list[str] = field(default_factory=list)  # kinds of what stayed wrong
    tool_cleanings: list[str] = field(default_factory=list)  # reasons of deterministic changes
    guard_usage: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def sibling(self, suffix: str) -> RequestContext:
        """A context for more work of this request (another prompt, a verification after the
        answer): who is asking and how, nothing decided, so that what the work decides stays
        out of this request's headers, metrics and access log."""
        return RequestContext(
            request_id=f"{self.request_id}-{suffix}",
            endpoint=self.endpoint,
            started=self.started,
            tenant=self.tenant,
            requested_model=self.requested_model,
            policy=self.policy,
            in_flight=self.in_flight,
            byok_key=self.byok_key,
            byok_hash=self.byok_hash,
            byok_providers=self.byok_providers,
            cache_directive=self.cache_directive,
            deadline_seconds=self.deadline_seconds,
            knowledge_directive=self.knowledge_directive,
        )

    def note_failure(self, deployment: str, reason: str) -> None:
        self.upstream_failures.append((deployment, reason))

    def add_guard_usage(self, purpose: str, model: str, usage: Any) -> None:
        """Tokens the gateway spent on the request's behalf (summaries, repairs)."""
        if isinstance(usage, dict):
            self.guard_usage.append((purpose, model, usage))

    def record_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self.usage = usage

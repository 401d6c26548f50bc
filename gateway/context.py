"""The RequestContext: one per request, carried through every stage, holding what they decided."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.config import ModelRoute


@dataclass(slots=True)
class RequestContext:
    request_id: str
    endpoint: str
    started: float = field(default_factory=time.perf_counter)
    tenant: str | None = None
    requested_model: str | None = None
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
    cache_near_miss: str | None = None  # why a close candidate was refused
    cache_lookup_seconds: float | None = None
    embed_seconds: float | None = None
    embedding: Any = None  # the last user turn's vector, computed once, reused by later stages
    saved_usage: dict[str, Any] | None = None  # usage of the upstream call a hit avoided

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def record_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self.usage = usage

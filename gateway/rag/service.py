"""The knowledge-base stage: which base a request uses, and which level retrieval gives it.

    level 1  enough passages score high enough: the answer is grounded in them
    level 2  retrieval worked but found too little: general knowledge, with a disclaimer
    level 3  retrieval failed or timed out: the same, marked as retrieval unavailable

A base is chosen per request by the `x-gateway-knowledge-base` header (a name, or `none`),
else by the request's policy (`knowledge.base`), else by the tenant's attachment, else by the
model's. A policy can also change the sufficiency rule (`min_chunks`, `min_score`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

from gateway.config import KnowledgeBaseConfig, ModelRoute, Settings
from gateway.config.policy_file import NO_KNOWLEDGE_BASE
from gateway.context import RequestContext
from gateway.errors import InvalidRequest, echo
from gateway.observability.logthrottle import ThrottledWarnings
from gateway.rag.base import KnowledgeBase, Passage, RetrievalFailed
from gateway.resilience.breaker import Breakers
from gateway.wire import last_user_text

log = logging.getLogger("gateway.rag")
Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Grounding:
    level: int  # 1, 2 or 3
    passages: list[Passage] = field(default_factory=list)
    error: str | None = None  # why retrieval failed (level 3)


class Knowledge:
    """The configured knowledge bases of one runtime, and the level decision."""

    def __init__(self, settings: Settings, breakers: Breakers) -> None:
        self.settings = settings
        self.bases: dict[str, KnowledgeBase] = {
            name: _build(name, config, settings, breakers)
            for name, config in settings.knowledge_bases.items()
        }
        self._warnings = ThrottledWarnings(log)  # one per base per interval while it fails

    def select(self, ctx: RequestContext, route: ModelRoute) -> str | None:
        asked = ctx.knowledge_directive
        if asked is not None:
            if asked == NO_KNOWLEDGE_BASE:
                return None
            if asked not in self.bases:
                known = ", ".join(sorted(self.bases)) or "(none configured)"
                raise InvalidRequest(
                    f"Unknown knowledge base {echo(asked)} in x-gateway-knowledge-base. "
                    f"Configured: {known}; 'none' turns retrieval off.",
                    code="invalid_header",
                )
            return asked
        by_policy = self.settings.policies.of(ctx).knowledge_base.base
        if by_policy is not None:
            return None if by_policy == NO_KNOWLEDGE_BASE else by_policy
        return self.settings.kb_by_tenant.get(ctx.tenant or "") or route.knowledge_base

    def skipped(self, ctx: RequestContext, name: str) -> Grounding:
        """Retrieval left out to shed load: answered like level 3, with the disclaimer."""
        ctx.knowledge_base, ctx.retrieval, ctx.degradation_level = name, "skipped", 3
        return Grounding(3, error="skipped under load")

    async def ground(
        self, ctx: RequestContext, name: str, body: Json, time_left: float = math.inf
    ) -> Grounding | None:
        """Retrieve for the last user turn and decide the level; None when there is nothing to
        retrieve for (the last turn is a tool result, say). Retrieval may take the base's
        timeout, and never more than `time_left` of the request's deadline."""
        query = last_user_text(body)
        if query is None:
            return None
        config = self.settings.knowledge_bases[name]
        ctx.knowledge_base = name
        started = time.perf_counter()
        timeout = max(0.0, min(config.timeout_seconds, time_left))
        try:
            async with asyncio.timeout(timeout):
                passages = await self.bases[name].search(query, ctx.embedding, config.top_k)
        except (RetrievalFailed, TimeoutError) as exc:
            reason = str(exc) or f"timed out after {timeout:.2f} s"
            self._warnings.warning("knowledge base %s unavailable: %s", name, reason, key=name)
            grounding = Grounding(3, error=reason)
        else:
            rule = self.settings.policies.of(ctx).knowledge_base
            min_score = config.min_score if rule.min_score is None else rule.min_score
            min_chunks = config.min_chunks if rule.min_chunks is None else rule.min_chunks
            good = [p for p in passages if p.score >= min_score][: config.top_k]
            grounding = Grounding(1, good) if len(good) >= min_chunks else Grounding(2)
        ctx.retrieval_seconds = time.perf_counter() - started
        ctx.retrieval = {1: "grounded", 2: "insufficient", 3: "failed"}[grounding.level]
        ctx.degradation_level = grounding.level
        return grounding

    def state(self) -> dict[str, str]:
        """For /readyz: each base's version in force (embedded) or breaker state (http)."""
        from gateway.rag.embedded import EmbeddedKnowledgeBase
        from gateway.rag.http import HttpKnowledgeBase

        states = {}
        for name, base in self.bases.items():
            if isinstance(base, EmbeddedKnowledgeBase):
                states[name] = base.version or "not ingested"
            elif isinstance(base, HttpKnowledgeBase):
                states[name] = f"breaker {base.breaker.state}"
        return states

    async def start(self) -> None:
        for base in self.bases.values():
            await base.start()

    async def close(self) -> None:
        for base in self.bases.values():
            await base.close()


def _build(
    name: str, config: KnowledgeBaseConfig, settings: Settings, breakers: Breakers
) -> KnowledgeBase:
    if config.type == "http":
        from gateway.rag.http import HttpKnowledgeBase

        token = settings.kb_secrets.get(name)
        breaker = breakers.get(f"kb/{name}", config.breaker)
        return HttpKnowledgeBase(name, config, token.get_secret_value() if token else None, breaker)
    from gateway.cache.factory import shared_embedder
    from gateway.rag.embedded import EmbeddedKnowledgeBase, kb_path

    embedder = shared_embedder(settings.file.cache.embedder)
    return EmbeddedKnowledgeBase(name, kb_path(name, config), embedder)

"""Routing an alias (`model: "auto"`) to the cheapest tier that can handle the request.

score the request (features + exemplar votes)  ->  the tier whose range holds the score
-> at least the escalation floor (tools, images, long context, tenant)
-> at least the tier this conversation was already escalated to (stickiness)
-> a tier whose breakers let calls through (up, or down, per policy)
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import orjson

from gateway.cache.bounds import INLINE_KEY_BYTES
from gateway.config import AliasConfig, ModelRoute, Settings
from gateway.context import RequestContext
from gateway.errors import ModelNotFound
from gateway.routing.decision import RouteDecision
from gateway.routing.features import Features, extract
from gateway.routing.scorer import ComplexityScorer, Score
from gateway.routing.thresholds import Thresholds
from gateway.util import offload
from gateway.wire import last_user_text

if TYPE_CHECKING:
    from gateway.embedding.embedder import Embedder

log = logging.getLogger("gateway.routing")
Json = dict[str, Any]
STICKY_CONVERSATIONS = 10_000


class Router:
    def __init__(
        self,
        settings: Settings,
        embedder: Embedder | None,
        can_answer: Callable[[ModelRoute], bool],
    ) -> None:
        self.settings = settings
        self.scorer = ComplexityScorer(settings.routing.scoring)
        self.thresholds = Thresholds(self.scorer.calibration)
        self.thresholds.check(settings.routing.aliases, self.scorer.model.variants)
        self._embedder = embedder
        self._can_answer = can_answer
        self._ready = False
        self._sticky: OrderedDict[str, int] = OrderedDict()
        self._preparing: asyncio.Task[None] | None = None

    @property
    def ready(self) -> bool:
        """Exemplars embedded: scores include their votes."""
        return self._ready

    def first_tier(self, name: str, config: AliasConfig | None) -> str:
        """For an alias (`config` its tiers, as the request's policy has them), its first
        usable tier's model: where a request starts before it is scored. Any other name as it
        is. An alias with no usable tier is a 404."""
        if config is None:
            return name
        routes = self.settings.routes
        usable = [t.model for t in config.tiers if routes[t.model].disabled_reason is None]
        if not usable:
            raise ModelNotFound(unserved(name, config, self.settings), param="model")
        return usable[0]

    async def start(self) -> None:
        """Embed the exemplars in the background: until then, scores use features only."""
        if self.settings.routing.aliases and self._embedder is not None:
            self._preparing = asyncio.get_running_loop().create_task(self._prepare())

    async def close(self) -> None:
        if self._preparing is not None:
            self._preparing.cancel()

    async def _prepare(self) -> None:
        assert self._embedder is not None
        try:
            # Started here too, not only by the cache: requests are embedded by the same stage
            # (a two-stage embedder's quick one, once loaded) whether the cache is on or off,
            # which is what `gateway route` assumes.
            await self._embedder.start()
            await self.scorer.prepare(self._embedder)
            self._ready = True
        except Exception:
            log.exception("routing exemplars could not be embedded: scoring on features only")

    async def decide(self, ctx: RequestContext, alias: str, body: Json) -> RouteDecision:
        """The tier for a request to `alias`, with its tiers as the request's policy has them."""
        config = self.settings.policies.of(ctx).routing.aliases[alias]
        # Reading a multi-MB prompt (features, conversation key) takes tens of ms: off the loop
        # for large bodies (issue 32), in place for the usual small ones.
        inline = (ctx.body_bytes or 0) <= INLINE_KEY_BYTES
        features, key = await offload.run(
            inline, _read_request, ctx.tenant, alias, body, config.sticky
        )
        score = self.scorer.score(features, await self._vector(ctx, body))
        tier = tier_for(config, score, self.thresholds)
        reason = "score"
        floor, why = escalation_floor(config, features, ctx.tenant)
        if floor > tier:
            tier, reason = floor, f"escalated:{why}"
        if key is not None and self._sticky.get(key, 0) > tier:
            tier, reason = self._sticky[key], "sticky"
        tier, moved = self._available(config, tier)
        if moved:
            reason = moved
        if key is not None and tier > 0:
            self._remember(key, tier)
        strongest = self.settings.routes[config.tiers[-1].model].pricing
        nearest = score.neighbours[0] if score.neighbours else None
        return RouteDecision(
            alias,
            config.tiers[tier].model,
            tier,
            score.value,
            reason,
            score.parts,
            strongest,
            nearest=None if nearest is None else (nearest.similarity, nearest.difficulty),
            variant=score.variant,
        )

    async def _vector(self, ctx: RequestContext, body: Json) -> Any:
        """The last user turn's embedding: computed once per request, reused by the cache."""
        if ctx.embedding is not None or not self._ready or self._embedder is None:
            return ctx.embedding
        text = last_user_text(body)
        if text is None:
            return None
        started = time.perf_counter()
        ctx.embedding = await self._embedder.embed(text)
        ctx.embed_seconds = time.perf_counter() - started
        return ctx.embedding

    def _available(self, config: AliasConfig, tier: int) -> tuple[int, str | None]:
        return available_tier(config, tier, self.settings.routes, self._can_answer)

    def _remember(self, key: str, tier: int) -> None:
        self._sticky[key] = max(tier, self._sticky.pop(key, 0))
        while len(self._sticky) > STICKY_CONVERSATIONS:
            self._sticky.popitem(last=False)


def available_tier(
    config: AliasConfig,
    tier: int,
    routes: Mapping[str, ModelRoute],
    can_answer: Callable[[ModelRoute], bool],
) -> tuple[int, str | None]:
    """The chosen tier, or the nearest one (up first, or down first, per policy) whose model
    is served and can take calls, with `moved-up` or `moved-down`; the chosen one if none can
    (level 4 will say so)."""
    order = list(range(tier, len(config.tiers))) + list(range(tier - 1, -1, -1))
    if config.when_open == "down":
        order = list(range(tier, -1, -1)) + list(range(tier + 1, len(config.tiers)))
    for candidate in order:
        route = routes[config.tiers[candidate].model]
        if route.disabled_reason is None and can_answer(route):
            if candidate == tier:
                return tier, None
            return candidate, "moved-up" if candidate > tier else "moved-down"
    return tier, None


def unserved(alias: str, config: AliasConfig, settings: Settings) -> str:
    """Why no tier of `alias` is served (each tier's disabled provider and the reason, such
    as an unset key variable), and which routed aliases are."""
    by_reason: dict[str, list[str]] = {}
    for tier in config.tiers:
        reason = settings.routes[tier.model].disabled_reason or "not served"
        by_reason.setdefault(reason, []).append(tier.model)
    causes = "; ".join(
        f"tier {models[0]} is configured but its {reason}"
        if len(models) == 1
        else f"tiers {' and '.join(models)} are configured but their {reason}"
        for reason, models in by_reason.items()
    )
    message = f"The routed alias '{alias}' has no tier whose provider is enabled: {causes}."
    others = [a for a in settings.served_aliases() if a != alias]
    if others:
        message += f" Routed aliases served: {', '.join(others)}."
    return message


def escalation_floor(
    config: AliasConfig, features: Features, tenant: str | None
) -> tuple[int, str]:
    """The lowest tier the request may go to (tools, images, a long context, the tenant) and
    why; (0, "") when nothing escalates it."""
    rules = config.escalate
    floors: list[tuple[int, str]] = [(0, "")]
    if rules.tools is not None and features.tools:
        floors.append((rules.tools, "tools"))
    if rules.images is not None and features.images:
        floors.append((rules.images, "images"))
    limit = rules.long_context_tokens
    if limit is not None and features.total_tokens > limit:
        floors.append((rules.long_context_tier, "long_context"))
    if tenant is not None and tenant in rules.tenants:
        floors.append((rules.tenants[tenant], "tenant"))
    return max(floors)


def tier_for(config: AliasConfig, score: Score, thresholds: Thresholds) -> int:
    """The first tier whose cut holds the score, its cut as resolved for the variant that
    scored it (keep_quality and cheap_share mean a different cut for each); the last takes
    the rest."""
    for index, cut in enumerate(thresholds.cuts(config, score.variant)):
        if score.value <= cut:
            return index
    return len(config.tiers) - 1


def _read_request(
    tenant: str | None, alias: str, body: Json, sticky: bool
) -> tuple[Features, str | None]:
    """A request's routing features and, for a sticky alias, its conversation key."""
    return extract(body), _conversation_key(tenant, alias, body) if sticky else None


def _conversation_key(tenant: str | None, alias: str, body: Json) -> str | None:
    """A conversation is known by its tenant, alias, system prompt and first user message
    (what every later request of it repeats). Each part is hashed as its UTF-8 bytes (text) or
    JSON (anything else), length-prefixed: no repr() of a multi-MB prompt (issue 32)."""
    messages = body.get("messages") or []
    system = next((m for m in messages if m.get("role") in ("system", "developer")), None)
    first = next((m for m in messages if m.get("role") == "user"), None)
    if first is None:
        return None
    digest = hashlib.sha256()
    for part in (tenant, alias, system and system.get("content"), first.get("content")):
        data = _key_bytes(part)
        digest.update(b"%d:" % len(data))
        digest.update(data)
    return digest.hexdigest()


def _key_bytes(part: object) -> bytes:
    if isinstance(part, str):
        return b"s" + part.encode("utf-8", "surrogatepass")
    try:
        return b"j" + orjson.dumps(part)
    except (TypeError, orjson.JSONEncodeError):
        return b"r" + repr(part).encode("utf-8", "surrogatepass")

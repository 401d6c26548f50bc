"""The request flow, stage by stage, and nothing else.

    the policies that apply (tenant, model) -> resolve the model
    -> stop runaway agent loops -> compress a long history
    -> route an alias to a tier by complexity -> choose a knowledge base
    -> cache lookup (exact, then semantic)
        hit -> answer from the cache
    -> retrieve from the knowledge base: level 1 (grounded), 2 (too little), 3 (failed)
    -> upstreams: breakers, retries, fallbacks (a plain answer, or a stream whose first chunk
       has arrived); nothing answered -> level 4
    -> the answer's stages, in order, for a plain answer and a stream alike (gateway/reply/):
       check its tool calls (repair them with the model, or strip them)
       -> finish it for its level (sources, disclaimer)
       -> the cache keeps it once complete: visible to lookups before the client has it
          all, durable in the background
       -> account its usage (hidden from a client that did not ask for it)

Authentication and rate limits happen before, in the HTTP middleware. Nothing in this module
knows HTTP: it takes wire types and a RequestContext and returns a Reply (JSON or a stream).
"""

from __future__ import annotations

import time
from typing import Any

from gateway import degradation, wire
from gateway.cache.service import CacheHit, CachePlan, SemanticCache
from gateway.cache.verify.judge import JudgeCall
from gateway.cache.verify.verifier import NotComparable, TenantLimited
from gateway.config import ModelRoute, Settings
from gateway.context import RequestContext
from gateway.errors import GatewayError, InvalidRequest, ModelNotFound, echo
from gateway.guard.conversation import ConversationGuard
from gateway.guard.tool_guard import ToolCallGuard
from gateway.rag.grounding import Sources, grounded_messages, sources_field
from gateway.rag.service import Grounding, Knowledge
from gateway.ratelimit import Permit, RateLimited, unpaid_tokens
from gateway.reply import chunks
from gateway.reply.headers import answer_headers, replayable
from gateway.reply.reply import Reply
from gateway.reply.stage import OnComplete, Stage
from gateway.reply.stream import ChunkStream
from gateway.reply.usage import UsageAccounting
from gateway.resilience.executor import AllUpstreamsUnavailable, UpstreamExecutor
from gateway.routing.router import Router
from gateway.server.overload import sheds
from gateway.util.tokens import estimate_prompt_tokens
from gateway.wire import ChatParams, EmbeddingRequest, last_user_text

Json = dict[str, Any]


class Pipeline:
    def __init__(
        self,
        settings: Settings,
        executor: UpstreamExecutor,
        knowledge: Knowledge,
        conversation: ConversationGuard,
        tool_guard: ToolCallGuard,
        router: Router,
        cache: SemanticCache | None = None,
    ) -> None:
        self.settings = settings
        self.router = router
        self.executor = executor
        self.conversation = conversation
        self.tool_guard = tool_guard
        self.knowledge = knowledge
        self.cache = cache
        # Per model, the output limit a shadow call adds when the client set none: max_tokens,
        # or max_completion_tokens once the upstream refused max_tokens (reasoning models).
        self._output_limit: dict[str, str] = {}

    async def chat(self, ctx: RequestContext, request: ChatParams, body: Json) -> Reply:
        policy = self.settings.policies.of(ctx)
        alias = policy.routing.aliases.get(request.model)
        route = ctx.route = self.resolve(self.router.first_tier(request.model, alias), "chat")
        await self.tool_guard.admit(ctx, body)  # a 400 before any upstream call
        body = self.conversation.stop_loops(ctx, body)
        body = await self.conversation.compress(ctx, route, body)
        if alias is not None:
            decision = ctx.routing = await self.router.decide(ctx, request.model, body)
            route = ctx.route = self.resolve(decision.model, "chat")
        if request.stream and route.pricing is not None:  # to price a stream without usage
            ctx.prompt_tokens_estimate = estimate_prompt_tokens(body["messages"])
        knowledge_base = self.knowledge.select(ctx, route)
        plan = await self._cache_plan(ctx, route, body, knowledge_base)
        if self.cache and plan:
            hit = await self.cache.lookup(ctx, plan)
            if hit is not None:
                reply = await self._from_cache(ctx, request, hit)
                self._verify_later(ctx, route, body, plan, hit, knowledge_base)
                return reply
        grounding = None
        if knowledge_base is not None and sheds(ctx, "retrieval"):
            grounding = self.knowledge.skipped(ctx, knowledge_base)
        elif knowledge_base is not None and self.executor.can_answer(route):
            time_left = self.executor.time_left(ctx, route)
            grounding = await self.knowledge.ground(ctx, knowledge_base, body, time_left)
        try:
            answer = await self.executor.chat(
                ctx,
                route,
                _prompt(body, grounding),
                stream=bool(request.stream),
                wants_usage=request.wants_usage_in_stream,
            )
        except AllUpstreamsUnavailable as err:
            return await self.unavailable(ctx, request, body, err)
        # On a stream, sources and the disclaimer go into the first batch as the upstream
        # sent it (Stage.opening), so the tool guard holds calls behind the disclaimer.
        reply = (
            Reply(answer)
            .then(self.tool_guard.stage(ctx, route, body))
            .then(self._for_level(ctx, request, body, grounding))
            .then(self._cache_store(ctx, plan, grounding))
            .then(UsageAccounting(ctx, request.wants_usage_in_stream))
        )
        return await reply.ready()

    async def _cache_plan(
        self, ctx: RequestContext, route: ModelRoute, body: Json, knowledge_base: str | None
    ) -> CachePlan | None:
        if self.cache is None:
            return None
        # Answers grounded in a knowledge base are only reused within that base; a caller who
        # brings its own key shares answers only with itself.
        context = knowledge_base
        if ctx.byok_hash is not None:
            context = f"{knowledge_base or ''}\x00key:{ctx.byok_hash}"
        return await self.cache.prepare(ctx, route, body, ctx.cache_directive, context)

    def _cache_store(
        self, ctx: RequestContext, plan: CachePlan | None, grounding: Grounding | None
    ) -> Stage | None:
        """What keeps a complete answer: only full-strength ones (no knowledge base, or level
        1 with its sources) that our model gave (a fallback's is not ours), never a disclaimer
        answer that better retrieval would replace, nor one whose tool calls the guard had to
        strip or let through broken (a stream's calls are settled when it ends, so that is
        checked then)."""
        cache = self.cache
        if cache is None or plan is None or (grounding is not None and grounding.level != 1):
            return None
        if ctx.fallback_model is not None:
            return None
        extra = {"sources": sources_field(grounding.passages)} if grounding else {}

        def keep(completion: Json) -> None:
            if ctx.tool_guard in _NOT_KEPT:
                return
            # Its level, knowledge base and route go with it: a hit replays them.
            cache.keep(ctx, plan, {**completion, **extra}, answer_headers(ctx))
            if plan.held_back is not None:  # would the held-back candidate have been right?
                held_back = plan.held_back
                judge_model = plan.policy.verify.judge_model
                judge = self._judge_call(
                    _verifying(ctx), judge_model, held_back.bill_to, list(ctx.permits)
                )
                cache.verifier.explore(held_back, completion, judge)

        return OnComplete(keep)

    def _verify_later(
        self,
        ctx: RequestContext,
        route: ModelRoute,
        body: Json,
        plan: CachePlan,
        hit: CacheHit,
        knowledge_base: str | None,
    ) -> None:
        """A share of hits is asked again upstream, after the client has its answer, and the
        two answers compared (cache/verify/): never while the model's breakers are not
        closed, nor under overload shedding. The fresh answer is made as a miss would make
        it (grounded in the same knowledge base), judged, and never cached.

        The tenant pays for it: each shadow call is charged to the request's rate-limit
        permits (one request and its prompt tokens before, or no call; its completion's
        after) and its cost to the tenant's metrics (verifier events). It sends no more than
        the hit's request: its prompt at most what that request was charged for, its answer
        at most `_shadow_output` tokens."""
        assert self.cache is not None
        verifier = self.cache.verifier
        probe = self.cache.probe(plan, hit, ctx)
        if probe is None:
            return
        if not self.executor.all_closed(route):
            return verifier.skip(probe, "breaker_open")
        if sheds(ctx, "verification"):
            return verifier.skip(probe, "shed")
        limit = self._output_limit.get(route.name, "max_tokens")
        shadow_body = _shadow_body(body, hit.entry.response, limit)
        tokens = estimate_prompt_tokens(shadow_body["messages"])
        if tokens > max(SHADOW_MIN_TOKENS, (ctx.body_bytes or 0) // 4):
            return verifier.skip(probe, "oversized")
        # Runs while (and after) the hit is sent: on a context of its own, so its retrieval
        # and tokens never reach the hit's headers, metrics or access log (verification
        # accounts its calls itself).
        shadow = _verifying(ctx)
        permits = list(ctx.permits)

        async def fresh() -> Json:
            await _charge(permits, tokens)
            prompt = shadow_body
            if knowledge_base is not None:
                grounding = await self.knowledge.ground(shadow, knowledge_base, body)
                if grounding is None or grounding.level != 1:
                    raise NotComparable("retrieval did not ground the shadow call")
                prompt = _prompt(shadow_body, grounding)
            answer = await self._shadow_call(shadow, route, prompt, body)
            await _settle(permits, tokens, answer.get("usage"))
            return answer

        judge = self._judge_call(shadow, plan.policy.verify.judge_model, probe.bill_to, permits)
        verifier.verify(probe, fresh, judge)

    async def _shadow_call(
        self, ctx: RequestContext, route: ModelRoute, prompt: Json, served: Json
    ) -> Json:
        """The shadow call; once more with the other output limit when the upstream refuses
        the one this call added (OpenAI's reasoning models take only max_completion_tokens),
        remembered for the model."""
        try:
            return await self.executor.on_behalf(
                ctx, route, prompt, "cache_verification", fallbacks=False
            )
        except GatewayError as err:
            added = next((f for f in _OUTPUT_LIMITS if f in prompt and f not in served), None)
            if added is None or err.status != 400 or err.param != added:
                raise
        other = _OUTPUT_LIMITS[added]
        self._output_limit[route.name] = other
        renamed = {k: v for k, v in prompt.items() if k != added} | {other: prompt[added]}
        return await self.executor.on_behalf(
            ctx, route, renamed, "cache_verification", fallbacks=False
        )

    def _judge_call(
        self,
        ctx: RequestContext,
        judge_model: str | None,
        bill_to: str | None = None,
        permits: list[Permit] | None = None,
    ) -> JudgeCall | None:
        """The verification judge model as a call, when the policy names one it can reach."""
        route = self.settings.routes.get(judge_model) if judge_model else None
        if route is None or route.kind != "chat" or route.disabled_reason is not None:
            return None  # none named, or a policy's that is not served: the default judge

        async def ask(body: Json) -> Json:
            answer = await self.executor.on_behalf(ctx, route, body, "cache_verification")
            if self.cache is not None:  # accounted as verification's (the request is done)
                self.cache.verifier.judged(route.name, answer.get("usage"), bill_to)
            await _settle(permits or [], 0, answer.get("usage"))  # the tenant's tokens too
            return answer

        return ask

    def _for_level(
        self,
        ctx: RequestContext,
        request: ChatParams,
        body: Json,
        grounding: Grounding | None,
    ) -> Stage | None:
        """Sources with a grounded answer; a disclaimer before an ungrounded one."""
        if grounding is None:
            return None
        if grounding.level == 1:
            return Sources(ctx, grounding.passages)
        texts = self.settings.policies.of(ctx).degradation.disclaimer
        disclaimer = degradation.localized(texts, last_user_text(body))
        return degradation.Disclaimer(disclaimer, request.n or 1)

    async def unavailable(
        self,
        ctx: RequestContext,
        request: ChatParams,
        body: Json,
        err: AllUpstreamsUnavailable,
    ) -> Reply:
        """Level 4: a well-formed answer saying so (or the 503, if the policy prefers)."""
        ctx.degradation_level = 4
        policy = self.settings.policies.of(ctx).degradation.unavailable
        if policy.mode == "error":
            raise err
        ctx.response_headers["Retry-After"] = str(err.retry_after)
        # Why, for whoever reads headers (an outage's cause: upstream_timeout, circuit_open...)
        ctx.response_headers[degradation.CAUSE_HEADER] = err.code or "upstream_error"
        ctx.error_code = err.code  # logged and counted; the client gets a normal answer
        text = degradation.localized(policy.message, last_user_text(body))
        completion = degradation.unavailable_completion(request.model, text, request.n or 1)
        return await _replayed(ctx, request, completion)

    async def _from_cache(self, ctx: RequestContext, request: ChatParams, hit: CacheHit) -> Reply:
        completion = {**hit.entry.response, "id": wire.completion_id(), "created": int(time.time())}
        ctx.saved_usage = completion.get("usage")
        ctx.replayed_headers = replayable(hit.entry.headers)
        return await _replayed(ctx, request, completion)

    async def embeddings(self, ctx: RequestContext, request: EmbeddingRequest, body: Json) -> Json:
        route = ctx.route = self.resolve(request.model, "embedding")
        return await self.executor.embeddings(ctx, route, body)

    def resolve(self, model: str, kind: str) -> ModelRoute:
        route = self.settings.routes.get(model)
        if route is not None and route.kind == kind and route.disabled_reason is None:
            return route
        # what a client may ask for instead: the models, and for chat the routed aliases
        served = [r.name for r in self.settings.served_models(kind)]
        if kind == "chat":
            served += self.settings.served_aliases()
        if route is None:
            raise ModelNotFound(
                f"The model {echo(model)} does not exist. Available models: "
                + ", ".join(sorted(served)),
                param="model",
            )
        if route.kind != kind:
            raise InvalidRequest(
                f"The model '{model}' is {_article(route.kind)} {route.kind} model and cannot "
                "serve this endpoint. "
                f"Models for it: " + ", ".join(sorted(served)),
                param="model",
                code="model_not_supported",
            )
        raise ModelNotFound(
            f"The model '{model}' is configured but its {route.disabled_reason}",
            param="model",
        )


# A shadow call is one plain answer: never a stream, never several.
_NOT_SHADOWED = frozenset({"stream", "stream_options", "n"})
# A shadow call's prompt may be as large as its hit's request body (bytes / 4, as the rate
# limiter charged it), or this many tokens when that is less (a request's grounding aside).
SHADOW_MIN_TOKENS = 256
# A shadow call's answer: at most twice the cached answer's completion tokens, at least this
# many, never more than the client's own max_tokens.
SHADOW_MIN_OUTPUT = 256


# The two names of a chat request's output limit, each to the other.
_OUTPUT_LIMITS = {"max_completion_tokens": "max_tokens", "max_tokens": "max_completion_tokens"}


def _shadow_body(body: Json, cached: Json, added: str = "max_tokens") -> Json:
    """The request a shadow call sends: the hit's as a miss would send it, one plain answer,
    its length bounded by the answer it is compared with (`SHADOW_MIN_OUTPUT`): in the
    client's own limit field, else in `added`."""
    shadow = {k: v for k, v in body.items() if k not in _NOT_SHADOWED}
    stored = (cached.get("usage") or {}).get("completion_tokens")
    limit = max(SHADOW_MIN_OUTPUT, 2 * stored if isinstance(stored, int) else 0)
    field = next((f for f in _OUTPUT_LIMITS if f in shadow), added)
    given = shadow.get(field)
    shadow[field] = min(given, limit) if isinstance(given, int) and given > 0 else limit
    return shadow


async def _charge(permits: list[Permit], tokens: int) -> None:
    """A shadow call counted against the hit's tenant's limits before it is sent (as one
    more request of the hit's, like a fan-out), or TenantLimited and no call."""
    try:
        for permit in permits:
            await permit.charge(1, tokens)
    except RateLimited as refused:
        raise TenantLimited(str(refused)) from refused


async def _settle(permits: list[Permit], charged: int, usage: Any) -> None:
    """The tokens a call used beyond those charged before it, on the tenant's minute."""
    if not isinstance(usage, dict):
        return
    extra = unpaid_tokens(usage, charged)
    for permit in permits:
        await permit.record_tokens(extra)


# Tool-guard outcomes whose answer is the guard's stand-in, or still wrong: never reused.
_NOT_KEPT = frozenset({"stripped", "passed", "failed", "unchecked"})


def _verifying(ctx: RequestContext) -> RequestContext:
    """The request's context for verification work, with the turn's embedding (retrieval for
    the shadow call reuses it)."""
    shadow = ctx.sibling("verify")
    shadow.embedding = ctx.embedding
    return shadow


async def _replayed(ctx: RequestContext, request: ChatParams, completion: Json) -> Reply:
    """A completion the gateway has in hand (a hit, level 4), as the request asked for it. A
    replayed stream carries usage only when the client asked: nothing to hide."""
    answer: Json | ChunkStream = completion
    if request.stream:
        replayed = chunks.replay(completion, request.wants_usage_in_stream)
        answer = await ChunkStream.open(ctx, replayed)
    return await Reply(answer).then(UsageAccounting(ctx, client_wants_usage=True)).ready()


def _prompt(body: Json, grounding: Grounding | None) -> Json:
    if grounding is None or grounding.level != 1:
        return body
    return {**body, "messages": grounded_messages(body["messages"], grounding.passages)}


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"

"""The cache stage: decide whether a request may use the cache, look it up, store answers.

Lookup order: the exact tier (a hash of the scope and the normalized last user turn, no
embedding) first, then the semantic tier inside the same scope: the best few neighbours, each
decided by the hit decision (matching/: vetoes, word rules at the threshold, the pair judge for
what they leave open) before it counts as a hit.

A fresh answer is published to the store's memory before the response goes out (an immediate
repeat is an exact hit) and written durably in the background.

A store that fails (a shared Redis store while Redis is away) costs a miss, never a request:
the lookup reports `error`, the write is dropped, and the failure is logged at most every 30 s.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from gateway.cache.bounds import INLINE_COMPARE_CHARS, INLINE_KEY_BYTES, exact_text
from gateway.cache.scope import CacheKey, cache_key
from gateway.cache.store import CacheEntry, CacheStore, LazyVectors
from gateway.cache.verify.judge import AnswerJudge
from gateway.cache.verify.ledger import Ledger
from gateway.cache.verify.nature import varies
from gateway.cache.verify.verifier import Probe, VerificationEvents, Verifier
from gateway.config import CachePolicy, ModelRoute
from gateway.context import RequestContext
from gateway.embedding.two_stage import NO_MARGINS, Margins, TwoStageEmbedder
from gateway.matching.decision import Bars, HitDecision, Judgement
from gateway.observability.logthrottle import ThrottledWarnings
from gateway.util import offload
from gateway.wire import last_user_text

if TYPE_CHECKING:
    from gateway.embedding.embedder import Embedder

log = logging.getLogger("gateway.cache")

Json = dict[str, Any]
Directive = Literal["default", "refresh", "bypass"]
_CANDIDATES = 4
_VECTORLESS_BATCH = 32  # entries of one scope embedded by one lookup, at most
SWEEP_SECONDS = 60.0


@dataclass(slots=True)
class CachePlan:
    key: CacheKey
    policy: CachePolicy
    read: bool
    semantic: bool | None = None  # the semantic tier may judge this text (None: not decided)
    held_back: Probe | None = None  # a candidate only the effective threshold kept back
    varies: str | None = None  # why its answers vary by nature (not verified), if they do


@dataclass(frozen=True, slots=True)
class CacheHit:
    entry: CacheEntry
    kind: Literal["hit-exact", "hit-semantic"]
    similarity: float


class SemanticCache:
    def __init__(
        self,
        store: CacheStore,
        embedder: Embedder | None,
        ledger: Ledger | None = None,
        events: VerificationEvents | None = None,
        decision: HitDecision | None = None,
    ) -> None:
        self.store = store
        self.embedder = embedder
        # Vetoes, word rules and the pair judge (matching/): what decides a candidate.
        self.decision = decision or HitDecision(None)
        # Verification of semantic hits (cache/verify/): off unless a policy samples hits.
        self.verifier = Verifier(AnswerJudge(embedder), ledger, events)
        self._lazy = store if isinstance(store, LazyVectors) else None
        self.embedder_ready = False
        self.embedder_error: str | None = None
        self._writes: set[asyncio.Task[None]] = set()
        self._loading: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._warnings = ThrottledWarnings(log)

    async def start(self) -> None:
        """Open the store now; load the embedder in the background. Until it is loaded the
        exact tier works and semantic lookups are skipped, so the gateway serves at once."""
        await self.store.open()
        await self.verifier.start()
        loop = asyncio.get_running_loop()
        self._sweeper = loop.create_task(self._sweep())
        if self.embedder is not None:
            self._loading = loop.create_task(self._load_embedder())

    async def wait_ready(self) -> None:
        if self._loading is not None:
            await asyncio.shield(self._loading)

    async def close(self) -> None:
        for task in (self._loading, self._sweeper):
            if task is not None:
                task.cancel()
        await self.flush()
        await self.verifier.close()
        await self.store.close()
        # Embedders and judges are shared by the process (factory): not closed here.

    async def _sweep(self) -> None:
        """Drop expired entries now and then, so they do not wait for a lookup to find them."""
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            try:
                await self.store.evict(time.time())
            except Exception as err:
                self._store_failed("sweep", err)

    async def _load_embedder(self) -> None:
        assert self.embedder is not None
        try:
            await self.embedder.start()
            if self.decision.judge is not None:
                await self.decision.judge.start()
            self.embedder_ready = True
            log.info("embedder %s loaded: the semantic tier is on", self.embedder.name)
        except ModuleNotFoundError as exc:  # an extra not installed: the message says which
            self.embedder_error = f"{type(exc).__name__}: {exc}"
            log.error("embedder failed to load (%s): the semantic tier is off, exact works", exc)
        except Exception as exc:
            self.embedder_error = f"{type(exc).__name__}: {exc}"
            log.exception("embedder failed to load: the semantic tier is off, exact works")

    def plan(
        self,
        ctx: RequestContext,
        route: ModelRoute,
        body: Json,
        directive: Directive,
        context: str | None = None,
    ) -> CachePlan | None:
        """A plan when this request may use the cache; None (and the reason on ctx) if not.
        `context` is anything else the answer depends on (the knowledge base), kept in scope.
        Builds the key inline: `prepare` is the same, off the loop for a long request."""
        policy = self._policy(ctx, route, body, directive)
        if policy is None:
            return None
        key = _key(ctx.tenant or "", route.name, body, context)
        return CachePlan(key, policy, read=directive != "refresh", varies=varies(body))

    async def prepare(
        self,
        ctx: RequestContext,
        route: ModelRoute,
        body: Json,
        directive: Directive,
        context: str | None = None,
    ) -> CachePlan | None:
        """`plan`, with the exact key of a long request (normalizing and hashing megabytes
        takes milliseconds) built on the cache's worker thread."""
        policy = self._policy(ctx, route, body, directive)
        if policy is None:
            return None
        inline = (ctx.body_bytes or 0) <= INLINE_KEY_BYTES
        key = await offload.run(inline, _key, ctx.tenant or "", route.name, body, context)
        return CachePlan(key, policy, read=directive != "refresh", varies=varies(body))

    def _policy(
        self, ctx: RequestContext, route: ModelRoute, body: Json, directive: Directive
    ) -> CachePolicy | None:
        policy = ctx.policy.cache_for(route.cache) if ctx.policy else route.cache
        if not policy.enabled:
            return None
        temperature = body.get("temperature")
        if (
            directive == "bypass"
            or last_user_text(body) is None
            or (body.get("n") or 1) > 1
            or (temperature is not None and temperature > policy.max_temperature)
        ):
            ctx.cache_result = "bypass"
            return None
        return policy

    async def lookup(self, ctx: RequestContext, plan: CachePlan) -> CacheHit | None:
        ctx.cache_result = "miss"
        if not plan.read:
            ctx.cache_result = "refresh"
            return None
        started, now = time.perf_counter(), time.time()
        try:
            entry = await self.store.get(plan.key.exact, now)
            if entry is not None:
                return self._hit(ctx, CacheHit(entry, "hit-exact", 1.0))
            if not await self._semantic_allowed(ctx, plan):
                return None
            return await self._semantic(ctx, plan, now)
        except Exception as err:  # the store is away: answer from the upstream
            ctx.cache_result = "error"
            self._store_failed("lookup", err)
            return None
        finally:
            ctx.cache_lookup_seconds = time.perf_counter() - started

    async def _semantic_allowed(self, ctx: RequestContext, plan: CachePlan) -> bool:
        """The semantic tier judges only what the embedder reads whole: a longer text (two
        prompts sharing a long document, differing in the last instruction, embed alike) gets
        the exact tier only. Decided once per plan, when the embedder is ready."""
        if plan.semantic is not None:
            return plan.semantic
        if not (plan.policy.semantic and self.embedder and self.embedder_ready):
            return False
        plan.semantic = await self._judges(plan.key.text, plan.policy)
        if not plan.semantic:
            ctx.cache_exact_only = "long-text"
        return plan.semantic

    def _store_failed(self, what: str, err: Exception) -> None:
        self._warnings.warning("cache %s failed: %s: %s", what, type(err).__name__, err)

    def keep(
        self,
        ctx: RequestContext,
        plan: CachePlan,
        completion: Json,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Keep a fresh answer and the headers that describe it: visible to lookups (exact
        key, and the vector when the lookup left one) when this returns, so an immediate
        repeat hits; written durably in the background, which a client that disconnects
        does not cancel."""
        if not cacheable(completion, plan.policy):
            return
        # The lookup's vector only when it judged the text semantically (a router's vector of
        # a long text must not enter the index).
        vector = ctx.embedding if plan.semantic else None
        entry = CacheEntry(
            scope=plan.key.scope,
            exact_key=plan.key.exact,
            tenant=plan.key.tenant,
            model=plan.key.model,
            text=plan.key.text,
            response=completion,
            expires_at=time.time() + plan.policy.ttl_seconds,
            headers=dict(headers or {}),
            vector=vector,
            embedder=self.embedder.name if vector is not None and self.embedder else None,
        )
        try:
            self.store.publish(entry)
        except Exception as err:
            self._store_failed(f"write (request {ctx.request_id})", err)
            return
        task = asyncio.get_running_loop().create_task(self._persist(ctx, plan, entry))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def flush(self) -> None:
        """Wait for pending writes (tests, shutdown)."""
        while self._writes:
            await asyncio.gather(*list(self._writes), return_exceptions=True)

    async def _semantic(self, ctx: RequestContext, plan: CachePlan, now: float) -> CacheHit | None:
        assert self.embedder is not None
        lazy = self._lazy
        if ctx.embedding is None:  # the router may have embedded this turn already
            if lazy is not None and lazy.scope_size(plan.key.scope) == 0:
                return None  # nothing to compare with: no embedding (see LazyVectors)
            embed_started = time.perf_counter()
            ctx.embedding = await self.embedder.embed(plan.key.text)
            ctx.embed_seconds = time.perf_counter() - embed_started
        if lazy is not None:
            await self._add_vectors(lazy, plan, now)
        model, policy = plan.key.model, plan.policy
        scope, name = plan.key.scope, self.embedder.name
        # The bars, raised alike when verification raised the threshold (this tenant's).
        effective = self.verifier.threshold(model, policy, plan.key.tenant)
        bars = Bars(
            effective,
            policy.judge_similarity + effective - policy.similarity_threshold,
            policy.judge_threshold,
        )
        # From the configured threshold: a candidate only the raised one holds back is
        # explored (verification), and from the judge's bar when there is a judge.
        floor = policy.similarity_threshold
        if self.decision.judge is not None:
            floor = min(floor, bars.judged)
        margins = self._margins
        # Only candidates that may reach a bar are read (and marked used).
        found = await self.store.search(
            scope, ctx.embedding, name, _CANDIDATES, now, min_similarity=floor - margins.below
        )
        # Close calls around the plain threshold are settled by the exact model; the judge's
        # bar is taken on the quick cosines (the judge, not the cosine, decides there).
        found = await self._settle(
            ctx,
            plan.key.text,
            found,
            policy.similarity_threshold - margins.below,
            effective + margins.above,
        )
        if found:
            ctx.cache_similarity = found[0][1]
        else:
            ctx.cache_similarity = self.store.best_similarity(scope, ctx.embedding, name)
        candidates = [
            (entry, similarity)
            for entry, similarity in found
            # stored before the cap, or under a larger one: never compared
            if similarity >= floor and len(entry.text) <= policy.semantic_max_chars
        ]
        if not candidates:
            return None
        longest = max(len(plan.key.text), *(len(e.text) for e, _ in candidates))
        judgements = await self.decision.decide(
            plan.key.text,
            [(entry.text, similarity) for entry, similarity in candidates],
            bars,
            inline=longest <= INLINE_COMPARE_CHARS,  # long texts' checks off the loop
        )
        return self._choose(ctx, plan, bars, candidates, judgements)

    def _choose(
        self,
        ctx: RequestContext,
        plan: CachePlan,
        bars: Bars,
        candidates: list[tuple[CacheEntry, float]],
        judgements: list[Judgement],
    ) -> CacheHit | None:
        """The nearest candidate that may be served: no veto, then no word rule at the
        threshold or the judge's yes at its bar, then verification's marks."""
        model, policy, verifier = plan.key.model, plan.policy, self.verifier
        tenant = plan.key.tenant
        judged = [j.score for j in judgements if j.score is not None]
        ctx.cache_judge = max(judged) if judged else None
        for (entry, similarity), judgement in zip(candidates, judgements, strict=True):
            reason = judgement.refusal(bars)
            if reason == "similarity" and similarity >= policy.similarity_threshold:
                reason = "verified-threshold"  # only the raised threshold holds it back
            if reason is None:
                bar = None if judgement.score is None else bars.judged
                reason = verifier.refusal(
                    model, policy, entry, similarity, ctx.embedding, bar=bar, tenant=tenant
                )
            if reason is None:
                ctx.cache_judge = judgement.score
                return self._hit(ctx, CacheHit(entry, "hit-semantic", similarity))
            if reason == "similarity":
                continue  # under the bars: not a near miss
            if ctx.cache_near_miss is None:
                ctx.cache_near_miss = reason
            held = reason == "verified-threshold" and plan.held_back is None
            if held and plan.varies is None:  # the fresh answer will say if it was right
                plan.held_back = verifier.held_back(
                    model,
                    policy,
                    entry,
                    similarity,
                    plan.key.text,
                    ctx.embedding,
                    tenant,
                    _bill_to(ctx),
                )
        return None

    def probe(self, plan: CachePlan, hit: CacheHit, ctx: RequestContext) -> Probe | None:
        """Whether this hit is also to be asked upstream and judged (the verifier draws)."""
        return self.verifier.probe(
            plan.key.model,
            plan.policy,
            hit.entry,
            hit.similarity,
            plan.key.text,
            ctx.embedding,
            exact=hit.kind == "hit-exact",
            tenant=plan.key.tenant,
            bill_to=_bill_to(ctx),
            varies=plan.varies,
        )

    async def _add_vectors(self, store: LazyVectors, plan: CachePlan, now: float) -> None:
        """Embed the scope's entries that were stored without a vector (their lookups had
        nothing to compare with), so this lookup compares with every entry of the scope."""
        assert self.embedder is not None
        entries = await store.vectorless(plan.key.scope, now, _VECTORLESS_BATCH)
        judged = []
        for entry in entries:
            if await self._judges(entry.text, plan.policy):
                judged.append(entry)
            else:
                store.forgo_vector(entry)  # too long to judge: the exact tier only, as stored
        if not judged:
            return
        vectors = await self.embedder.embed_many([entry.text for entry in judged])
        for entry, vector in zip(judged, vectors, strict=True):
            await store.add_vector(entry, vector, self.embedder.name)

    async def _judges(self, text: str, policy: CachePolicy) -> bool:
        """Whether the semantic tier judges `text`: the embedder reads it whole, and it is
        within the policy's cap (asked of a query and of an entry stored without a vector)."""
        fits = getattr(self.embedder, "fits", None)  # a test double may not know its window
        return len(text) <= policy.semantic_max_chars and (fits is None or await fits(text))

    async def _settle(
        self,
        ctx: RequestContext,
        text: str,
        found: list[tuple[CacheEntry, float]],
        clear_below: float,
        clear_above: float,
    ) -> list[tuple[CacheEntry, float]]:
        """The candidates best first, each quick cosine between `clear_below` and
        `clear_above` (too close to the threshold to call: two-stage embedders) replaced by
        the exact model's, so that every threshold decision is the exact model's. A one-stage
        embedder's candidates are all clear."""
        if not isinstance(self.embedder, TwoStageEmbedder):
            return found
        close = [
            i for i, (_, similarity) in enumerate(found) if clear_below <= similarity < clear_above
        ]
        if not close:
            return found
        ctx.cache_exact_checks = len(close)
        exact = await self.embedder.exact_similarities(text, [found[i][0].text for i in close])
        settled = list(found)
        for i, similarity in zip(close, exact, strict=True):
            settled[i] = (found[i][0], similarity)
        return sorted(settled, key=lambda c: -c[1])

    @property
    def _margins(self) -> Margins:
        embedder = self.embedder
        return embedder.margins if isinstance(embedder, TwoStageEmbedder) else NO_MARGINS

    def _hit(self, ctx: RequestContext, hit: CacheHit) -> CacheHit:
        ctx.cache_result = hit.kind
        ctx.cache_similarity = hit.similarity
        return hit

    async def _persist(self, ctx: RequestContext, plan: CachePlan, entry: CacheEntry) -> None:
        try:
            if (
                entry.vector is None
                and self._lazy is None
                and await self._semantic_allowed(ctx, plan)
            ):
                # No vector from the lookup (refresh, embedder loaded since): the exact key
                # is served meanwhile, the vector joins once computed. (A lazy store adds it
                # when a lookup in the scope needs it.)
                assert self.embedder is not None
                try:
                    entry.vector = await self.embedder.embed(plan.key.text)
                except Exception as err:  # keep the exact key at least
                    self._store_failed(f"embedding (request {ctx.request_id})", err)
                else:
                    entry.embedder = self.embedder.name
                    self.store.publish(entry)
            await self.store.put(entry)
        except Exception as err:
            self._store_failed(f"write (request {ctx.request_id})", err)


def _bill_to(ctx: RequestContext) -> str | None:
    """The tenant a verification's cost is also counted under, when its policy opts in to
    per-tenant metrics (the label's values are the configured tenants: bounded)."""
    opted_in = ctx.policy is not None and ctx.policy.metrics.per_tenant
    return ctx.tenant if opted_in else None


def _key(tenant: str, model: str, body: Json, context: str | None) -> CacheKey:
    text = last_user_text(body)
    assert text is not None
    return cache_key(tenant, model, body, exact_text(text), context)


def cacheable(completion: Json, policy: CachePolicy) -> bool:
    """Only complete, successful, single answers: never errors, truncations or n > 1."""
    choices = completion.get("choices") or []
    if len(choices) != 1 or not isinstance(choices[0], dict):
        return False
    finish = choices[0].get("finish_reason")
    message = choices[0].get("message") or {}
    if message.get("tool_calls"):
        return policy.cache_tool_calls and finish == "tool_calls"
    content = message.get("content")
    return finish == "stop" and isinstance(content, str) and bool(content.strip())

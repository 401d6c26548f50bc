"""Calling upstreams so that one failing deployment does not fail the request.

For one request: the model's deployments in weighted random order, then each fallback model's;
each deployment behind its circuit breaker (an open one is skipped without a network call) and
retried with backoff while its failures are worth retrying; all of it inside the request's
deadline. A client error (4xx other than 429) ends the walk at once: every model would refuse
the same request. A deployment whose provider is misconfigured (ProviderMisconfigured: a
rejected key, an unknown model, a base_url that never answered) is moved on from without a
retry or a breaker count, and logged at ERROR once per cause. When nothing answers,
AllUpstreamsUnavailable carries the last cause and a Retry-After, and the pipeline decides what
the client receives (degradation level 4); but when every failure was a configuration fault,
that fault is the answer: an error, since waiting will not fix it.

A caller who brings its own provider key is served only by deployments on the providers the
key is for (its policy's `byok.providers`), so its requests never spend the gateway's keys.
A call to an endpoint an upstream serves itself (`native`: legacy completions, Responses) walks
the same way, over only the deployments whose provider declares that endpoint.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from typing import Any, TypeVar

from pydantic import SecretStr

from gateway.config import Deployment, ModelRoute, Settings
from gateway.context import RequestContext
from gateway.errors import (
    GatewayError,
    InvalidRequest,
    InvalidUpstreamAnswer,
    ProviderMisconfigured,
    UpstreamTimeout,
)
from gateway.reply.native import chat_usage
from gateway.reply.stream import ChunkStream
from gateway.resilience.breaker import CLOSED, BreakerOpen, Breakers
from gateway.resilience.retry import Backoff, Outcome, classify, failure_reason, retry_after_seconds
from gateway.upstream import Upstreams
from gateway.upstream.base import Provider

Json = dict[str, Any]
T = TypeVar("T")
Call = Callable[[Provider, Json, SecretStr | None], Awaitable[T]]


MIN_ATTEMPT_SECONDS = 0.05  # less time left than this: the deadline has passed
FAIR_ATTEMPT_SECONDS = 1.0  # an attempt cut by the deadline sooner is not the upstream's fault


class AllUpstreamsUnavailable(GatewayError):
    """Every deployment of the model and of its fallbacks failed, was open, or ran out of time.
    As an error it is a 503 whose code names the last cause (upstream_timeout, ...)."""

    status = 503
    type = "upstream_error"
    code = "upstreams_unavailable"

    def __init__(self, message: str, retry_after: int, code: str | None = None) -> None:
        super().__init__(message, code=code, headers={"Retry-After": str(retry_after)})
        self.retry_after = retry_after


class UpstreamExecutor:
    def __init__(self, settings: Settings, upstreams: Upstreams, breakers: Breakers) -> None:
        self.settings = settings
        self.upstreams = upstreams
        self.breakers = breakers
        self.backoff = Backoff(settings.resilience.retry)

    async def chat(
        self,
        ctx: RequestContext,
        route: ModelRoute,
        body: Json,
        *,
        stream: bool,
        wants_usage: bool,
    ) -> Json | ChunkStream:
        """A completion, or a stream whose first chunk has arrived. `ctx.fallback_model` says
        whether a fallback answered."""
        if not stream:
            return await self._timed(ctx, self._run(ctx, route, body, _chat, fallbacks=True))

        async def open_stream(
            provider: Provider, upstream_body: Json, key: SecretStr | None
        ) -> ChunkStream:
            if provider.settings.stream_usage and not wants_usage:
                # Ask for usage anyway, for accounting; the usage stage hides it.
                options = upstream_body.get("stream_options") or {}
                upstream_body["stream_options"] = {**options, "include_usage": True}
            served = ctx.served_deployment
            breaker = self.breakers.get(served.key) if served else None
            return await ChunkStream.open(
                ctx,
                provider.stream(upstream_body, key),
                on_break=breaker.record_failure if breaker else None,
            )

        return await self._run(ctx, route, body, open_stream, fallbacks=True)

    async def native(
        self, ctx: RequestContext, route: ModelRoute, endpoint: str, body: Json, *, stream: bool
    ) -> Json | ChunkStream:
        """A call to an OpenAI endpoint an upstream serves itself (`completions`, `responses`),
        `body` relayed as the client sent it: through the same deployments, breakers, retries,
        deadline and fallbacks as chat, skipping deployments whose provider does not serve the
        endpoint (check `serves_natively` first). The answer, or a stream of its events whose
        first batch has arrived (the events as they came, names kept: reply/native.py)."""
        if not stream:

            async def call(provider: Provider, upstream_body: Json, key: SecretStr | None) -> Json:
                return await provider.native(endpoint, upstream_body, key)

            run = self._run(ctx, route, body, call, fallbacks=True, native=endpoint)
            answer = await self._timed(ctx, run)
            ctx.record_usage(chat_usage(answer.get("usage")))
            return answer

        async def open_stream(
            provider: Provider, upstream_body: Json, key: SecretStr | None
        ) -> ChunkStream:
            served = ctx.served_deployment
            breaker = self.breakers.get(served.key) if served else None
            return await ChunkStream.open(
                ctx,
                provider.native_stream(endpoint, upstream_body, key),
                on_break=breaker.record_failure if breaker else None,
            )

        return await self._run(ctx, route, body, open_stream, fallbacks=True, native=endpoint)

    def serves_natively(self, route: ModelRoute, endpoint: str) -> bool:
        """Whether a provider of one of the model's own deployments serves `endpoint` itself
        (its `native` list); `native` then walks those and the fallbacks' that do too."""
        return any(self._native(d, endpoint) for d in route.deployments)

    def _native(self, deployment: Deployment, endpoint: str) -> bool:
        provider = self.settings.providers.get(deployment.provider)
        return provider is not None and endpoint in provider.native

    async def on_behalf(
        self,
        ctx: RequestContext,
        route: ModelRoute,
        body: Json,
        purpose: str,
        *,
        fallbacks: bool = True,
    ) -> Json:
        """A plain call the gateway makes for a request (a summary, a repair, a cache
        verification): through the same breakers and retries (and fallbacks, unless only the
        model's own answer will do), on a context of its own so the request's record stays
        its own, its tokens accounted to the request as `purpose`."""
        sub = RequestContext(
            request_id=f"{ctx.request_id}-{purpose}",
            endpoint="chat",
            tenant=ctx.tenant,
            byok_key=ctx.byok_key,
            byok_providers=ctx.byok_providers,
        )
        reply = await self._timed(sub, self._run(sub, route, body, _chat, fallbacks=fallbacks))
        ctx.add_guard_usage(purpose, route.name, sub.usage)
        return reply

    async def embeddings(self, ctx: RequestContext, route: ModelRoute, body: Json) -> Json:
        # No fallback across models: another model's vectors live in another space.
        return await self._timed(ctx, self._run(ctx, route, body, _embeddings, fallbacks=False))

    @staticmethod
    async def _timed(ctx: RequestContext, reply: Awaitable[Json]) -> Json:
        """Time spent on upstreams (retries and their waits included) and the usage reported."""
        started = time.perf_counter()
        try:
            result = await reply
        finally:
            ctx.upstream_seconds = time.perf_counter() - started
        ctx.record_usage(result.get("usage"))
        return result

    async def _run(
        self,
        ctx: RequestContext,
        route: ModelRoute,
        body: Json,
        call: Call[T],
        *,
        fallbacks: bool,
        native: str | None = None,
    ) -> T:
        loop = asyncio.get_running_loop()
        # The loop's clock: its timers (asyncio.timeout) may fire a little before a
        # perf_counter deadline, which would leave slivers of "time left" for doomed calls.
        deadline = loop.time() + self.time_left(ctx, route)
        attempt_cap = self.settings.resilience.attempt_timeout_seconds or math.inf
        last: GatewayError | None = None
        outage = False  # any failure that waiting may cure (not a configuration fault)
        waits: list[float] = []  # what upstreams and breakers said about when to come back
        chain = list(self._chain(route)) if fallbacks else [route]
        if ctx.byok_key is not None:
            chain = _for_callers_key(chain, ctx.byok_providers, route.name)
        if native is not None:
            chain = self._serving(chain, native, route.name)
        for model in chain:
            for deployment in _weighted_order(model.deployments):
                breaker = self.breakers.get(deployment.key)
                provider = self.upstreams.get(deployment.provider)
                for attempt in range(1, self.settings.resilience.retry.attempts + 1):
                    remaining = deadline - loop.time()
                    if remaining < MIN_ATTEMPT_SECONDS:
                        raise self._unavailable(last, waits, deadline_passed=True)
                    ctx.served_deployment = deployment
                    ctx.fallback_model = model.name if model.name != route.name else None
                    try:
                        with breaker.attempt():
                            ctx.attempts += 1  # only calls that go out count
                            upstream_body = {**body, "model": deployment.upstream_model}
                            result = await _attempt(
                                call,
                                provider,
                                upstream_body,
                                ctx.byok_key,
                                cap=attempt_cap,
                                time_left=remaining,
                            )
                        self.upstreams.note_answer(provider.name)
                        return result
                    except BreakerOpen as err:
                        outage = True
                        ctx.note_failure(deployment.key, "breaker_open")
                        if err.retry_in is not None:
                            waits.append(err.retry_in)
                        break
                    except GatewayError as err:
                        outcome = classify(err)
                        if outcome is Outcome.GIVE_UP:
                            raise
                        last = err
                        ctx.note_failure(deployment.key, failure_reason(err))
                        if isinstance(err, ProviderMisconfigured):
                            self.upstreams.note_fault(err)
                            break
                        outage = True
                        if isinstance(err, InvalidUpstreamAnswer):
                            ctx.invalid_answers.append((deployment.key, err.reason))
                        asked = retry_after_seconds(err)
                        if asked is not None:
                            waits.append(asked)
                        delay = self.backoff.delay(attempt, err)
                        if delay is None or loop.time() + delay >= deadline:
                            break
                        ctx.retries += 1
                        await asyncio.sleep(delay)
        if isinstance(last, ProviderMisconfigured) and not outage:
            raise last
        raise self._unavailable(last, waits, deadline_passed=False)

    def time_left(self, ctx: RequestContext, route: ModelRoute) -> float:
        """Seconds until this request must have its first byte. The deadline counts from the
        request's arrival, so time spent on retrieval comes out of it too."""
        budget = ctx.deadline_seconds or route.deadline_seconds
        return (budget or self.settings.resilience.deadline_seconds) - ctx.elapsed()

    def can_answer(self, route: ModelRoute) -> bool:
        """False when every deployment of the model and its fallbacks sits behind an open
        breaker: the request will be answered at level 4, so retrieval can be skipped."""
        return any(
            self.breakers.get(d.key).may_try() for m in self._chain(route) for d in m.deployments
        )

    def all_closed(self, route: ModelRoute) -> bool:
        """Whether every deployment of the model has a closed breaker: optional calls (a cache
        verification) stay away from an upstream in trouble and from a half-open trial."""
        return all(self.breakers.get(d.key).state == CLOSED for d in route.deployments)

    def _chain(self, route: ModelRoute) -> Iterator[ModelRoute]:
        yield route
        for name in route.fallbacks:
            fallback = self.settings.routes.get(name)
            if fallback is not None and fallback.disabled_reason is None:
                yield fallback

    def _serving(self, chain: list[ModelRoute], endpoint: str, model: str) -> list[ModelRoute]:
        """The chain cut down to the deployments whose provider serves `endpoint` itself."""
        kept = []
        for route in chain:
            deployments = tuple(d for d in route.deployments if self._native(d, endpoint))
            if deployments:
                kept.append(replace(route, deployments=deployments))
        if not kept:
            raise InvalidRequest(
                f"The model '{model}' has no upstream that serves /v1/{endpoint} itself.",
                param="model",
                code="native_unsupported",
            )
        return kept

    def _unavailable(
        self, last: GatewayError | None, waits: list[float], *, deadline_passed: bool
    ) -> AllUpstreamsUnavailable:
        code = last.code if last is not None else "circuit_open"
        if deadline_passed:
            code = "upstream_timeout"
            cause = "the request deadline passed"
            if last is not None:
                cause += f" (last error: {last.message})"
        elif last is not None:
            cause = last.message
        else:
            cause = "every circuit breaker on the way is open"
        default = self.settings.degradation.unavailable.retry_after_seconds
        retry_after = max(1, math.ceil(min(waits))) if waits else default
        return AllUpstreamsUnavailable(
            f"No upstream could answer: {cause}. Retry after {retry_after} s.", retry_after, code
        )


async def _attempt(
    call: Call[T],
    provider: Provider,
    body: Json,
    key: SecretStr | None,
    *,
    cap: float,
    time_left: float,
) -> T:
    """One attempt, bounded by `attempt_timeout_seconds` (`cap`) or by what is left of the
    request's deadline, whichever is sooner. Running out of the cap is an upstream timeout the
    breaker counts; cut by the deadline, it counts only when the attempt had a fair amount of
    time: a request that arrives with little budget left says nothing about the upstream."""
    seconds = min(cap, time_left)
    try:
        async with asyncio.timeout(seconds):
            return await call(provider, body, key)
    except TimeoutError:
        if cap < time_left:
            raise UpstreamTimeout(
                f"provider '{provider.name}' did not answer within {seconds:g} s"
            ) from None
        raise UpstreamTimeout(
            f"provider '{provider.name}' did not answer within the request deadline",
            blame_upstream=seconds >= FAIR_ATTEMPT_SECONDS,
        ) from None


async def _chat(provider: Provider, body: Json, key: SecretStr | None) -> Json:
    return await provider.chat(body, key)


async def _embeddings(provider: Provider, body: Json, key: SecretStr | None) -> Json:
    return await provider.embeddings(body, key)


def _for_callers_key(
    chain: list[ModelRoute], providers: tuple[str, ...], model: str
) -> list[ModelRoute]:
    """The chain cut down to the deployments on the providers a caller's own key is for."""
    kept = []
    for route in chain:
        deployments = tuple(d for d in route.deployments if d.provider in providers)
        if deployments:
            kept.append(replace(route, deployments=deployments))
    if not kept:
        raise InvalidRequest(
            f"The model '{model}' is not served by a provider your own key is for "
            f"({', '.join(providers)}).",
            param="model",
            code="byok_provider_mismatch",
        )
    return kept


def _weighted_order(deployments: tuple[Deployment, ...]) -> list[Deployment]:
    """Deployments in random order, each first with probability proportional to its weight
    (Efraimidis-Spirakis: sort by u ** (1 / weight))."""
    if len(deployments) == 1:
        return list(deployments)
    return sorted(deployments, key=lambda d: random.random() ** (1 / d.weight), reverse=True)

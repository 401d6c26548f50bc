"""The verified cache at the cache stage: which hits are verified, what a verdict changes.

    lookup:  `threshold` (the effective one) and `refusal` (marked entries, the threshold)
    hit:     `probe` -> the pipeline's shadow call -> `verify` (in the background)
    miss:    a candidate the effective threshold held back -> `explore` with the fresh answer
             (no shadow call: the request went upstream anyway)
    verdict: the ledger; a wrong one marks the entry for that question; the threshold is
             reconsidered (boundary.py) and every move is logged with its evidence

Everything that verdicts move is per (tenant, model): the verdict window, the effective
threshold, the estimate and the shadow-call budget (ledger.window_key). A tenant with no
evidence of its own uses the model's configured (calibrated) threshold; there is no pooled
prior, so one tenant's verdicts never move another's threshold or estimate. Hits that vary by
nature (nature.py) are not verified, and a "different" is checked by asking twice.

The client never waits for any of it: probes and verdicts run after the answer has gone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from gateway.cache.store import CacheEntry
from gateway.cache.verify import boundary
from gateway.cache.verify.estimate import (
    MIN_CONTROLS,
    Estimate,
    Kind,
    Observation,
    corrected,
    precision,
)
from gateway.cache.verify.judge import AnswerJudge, JudgeCall, Verdict
from gateway.cache.verify.ledger import (
    MAX_WINDOWS,
    Ledger,
    Mark,
    MemoryLedger,
    split_key,
    tenant_hash,
    window_key,
)
from gateway.cache.verify.nature import Varying
from gateway.cache.verify.sampler import Sampler
from gateway.config.cache import CachePolicy
from gateway.observability.logthrottle import ThrottledWarnings

log = logging.getLogger("gateway.cache.verify")

Json = dict[str, Any]
ShadowOutcome = Literal[
    "answered",
    "failed",
    "rate_limited",
    "breaker_open",
    "shed",
    "not_comparable",
    "judged",
    "tenant_limited",
    "oversized",
    "varies",
]
RECONSIDER_EVERY = 5  # new verdicts, at least, between two looks at the threshold
REFRESH_SECONDS = 1.0  # how often verdicts recorded elsewhere (replicas) are reconsidered


class NotComparable(Exception):
    """The fresh answer could not be made as the cached one was (retrieval did not ground
    it): no verdict, and no fault of the upstream."""


class TenantLimited(Exception):
    """The tenant's own rate limits refused the shadow call it would have been charged."""


class VerificationEvents(Protocol):
    """Where verification reports what it did (the metrics)."""

    def verified(self, model: str, kind: Kind, agree: bool) -> None: ...

    def shadow_call(
        self, model: str, outcome: ShadowOutcome, usage: Json | None, tenant: str | None
    ) -> None:
        """`tenant`: the label its cost is also counted under (a tenant whose policy opts in
        to per-tenant metrics), or None."""


@dataclass(frozen=True, slots=True)
class Probe:
    """A hit (or a held-back candidate) chosen for a verdict, with what the verdict needs."""

    model: str
    policy: CachePolicy
    entry: CacheEntry
    similarity: float
    question: str
    vector: np.ndarray | None  # the question's, for marking its neighbourhood
    weight: float  # 1 / the chance it had of being chosen
    kind: Kind
    tenant: str = ""  # whose hit: its verdict moves only this tenant's window
    bill_to: str | None = None  # the tenant's cost-metrics label, when its policy opts in

    @property
    def key(self) -> str:
        return window_key(self.tenant, self.model)


@dataclass(frozen=True, slots=True)
class ModelVerification:
    """What `GET /admin/cache/stats` and the metrics show for one model."""

    model: str
    configured_threshold: float
    effective_threshold: float
    max_error_rate: float
    sample_rate: float
    served: Estimate  # the precision of the hits served (corrected by the controls)
    explored: int  # verdicts on held-back candidates
    explored_agreeing: int
    judge: Estimate  # how often the judge agrees on controls (exact hits, exact_hits: true)
    # per tenant (by name when this process served it, else "#" and its hash); the model's
    # own figures above pool them for the operator (its threshold: the highest in force)
    tenants: dict[str, ModelVerification] = field(default_factory=dict)

    def as_json(self) -> Json:
        found = self._own()
        if self.tenants:
            found["tenants"] = {name: t._own() for name, t in sorted(self.tenants.items())}
        return found

    def _own(self) -> Json:
        return {
            "configured_threshold": self.configured_threshold,
            "effective_threshold": self.effective_threshold,
            "max_error_rate": self.max_error_rate,
            "sample_rate": self.sample_rate,
            "precision": self.served.as_json(),
            "within_budget": None
            if self.served.lower is None
            else self.served.lower >= 1 - self.max_error_rate,
            "explored": {"verified": self.explored, "agreeing": self.explored_agreeing},
            "judge_agreement_on_controls": self.judge.as_json(),
        }


@dataclass(slots=True)
class _State:
    """One (tenant, model)'s decisions: its latest policy, its effective threshold (None: the
    configured one) and the ledger version last reconsidered."""

    key: str  # ledger.window_key(tenant, model)
    model: str
    tenant: str
    policy: CachePolicy
    effective: float | None = None
    considered: int = 0


# (tenant, model) states held; a dropped one is rebuilt from the ledger at its next lookup
MAX_STATES = 4 * MAX_WINDOWS


class Verifier:
    def __init__(
        self,
        judge: AnswerJudge,
        ledger: Ledger | None = None,
        events: VerificationEvents | None = None,
        sampler: Sampler | None = None,
    ) -> None:
        self.judge = judge
        self.ledger: Ledger = ledger or MemoryLedger()
        self.events = events
        self.sampler = sampler or Sampler()
        self._states: OrderedDict[str, _State] = OrderedDict()  # by ledger.window_key
        self._varying = Varying()  # entries whose answers disagreed with themselves
        self._tasks: set[asyncio.Task[None]] = set()
        self._refresher: asyncio.Task[None] | None = None
        self._warnings = ThrottledWarnings(log)

    async def start(self) -> None:
        await self.ledger.open()
        self._refresher = asyncio.get_running_loop().create_task(self._refresh())

    async def close(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
        await self.flush()
        await self.ledger.close()

    async def flush(self) -> None:
        """Wait for verdicts in flight (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # --- lookups -------------------------------------------------------------------------

    def threshold(self, model: str, policy: CachePolicy, tenant: str = "") -> float:
        """The similarity a hit of `tenant` needs now: the configured one, or higher where
        verification of this tenant's hits found the configured one over budget."""
        state = self._state(model, tenant, policy)
        base = policy.similarity_threshold
        if state.effective is not None and self.ledger.version(state.key) < state.considered:
            state.considered, state.effective = 0, None  # its window was dropped: no evidence
        if not _adapts(policy) or state.effective is None:
            return base
        return max(base, state.effective)

    def _state(self, model: str, tenant: str, policy: CachePolicy) -> _State:
        key = window_key(tenant, model)
        state = self._states.get(key)
        if state is None:  # the first lookup: evidence loaded at start counts
            state = self._states[key] = _State(key, model, tenant, policy)
            while len(self._states) > MAX_STATES:
                self._states.popitem(last=False)
            self._reconsider(key)
        else:
            self._states.move_to_end(key)
            state.policy = policy
        return state

    def refusal(
        self,
        model: str,
        policy: CachePolicy,
        entry: CacheEntry,
        similarity: float,
        vector: np.ndarray | None,
        *,
        bar: float | None = None,
        tenant: str = "",
    ) -> str | None:
        """Why a candidate that passed the guards is not served: "verified-threshold" (under
        the effective threshold, or under `bar`, a hit's own bar raised as far: the pair
        judge's), "verified-wrong" (found wrong for this question, for one nearer to that
        question than to the entry, or for one as far from the entry), or None."""
        if not _adapts(policy):
            return None
        if similarity < (self.threshold(model, policy, tenant) if bar is None else bar):
            return "verified-threshold"
        for mark in self.ledger.marks(entry.exact_key):
            if similarity <= mark.similarity + 1e-6:
                return "verified-wrong"  # no closer to the entry than a question it failed
            # In the wrong question's neighbourhood, and nearer to it than to the entry. (A mark
            # made by another embedder, before a config change, has no neighbourhood here.)
            if vector is not None and vector.shape == mark.vector.shape:
                to_wrong = float(np.dot(vector, mark.vector))
                if to_wrong >= max(policy.similarity_threshold, similarity):
                    return "verified-wrong"
        return None

    # --- hits ----------------------------------------------------------------------------

    def probe(
        self,
        model: str,
        policy: CachePolicy,
        entry: CacheEntry,
        similarity: float,
        question: str,
        vector: np.ndarray | None,
        *,
        exact: bool,
        tenant: str = "",
        bill_to: str | None = None,
        varies: str | None = None,
    ) -> Probe | None:
        """Whether this hit is verified (drawn at its rate, within the tenant's call budget
        on the model). `varies`: why the request's answers vary by nature (nature.py), if
        they do: then it is not (outcome "varies"), nor is an entry seen to vary."""
        verify = policy.verify
        if verify.sample_rate <= 0 or (exact and not verify.exact_hits):
            return None
        key = window_key(tenant, model)
        threshold = self.threshold(model, policy, tenant)
        chance = self.sampler.probability(key, verify, similarity, threshold)
        if not self.sampler.draw(chance):
            return None
        if varies is not None or entry.exact_key in self._varying:
            self._shadow(model, "varies", None, bill_to)
            return None
        if not self.sampler.take(key, verify):
            self._shadow(model, "rate_limited", None, bill_to)
            return None
        kind: Kind = "control" if exact else "served"
        return Probe(
            model, policy, entry, similarity, question, vector, 1.0 / chance, kind, tenant, bill_to
        )

    def judged(self, judge_model: str, usage: Json | None, bill_to: str | None = None) -> None:
        """A judge model's call, made for a verdict: counted and priced as the judge's (and
        in the tenant's cost, `bill_to`, when its policy opts in)."""
        self._shadow(judge_model, "judged", usage, bill_to)

    def skip(self, probe: Probe, outcome: ShadowOutcome) -> None:
        """A chosen hit not verified after all (its breaker is open, the process sheds, its
        shadow call would send more than the hit's request)."""
        self._shadow(probe.model, outcome, None, probe.bill_to)

    def verify(
        self,
        probe: Probe,
        fresh: Callable[[], Awaitable[Json]],
        judge: JudgeCall | None = None,
    ) -> None:
        """Ask the upstream again (`fresh`: the shadow call) and judge, in the background."""
        self._spawn(self._verify(probe, fresh, judge))

    async def _verify(
        self, probe: Probe, fresh: Callable[[], Awaitable[Json]], judge: JudgeCall | None
    ) -> None:
        completion = await self._fresh(probe, fresh)
        if completion is None:
            return
        verdict = await self._compare(probe.question, probe.entry.response, completion, judge)
        if verdict is None:
            return
        if not verdict.agree:
            # Asked twice: an upstream that disagrees with itself says the prompt varies by
            # nature, not that the hit was wrong. One more call, from the same budgets.
            if not self.sampler.take(probe.key, probe.policy.verify):
                self._shadow(probe.model, "rate_limited", None, probe.bill_to)
                return  # undecided: no verdict rather than a wrong one
            again = await self._fresh(probe, fresh)
            if again is None:
                return
            second = await self._compare(probe.question, completion, again, judge)
            if second is None:
                return
            if not second.agree:
                self._varying.add(probe.entry.exact_key)
                self._shadow(probe.model, "varies", None, probe.bill_to)
                log.info(
                    "cache entry %s: two fresh answers disagree too (%s): varies by nature, "
                    "no verdict, not verified again",
                    probe.entry.exact_key[:12],
                    second.reason,
                )
                return
        await self.record(probe, verdict)

    async def _fresh(self, probe: Probe, fresh: Callable[[], Awaitable[Json]]) -> Json | None:
        """One shadow call, its outcome counted (charged to the probe's tenant)."""
        try:
            completion = await fresh()
        except NotComparable as err:
            self._shadow(probe.model, "not_comparable", None, probe.bill_to)
            log.debug("cache verification skipped: %s", err)
            return None
        except TenantLimited:
            self._shadow(probe.model, "tenant_limited", None, probe.bill_to)
            return None
        except Exception as err:  # an upstream failure costs the verdict, nothing else
            self._shadow(probe.model, "failed", None, probe.bill_to)
            self._warnings.warning(
                "cache verification call failed: %s: %s", type(err).__name__, err
            )
            return None
        self._shadow(probe.model, "answered", completion.get("usage"), probe.bill_to)
        return completion

    # --- held-back candidates ------------------------------------------------------------

    def held_back(
        self,
        model: str,
        policy: CachePolicy,
        entry: CacheEntry,
        similarity: float,
        question: str,
        vector: np.ndarray | None,
        tenant: str = "",
        bill_to: str | None = None,
    ) -> Probe:
        """A candidate the effective threshold kept from being served: its verdict, once the
        fresh answer is in (`explore`), says whether the threshold could be lower."""
        return Probe(
            model, policy, entry, similarity, question, vector, 1.0, "explored", tenant, bill_to
        )

    def explore(self, probe: Probe, completion: Json, judge: JudgeCall | None = None) -> None:
        if probe.entry.exact_key in self._varying:
            return  # its answers vary by nature: a verdict would say nothing
        if judge is not None and not self.sampler.take(probe.key, probe.policy.verify):
            return  # a judge model costs a call: within the same budget
        self._spawn(self._judge(probe, completion, judge))

    # --- verdicts ------------------------------------------------------------------------

    async def _judge(self, probe: Probe, fresh: Json, judge: JudgeCall | None) -> None:
        verdict = await self._compare(probe.question, probe.entry.response, fresh, judge)
        if verdict is not None:
            await self.record(probe, verdict)

    async def _compare(
        self, question: str, cached: Json, fresh: Json, judge: JudgeCall | None
    ) -> Verdict | None:
        try:
            return await self.judge.compare(question, cached, fresh, judge)
        except Exception as err:
            self._warnings.warning("cache verification failed: %s: %s", type(err).__name__, err)
            return None

    async def record(self, probe: Probe, verdict: Verdict) -> None:
        observation = Observation(
            probe.similarity, verdict.agree, probe.weight, probe.kind, time.time()
        )
        await self.ledger.record(probe.key, observation)
        if self.events is not None:
            self.events.verified(probe.model, probe.kind, verdict.agree)
        wrong = not verdict.agree and probe.kind != "control"  # a control's is the judge's
        if wrong and probe.policy.verify.adapt and probe.vector is not None:
            entry = probe.entry
            await self.ledger.mark(
                Mark(entry.exact_key, probe.vector, probe.similarity, entry.expires_at)
            )
            log.info(
                "cache entry %s found wrong (%s) for a question at similarity %.4f: not "
                "served for it or its neighbours again",
                entry.exact_key[:12],
                verdict.reason,
                probe.similarity,
            )
        self._reconsider(probe.key)

    def _reconsider(self, key: str) -> None:
        """A (tenant, model)'s effective threshold anew, once enough of its verdicts have
        come since last time. Its own verdicts only: no other tenant's moves it."""
        state = self._states.get(key)
        if state is None:
            return
        version = self.ledger.version(key)
        if version < state.considered:  # its window was dropped and began again
            state.considered, state.effective = 0, None
        observations = self.ledger.observations(key)
        if version - state.considered < max(RECONSIDER_EVERY, len(observations) // 100):
            return
        state.considered = version
        policy = state.policy
        if not _adapts(policy):
            state.effective = None
            return
        base, budget = policy.similarity_threshold, policy.verify.max_error_rate
        current = max(base, state.effective if state.effective is not None else base)
        judge = _judge_agreement(observations)
        agrees = judge.point if judge.point and judge.verified >= MIN_CONTROLS else 1.0
        decision = boundary.decide(current, base, budget, observations, agrees)
        state.effective = decision.threshold
        if decision.threshold != current:
            region = decision.evidence
            share = "none" if region.wrong_share is None else f"{region.wrong_share:.3f}"
            log.warning(
                "cache %s (tenant %s): effective threshold %.4f -> %.4f (%s): %d verdicts at "
                "or above it, weighted wrong share %s on %.0f effective, budget %.3f, "
                "configured %.4f",
                state.model,
                tenant_hash(state.tenant),
                current,
                decision.threshold,
                decision.reason,
                region.verdicts,
                share,
                region.effective_n,
                budget,
                base,
            )

    async def _refresh(self) -> None:
        """Reconsider windows whose verdicts came from elsewhere (a shared ledger)."""
        while True:
            await asyncio.sleep(REFRESH_SECONDS)
            for key, state in list(self._states.items()):
                if self.ledger.version(key) != state.considered:
                    self._reconsider(key)

    def snapshot(self) -> dict[str, ModelVerification]:
        """Each model that verifies (or has verdicts), as this process last saw its policy:
        each tenant's own figures, and the model's pooling them (for the operator: decisions
        are the tenants' own)."""
        names = {tenant_hash(state.tenant): state.tenant for state in self._states.values()}
        policies = {state.model: state.policy for state in self._states.values()}
        windows: dict[str, dict[str, Sequence[Observation]]] = {}
        for key in set(self.ledger.models()) | set(self._states):
            parts = split_key(key)
            if parts is not None:
                model, owner = parts
                windows.setdefault(model, {})[owner] = self.ledger.observations(key)
        found = {}
        for model in sorted(windows):
            policy = policies.get(model)
            pooled = [o for window in windows[model].values() for o in window]
            if policy is None or (policy.verify.sample_rate <= 0 and not pooled):
                continue  # not seen yet, or never verified
            tenants = {}
            for owner, observations in windows[model].items():
                name = names.get(owner)
                state = self._states.get(window_key(name, model)) if name is not None else None
                own = state.policy if state is not None else policy
                threshold = self._shown_threshold(own, state)
                tenants[name or f"#{owner}"] = _view(model, own, threshold, observations)
            highest = max((t.effective_threshold for t in tenants.values()), default=None)
            shown = policy.similarity_threshold if highest is None else highest
            found[model] = _view(model, policy, shown, pooled, tenants)
        return found

    @staticmethod
    def _shown_threshold(policy: CachePolicy, state: _State | None) -> float:
        base = policy.similarity_threshold
        if state is None or state.effective is None or not _adapts(policy):
            return base
        return max(base, state.effective)

    def _shadow(
        self, model: str, outcome: ShadowOutcome, usage: Json | None, tenant: str | None = None
    ) -> None:
        if self.events is not None:
            self.events.shadow_call(model, outcome, usage, tenant)

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _view(
    model: str,
    policy: CachePolicy,
    threshold: float,
    observations: Sequence[Observation],
    tenants: dict[str, ModelVerification] | None = None,
) -> ModelVerification:
    explored = [o for o in observations if o.kind == "explored"]
    judge = _judge_agreement(observations)
    served = precision(o for o in observations if o.kind == "served")
    return ModelVerification(
        model,
        policy.similarity_threshold,
        threshold,
        policy.verify.max_error_rate,
        policy.verify.sample_rate,
        corrected(served, judge),
        len(explored),
        sum(o.agree for o in explored),
        judge,
        tenants or {},
    )


def _judge_agreement(observations: Sequence[Observation]) -> Estimate:
    return precision(o for o in observations if o.kind == "control")


def _adapts(policy: CachePolicy) -> bool:
    return policy.verify.adapt and policy.verify.sample_rate > 0

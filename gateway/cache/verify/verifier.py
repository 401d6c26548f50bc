"""The verified cache at the cache stage: which hits are verified, what a verdict changes.

    lookup:  `threshold` (the effective one) and `refusal` (marked entries, the threshold)
    hit:     `probe` -> the pipeline's shadow call -> `verify` (in the background)
    miss:    a candidate the effective threshold held back -> `explore` with the fresh answer
             (no shadow call: the request went upstream anyway)
    verdict: the ledger; a wrong one marks the entry for that question; the threshold is
             reconsidered (boundary.py) and every move is logged with its evidence

The client never waits for any of it: probes and verdicts run after the answer has gone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
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
from gateway.cache.verify.ledger import Ledger, Mark, MemoryLedger
from gateway.cache.verify.sampler import Sampler
from gateway.config.cache import CachePolicy
from gateway.observability.logthrottle import ThrottledWarnings

log = logging.getLogger("gateway.cache.verify")

Json = dict[str, Any]
ShadowOutcome = Literal[
    "answered", "failed", "rate_limited", "breaker_open", "shed", "not_comparable", "judged"
]
RECONSIDER_EVERY = 5  # new verdicts, at least, between two looks at the threshold
REFRESH_SECONDS = 1.0  # how often verdicts recorded elsewhere (replicas) are reconsidered


class NotComparable(Exception):
    """The fresh answer could not be made as the cached one was (retrieval did not ground
    it): no verdict, and no fault of the upstream."""


class VerificationEvents(Protocol):
    """Where verification reports what it did (the metrics)."""

    def verified(self, model: str, kind: Kind, agree: bool) -> None: ...

    def shadow_call(self, model: str, outcome: ShadowOutcome, usage: Json | None) -> None: ...


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

    def as_json(self) -> Json:
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
        self._effective: dict[str, float] = {}
        self._policies: dict[str, CachePolicy] = {}  # each model's latest, for reconsidering
        self._considered: dict[str, int] = {}  # the ledger version last reconsidered
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

    def threshold(self, model: str, policy: CachePolicy) -> float:
        """The similarity a hit needs now: the configured one, or higher where verification
        found the configured one over budget."""
        if model not in self._policies:  # the first lookup: evidence loaded at start counts
            self._policies[model] = policy
            self._reconsider(model)
        self._policies[model] = policy
        base = policy.similarity_threshold
        if not _adapts(policy):
            return base
        return max(base, self._effective.get(model, base))

    def refusal(
        self,
        model: str,
        policy: CachePolicy,
        entry: CacheEntry,
        similarity: float,
        vector: np.ndarray | None,
        *,
        bar: float | None = None,
    ) -> str | None:
        """Why a candidate that passed the guards is not served: "verified-threshold" (under
        the effective threshold, or under `bar`, a hit's own bar raised as far: the pair
        judge's), "verified-wrong" (found wrong for this question, for one nearer to that
        question than to the entry, or for one as far from the entry), or None."""
        if not _adapts(policy):
            return None
        if similarity < (self.threshold(model, policy) if bar is None else bar):
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
    ) -> Probe | None:
        """Whether this hit is verified (drawn at its rate, within the call budget)."""
        verify = policy.verify
        if verify.sample_rate <= 0 or (exact and not verify.exact_hits):
            return None
        chance = self.sampler.probability(model, verify, similarity, self.threshold(model, policy))
        if not self.sampler.draw(chance):
            return None
        if not self.sampler.take(model, verify):
            self._shadow(model, "rate_limited", None)
            return None
        kind: Kind = "control" if exact else "served"
        return Probe(model, policy, entry, similarity, question, vector, 1.0 / chance, kind)

    def judged(self, judge_model: str, usage: Json | None) -> None:
        """A judge model's call, made for a verdict: counted and priced as the judge's."""
        self._shadow(judge_model, "judged", usage)

    def skip(self, probe: Probe, outcome: ShadowOutcome) -> None:
        """A chosen hit not verified after all (its breaker is open, the process sheds)."""
        self._shadow(probe.model, outcome, None)

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
        try:
            completion = await fresh()
        except NotComparable as err:
            self._shadow(probe.model, "not_comparable", None)
            log.debug("cache verification skipped: %s", err)
            return
        except Exception as err:  # an upstream failure costs the verdict, nothing else
            self._shadow(probe.model, "failed", None)
            self._warnings.warning(
                "cache verification call failed: %s: %s", type(err).__name__, err
            )
            return
        self._shadow(probe.model, "answered", completion.get("usage"))
        await self._judge(probe, completion, judge)

    # --- held-back candidates ------------------------------------------------------------

    def held_back(
        self,
        model: str,
        policy: CachePolicy,
        entry: CacheEntry,
        similarity: float,
        question: str,
        vector: np.ndarray | None,
    ) -> Probe:
        """A candidate the effective threshold kept from being served: its verdict, once the
        fresh answer is in (`explore`), says whether the threshold could be lower."""
        return Probe(model, policy, entry, similarity, question, vector, 1.0, "explored")

    def explore(self, probe: Probe, completion: Json, judge: JudgeCall | None = None) -> None:
        if judge is not None and not self.sampler.take(probe.model, probe.policy.verify):
            return  # a judge model costs a call: within the same budget
        self._spawn(self._judge(probe, completion, judge))

    # --- verdicts ------------------------------------------------------------------------

    async def _judge(self, probe: Probe, fresh: Json, judge: JudgeCall | None) -> None:
        try:
            verdict = await self.judge.compare(probe.question, probe.entry.response, fresh, judge)
        except Exception as err:
            self._warnings.warning("cache verification failed: %s: %s", type(err).__name__, err)
            return
        if verdict is not None:
            await self.record(probe, verdict)

    async def record(self, probe: Probe, verdict: Verdict) -> None:
        observation = Observation(
            probe.similarity, verdict.agree, probe.weight, probe.kind, time.time()
        )
        await self.ledger.record(probe.model, observation)
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
        self._reconsider(probe.model)

    def _reconsider(self, model: str) -> None:
        """The effective threshold anew, once enough verdicts have come since last time."""
        policy = self._policies.get(model)
        version = self.ledger.version(model)
        last = self._considered.get(model, 0)
        observations = self.ledger.observations(model)
        if policy is None or version - last < max(RECONSIDER_EVERY, len(observations) // 100):
            return
        self._considered[model] = version
        if not _adapts(policy):
            self._effective.pop(model, None)
            return
        base, budget = policy.similarity_threshold, policy.verify.max_error_rate
        current = max(base, self._effective.get(model, base))
        judge = _judge_agreement(observations)
        agrees = judge.point if judge.point and judge.verified >= MIN_CONTROLS else 1.0
        decision = boundary.decide(current, base, budget, observations, agrees)
        self._effective[model] = decision.threshold
        if decision.threshold != current:
            region = decision.evidence
            share = "none" if region.wrong_share is None else f"{region.wrong_share:.3f}"
            log.warning(
                "cache %s: effective threshold %.4f -> %.4f (%s): %d verdicts at or above "
                "it, weighted wrong share %s on %.0f effective, budget %.3f, configured %.4f",
                model,
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
        """Reconsider models whose verdicts came from elsewhere (a shared ledger)."""
        while True:
            await asyncio.sleep(REFRESH_SECONDS)
            for model in self.ledger.models():
                if self.ledger.version(model) != self._considered.get(model, 0):
                    self._reconsider(model)

    def snapshot(self) -> dict[str, ModelVerification]:
        """Each model that verifies (or has verdicts), as this process last saw its policy."""
        found = {}
        for model in sorted(set(self.ledger.models()) | set(self._policies)):
            policy = self._policies.get(model)
            observations = self.ledger.observations(model)
            if policy is None or (policy.verify.sample_rate <= 0 and not observations):
                continue  # not seen yet, or never verified
            explored = [o for o in observations if o.kind == "explored"]
            judge = _judge_agreement(observations)
            served = precision(o for o in observations if o.kind == "served")
            found[model] = ModelVerification(
                model,
                policy.similarity_threshold,
                self.threshold(model, policy),
                policy.verify.max_error_rate,
                policy.verify.sample_rate,
                corrected(served, judge),
                len(explored),
                sum(o.agree for o in explored),
                judge,
            )
        return found

    def _shadow(self, model: str, outcome: ShadowOutcome, usage: Json | None) -> None:
        if self.events is not None:
            self.events.shadow_call(model, outcome, usage)

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _judge_agreement(observations: Sequence[Observation]) -> Estimate:
    return precision(o for o in observations if o.kind == "control")


def _adapts(policy: CachePolicy) -> bool:
    return policy.verify.adapt and policy.verify.sample_rate > 0

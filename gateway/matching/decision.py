"""The hit decision: may a stored question's answer be served for the one asked?

Candidates come from the embedding index (cosine at or above the policy's bar); each then
passes, in order:

1. **Vetoes** (`vetoes`): facts a model cannot be trusted to weigh: numbers, units, dates,
   negation, named entities, identifiers, code, case that carries meaning, and texts too long
   to compare. A differing one refuses the hit, whatever the judge would say.
2. **The judge** (`judge.PairJudge`): the probability that one answer serves both texts. At or
   above the policy's `judge_threshold` (or the higher one verification set) it is a hit.
3. **Kept word rules** (`KEPT_RULES`): the lexical rules that the dev curves show still buy
   precision at equal recall on top of the judge (docs/CACHE.md has the table, rule by rule).

Pairs the judge cannot read (Chinese, Japanese, Korean) and caches configured without a judge
are decided as before the judge: the cosine at the bar and every lexical rule.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import chain

from gateway.matching.guards.compare import lexical_reasons, vetoes
from gateway.matching.judge import Judge
from gateway.util import offload

# Lexical rules kept on top of the judge (measured: bench/cache_quality.py --judge).
KEPT_RULES: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Judgement:
    """What the decision found for one candidate."""

    reason: str | None  # why it may not be served: a veto or rule's name, or None
    score: float | None  # the judge's probability; None when it did not judge the pair

    def hit(self, threshold: float) -> bool:
        return self.reason is None and self.score is not None and self.score >= threshold


def refusal(asked: str, stored: str, *, judged: bool) -> str | None:
    """The first veto (or, for a pair the judge does not read, the first lexical rule)."""
    reasons: Iterator[str] = vetoes(asked, stored)
    if judged:
        rules = (r for r in lexical_reasons(asked, stored) if r in KEPT_RULES)
        reasons = chain(reasons, rules) if KEPT_RULES else reasons
    else:
        reasons = chain(reasons, lexical_reasons(asked, stored))
    return next(reasons, None)


def _refusals(asked: str, stored: list[str], judged: list[bool]) -> list[str | None]:
    return [refusal(asked, text, judged=j) for text, j in zip(stored, judged, strict=True)]


class HitDecision:
    """Vetoes, then the judge on what they let through (one batch per lookup)."""

    def __init__(self, judge: Judge | None) -> None:
        self.judge = judge

    def judges(self, asked: str, stored: str) -> bool:
        """Whether the judge decides this pair (loaded, and it reads both texts)."""
        judge = self.judge
        return judge is not None and judge.ready and judge.reads(asked) and judge.reads(stored)

    async def decide(
        self, asked: str, stored: Sequence[str], *, inline: bool = True
    ) -> list[Judgement]:
        """One judgement per stored text, in order. Pairs the judge does not read get
        `score` None: the caller decides them by cosine, as a cache without a judge does.
        `inline` False: the vetoes run on the worker thread (long texts)."""
        judged = [self.judges(asked, text) for text in stored]
        reasons = await offload.run(inline, _refusals, asked, list(stored), judged)
        to_score = [i for i, (j, r) in enumerate(zip(judged, reasons, strict=True)) if j and not r]
        scores: dict[int, float] = {}
        if to_score:
            assert self.judge is not None
            found = await self.judge.scores(asked, [stored[i] for i in to_score])
            scores = dict(zip(to_score, found, strict=True))
        return [Judgement(reasons[i], scores.get(i)) for i in range(len(stored))]

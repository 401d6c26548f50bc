"""The hit decision: may a stored question's answer be served for the one asked?

Candidates come from the embedding index with their cosine; each then passes, in order:

1. **Vetoes** (`vetoes`): facts a model cannot be trusted to weigh: numbers, units, dates,
   negation, named entities, identifiers, code, case that carries meaning, and texts too long
   to compare. A differing one refuses the hit; no score overrides it.
2. **Word rules** (`lexical_reasons`): qualifier, substitution, order, relation, person,
   question kind, antonym, and the Chinese checks. A candidate at or above the cosine threshold
   that no rule refuses is a hit, as before the judge.
3. **The judge** (`judge.PairJudge`), for what the rules cannot settle: a candidate only word
   rules refused ("how tall" / "the height of" is a substitution to them), or one under the
   cosine threshold but at or above `judge_similarity`. The judge reads both texts together;
   at or above `judge_threshold` it is a hit. Rules in `KEPT_RULES` refuse even then.

Word rules refuse as many true rewordings as look-alikes; the judge takes those back where it
is sure, and is never asked where the rules already let a candidate through (a judge call saved,
and no precision lost: docs/CACHE.md, "What decides a hit"). Pairs the judge cannot read
(Chinese, Japanese, Korean) and caches without a judge are decided by the rules alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway.matching.guards.compare import lexical_reasons, vetoes
from gateway.matching.judge import Judge
from gateway.util import offload

# Word rules that refuse even a candidate the judge is sure of (bench/cache_quality.py --judge,
# rule by rule): none bought precision at equal recall on top of the judge.
KEPT_RULES: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Bars:
    """The cosines a candidate needs: `plain` with no rule against it, `judged` for the judge
    to decide it (both raised alike when verification raised the model's threshold), and the
    judge's probability."""

    plain: float
    judged: float
    judge_threshold: float


@dataclass(frozen=True, slots=True)
class Judgement:
    """What the decision found for one candidate."""

    similarity: float
    veto: str | None = None  # a veto's name, or a kept rule's
    rule: str | None = None  # the first word rule that refuses it
    score: float | None = None  # the judge's probability; None when it was not asked

    def refusal(self, bars: Bars) -> str | None:
        """Why it is not a hit (a veto or rule's name, "judge", "similarity"), or None. A rule
        the judge did not take back is named; "judge" is a candidate under the cosine
        threshold that the judge did not take."""
        if self.veto is not None:
            return self.veto
        if self.score is not None and self.similarity >= bars.judged:
            return None if self.score >= bars.judge_threshold else (self.rule or "judge")
        if self.rule is not None:
            return self.rule
        return None if self.similarity >= bars.plain else "similarity"


def check(asked: str, stored: str) -> tuple[str | None, str | None]:
    """The first veto (or kept rule), and the first word rule, of one pair. Lazy: the rules
    are read only as far as these answers need (the alignment is the costly last one)."""
    veto = next(vetoes(asked, stored), None)
    if veto is not None:
        return veto, None
    first = None
    for rule in lexical_reasons(asked, stored):
        first = first or rule
        if rule in KEPT_RULES:
            return rule, first
        if not KEPT_RULES:
            break
    return None, first


def _checks(asked: str, stored: list[str]) -> list[tuple[str | None, str | None]]:
    return [check(asked, text) for text in stored]


class HitDecision:
    """Vetoes and word rules on each candidate, then the judge on the ones they leave open."""

    def __init__(self, judge: Judge | None) -> None:
        self.judge = judge

    def judges(self, asked: str, stored: str) -> bool:
        """Whether the judge may decide this pair (loaded, and it reads both texts)."""
        judge = self.judge
        return judge is not None and judge.ready and judge.reads(asked) and judge.reads(stored)

    async def decide(
        self,
        asked: str,
        candidates: Sequence[tuple[str, float]],
        bars: Bars,
        *,
        inline: bool = True,
    ) -> list[Judgement]:
        """One judgement per (stored text, cosine), in order. `inline` False: the lexical
        checks run on the worker thread (long texts)."""
        texts = [text for text, _ in candidates]
        found = await offload.run(inline, _checks, asked, texts)
        judgements = [
            Judgement(similarity, veto, rule)
            for (_, similarity), (veto, rule) in zip(candidates, found, strict=True)
        ]
        # The judge only where it can change the outcome: no veto, at or above its bar, and
        # not already a hit by the rules.
        ask = [
            i
            for i, j in enumerate(judgements)
            if j.veto is None
            and j.similarity >= bars.judged
            and (j.rule is not None or j.similarity < bars.plain)
            and self.judges(asked, texts[i])
        ]
        if ask:
            assert self.judge is not None
            scores = await self.judge.scores(asked, [texts[i] for i in ask])
            for i, score in zip(ask, scores, strict=True):
                j = judgements[i]
                judgements[i] = Judgement(j.similarity, j.veto, j.rule, score)
        return judgements

"""`gateway cache explain STORED ASKED`: what the hit decision makes of two texts.

The cosine of the configured embedder (the quick vectors the index searches with), every veto
and lexical rule that fires, the judge's score, the thresholds of the configured default
policy, and the verdict: the same decision the cache stage takes, without a server.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np

from gateway.config import CacheConfig, CachePolicyOverride
from gateway.matching.decision import KEPT_RULES, refusal
from gateway.matching.guards.compare import lexical_reasons, vetoes
from gateway.matching.judge import PairJudge


@dataclass(frozen=True, slots=True)
class Explanation:
    cosine: float
    bar: float
    vetoes: list[str]
    rules: list[str]
    judged: bool  # a judge is configured and reads both texts
    score: float | None
    judge_threshold: float
    verdict: str  # "hit", or why not

    def lines(self) -> list[str]:
        out = [f"cosine         {self.cosine:.4f}  (candidate bar {self.bar:.4f})"]
        out.append(f"vetoes         {', '.join(self.vetoes) or 'none'}")
        kept = {r: r in KEPT_RULES for r in self.rules}
        rules = ", ".join(f"{r}{'' if kept[r] else ' (not applied)'}" for r in self.rules)
        if not self.judged:
            rules = ", ".join(self.rules)
        out.append(f"lexical rules  {rules or 'none'}")
        if self.score is None:
            why = "not asked: a veto decided" if self.judged else "none for this pair"
            out.append(f"judge          {why}")
        else:
            out.append(f"judge          {self.score:.4f}  (threshold {self.judge_threshold:.4f})")
        out.append(f"verdict        {self.verdict}")
        return out


def explain(config: CacheConfig, stored: str, asked: str) -> Explanation:
    """The decision for `asked` against `stored` under `config`'s default policy."""
    from gateway.cache.factory import new_embedder

    policy = config.policy_for(CachePolicyOverride())
    judge = PairJudge() if config.judge.on(config.embedder) else None
    judged = judge is not None and judge.reads(asked) and judge.reads(stored)

    async def cosine() -> float:
        embedder = new_embedder(config.embedder)
        await embedder.start()
        try:
            vectors = await embedder.embed_many([stored, asked])
        finally:
            await embedder.close()
        return float(np.dot(vectors[0], vectors[1]))

    cos = asyncio.run(cosine())
    found = list(dict.fromkeys(vetoes(asked, stored)))
    rules = list(dict.fromkeys(lexical_reasons(asked, stored)))
    reason = refusal(asked, stored, judged=judged)
    score = None
    if judge is not None and judged and reason is None:
        score = judge.score_now([(asked, stored)])[0]
    if cos < policy.similarity_threshold:
        verdict = "miss: under the candidate bar"
    elif reason is not None:
        verdict = f"miss: {reason}"
    elif judge is not None and not judged:
        verdict = "miss: unjudged (a script the judge does not read: exact tier only)"
    elif score is not None and score < policy.judge_threshold:
        verdict = "miss: judge"
    else:
        verdict = "hit"
    return Explanation(
        cos,
        policy.similarity_threshold,
        found,
        rules,
        judged,
        score,
        policy.judge_threshold,
        verdict,
    )

"""`gateway cache explain STORED ASKED`: what the hit decision makes of two texts.

The cosine the cache would compare (the quick vectors, settled by the exact model near the
threshold), every veto and word rule that fires, the judge's score where the decision asks it,
the bars of the configured default policy, and the verdict: the decision the cache stage takes
for a candidate, without a server or a store (verification's raised threshold and marks are a
running gateway's; `gateway cache stats --url` shows them).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np

from gateway.config import CacheConfig, CachePolicyOverride
from gateway.embedding.two_stage import TwoStageEmbedder
from gateway.matching.decision import Bars, HitDecision, Judgement
from gateway.matching.guards.compare import lexical_reasons, vetoes
from gateway.matching.judge import PairJudge


@dataclass(frozen=True, slots=True)
class Explanation:
    judgement: Judgement
    bars: Bars
    vetoes: list[str]
    rules: list[str]
    judge: str  # the judge's state for this pair, in words
    verdict: str

    def lines(self) -> list[str]:
        j, bars = self.judgement, self.bars
        score = "-" if j.score is None else f"{j.score:.4f}"
        return [
            f"cosine         {j.similarity:.4f}  (threshold {bars.plain:.4f}; "
            f"the judge from {bars.judged:.4f})",
            f"vetoes         {', '.join(self.vetoes) or 'none'}",
            f"word rules     {', '.join(self.rules) or 'none'}",
            f"judge          {score}  (threshold {bars.judge_threshold:.4f}; {self.judge})",
            f"verdict        {self.verdict}",
        ]


def explain(config: CacheConfig, stored: str, asked: str) -> Explanation:
    """The decision for `asked` against `stored` under `config`'s default policy."""
    from gateway.cache.factory import new_embedder

    policy = config.policy_for(CachePolicyOverride())
    judge = PairJudge() if config.judge.on(config.embedder) else None
    bars = Bars(policy.similarity_threshold, policy.judge_similarity, policy.judge_threshold)

    async def decide() -> Judgement:
        embedder = new_embedder(config.embedder)
        await embedder.start()
        try:
            vectors = await embedder.embed_many([stored, asked])
            cosine = float(np.dot(vectors[0], vectors[1]))
            if isinstance(embedder, TwoStageEmbedder):
                low = policy.similarity_threshold - embedder.margins.below
                if low <= cosine < policy.similarity_threshold + embedder.margins.above:
                    cosine = (await embedder.exact_similarities(asked, [stored]))[0]
            if judge is not None:
                await judge.start()
            return (await HitDecision(judge).decide(asked, [(stored, cosine)], bars))[0]
        finally:
            await embedder.close()
            if judge is not None:
                await judge.close()

    judgement = asyncio.run(decide())
    if judge is None:
        state = "none configured"
    elif not (judge.reads(asked) and judge.reads(stored)):
        state = "does not read this script"
    elif judgement.score is None:
        state = "not asked: a veto, or the word rules and the cosine decide"
    else:
        state = "asked"
    reason = judgement.refusal(bars)
    return Explanation(
        judgement,
        bars,
        list(dict.fromkeys(vetoes(asked, stored))),
        list(dict.fromkeys(lexical_reasons(asked, stored))),
        state,
        "hit" if reason is None else f"miss: {reason}",
    )

"""The hit decision's order: vetoes first (no judge call for a vetoed pair), then the judge on
what is left in one batch; pairs the judge does not read keep every lexical rule."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gateway.matching import decision
from gateway.matching.decision import HitDecision, Judgement, refusal
from gateway.matching.judge import PairJudge


class ScriptedJudge:
    """A judge that scores from a table and records what it was asked."""

    name = "scripted"

    def __init__(self, table: dict[tuple[str, str], float], *, ready: bool = True) -> None:
        self.table = table
        self.asked: list[list[tuple[str, str]]] = []
        self._ready = ready

    @property
    def ready(self) -> bool:
        return self._ready

    def reads(self, text: str) -> bool:
        return PairJudge.reads(text)

    async def scores(self, asked: str, stored: Sequence[str]) -> list[float]:
        self.asked.append([(asked, s) for s in stored])
        return [self.table.get((asked, s), 0.0) for s in stored]

    async def start(self) -> None:
        return None


async def test_a_vetoed_candidate_is_never_judged_and_the_rest_go_in_one_batch() -> None:
    asked = "How many calories are in 2 eggs?"
    stored = ["How many calories are in 3 eggs?", "What is the calorie count of 2 eggs?"]
    judge = ScriptedJudge({(asked, stored[1]): 0.93})
    found = await HitDecision(judge).decide(asked, stored)
    assert found == [Judgement("number", None), Judgement(None, 0.93)]
    assert judge.asked == [[(asked, stored[1])]]
    assert not found[0].hit(0.5) and found[1].hit(0.5) and not found[1].hit(0.95)


async def test_word_rules_do_not_refuse_what_the_judge_decides() -> None:
    """'how tall' / 'the height of' is a substitution to the word rules; with a judge only the
    vetoes and the kept rules refuse, and the judge's score decides."""
    asked, stored = "What is the height of Mount Everest?", "How tall is Mount Everest?"
    assert refusal(asked, stored, judged=False) == "substitution"
    assert refusal(asked, stored, judged=True) is None
    judge = ScriptedJudge({(asked, stored): 0.97})
    assert await HitDecision(judge).decide(asked, [stored]) == [Judgement(None, 0.97)]


async def test_a_pair_the_judge_cannot_read_is_not_scored_and_keeps_the_rules() -> None:
    judge = ScriptedJudge({})
    asked, stored = "怎么快速减肥", "怎么减肥"
    assert not PairJudge.reads(asked)
    found = await HitDecision(judge).decide(asked, [stored])
    assert found == [Judgement("qualifier", None)] and judge.asked == []


async def test_without_a_ready_judge_every_rule_applies_and_nothing_is_scored() -> None:
    asked, stored = "What is the height of Mount Everest?", "How tall is Mount Everest?"
    for judge in (None, ScriptedJudge({}, ready=False)):
        found = await HitDecision(judge).decide(asked, [stored])
        assert found == [Judgement("substitution", None)]


async def test_a_kept_rule_refuses_on_top_of_the_judge(monkeypatch: pytest.MonkeyPatch) -> None:
    asked, stored = "What is the height of Mount Everest?", "How tall is Mount Everest?"
    monkeypatch.setattr(decision, "KEPT_RULES", frozenset({"substitution"}))
    judge = ScriptedJudge({(asked, stored): 0.99})
    assert await HitDecision(judge).decide(asked, [stored]) == [Judgement("substitution", None)]


async def test_long_pairs_are_vetoed_on_the_worker_thread() -> None:
    import threading

    seen: list[str] = []
    real = decision.refusal

    def recording(asked: str, stored: str, *, judged: bool) -> str | None:
        seen.append(threading.current_thread().name)
        return real(asked, stored, judged=judged)

    decision.refusal = recording  # type: ignore[assignment]
    try:
        text = "Please summarise this. " * 20
        await HitDecision(ScriptedJudge({})).decide(text, [text + "Thanks."], inline=False)
    finally:
        decision.refusal = real  # type: ignore[assignment]
    assert seen and all(name != threading.current_thread().name for name in seen)

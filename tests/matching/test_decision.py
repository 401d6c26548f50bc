"""The hit decision: vetoes first (never judged), word rules and the cosine as before, and the
judge asked only where it can change the outcome; pairs it cannot read keep the rules."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gateway.matching import decision
from gateway.matching.decision import Bars, HitDecision, Judgement
from gateway.matching.judge import PairJudge

BARS = Bars(plain=0.94, judged=0.85, judge_threshold=0.95)


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


HEIGHT = ("What is the height of Mount Everest?", "How tall is Mount Everest?")


async def test_the_judge_takes_back_what_only_a_word_rule_refused() -> None:
    asked, stored = HEIGHT
    judge = ScriptedJudge({(asked, stored): 0.97})
    [found] = await HitDecision(judge).decide(asked, [(stored, 0.97)], BARS)
    assert found == Judgement(0.97, None, "substitution", 0.97)
    assert found.refusal(BARS) is None
    judge.table[(asked, stored)] = 0.6
    [found] = await HitDecision(judge).decide(asked, [(stored, 0.97)], BARS)
    assert found.refusal(BARS) == "substitution"  # the rule it did not take back
    [found] = await HitDecision(judge).decide(asked, [(stored, 0.9)], BARS)
    assert found.refusal(BARS) == "substitution"


async def test_a_vetoed_candidate_is_never_judged_and_the_rest_go_in_one_batch() -> None:
    asked = "How many calories are in 2 eggs?"
    stored = ["How many calories are in 3 eggs?", "What is the calorie count of 2 eggs?"]
    judge = ScriptedJudge({(asked, stored[1]): 0.96})
    found = await HitDecision(judge).decide(asked, [(stored[0], 0.98), (stored[1], 0.9)], BARS)
    assert found[0].veto == "number" and found[0].score is None
    assert found[0].refusal(BARS) == "number"
    assert found[1].score == 0.96 and found[1].refusal(BARS) is None
    assert judge.asked == [[(asked, stored[1])]]


async def test_what_the_rules_let_through_at_the_threshold_costs_no_judge_call() -> None:
    asked, stored = "How can I reset my password?", "How do I reset my password?"
    judge = ScriptedJudge({})
    [found] = await HitDecision(judge).decide(asked, [(stored, 0.97)], BARS)
    assert found == Judgement(0.97) and found.refusal(BARS) is None and judge.asked == []


async def test_under_the_judges_bar_nothing_is_asked() -> None:
    asked, stored = HEIGHT
    judge = ScriptedJudge({(asked, stored): 0.99})
    [found] = await HitDecision(judge).decide(asked, [(stored, 0.8)], BARS)
    assert found.score is None and found.refusal(BARS) == "substitution"
    assert judge.asked == []


async def test_a_pair_the_judge_cannot_read_keeps_the_rules() -> None:
    judge = ScriptedJudge({})
    asked, stored = "怎么快速减肥", "怎么减肥"
    assert not PairJudge.reads(asked)
    [found] = await HitDecision(judge).decide(asked, [(stored, 0.99)], BARS)
    assert found.refusal(BARS) == "qualifier" and judge.asked == []


async def test_without_a_ready_judge_the_rules_decide() -> None:
    asked, stored = HEIGHT
    for judge in (None, ScriptedJudge({}, ready=False)):
        [found] = await HitDecision(judge).decide(asked, [(stored, 0.99)], BARS)
        assert found.refusal(BARS) == "substitution" and found.score is None


async def test_a_kept_rule_refuses_even_a_sure_judge(monkeypatch: pytest.MonkeyPatch) -> None:
    asked, stored = HEIGHT
    monkeypatch.setattr(decision, "KEPT_RULES", frozenset({"substitution"}))
    judge = ScriptedJudge({(asked, stored): 0.99})
    [found] = await HitDecision(judge).decide(asked, [(stored, 0.97)], BARS)
    assert found.refusal(BARS) == "substitution" and judge.asked == []


def test_the_refusal_reads_the_bars() -> None:
    assert Judgement(0.93).refusal(BARS) == "similarity"
    assert Judgement(0.94).refusal(BARS) is None
    assert Judgement(0.86, rule="order", score=0.95).refusal(BARS) is None
    assert Judgement(0.86, rule="order", score=0.94).refusal(BARS) == "order"
    assert Judgement(0.86, score=0.94).refusal(BARS) == "judge"
    raised = Bars(plain=0.96, judged=0.87, judge_threshold=0.95)
    assert Judgement(0.86, rule="order", score=0.99).refusal(raised) == "order"


async def test_long_pairs_are_checked_on_the_worker_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import threading

    seen: list[str] = []
    real = decision.check

    def recording(asked: str, stored: str) -> tuple[str | None, str | None]:
        seen.append(threading.current_thread().name)
        return real(asked, stored)

    monkeypatch.setattr(decision, "check", recording)
    text = "Please summarise this. " * 20
    await HitDecision(None).decide(text, [(text + "Thanks.", 0.99)], BARS, inline=False)
    assert seen and all(name != threading.current_thread().name for name in seen)

"""The pair judge study of `bench/cache_quality.py --judge DIR`.

On each dev set (QQP; the team's held-out question clusters; the held-back part of the trap
suite, never trained on; every English trap and paraphrase of the suite), for the MiniLM
configuration:

- plain cosine and today's rules (cosine, every lexical rule) per cosine threshold;
- the judge alone and the judge with the vetoes, per quick-cosine bar (the int8 vectors the
  index searches with) and judge threshold;
- the shipped decision (the rules at cosine 0.94, or the judge at its threshold from the bar
  up) per bar and threshold, with its wrong hits;
- rule by rule on top of the shipped decision at its operating point: what each word rule,
  kept, catches and loses, and what it buys in precision at equal recall;
- the judge's CPU per candidate (p50, p99), one pair at a time on one thread.

Judge scores and int8 cosines are computed here and kept beside cache_quality's embedding cache
(per judge and set); fp32 cosines come from that cache.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from cache_quality import (
    CACHE_DIR,
    Pairs,
    embed_cached,
    load_pairs,
    pr,
    precision_recall,
    progress,
    sample,
)
from judge_pairs import Pair, all_pairs

from gateway.embedding.onnx_runner import OnnxRunner
from gateway.embedding.shipped import MINILM_SEQ_LENGTH, minilm_graph
from gateway.matching.guards.compare import lexical_reasons, near_miss, vetoes
from gateway.matching.judge import PairJudge
from gateway.testing.harness.stats import percentile
from gateway.testing.harness.tables import markdown_table

BARS = (0.60, 0.70, 0.75, 0.80, 0.85)
JUDGE_AT = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98)
COSINE_AT = (0.80, 0.85, 0.88, 0.90, 0.92, 0.94, 0.96, 0.97, 0.98)
RULES = ("qualifier", "substitution", "order", "relation", "question", "person", "antonym")
PLAIN = 0.94  # MiniLM's calibrated threshold: a candidate no rule refuses is a hit from here
RESCUE_BARS = (0.80, 0.85, 0.88, 0.90)
RESCUE_AT = (0.8, 0.9, 0.93, 0.95, 0.97, 0.99)
OPERATING_POINT = (0.85, 0.95)  # (bar, judge threshold): config/cache.py's JUDGE_* defaults
QUICK_PAIRS = 2000


@dataclass
class Scored:
    pairs: Pairs
    cos: np.ndarray  # fp32 cosine
    quick: np.ndarray  # int8 cosine: what the index searches with
    judge: np.ndarray  # the judge's probability (NaN where not judged: quick < lowest bar)
    veto: np.ndarray  # bool: a veto fires
    rules: list[frozenset[str]]  # the lexical rules that fire
    today: np.ndarray  # bool: today's near_miss refuses


def dev_sets(quick: bool) -> list[Pairs]:
    qqp = load_pairs("qqp")
    sets = [sample(qqp, QUICK_PAIRS) if quick else qqp]
    pairs = all_pairs(("en",))

    def of(name: str, chosen: list[Pair]) -> Pairs:
        label = np.array([p.label == 1 for p in chosen])
        return Pairs(name, [p.a for p in chosen], [p.b for p in chosen], label)

    sets.append(of("team-dev", [p for p in pairs if p.source == "team" and p.split == "dev"]))
    sets.append(
        of("traps-held-back", [p for p in pairs if p.source == "traps" and p.split == "dev"])
    )
    sets.append(of("traps-all", [p for p in pairs if p.source == "traps"]))
    return sets


def quick_cosines(p: Pairs) -> np.ndarray:
    runner = OnnxRunner(minilm_graph("int8-all"), max_seq_length=MINILM_SEQ_LENGTH, threads=2)
    texts = sorted(set(p.a) | set(p.b))
    vecs = runner(texts)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    row = {t: i for i, t in enumerate(texts)}
    a = vecs[[row[t] for t in p.a]]
    b = vecs[[row[t] for t in p.b]]
    return np.einsum("ij,ij->i", a, b)


def score_set(p: Pairs, judge: PairJudge) -> Scored:
    """Every figure of every pair; kept in the embedding cache's folder per judge and set, so
    a second look at the same judge costs nothing."""
    saved = CACHE_DIR / f"judge-{judge.name}-{p.name}-{len(p.a)}.npz"
    if saved.exists():
        z = np.load(saved, allow_pickle=True)
        rules = [frozenset(r) for r in z["rules"]]
        return Scored(p, z["cos"], z["quick"], z["judge"], z["veto"], rules, z["today"])
    progress(f"[judge] {p.name}: {len(p.a)} pairs")
    cos = np.einsum(
        "ij,ij->i", embed_cached("minilm", p.name, p.a), embed_cached("minilm", p.name, p.b)
    )
    quick = quick_cosines(p)
    scores = np.full(len(p.a), np.nan)
    todo = [i for i in range(len(p.a)) if quick[i] >= min(BARS)]
    todo.sort(key=lambda i: len(p.a[i]) + len(p.b[i]))
    for start in range(0, len(todo), 16):
        idx = todo[start : start + 16]
        scores[idx] = judge.score_now([(p.a[i], p.b[i]) for i in idx])
    veto = np.array([next(vetoes(a, b), None) is not None for a, b in zip(p.a, p.b, strict=True)])
    rules = [frozenset(lexical_reasons(a, b)) for a, b in zip(p.a, p.b, strict=True)]
    today = np.array([near_miss(a, b) is not None for a, b in zip(p.a, p.b, strict=True)])
    listed = np.array([sorted(r) for r in rules], dtype=object)
    np.savez(saved, cos=cos, quick=quick, judge=scores, veto=veto, rules=listed, today=today)
    return Scored(p, cos, quick, scores, veto, rules, today)


def curves(s: Scored) -> None:
    label = s.pairs.label
    print(f"\n### {s.pairs.name}: {len(label)} pairs, {int(label.sum())} same-meaning\n")
    rows = []
    for t in COSINE_AT:
        near = s.cos >= t
        rows.append(
            (
                f"{t:g}",
                pr(*precision_recall(label, near)),
                pr(*precision_recall(label, near & ~s.today)),
            )
        )
    print(markdown_table(["cos >=", "plain cosine P / R", "today's rules P / R"], rows))
    judged = np.nan_to_num(s.judge, nan=-1.0)
    for title, allowed in (("judge alone", np.ones(len(label), bool)), ("judge + vetoes", ~s.veto)):
        rows = []
        for j in JUDGE_AT:
            cells = [
                pr(*precision_recall(label, (s.quick >= bar) & (judged >= j) & allowed))
                for bar in BARS
            ]
            rows.append((f"{j:g}", *cells))
        print(f"\n{title}, P / R per judge threshold (rows) and quick-cosine bar (columns):\n")
        print(markdown_table(["judge >=", *(f"bar {b:g}" for b in BARS)], rows))


def shipped(s: Scored, bar: float, at: float, kept: frozenset[str] = frozenset()) -> np.ndarray:
    """The gateway's decision: no veto, and either no word rule at the cosine threshold, or the
    judge at or above `at` from the quick-cosine `bar` up; a kept rule refuses either way."""
    judged = np.nan_to_num(s.judge, nan=-1.0)
    ruled = np.array([bool(r) for r in s.rules])
    held = np.array([bool(r & kept) for r in s.rules])
    plain = (s.cos >= PLAIN) & ~ruled
    rescued = (s.quick >= bar) & (judged >= at)
    return ~s.veto & ~held & (plain | rescued)


def decision_grid(s: Scored) -> None:
    label = s.pairs.label
    base = pr(*precision_recall(label, (s.cos >= PLAIN) & ~s.today))
    print(
        f"\nThe shipped decision on {s.pairs.name} (rules at cos >= {PLAIN:g}: {base}), with the "
        "judge deciding from the quick-cosine bar (columns) at its threshold (rows), P / R / "
        "wrong hits:\n"
    )
    rows = []
    for at in RESCUE_AT:
        cells = []
        for bar in RESCUE_BARS:
            hit = shipped(s, bar, at)
            p, r = precision_recall(label, hit)
            cells.append(f"{pr(p, r)} / {int((hit & ~label).sum())}")
        rows.append((f"{at:g}", *cells))
    print(markdown_table(["judge >=", *(f"bar {b:g}" for b in RESCUE_BARS)], rows))


def rule_table(s: Scored, bar: float, at: float) -> None:
    """Each word rule kept on top of the shipped decision (refusing even a sure judge): the
    wrong hits it catches, the right ones it loses, and the precision the judge alone reaches
    at the same recall (its threshold raised)."""
    label = s.pairs.label
    p0, r0 = precision_recall(label, shipped(s, bar, at))
    where = f"{s.pairs.name}, bar {bar:g}, judge >= {at:g}"
    print(f"\nRule by rule on {where}: the shipped decision {pr(p0, r0)}\n")
    rows = []
    for rule in RULES:
        hit = shipped(s, bar, at, frozenset({rule}))
        base = shipped(s, bar, at)
        p, r = precision_recall(label, hit)
        caught = int((base & ~hit & ~label).sum())
        lost = int((base & ~hit & label).sum())
        same_recall = _precision_at_recall(s, bar, at, r)
        rows.append(
            (rule, f"{caught} / {lost}", pr(p, r), f"{same_recall:.3f}", f"{p - same_recall:+.3f}")
        )
    header = ["rule kept", "wrong hits caught / right hits lost", "with it P / R"]
    print(markdown_table([*header, "without it, same recall: P", "rule buys"], rows))


def _precision_at_recall(s: Scored, bar: float, at: float, recall: float) -> float:
    """The shipped decision's precision with the judge's threshold raised until its recall
    falls to `recall`."""
    for higher in np.linspace(at, 1.0, 201):
        p, r = precision_recall(s.pairs.label, shipped(s, bar, float(higher)))
        if r <= recall + 1e-9:
            return p
    return float("nan")


def judge_cpu(judge: PairJudge, p: Pairs, n: int = 500) -> str:
    pairs = list(zip(p.a, p.b, strict=True))[:n]
    judge.score_now(pairs[:5])
    times = []
    for pair in pairs:
        t0 = time.thread_time_ns()
        judge.score_now([pair])
        times.append((time.thread_time_ns() - t0) / 1e6)
    arr = np.array(times)
    return (
        f"judge CPU per candidate (one at a time, {len(arr)} QQP pairs): "
        f"p50 {percentile(arr, 50):.2f} ms, p99 {percentile(arr, 99):.2f} ms"
    )


def judge_study(model_dir: Path, quick: bool) -> int:
    judge = PairJudge(model_dir, threads=1)
    print(f"# pair judge study: {judge.name}")
    scored = [score_set(p, judge) for p in dev_sets(quick)]
    for s in scored:
        curves(s)
    for s in scored:
        decision_grid(s)
    for s in scored:
        rule_table(s, *OPERATING_POINT)
    print("\n" + judge_cpu(judge, scored[0].pairs))
    return 0

"""The numbers routing_quality.py reports for one dataset, and the markdown they print as.

For every scorer of a dataset (the shipped scorer, length alone, the learned model's held-out
folds) against the random router: kept at every 5 % of cheap share, APGR, the best share at
95 % kept with a bootstrap interval, whether the curve is above random at every 5 % step and
its worst gap at any share; with a difficulty (the team's sets), Spearman with it; and, for a
dataset of several groups (MMLU subjects, the team's files), the same per group, compactly.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from routing_data import (
    GRID,
    Dataset,
    apgr,
    at,
    best_share,
    bootstrap,
    kept_curve,
    random_curve,
    spearman,
    threshold,
)

from gateway.testing.harness.stats import fmt
from gateway.testing.harness.tables import markdown_table

ROUTER, LENGTH, HELD_OUT, RANDOM = "router", "length only", "held-out", "random"
TITLES = {"gsm8k": "GSM8K", "mmlu": "MMLU", "team": "team sets"}
MIN_GROUP = 20  # smaller groups are left out of the per-group table: their curves are noise


def title(name: str) -> str:
    return TITLES.get(name, name)


# ---------------------------------------------------------------- numbers


def curve_summary(curve: np.ndarray, rand: np.ndarray, d: Dataset) -> dict[str, Any]:
    n = len(curve) - 1
    gap = curve[1:n] - rand[1:n]  # every share strictly between 0 and 1
    worst = int(np.argmin(gap)) if len(gap) else 0
    return {
        "apgr": apgr(curve, d.cheap, d.strong),
        "best_share_at_95": best_share(curve),
        "above_random_every_5pct": above(curve, rand, GRID[1:-1]),
        "above_random_every_10pct": above(curve, rand, GRID[2:-1:2]),
        "share_of_points_above_random": float(np.mean(gap > 0)) if len(gap) else math.nan,
        "worst_gap": float(gap[worst]) if len(gap) else math.nan,
        "worst_gap_at_share": (worst + 1) / n if len(gap) else math.nan,
    }


def above(curve: np.ndarray, rand: np.ndarray, shares: list[float]) -> bool:
    return all(at(curve, s) > at(rand, s) for s in shares)


def evaluate(
    d: Dataset, scores: dict[str, np.ndarray], rounds: int, groups: bool = True
) -> dict[str, Any]:
    """Every number of the report for dataset `d`, scored by each of `scores` (name -> one score
    per row, lower = cheaper)."""
    n = len(d)
    rand = random_curve(n, d.cheap, d.strong)
    curves = {name: kept_curve(s, d.cheap, d.strong) for name, s in scores.items()}
    report: dict[str, Any] = {
        "name": d.name,
        "prompts": n,
        "cheap_mean": float(d.cheap.mean()),
        "strong_mean": float(d.strong.mean()),
        "all_cheap_kept": float(d.cheap.mean() / d.strong.mean()),
        "outcomes": "from difficulty" if d.difficulty is not None else "measured",
        "curve": [
            {"share": s, RANDOM: at(rand, s)}
            | {name: at(c, s) for name, c in curves.items()}
            | {f"{name} cut": threshold(scores[name], s) for name in scores if name == ROUTER}
            for s in GRID
        ],
        RANDOM: {"apgr": apgr(rand, d.cheap, d.strong), "best_share_at_95": best_share(rand)},
        "scorers": {},
    }
    for name, curve in curves.items():
        row = curve_summary(curve, rand, d)
        if rounds:
            row["bootstrap_95ci"] = bootstrap(scores[name], d.cheap, d.strong, rounds)
        if d.difficulty is not None:
            row["spearman_difficulty"] = spearman(scores[name], d.difficulty)
        report["scorers"][name] = row
    names = sorted(set(d.groups.tolist()))
    if groups and len(names) > 1:
        report["groups"] = [group_row(d, scores, g) for g in names]
    return report


def group_row(d: Dataset, scores: dict[str, np.ndarray], group: str) -> dict[str, Any]:
    rows = d.groups == group
    part = d.subset(rows, group)
    row: dict[str, Any] = {
        "group": group,
        "prompts": len(part),
        "cheap_mean": float(part.cheap.mean()),
        "strong_mean": float(part.strong.mean()),
    }
    if len(part) < MIN_GROUP or part.strong.sum() <= 0:
        return row | {"scorers": {}}
    rand = random_curve(len(part), part.cheap, part.strong)
    row["scorers"] = {}
    for name, s in scores.items():
        summary = curve_summary(kept_curve(s[rows], part.cheap, part.strong), rand, part)
        if part.difficulty is not None:
            summary["spearman_difficulty"] = spearman(s[rows], part.difficulty)
        row["scorers"][name] = summary
    row["random_best_share_at_95"] = best_share(rand)
    return row


# ---------------------------------------------------------------- markdown


def pct(x: float) -> str:
    return fmt(x * 100, ".1f") + ("" if math.isnan(x) else " %")


def pct_ci(value: float, ci: tuple[float, float] | None) -> str:
    if ci is None:
        return pct(value)
    return f"{pct(value)} ({fmt(ci[0] * 100, '.1f')}..{fmt(ci[1] * 100, '.1f')})"


def num_ci(value: float, ci: tuple[float, float] | None) -> str:
    if ci is None:
        return fmt(value, ".3f")
    return f"{fmt(value, '.3f')} ({fmt(ci[0], '.3f')}..{fmt(ci[1], '.3f')})"


def yes_no(s: dict[str, Any]) -> str:
    if s["above_random_every_5pct"]:
        return "yes"
    return "no; every 10 %: " + ("yes" if s["above_random_every_10pct"] else "no")


def overview(reports: list[dict[str, Any]]) -> str:
    """One row per dataset and scorer: the headline numbers."""
    rows = []
    for r in reports:
        for name, s in r["scorers"].items():
            ci = s.get("bootstrap_95ci", {})
            rows.append(
                (
                    title(r["name"]),
                    name,
                    pct_ci(s["best_share_at_95"], ci.get("best_share_95")),
                    num_ci(s["apgr"], ci.get("apgr")),
                    yes_no(s),
                    f"{fmt(s['worst_gap'] * 100, '+.2f')} pt at {pct(s['worst_gap_at_share'])}",
                    fmt(s.get("spearman_difficulty", math.nan), "+.3f"),
                )
            )
        rand = r[RANDOM]
        rows.append(
            (
                title(r["name"]),
                RANDOM,
                pct(rand["best_share_at_95"]),
                fmt(rand["apgr"], ".3f"),
                "",
                "",
                "",
            )
        )
    header = [
        "dataset",
        "scorer",
        "share at 95 % kept (95 % CI)",
        "APGR (95 % CI)",
        "above random at every 5 %",
        "worst gap to random",
        "Spearman with difficulty",
    ]
    return markdown_table(header, rows)


def curve_table(r: dict[str, Any]) -> str:
    names = [*r["scorers"], RANDOM]
    cut = f"{ROUTER} cut"
    has_cut = cut in r["curve"][0]
    header = ["cheap share", *([cut] if has_cut else []), *(f"kept: {n}" for n in names)]
    rows = [
        (
            f"{p['share']:.0%}",
            *([fmt(p[cut], ".4f")] if has_cut else []),
            *(pct(p[n]) for n in names),
        )
        for p in r["curve"]
    ]
    return markdown_table(header, rows)


def group_table(r: dict[str, Any]) -> str:
    names = list(r["scorers"])
    header = ["group", "n", "cheap", "strong", "random share@95"]
    for name in names:
        header += [f"{name} share@95", f"{name} APGR", f"{name} >random"]
    if r["outcomes"] == "from difficulty":
        header += [f"{name} Spearman" for name in names]
    rows = []
    for g in r["groups"]:
        row = [g["group"], g["prompts"], fmt(g["cheap_mean"], ".3f"), fmt(g["strong_mean"], ".3f")]
        if not g["scorers"]:
            rows.append([*row, *["-"] * (len(header) - len(row))])
            continue
        row.append(pct(g["random_best_share_at_95"]))
        for name in names:
            s = g["scorers"][name]
            worst = fmt(s["worst_gap"] * 100, "+.1f")
            above = "yes" if s["above_random_every_5pct"] else f"no ({worst} pt)"
            row += [pct(s["best_share_at_95"]), fmt(s["apgr"], ".3f"), above]
        if r["outcomes"] == "from difficulty":
            row += [
                fmt(g["scorers"][n].get("spearman_difficulty", math.nan), "+.3f") for n in names
            ]
        rows.append(row)
    return markdown_table(header, rows)


def dataset_section(r: dict[str, Any]) -> str:
    lines = [
        f"### {title(r['name'])}: {r['prompts']} prompts",
        "",
        f"cheap model {r['cheap_mean']:.3f}, strong {r['strong_mean']:.3f}; all cheap keeps "
        f"{pct(r['all_cheap_kept'])}.",
    ]
    if r.get("fitted_on"):
        lines.append(
            "The learned default is fitted on these prompts: its `router` rows are in-sample "
            "here; `held-out` (folds it was not fitted on) is the estimate for unseen prompts."
        )
    if r["outcomes"] == "from difficulty":
        lines.append(
            "No outcomes, a difficulty in [0, 1]: the curve counts the strong model right with "
            "probability 1 and the cheap one with 1 - difficulty (an assumption, not a "
            "measurement); Spearman with the difficulty is the direct measure."
        )
    lines += ["", curve_table(r)]
    if r.get("groups"):
        lines += [
            "",
            f"Per group (`>random`: above random at every 5 % step, else the worst gap at any "
            f"share; groups under {MIN_GROUP} prompts are not scored):",
            "",
            group_table(r),
        ]
    return "\n".join(lines)


def latency_table(latency: dict[str, dict[str, dict[str, float]]]) -> str:
    rows = [
        (where, part, *(fmt(v[k], ".1f") for k in ("p50", "p99", "max")))
        for where, parts in latency.items()
        for part, v in parts.items()
    ]
    return markdown_table(["requests", "part", "p50 µs", "p99 µs", "max µs"], rows)

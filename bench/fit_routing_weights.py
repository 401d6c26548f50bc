"""Fit a scoring profile's feature weights and exemplar mix (PROFILES of
gateway/routing/scorer.py; `--profile` picks one) on labelled prompts written for this project,
never on a benchmark.

Data: the exemplars of gateway/routing/exemplars.yaml (their `difficulty`), the math word
problems of bench/data/routing_dev.yaml (difficulty `min(0.9, 0.1 + 0.1 * steps)`) and, for
`general` only, the hand-labelled general prompts of bench/data/routing_dev_general.yaml (both
checked by bench/check_routing_dev.py). Each text becomes a request body with one user message,
its features squashed by `ComplexityScorer.score` itself (unit weights).

1. Bias plus one weight per feature: soft-label logistic regression with an L2 pull towards
   the hand-set PRIOR (a MAP estimate, `fit`), its strength by 5-fold cross-validation on all
   texts (`choose_lambda`). A feature that never occurs in the data keeps its prior weight.
2. `exemplar_weight` and `neighbours`: 5-fold cross-validation on the dev prompts, each fold's
   weights refitted without its held-out prompts, scored by the real scorer with the exemplars
   voting (`choose_mix`); printed per domain beside the hand-set scorer.
3. Probe prompts (bench/data/routing_probes.yaml, in no data set): hand-set and fitted scores.
4. Diff check: the refit, rounded to 2 decimals as written, against the profile in scorer.py.

The profiles differ in procedure (PROCEDURES): `general` serves general traffic, of which math
word problems are one kind among many, so they and everything else weigh half each, every
weight keeps its prior's sign, lam follows the one-standard-error rule on folds stratified by
source, and the mix is judged by the balanced Spearman; `word-problems` takes the texts as
they come.

    python bench/fit_routing_weights.py [--profile general|word-problems] [--write]

Without --write the exit status is 1 when the diff check finds a difference; --write rewrites
the profile in gateway/routing/scorer.py.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from check_routing_dev import DEV, DEV_GENERAL, checked, counts
from routing_quality import body, score_all

from gateway.cache.factory import new_embedder
from gateway.config import EmbedderConfig
from gateway.config.routing import ProfileName, ScoringConfig
from gateway.routing.exemplars import load_exemplars
from gateway.routing.features import SCORED, extract
from gateway.routing.scorer import (
    BIAS,
    FEATURES_PART,
    PROFILES,
    ComplexityScorer,
    Profile,
)
from gateway.testing.harness.stats import fmt
from gateway.testing.harness.tables import markdown_table

REPO = Path(__file__).resolve().parents[1]
PROBES: dict[str, str] = yaml.safe_load((DEV.parent / "routing_probes.yaml").read_text("utf-8"))
WORD_PROBLEM = "word-problem"  # the domain of math word problems (exemplars and routing_dev)
EXEMPLARS, WORD_PROBLEMS, GENERAL = "exemplars", "word problems", "general"  # the sources
SEED = 0
FOLDS = 5
LAMBDAS = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0)
EXEMPLAR_WEIGHTS = (0.0, 0.25, 0.5, 0.75)
NEIGHBOURS = (3, 7, 15)
# The prior: the weights set by hand before any fit, by what each feature means (explicit
# reasoning asks and code weigh most, chit-chat openers pull down), with their exemplar mix.
# Kept here, not read from scorer.py, so that a refit pulls towards the same prior. Its signs
# are the fit's sign constraints.
PRIOR: dict[str, float] = {
    BIAS: -2.5, "last_user_tokens": 1.5, "total_tokens": 0.5, "code_blocks": 1.0,
    "identifiers": 0.8, "code_task": 1.0, "math": 1.2, "numbers": 0.6, "relations": 0.6,
    "reasoning": 2.0, "multi_step": 0.8, "questions": 0.3, "constraints": 0.6, "simple": -1.0,
    "tools": 0.8, "depth": 0.4, "images": 0.8,
}  # fmt: skip
PRIOR_MIX = {"exemplar_weight": 0.5, "neighbours": 7}
assert all(set(PRIOR) == set(p.weights) for p in PROFILES.values()), (
    "a feature was added: give it a prior weight here"
)
SCORER_PY = REPO / "gateway" / "routing" / "scorer.py"
Box = tuple[np.ndarray, np.ndarray] | None  # (lower, upper) bounds of [bias, *weights]; None: free


@dataclass(frozen=True)
class Procedure:
    """How one profile is fitted. All off: the first fit's procedure (9a6dce1)."""

    general_prompts: bool = False  # routing_dev_general.yaml is in the data
    balanced: bool = False  # math word problems and the rest weigh half each (else each 1)
    signs: bool = False  # each weight keeps its prior's sign or is 0
    one_se: bool = False  # lam by the one-standard-error rule (else the lowest held-out CE)
    stratified: bool = False  # folds stratified by source file (else one permutation of all)
    pooled: bool = False  # mix: balanced Spearman pooled over the folds (else the folds' mean)

    def sample_weights(self, math: np.ndarray) -> np.ndarray:
        return balance(math) if self.balanced else np.ones(len(math))

    def box(self, names: tuple[str, ...]) -> Box:
        return bounds(names) if self.signs else None

    def folds(self, source: np.ndarray) -> np.ndarray:
        return folds(source if self.stratified else np.zeros(len(source)))


PROCEDURES: dict[ProfileName, Procedure] = {
    # 489bee4: general traffic, math word problems one kind among many.
    "general": Procedure(
        general_prompts=True, balanced=True, signs=True, one_se=True, stratified=True, pooled=True
    ),
    # 9a6dce1: the word problems and the exemplars as they come.
    "word-problems": Procedure(),
}
assert set(PROCEDURES) == set(PROFILES), "a profile without a procedure, or the reverse"


@dataclass(frozen=True)
class Data:
    texts: list[str]
    x: np.ndarray  # squashed features in [0, 1], one column per name in `names`
    y: np.ndarray  # difficulty in [0, 1]
    source: np.ndarray  # str: EXEMPLARS, WORD_PROBLEMS or GENERAL (the file)
    domain: np.ndarray  # str
    language: list[str]
    names: tuple[str, ...]  # the features that occur in the data (the others keep their prior)

    @property
    def dev(self) -> np.ndarray:
        dev: np.ndarray = self.source != EXEMPLARS
        return dev

    @property
    def math(self) -> np.ndarray:
        math: np.ndarray = self.domain == WORD_PROBLEM
        return math


def difficulty(steps: int) -> float:
    return min(0.9, 0.1 + 0.1 * steps)


def squashed(texts: list[str]) -> np.ndarray:
    """Each feature's term as ComplexityScorer.score makes it, with weight 1 and bias 0."""
    unit = ComplexityScorer(ScoringConfig(weights={**dict.fromkeys(SCORED, 1.0), BIAS: 0.0}))
    parts = [unit.score(extract(body(t))).parts for t in texts]
    return np.array([[p.get(name, 0.0) for name in SCORED] for p in parts])


def load_data(with_general: bool) -> Data:
    dev = checked(DEV)
    general = checked(DEV_GENERAL) if with_general else []
    exemplars = load_exemplars()
    texts = [e.text for e in exemplars] + [e["text"] for e in dev] + [e["text"] for e in general]
    y = (
        [e.difficulty for e in exemplars]
        + [difficulty(len(e["steps"])) for e in dev]
        + [float(e["difficulty"]) for e in general]
    )
    sources = [EXEMPLARS] * len(exemplars) + [WORD_PROBLEMS] * len(dev) + [GENERAL] * len(general)
    domains = [e.domain for e in exemplars] + [WORD_PROBLEM] * len(dev)
    x = squashed(texts)
    occurs = [bool(x[:, j].any()) for j in range(x.shape[1])]
    return Data(
        texts=texts,
        x=x[:, np.array(occurs)],
        y=np.array(y),
        source=np.array(sources),
        domain=np.array(domains + [e["domain"] for e in general]),
        language=[""] * len(exemplars) + [e["language"] for e in (*dev, *general)],
        names=tuple(n for n, o in zip(SCORED, occurs, strict=True) if o),
    )


def balance(math: np.ndarray) -> np.ndarray:
    """Sample weights: math word problems and everything else each get half the total weight,
    spread evenly (the mean weight is 1, so `lam` keeps its scale)."""
    n, n_math = len(math), int(math.sum())
    if n_math in (0, n):
        return np.ones(n)
    return np.where(math, n / (2 * n_math), n / (2 * (n - n_math)))


# ---------------------------------------------------------------- the fit


def prior(names: tuple[str, ...]) -> np.ndarray:
    return np.array([PRIOR[BIAS], *(PRIOR[n] for n in names)])


def bounds(names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) for [bias, *weights]: each weight keeps its prior's sign or is 0 (what a
    feature means decides whether it raises or lowers complexity: a question mark cannot make a
    prompt simpler; a zero prior would hold its weight at 0); the bias is free."""
    w0 = prior(names)
    lower = np.where(w0 > 0, 0.0, -np.inf)
    upper = np.where(w0 < 0, 0.0, np.inf)
    lower[w0 == 0] = upper[w0 == 0] = 0.0
    lower[0], upper[0] = -np.inf, np.inf
    return lower, upper


def design(x: np.ndarray) -> np.ndarray:
    return np.hstack([np.ones((len(x), 1)), x])


def sigmoid(z: np.ndarray) -> np.ndarray:
    out: np.ndarray = 1.0 / (1.0 + np.exp(-z))
    return out


@dataclass(frozen=True)
class Problem:
    """The MAP objective: weighted soft-label cross-entropy plus the pull towards the prior."""

    a: np.ndarray  # design matrix [1, features]
    y: np.ndarray
    s: np.ndarray  # sample weights
    w0: np.ndarray  # the prior
    lam: float

    @property
    def pull(self) -> np.ndarray:
        pull = np.full(len(self.w0), self.lam)
        pull[0] = 0.0  # the bias is not pulled towards the prior
        return pull

    def loss(self, w: np.ndarray) -> float:
        z = self.a @ w
        # -(y log p + (1 - y) log(1 - p)), stable for any z
        nll = self.s @ (np.logaddexp(0.0, z) - self.y * z)
        return float(nll + np.sum(self.pull * (w - self.w0) ** 2) / 2)

    def gradient(self, w: np.ndarray) -> np.ndarray:
        p = sigmoid(self.a @ w)
        grad: np.ndarray = self.a.T @ (self.s * (p - self.y)) + self.pull * (w - self.w0)
        return grad

    def hessian(self, w: np.ndarray) -> np.ndarray:
        p = sigmoid(self.a @ w)
        h: np.ndarray = (self.a.T * (self.s * p * (1 - p))) @ self.a + np.diag(self.pull + 1e-9)
        return h

    def kkt_residual(self, w: np.ndarray, box: Box) -> float:
        """The largest violation of the optimality conditions at `w`: a zero gradient for the
        weights inside the box, a gradient pointing out of the box for those on a bound."""
        lower, upper = box or unbounded(len(w))
        return float(np.max(np.abs(w - np.clip(w - self.gradient(w), lower, upper))))


def unbounded(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.full(n, -np.inf), np.full(n, np.inf)


def fit(
    x: np.ndarray,
    y: np.ndarray,
    s: np.ndarray,
    w0: np.ndarray,
    lam: float,
    box: Box = None,
) -> np.ndarray:
    """MAP weights [bias, *features] within `box` (lower, upper; None: no constraints), by
    projected Newton (Bertsekas 1982), from the prior projected onto the box.

    Each step: the weights within `eps` of a bound whose gradient pushes them out of the box are
    held (eps shrinks with the projected gradient, so the set settles on the binding
    constraints); a Newton step on the others, projected onto the box; Armijo backtracking along
    that projection. Stops when the projected gradient vanishes (the KKT conditions hold)."""
    problem = Problem(design(x), y, s, w0, lam)
    lower, upper = box or unbounded(len(w0))
    w: np.ndarray = np.clip(w0, lower, upper)
    loss = problem.loss(w)
    for _ in range(200):
        grad = problem.gradient(w)
        projected = w - np.clip(w - grad, lower, upper)
        if np.max(np.abs(projected)) < 1e-9:
            break
        eps = min(1e-3, float(np.linalg.norm(projected)))
        held = ((w <= lower + eps) & (grad > 0)) | ((w >= upper - eps) & (grad < 0))
        free = ~held
        step = np.zeros_like(w)
        h = problem.hessian(w)
        step[free] = np.linalg.solve(h[np.ix_(free, free)], grad[free])
        step[held] = grad[held]  # a gradient step for the held: the projection keeps them put
        t = 1.0
        while True:
            new_w: np.ndarray = np.clip(w - t * step, lower, upper)
            new = problem.loss(new_w)
            if new <= loss + 1e-4 * grad @ (new_w - w) or t < 1e-12:
                break
            t /= 2
        w, loss = new_w, new
    return w


def cross_entropy(p: np.ndarray, y: np.ndarray, s: np.ndarray) -> float:
    p = np.clip(p, 1e-12, 1 - 1e-12)
    return float(-np.average(y * np.log(p) + (1 - y) * np.log(1 - p), weights=s))


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(np.corrcoef(_ranks(a), _ranks(b))[0, 1])


def _ranks(v: np.ndarray) -> np.ndarray:
    """Ranks with ties sharing their average rank."""
    _, inverse, counts = np.unique(v, return_inverse=True, return_counts=True)
    upper = np.cumsum(counts)
    average: np.ndarray = (upper - (counts - 1) / 2)[inverse]
    return average


def folds(groups: np.ndarray, seed: int = SEED) -> np.ndarray:
    """A fold for each item, stratified by group (each group spread evenly over the folds)."""
    rng = np.random.default_rng(seed)
    fold = np.empty(len(groups), dtype=int)
    for group in np.unique(groups):
        where = np.flatnonzero(groups == group)
        fold[where] = rng.permutation(len(where)) % FOLDS
    return fold


@dataclass(frozen=True)
class LambdaResult:
    ce: float  # held-out weighted cross-entropy, pooled over the folds
    se: float  # its standard error: the spread of the per-fold values / sqrt(FOLDS)
    rho_math: float  # held-out Spearman of the word problems
    rho_rest: float  # and of everything else


def choose_lambda(d: Data, p: Procedure) -> tuple[float, float, dict[float, LambdaResult]]:
    """(chosen lam, lam with the lowest held-out CE, per lam its numbers). The one-standard-
    error rule, when `p` uses it: the largest lam whose held-out CE is within one standard error
    of the lowest, i.e. the fit nearest the prior among those the data cannot tell apart (the
    curve is flat over two decades of lam)."""
    fold = p.folds(d.source)
    w0, box = prior(d.names), p.box(d.names)
    s = p.sample_weights(d.math)
    results = {}
    for lam in (0.0, *LAMBDAS):  # 0.0: the prior itself, not fitted (for comparison)
        held = np.empty(len(d.y))
        for k in range(FOLDS):
            test, train = fold == k, fold != k
            w = w0
            if lam != 0.0:
                w = fit(d.x[train], d.y[train], p.sample_weights(d.math[train]), w0, lam, box)
            held[test] = sigmoid(design(d.x[test]) @ w)
        per_fold = [
            cross_entropy(held[fold == k], d.y[fold == k], s[fold == k]) for k in range(FOLDS)
        ]
        results[lam] = LambdaResult(
            cross_entropy(held, d.y, s),
            float(np.std(per_fold, ddof=1) / np.sqrt(FOLDS)),
            spearman(held[d.math], d.y[d.math]),
            spearman(held[~d.math], d.y[~d.math]),
        )
    lowest = min(LAMBDAS, key=lambda lam: results[lam].ce)
    if not p.one_se:
        return lowest, lowest, results
    limit = results[lowest].ce + results[lowest].se
    chosen = max(lam for lam in LAMBDAS if results[lam].ce <= limit)
    return chosen, lowest, results


def weights_dict(w: np.ndarray, names: tuple[str, ...]) -> dict[str, float]:
    """Every weight: the fitted ones, and the prior for features not in the data."""
    fitted = dict(zip(names, map(float, w[1:]), strict=True))
    return {**PRIOR, BIAS: float(w[0]), **fitted}


# ---------------------------------------------------------------- the exemplar mix

Mix = tuple[float, int]


@dataclass(frozen=True)
class MixResult:
    best: Mix
    held: dict[Mix, np.ndarray]  # per setting, the held-out score of each dev prompt
    hand_set: np.ndarray  # the hand-set scorer's score of each dev prompt (nothing fitted)
    hand_set_features: np.ndarray  # its feature part alone
    probes: dict[str, tuple[float, float, float, float]]  # hand-set, fitted: value, feature part


@dataclass(frozen=True)
class Criterion:
    """How `p` ranks the held-out scores of the dev prompts (higher is better)."""

    p: Procedure
    y: np.ndarray
    math: np.ndarray
    fold: np.ndarray

    @property
    def name(self) -> str:
        if self.p.pooled:
            return "balanced held-out Spearman (mean of word problems and general)"
        return "held-out Spearman, mean over the folds"

    def __call__(self, scores: np.ndarray) -> float:
        if self.p.pooled:  # the mean of the word problems' and everything else's
            math, y = self.math, self.y
            return (spearman(scores[math], y[math]) + spearman(scores[~math], y[~math])) / 2
        per_fold = [spearman(scores[self.fold == k], self.y[self.fold == k]) for k in range(FOLDS)]
        return float(np.mean(per_fold))

    def key(self, mix: Mix, scores: np.ndarray) -> tuple[float, float, int]:
        """Ties: the smaller mix, then more neighbours (pooled) or fewer (per fold)."""
        return self(scores), -mix[0], mix[1] if self.p.pooled else -mix[1]


async def choose_mix(
    d: Data, lam: float, fitted: dict[str, float], p: Procedure
) -> tuple[MixResult, Criterion]:
    """(exemplar_weight, neighbours) with the best held-out criterion of `p` on the dev
    prompts (weights refitted per fold without the held-out prompts; exemplars.yaml votes)."""
    dev = np.flatnonzero(d.dev)
    fold = p.folds(d.source[dev])
    texts = [d.texts[i] for i in dev]
    w0, box = prior(d.names), p.box(d.names)
    criterion = Criterion(p, d.y[dev], d.math[dev], fold)
    embedder = new_embedder(EmbedderConfig())
    await embedder.start()
    try:
        vectors = await embedder.embed_many(texts)
        held: dict[Mix, np.ndarray] = {
            (m, n): np.empty(len(dev)) for m in EXEMPLAR_WEIGHTS for n in NEIGHBOURS
        }
        hand_set = ComplexityScorer(ScoringConfig(weights=PRIOR, **PRIOR_MIX))
        await hand_set.prepare(embedder)
        hand_scores = score_all(hand_set, texts, vectors)
        hand_features = score_all(
            ComplexityScorer(ScoringConfig(weights=PRIOR, exemplar_weight=0)), texts, vectors
        )
        for k in range(FOLDS):
            test = dev[fold == k]
            train = np.setdiff1d(np.arange(len(d.y)), test)
            s = p.sample_weights(d.math[train])
            w = weights_dict(fit(d.x[train], d.y[train], s, w0, lam, box), d.names)
            rows = np.flatnonzero(fold == k)
            for mix, n in held:
                scorer = ComplexityScorer(
                    ScoringConfig(weights=w, exemplar_weight=mix, neighbours=n)
                )
                await scorer.prepare(embedder)
                held[mix, n][rows] = score_all(scorer, [texts[j] for j in rows], vectors[rows])
        best = max(held, key=lambda m: criterion.key(m, held[m]))
        probe_texts = list(PROBES.values())
        probe_vectors = await embedder.embed_many(probe_texts)
        final = ComplexityScorer(
            ScoringConfig(weights=fitted, exemplar_weight=best[0], neighbours=best[1])
        )
        await final.prepare(embedder)
        probes = {}
        for name, text, vector in zip(PROBES, probe_texts, probe_vectors, strict=True):
            by_hand = hand_set.score(extract(body(text)), vector)
            new = final.score(extract(body(text)), vector)
            probes[name] = (
                by_hand.value,
                by_hand.parts[FEATURES_PART],
                new.value,
                new.parts[FEATURES_PART],
            )
    finally:
        await embedder.close()
    return MixResult(best, held, hand_scores, hand_features, probes), criterion


# ---------------------------------------------------------------- writing the profile


def profile_block(name: ProfileName, profile: Profile) -> str:
    """The profile's entry in PROFILES, as scorer.py writes it (ruff-formatted)."""
    lines = [
        f'        "{name}": Profile(',
        f"            exemplar_weight={profile.exemplar_weight!r},",
        f"            neighbours={profile.neighbours},",
        "            weights=MappingProxyType(",
        "                {",
        f"                    BIAS: {_rounded(profile.weights[BIAS])!r},",
        *(f'                    "{n}": {_rounded(profile.weights[n])!r},' for n in SCORED),
        "                }",
        "            ),",
        "        ),",
    ]
    return "\n".join(lines) + "\n"


def write_profile(name: ProfileName, profile: Profile) -> None:
    text = SCORER_PY.read_text("utf-8")
    pattern = rf'^        "{re.escape(name)}": Profile\(\n.*?^        \),\n'
    new, count = re.subn(pattern, lambda _: profile_block(name, profile), text, flags=re.S | re.M)
    if count != 1:
        raise SystemExit(f"{SCORER_PY}: PROFILES[{name!r}] not found in the expected shape")
    SCORER_PY.write_text(new, "utf-8")


def _rounded(x: float) -> float:
    return round(x, 2) + 0.0  # + 0.0: no "-0.0"


def diff_check(name: ProfileName, refit: Profile) -> list[str]:
    """Print the refit (rounded as written; before rounding too, to show how far each weight is
    from a flip) beside the committed profile; the names that differ."""
    committed = PROFILES[name]
    print(
        f"\n4. diff check: the refit, rounded as --write writes it, against PROFILES[{name!r}] "
        f"in {SCORER_PY.relative_to(REPO)}\n"
    )
    rows: list[tuple[str, float, float, str]] = [
        (n, committed.weights[n], _rounded(refit.weights[n]), f"{refit.weights[n]:.5f}")
        for n in (BIAS, *SCORED)
    ]
    rows += [
        ("exemplar_weight", committed.exemplar_weight, refit.exemplar_weight, ""),
        ("neighbours", committed.neighbours, refit.neighbours, ""),
    ]
    differ = [n for n, old, new, _ in rows if old != new]
    cells = [
        (n, f"{old:g}", f"{new:g}", raw, "DIFFERS" if n in differ else "ok")
        for n, old, new, raw in rows
    ]
    print(markdown_table(["", "committed", "refit", "unrounded", ""], cells))
    if differ:
        print(f"diff check: {len(differ)} of {len(rows)} differ: {', '.join(differ)}")
    else:
        print(f"diff check: all {len(rows)} numbers equal the committed profile {name!r}")
    return differ


# ---------------------------------------------------------------- report


def report_data(d: Data, p: Procedure) -> None:
    s = p.sample_weights(d.math)
    count = Counter(d.source)
    print(
        f"data: {count[EXEMPLARS]} exemplars, {count[WORD_PROBLEMS]} word problems "
        f"(routing_dev.yaml), {count[GENERAL]} general prompts (routing_dev_general.yaml)"
    )
    print(f"   dev languages: {counts(Counter(np.array(d.language)[d.dev]))}")
    if p.balanced:
        print(
            f"   balance: {int(d.math.sum())} math word problems weigh {s[d.math][0]:.3f} each, "
            f"{int((~d.math).sum())} others {s[~d.math][0]:.3f} each (half of the total each)"
        )
    else:
        print(f"   unweighted: each of the {len(s)} texts weighs 1")
    if count[GENERAL]:
        print(f"   general by domain: {counts(Counter(d.domain[d.source == GENERAL]))}")
    missing = [n for n in SCORED if n not in d.names]
    print(f"   features never in the data (prior kept): {', '.join(missing) or 'none'}\n")


def report_lambda(
    d: Data, p: Procedure, lam: float, lowest: float, by_lam: dict[float, LambdaResult]
) -> None:
    kind = "sign-constrained" if p.signs else "unconstrained"
    print(
        f"1. penalty strength, {FOLDS}-fold CV on all {len(d.y)} texts (seed {SEED}; {kind} fits)\n"
    )
    rows = [
        (
            "prior" if key == 0.0 else f"{key:g}",
            f"{r.ce:.4f} ({r.se:.4f})",
            {lowest: "lowest", lam: "chosen"}.get(key, ""),
            f"{r.rho_math:.3f}",
            fmt(r.rho_rest),
        )
        for key, r in by_lam.items()
    ]
    header = ["lam", "held-out weighted CE (SE)", "", "Spearman: word problems", "others"]
    print(markdown_table(header, rows))
    if p.one_se:
        print(
            f"chosen: the largest lam within one SE of the lowest CE "
            f"({by_lam[lowest].ce:.4f} + {by_lam[lowest].se:.4f})"
        )
    else:
        print("chosen: the lam with the lowest CE")


def report_weights(d: Data, p: Procedure, lam: float, w: np.ndarray, residual: float) -> None:
    fitted = weights_dict(w, d.names)
    free = {}
    if p.signs:
        s = p.sample_weights(d.math)
        free = weights_dict(fit(d.x, d.y, s, prior(d.names), lam), d.names)
    print(f"\nweights (lam {lam:g}, all data; KKT residual {residual:.1e})\n")
    rows = []
    for name in (BIAS, *SCORED):
        if name != BIAS and name not in d.names:
            note = "(not in the data)"
        elif name != BIAS and fitted[name] == 0 and p.signs:
            note = "(held at 0 by its sign)"
        else:
            note = ""
        unconstrained = [f"{free[name]:.2f}"] if p.signs else []
        rows.append((name, f"{PRIOR[name]:.2f}", f"{fitted[name]:.2f}", *unconstrained, note))
    print(markdown_table(["", "prior", "fitted", *(["without signs"] * p.signs), ""], rows))


def report_mix(d: Data, result: MixResult, criterion: Criterion) -> None:
    dev = np.flatnonzero(d.dev)
    y, math, domain = d.y[dev], d.math[dev], d.domain[dev]
    print(
        f"\n2. exemplar mix, {FOLDS}-fold CV on the {len(dev)} dev prompts (weights refitted per "
        f"fold; exemplars.yaml votes): {criterion.name}\n"
    )
    grid = [
        (
            m,
            *(
                f"{criterion(result.held[m, n]):.3f}{'*' * ((m, n) == result.best)}"
                for n in NEIGHBOURS
            ),
        )
        for m in EXEMPLAR_WEIGHTS
    ]
    print(markdown_table(["exemplar_weight", *(f"k={n}" for n in NEIGHBOURS)], grid))
    print(
        f"(* best; the hand-set scorer, prior weights with exemplar_weight "
        f"{PRIOR_MIX['exemplar_weight']} and {PRIOR_MIX['neighbours']} neighbours: "
        f"{criterion(result.hand_set):.3f})"
    )
    columns = [
        ("hand-set, features", result.hand_set_features),
        (f"hand-set, mix {PRIOR_MIX['exemplar_weight']}", result.hand_set),
        ("fitted, features", result.held[0.0, NEIGHBOURS[0]]),
    ]
    if result.best[0] != 0:
        columns.append(
            (f"fitted, mix {result.best[0]} k {result.best[1]}", result.held[result.best])
        )
    groups: list[tuple[str, np.ndarray]] = [(n, domain == n) for n in sorted(set(domain[~math]))]
    groups += [
        (f"{WORD_PROBLEM}s", math),
        ("ALL general", ~math),
        ("ALL dev (pooled)", np.ones(len(dev), dtype=bool)),
    ]
    rows = [
        (
            name,
            int(where.sum()),
            f"{y[where].min():.2f}-{y[where].max():.2f}",
            *(fmt(spearman(v[where], y[where])) for _, v in columns),
        )
        for name, where in groups
        if where.any()
    ]
    rows.append(("CRITERION", "", "", *(f"{criterion(v):.2f}" for _, v in columns)))
    print("\nheld-out Spearman by domain (dev prompts; pooled over the folds)\n")
    print(markdown_table(["domain", "n", "difficulty", *(c for c, _ in columns)], rows))


def report_probes(result: MixResult, mix: float) -> None:
    print(
        f"\n3. probe prompts: hand-set (mix {PRIOR_MIX['exemplar_weight']}) and fitted "
        f"(mix {mix}); in brackets the feature part alone (the score without an embedding)\n"
    )
    rows = [
        (probe, f"{by_hand:.2f} ({by_hand_features:.2f})", f"{new:.2f} ({new_features:.2f})")
        for probe, (by_hand, by_hand_features, new, new_features) in result.probes.items()
    ]
    print(markdown_table(["probe", "hand-set", "fitted"], rows))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", choices=sorted(PROCEDURES), default="general")
    ap.add_argument("--write", action="store_true", help="rewrite the profile in scorer.py")
    args = ap.parse_args(argv)
    name: ProfileName = args.profile
    p = PROCEDURES[name]

    print(f"profile {name!r}: {p}\n")
    d = load_data(p.general_prompts)
    report_data(d, p)
    lam, lowest, by_lam = choose_lambda(d, p)
    report_lambda(d, p, lam, lowest, by_lam)

    s = p.sample_weights(d.math)
    w0, box = prior(d.names), p.box(d.names)
    w = fit(d.x, d.y, s, w0, lam, box)
    residual = Problem(design(d.x), d.y, s, w0, lam).kkt_residual(w, box)
    assert residual < 1e-6, f"the fit did not converge (KKT residual {residual:g})"
    fitted = weights_dict(w, d.names)
    # The model fitted here is the scorer's feature part: check it on every text.
    check = ComplexityScorer(ScoringConfig(weights=fitted, exemplar_weight=0))
    by_scorer = np.array([check.score(extract(body(t))).parts[FEATURES_PART] for t in d.texts])
    assert np.allclose(by_scorer, sigmoid(design(d.x) @ w), atol=1e-9), "model != scorer"
    report_weights(d, p, lam, w, residual)

    result, criterion = asyncio.run(choose_mix(d, lam, fitted, p))
    report_mix(d, result, criterion)
    mix, neighbours = result.best
    if mix == 0:  # no vote: the count of voters changes nothing, so the profile's stays
        neighbours = PROFILES[name].neighbours
    print(f"chosen: exemplar_weight {mix}, neighbours {neighbours}")
    report_probes(result, mix)

    refit = Profile(exemplar_weight=mix, neighbours=neighbours, weights=fitted)
    differ = diff_check(name, refit)
    if args.write:
        write_profile(name, refit)
        print(f"\nwrote PROFILES[{name!r}] in {SCORER_PY.relative_to(REPO)}")
        return 0
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())

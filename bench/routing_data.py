"""Labelled prompts for judging a router, and the curves that judge it.

Datasets (each row a prompt with how well the cheap and the strong model did on it):
- GSM8K and MMLU as RouteLLM released them (../shared/datasets/routing/): a prompt column and
  one column per model, True/False for a correct answer. MMLU is one CSV per subject,
  `mmlu_<subject>.csv`; the subject is each row's group.
- Any CSV of that shape (`load_csv`): the model columns are named by the caller and hold
  True/False or numbers (e.g. MT-Bench's 1..10 judge scores). A prompt that is a JSON list is a
  conversation: strings are the user's turns (the assistant's replies between them are not
  known: empty turns stand in for them), objects are messages as they come.
- The team's labelled prompts (`load_team`): gateway/routing/exemplars.yaml,
  bench/data/routing_dev.yaml (math word problems, difficulty `0.1 + 0.1 * steps`, capped at 1)
  and bench/data/routing_dev_general.yaml. They carry a difficulty in [0, 1], not outcomes: the
  strong model counts as right (1) and the cheap one as right with probability 1 - difficulty,
  which makes a curve of the same shape; Spearman with the difficulty is the direct measure.

Curves: kept(n) = quality of the mix with the n lowest-scoring prompts sent cheap / quality of
always-strong, for n = 0..N; a random router's exact expected curve; APGR; the best share at a
kept target; a bootstrap of those.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # importable from anywhere

from check_routing_dev import DEV, DEV_GENERAL, checked
from routing_embeddings import CACHE_DIR as CACHE_DIR  # re-exported: the fitter's cache
from routing_embeddings import EmbedStats as EmbedStats
from routing_embeddings import embed_cached as embed_cached

from gateway.routing.exemplars import load_exemplars
from gateway.testing.harness.stats import percentile
from gateway.wire import last_user_text

REPO = Path(__file__).resolve().parents[1]
ROUTING_DATA = REPO.parent / "shared" / "datasets" / "routing"
DEFAULT_GSM8K = ROUTING_DATA / "gsm8k_responses.csv"
DEFAULT_MMLU = ROUTING_DATA / "mmlu-dev"
CHEAP, STRONG = "mistralai/Mixtral-8x7B-Instruct-v0.1", "gpt-4-1106-preview"
EXEMPLARS, WORD_PROBLEMS, GENERAL = "exemplars", "word problems", "general"  # load_team's groups
TARGET_KEPT = 0.95
GRID = [round(0.05 * i, 2) for i in range(21)]  # every 5 % of cheap share


class DatasetError(Exception):
    """A dataset that cannot be read: missing, or not in the expected shape."""


@dataclass(frozen=True)
class Dataset:
    """Rows of prompts with the cheap and the strong model's quality on each (1/0 for a correct
    answer, or a number such as a judge's score). `difficulty` is set for the team's sets,
    where cheap = 1 - difficulty and strong = 1."""

    name: str
    prompts: list[str]  # as in the file: text, or a JSON list of turns
    groups: np.ndarray  # str: subject (MMLU), file (team), the file's name otherwise
    cheap: np.ndarray  # float
    strong: np.ndarray  # float
    difficulty: np.ndarray | None = None
    conversations: bool = field(default=False)  # prompts may be JSON lists of turns

    def __len__(self) -> int:
        return len(self.prompts)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        """Each prompt as the chat request the gateway would see."""
        return [body_of(p) if self.conversations else body(p) for p in self.prompts]

    def subset(self, rows: np.ndarray, name: str | None = None) -> Dataset:
        """The rows `rows` (indices or a boolean mask), as a dataset of their own."""
        index = np.flatnonzero(rows) if rows.dtype == bool else rows
        return Dataset(
            name or self.name,
            [self.prompts[i] for i in index],
            self.groups[index],
            self.cheap[index],
            self.strong[index],
            None if self.difficulty is None else self.difficulty[index],
            self.conversations,
        )


# ---------------------------------------------------------------- request bodies


def body(prompt: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": prompt}]}


def body_of(prompt: str) -> dict[str, Any]:
    """The request for a prompt that may be a conversation (a JSON list of turns)."""
    turns = _turns(prompt)
    if turns is None:
        return body(prompt)
    if all(isinstance(t, str) for t in turns):
        messages: list[dict[str, Any]] = []
        for i, text in enumerate(turns):
            if i:
                messages.append({"role": "assistant", "content": ""})  # the reply is not known
            messages.append({"role": "user", "content": text})
        return {"messages": messages}
    return {"messages": list(turns)}


def _turns(prompt: str) -> list[Any] | None:
    if not prompt.lstrip().startswith("["):
        return None
    try:
        turns = json.loads(prompt)
    except json.JSONDecodeError:
        return None
    if not isinstance(turns, list) or not turns:
        return None
    if all(isinstance(t, str) for t in turns):
        return turns
    if all(isinstance(t, dict) and "role" in t for t in turns):
        return turns
    return None


def task_text(request: dict[str, Any]) -> str | None:
    """What the router embeds: the last user turn's text (None when the last turn is not one)."""
    return last_user_text(request)


# ---------------------------------------------------------------- loaders


def load_gsm8k(path: Path = DEFAULT_GSM8K) -> Dataset:
    """Named "gsm8k", every row in group "gsm8k"."""
    return load_csv(path, CHEAP, STRONG, name="gsm8k", conversations=False)


def load_mmlu(directory: Path = DEFAULT_MMLU) -> Dataset:
    """Every mmlu_*.csv in `directory`, pooled, named "mmlu"; each row's group is its subject."""
    if not directory.is_dir():
        raise DatasetError(f"{directory}: no such directory (MMLU subjects, mmlu_*.csv)")
    files = sorted(directory.glob("mmlu_*.csv"))
    if not files:
        raise DatasetError(f"{directory}: no mmlu_*.csv file")
    parts = [
        load_csv(f, CHEAP, STRONG, name=f.stem.removeprefix("mmlu_"), conversations=False)
        for f in files
    ]
    return Dataset(
        "mmlu",
        [p for d in parts for p in d.prompts],
        np.concatenate([np.full(len(d), d.name, dtype=object) for d in parts]).astype(str),
        np.concatenate([d.cheap for d in parts]),
        np.concatenate([d.strong for d in parts]),
    )


def load_csv(
    path: Path,
    cheap_column: str = CHEAP,
    strong_column: str = STRONG,
    *,
    prompt_column: str = "prompt",
    group_column: str | None = None,
    name: str | None = None,
    conversations: bool = True,
) -> Dataset:
    """A CSV with a prompt column and a cheap and a strong column (True/False or numbers); each
    row's group is its `group_column` (e.g. MT-Bench's category), else the file's name."""
    if not path.is_file():
        raise DatasetError(f"{path}: no such file")
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        columns = reader.fieldnames or []
        wanted = [prompt_column, cheap_column, strong_column, group_column or prompt_column]
        missing = [c for c in wanted if c not in columns]
        if missing:
            raise DatasetError(
                f"{path}: no column {', '.join(map(repr, missing))}; it has {', '.join(columns)}"
                " (set them with --cheap-column/--strong-column/--group-column)"
            )
        rows = list(reader)
    if not rows:
        raise DatasetError(f"{path}: no rows")
    label = name or path.stem
    return Dataset(
        label,
        [r[prompt_column] for r in rows],
        np.array([r[group_column] for r in rows]) if group_column else np.full(len(rows), label),
        _values(path, rows, cheap_column),
        _values(path, rows, strong_column),
        conversations=conversations,
    )


def _values(path: Path, rows: list[dict[str, str]], column: str) -> np.ndarray:
    out = np.empty(len(rows))
    for i, row in enumerate(rows):
        raw = (row[column] or "").strip()
        if raw.lower() in ("true", "false"):
            out[i] = raw.lower() == "true"
            continue
        try:
            out[i] = float(raw)
        except ValueError:
            raise DatasetError(
                f"{path}, row {i + 2}, column {column!r}: {raw!r} is neither True/False nor a "
                "number"
            ) from None
        if not math.isfinite(out[i]):
            raise DatasetError(f"{path}, row {i + 2}, column {column!r}: {raw!r} is not finite")
    return out


def word_problem_difficulty(steps: int) -> float:
    return min(1.0, 0.1 + 0.1 * steps)


def load_team() -> Dataset:
    """The team's labelled prompts, named "team": exemplars, word problems, general prompts (the
    groups)."""
    exemplars = load_exemplars()
    problems = checked(DEV)
    general = checked(DEV_GENERAL)
    prompts = [e.text for e in exemplars] + [e["text"] for e in (*problems, *general)]
    difficulty = np.array(
        [e.difficulty for e in exemplars]
        + [word_problem_difficulty(len(e["steps"])) for e in problems]
        + [float(e["difficulty"]) for e in general]
    )
    groups = [EXEMPLARS] * len(exemplars) + [WORD_PROBLEMS] * len(problems)
    return Dataset(
        "team",
        prompts,
        np.array(groups + [GENERAL] * len(general)),
        1.0 - difficulty,
        np.ones(len(prompts)),
        difficulty,
    )


# ---------------------------------------------------------------- curves


def kept_curve(scores: np.ndarray, cheap: np.ndarray, strong: np.ndarray) -> np.ndarray:
    """kept[n] for n = 0..N prompts routed cheap, lowest scores first. Within a run of equal
    scores no threshold can choose, so the expected value over their orders is used."""
    order = np.argsort(scores, kind="stable")
    s, c, g = scores[order], cheap[order].astype(float), strong[order].astype(float)
    gain = np.concatenate([[0.0], np.cumsum(c - g)])  # routed-cheap minus always-strong
    # Equal scores: interpolate the gain linearly across each run.
    starts = np.flatnonzero(np.concatenate([[True], s[1:] != s[:-1]]))
    bounds = np.concatenate([starts, [len(s)]])
    n = np.arange(len(s) + 1)
    run_gain = np.interp(n, bounds, gain[bounds])
    kept: np.ndarray = (g.sum() + run_gain) / g.sum()
    return kept


def random_curve(n_total: int, cheap: np.ndarray, strong: np.ndarray) -> np.ndarray:
    """A random router's expected kept(n): exact, since any n prompts are equally likely."""
    share = np.arange(n_total + 1) / n_total
    kept: np.ndarray = (share * cheap.mean() + (1 - share) * strong.mean()) / strong.mean()
    return kept


def best_share(kept: np.ndarray, target: float = TARGET_KEPT) -> float:
    """The largest cheap share whose kept is at least `target`."""
    ok = np.flatnonzero(kept >= target - 1e-12)
    return float(ok.max()) / (len(kept) - 1)


def at(curve: np.ndarray, share: float) -> float:
    return float(curve[round(share * (len(curve) - 1))])


def threshold(scores: np.ndarray, share: float) -> float:
    """The score at or below which `share` of the prompts fall (-inf for none)."""
    n = round(share * len(scores))
    return float(np.sort(scores)[n - 1]) if n else float("-inf")


def apgr(curve: np.ndarray, cheap: np.ndarray, strong: np.ndarray) -> float:
    """Average performance gap recovered (RouteLLM's summary): 0.5 for a random router. NaN
    when the two models do equally well (no gap to recover)."""
    gap = strong.mean() - cheap.mean()
    if abs(gap) < 1e-12:
        return float("nan")
    pgr = (curve * strong.mean() - cheap.mean()) / gap
    return float(np.trapezoid(pgr, dx=1 / (len(curve) - 1)))


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Rank correlation, ties sharing their average rank; NaN when either is constant."""
    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    return float(np.corrcoef(_ranks(a), _ranks(b))[0, 1])


def _ranks(v: np.ndarray) -> np.ndarray:
    _, inverse, counts = np.unique(v, return_inverse=True, return_counts=True)
    upper = np.cumsum(counts)
    average: np.ndarray = (upper - (counts - 1) / 2)[inverse]
    return average


def interval(values: list[float]) -> tuple[float, float]:
    """The central 95 % of `values`."""
    return percentile(values, 2.5), percentile(values, 97.5)


def bootstrap(
    scores: np.ndarray, cheap: np.ndarray, strong: np.ndarray, rounds: int, seed: int = 0
) -> dict[str, tuple[float, float]]:
    """95 % intervals, over resampled prompts, of the best share at 95 % kept, APGR, kept at
    30 % cheap and the share of all cut points where the router is above random."""
    rng = np.random.default_rng(seed)
    n = len(scores)
    samples: dict[str, list[float]] = {"best_share_95": [], "apgr": [], "kept_at_30": []}
    samples["share_of_points_above_random"] = []
    for _ in range(rounds):
        idx = rng.integers(0, n, n)
        c, g = cheap[idx], strong[idx]
        if g.sum() <= 0:
            continue
        curve = kept_curve(scores[idx], c, g)
        rand = random_curve(n, c, g)
        samples["best_share_95"].append(best_share(curve))
        samples["apgr"].append(apgr(curve, c, g))
        samples["kept_at_30"].append(at(curve, 0.30))
        samples["share_of_points_above_random"].append(float(np.mean(curve[1:-1] > rand[1:-1])))
    return {k: interval([x for x in v if not math.isnan(x)]) for k, v in samples.items() if v}

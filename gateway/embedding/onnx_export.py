"""Export sentence-transformers models to ONNX: once, locally, then reuse.

For models other than the shipped MiniLM (whose files come with the gateway, see shipped.py)
and for scripts/export_minilm.py, which regenerates those. The export runs from the model
already on disk (nothing is downloaded) and is cached under a directory keyed by the model's
files, so later processes skip both the export and the slow `sentence_transformers` import.

Needs the `sentence-transformers` extra (torch, onnx); callers fall back to torch without onnx.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any, Literal

import numpy as np

from gateway.embedding.onnx_runner import OnnxRunner

log = logging.getLogger(__name__)

# Bump when the exported graph or its files change, so stale caches are not reused.
RECIPE = "st-onnx-v1"
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# Texts that exercise padding and truncation when checking the export against torch.
_PROBES = [
    "How do I reset my password?",
    "a",
    "Explain, in two or three sentences, why the sky looks blue during the day but red at "
    "sunset, and whether the same happens on Mars. " * 12,
    "Ünïcödé façade — naïve café, 東京 2024!",
]


def st_preprocess(model: Any, texts: list[str]) -> dict[str, Any]:
    """Tokenize for a SentenceTransformer: `preprocess` since v6, `tokenize` before."""
    prep = getattr(model, "preprocess", None) or model.tokenize
    return prep(texts)  # type: ignore[no-any-return]


def st_dim(model: Any) -> int:
    get = getattr(model, "get_embedding_dimension", None)
    return int((get or model.get_sentence_embedding_dimension)() or 0)


def default_cache_dir() -> Path:
    env = os.environ.get("GATEWAY_EMBEDDER_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "semantic-gateway" / "embedders"


def _fingerprint(model_ref: str, model_dir: Path | None) -> str:
    """Key the cache on the model files (path, size, mtime), not only on the model's name."""
    parts = [RECIPE, model_ref]
    if model_dir is not None and model_dir.is_dir():
        for f in sorted(model_dir.rglob("*")):
            if f.is_file() and f.suffix in {".safetensors", ".bin", ".json", ".txt", ".model"}:
                st = f.stat()
                parts.append(f"{f.relative_to(model_dir)}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def artifacts_dir(model_ref: str, model_dir: Path | None, cache_dir: Path) -> Path:
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in model_ref.rsplit("/", 1)[-1])
    return cache_dir / f"{slug[:60]}-{_fingerprint(model_ref, model_dir)}"


# The graphs made from one export: fp32 as exported; "int8", the opt-in quantized model (FFN
# down-projections kept fp32, closest to fp32); "int8-all", every MatMul int8 (about 1.5x
# faster again): the quick stage of a two-stage embedder, whose close calls fp32 settles.
QUANTIZED = {"int8": "model.int8.onnx", "int8-all": "model.int8-all.onnx"}
Precision = Literal["fp32", "int8", "int8-all"]


def ensure_onnx(model_ref: str, load_path: str, cache_dir: Path, precision: Precision) -> Path:
    """Return the path of the ONNX graph for the model, exporting (and quantizing) if missing."""
    local = Path(load_path)
    target = artifacts_dir(model_ref, local if local.is_dir() else None, cache_dir)
    if not (target / "model.onnx").exists() and not _writable(cache_dir):
        # e.g. a read-only home in a container: export per machine rather than fall back to torch
        fallback = Path(tempfile.gettempdir()) / "semantic-gateway-embedders"
        log.warning("embedder cache %s is not writable; using %s", cache_dir, fallback)
        target = artifacts_dir(model_ref, local if local.is_dir() else None, fallback)
    if not (target / "model.onnx").exists():
        export(load_path, target)
    if precision == "fp32":
        return target / "model.onnx"
    qpath = target / QUANTIZED[precision]
    if not qpath.exists():
        quantize(target / "model.onnx", qpath, every_matmul=precision == "int8-all")
    return qpath


def _writable(directory: Path) -> bool:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(directory, os.W_OK)


def export(load_path: str, target: Path) -> None:
    """Export the model at `load_path` into the directory `target` (model.onnx, tokenizer.json,
    meta.json), checked against torch; another process's finished export is kept."""
    import torch
    from sentence_transformers import SentenceTransformer

    log.info("exporting %s to ONNX under %s (once per model)", load_path, target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer and legacy-exporter warnings are expected
        # Eager attention exports to the plain MatMul/Softmax pattern that ONNX Runtime fuses.
        model = SentenceTransformer(
            load_path, device="cpu", model_kwargs={"attn_implementation": "eager"}
        ).eval()
        features = st_preprocess(model, ["hello world", "a longer sentence for the shapes"])
        names = [n for n in INPUTS if n in features]
        if names[:2] != ["input_ids", "attention_mask"]:
            raise RuntimeError(f"unsupported model inputs for ONNX export: {sorted(features)}")

        # The ignores hold where torch is not installed (the test install: mypy sees Any).
        class _Wrapper(torch.nn.Module):  # type: ignore[misc, unused-ignore]
            def __init__(self) -> None:
                super().__init__()
                self.st = model

            def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
                feats: dict[str, Any] = dict(zip(names, tensors, strict=True))
                feats["modality"] = "text"
                return self.st(feats)["sentence_embedding"]  # type: ignore[no-any-return, unused-ignore]

        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".export-", dir=target.parent))
        try:
            axes = {n: {0: "batch", 1: "seq"} for n in names}
            axes["sentence_embedding"] = {0: "batch"}
            with torch.inference_mode():
                torch.onnx.export(
                    _Wrapper().eval(),
                    tuple(features[n] for n in names),
                    str(tmp / "model.onnx"),
                    dynamo=False,
                    input_names=names,
                    output_names=["sentence_embedding"],
                    dynamic_axes=axes,
                    opset_version=17,
                )
            tok = model.tokenizer
            backend = tok.backend_tokenizer
            backend.no_truncation()
            backend.enable_padding(pad_id=tok.pad_token_id or 0, pad_token=tok.pad_token or "[PAD]")
            backend.save(str(tmp / "tokenizer.json"))
            meta = {
                "recipe": RECIPE,
                "source": load_path,
                "inputs": names,
                "dim": st_dim(model),
                "max_seq_length": int(model.max_seq_length or 512),
            }
            (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
            _check_export(model, tmp)
            try:  # another process may have finished the same export first: keep theirs
                os.rename(tmp, target)
            except OSError:
                if not (target / "model.onnx").exists():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _check_export(model: Any, tmp: Path) -> None:
    """Refuse an export whose tokenizer or graph disagrees with the torch model."""
    import torch

    runner = OnnxRunner(tmp / "model.onnx", max_seq_length=model.max_seq_length, threads=1)
    with torch.inference_mode():
        feats = st_preprocess(model, _PROBES)
        want = torch.nn.functional.normalize(model(feats)["sentence_embedding"], dim=-1).numpy()
    want_ids = [
        row[mask.bool()].tolist()
        for row, mask in zip(feats["input_ids"], feats["attention_mask"], strict=True)
    ]
    if [e.ids for e in runner.tokenizer.encode_batch(_PROBES)] != want_ids:
        raise RuntimeError("ONNX export check failed: tokenization differs from the model's")
    got = runner(_PROBES)
    got /= np.linalg.norm(got, axis=1, keepdims=True)
    err = float(np.abs(got - want).max())
    if err > 1e-4:
        raise RuntimeError(f"ONNX export check failed: max abs difference {err:.2e}")


def ffn_output_matmuls(path: Path) -> list[str]:
    """BERT FFN down-projections: their GELU inputs have the widest range, so int8 hurts most."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    return [
        n.name
        for n in graph.node
        if n.op_type == "MatMul"
        and n.name.endswith("/output/dense/MatMul")
        and "/attention/" not in n.name
    ]


def quantize(src: Path, dst: Path, *, every_matmul: bool) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    log.info("quantizing %s to %s", src, dst.name)
    fd, tmp = tempfile.mkstemp(prefix=".quant-", suffix=".onnx", dir=dst.parent)
    os.close(fd)
    try:
        # Per-channel weights and fp32 FFN down-projections: measured to cut the cosine error
        # vs fp32 about 4x (max 0.09 -> 0.02) for a small loss of speed.
        quantize_dynamic(
            src,
            tmp,
            weight_type=QuantType.QInt8,
            per_channel=True,
            nodes_to_exclude=[] if every_matmul else ffn_output_matmuls(src),
        )
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def store_tables_as_fp16(src: Path, dst: Path) -> list[str]:
    """Write `src` with its lookup tables (initializers only Gather reads: the token and
    position embeddings) stored as fp16 and cast back to fp32 when the session loads.

    Nearly halves MiniLM's file (the token table is 30522 x 384) while every weight the model
    multiplies by stays fp32: a row's rounding (2^-11 relative) moves an embedding by less than
    1e-4. Returns the names of the tables converted."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(src))
    graph = model.graph
    readers: dict[str, set[str]] = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            readers.setdefault(name, set()).add(node.op_type if i == 0 else f"{node.op_type}:{i}")
    tables = [
        t
        for t in graph.initializer
        if t.data_type == onnx.TensorProto.FLOAT
        and readers.get(t.name) == {"Gather"}
        and int(np.prod(t.dims)) > 1024
    ]
    casts = []
    for table in tables:
        half = numpy_helper.from_array(
            numpy_helper.to_array(table).astype(np.float16), f"{table.name}.fp16"
        )
        graph.initializer.remove(table)
        graph.initializer.append(half)
        casts.append(
            helper.make_node(
                "Cast",
                [half.name],
                [table.name],
                to=onnx.TensorProto.FLOAT,
                name=f"{table.name}.cast",
            )
        )
    nodes = [*casts, *graph.node]
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.checker.check_model(model)
    onnx.save(model, str(dst))
    return [t.name for t in tables]

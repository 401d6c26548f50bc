"""Run a sentence-embedding ONNX graph: its own fast tokenizer, then ONNX Runtime.

Needs only `onnxruntime`, `tokenizers` and numpy: what the shipped MiniLM and every exported
model run on, with no torch in the process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


class OnnxRunner:
    """Tokenize with the model's own fast tokenizer and run the graph. Nothing changes per
    call: two threads may call it at once (a batcher's two lanes; ONNX Runtime allows it)."""

    def __init__(self, path: Path, *, max_seq_length: int, threads: int, chunk: int = 8) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(path.parent / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_seq_length)
        self.pad_id = int((self.tokenizer.padding or {}).get("pad_id", 0))
        self.tokenizer.no_padding()  # padded per length-sorted chunk instead, in __call__
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Spinning threads burn a core waiting for work; on a small shared box that slows the
        # event loop and the other requests more than it speeds up this one.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.log_severity_level = 3
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.chunk = chunk
        probe = self._run(self.tokenizer.encode_batch(["dimension probe"]))
        # A sentence embedding's width; 0 for a graph with one number per input (a judge's).
        self.dim = int(probe.shape[1]) if probe.ndim == 2 else 0

    def __call__(self, texts: list[str] | list[tuple[str, str]]) -> np.ndarray:
        """One row per text (or per pair of texts, read together: `[CLS] a [SEP] b [SEP]`)."""
        enc = self.tokenizer.encode_batch(texts)
        if len(enc) == 1:
            return self._run(enc)
        # Sorted by length, in chunks of 8: each chunk pads only to its own longest text
        # (padding is pure waste in a compute-bound model, and fp32 results do not depend on it,
        # checked to ~1e-7), and past 8 texts the activations outgrow the core's cache. CPU per
        # QQP question, 256 of them: int8 1.42 ms in sorted eights, 2.69 in unsorted sixteens,
        # 2.07 in sorted 32s; fp32 3.01, 5.26 and 3.83 (bench/cache_two_stage.py's machine).
        order = sorted(range(len(enc)), key=lambda i: len(enc[i].ids))
        out = np.empty((len(enc), self.dim) if self.dim else len(enc), dtype=np.float32)
        for start in range(0, len(order), self.chunk):
            idx = order[start : start + self.chunk]
            out[idx] = self._run([enc[i] for i in idx])
        return out

    def _run(self, enc: list[Any]) -> np.ndarray:
        width = max(len(e.ids) for e in enc)
        ids = np.full((len(enc), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(enc), width), dtype=np.int64)
        types = np.zeros((len(enc), width), dtype=np.int64)
        for row, e in enumerate(enc):
            n = len(e.ids)
            ids[row, :n], mask[row, :n], types[row, :n] = e.ids, 1, e.type_ids
        cols = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        out = self.session.run(None, {name: cols[name] for name in self.inputs})[0]
        return np.asarray(out, dtype=np.float32)

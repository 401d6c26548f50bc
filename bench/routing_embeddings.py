"""Embeddings of benchmark prompts, cached on disk: embedding the ~6,900 routing prompts with
MiniLM takes about two minutes on 2 cores, and every run of routing_quality.py or the fitter
needs the same vectors.

A cache file holds one embedder's vectors for one list of texts, named by a hash of the
embedder (its name and dimension) and the texts, so a changed prompt or another embedder never
reads stale vectors. Default directory: ~/.cache/gateway-bench; delete it to re-embed.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gateway.embedding.embedder import Embedder

CACHE_DIR = Path.home() / ".cache" / "gateway-bench"
CHUNK = 256  # texts per embed_many call: bounds the memory of one batch of long prompts


@dataclass
class EmbedStats:
    """What `embed_cached` did, summed over calls: for a report's "embedding took" line."""

    seconds: float = 0.0  # spent embedding (reads from the cache cost ~0)
    embedded: int = 0  # texts embedded
    cached: int = 0  # texts read from the cache


def cache_key(embedder: Embedder, texts: list[str]) -> str:
    digest = hashlib.sha256(f"{embedder.name}\x00{embedder.dim}".encode())
    for text in texts:
        encoded = text.encode()
        digest.update(len(encoded).to_bytes(8, "little"))
        digest.update(encoded)
    return digest.hexdigest()


def cache_path(directory: Path, embedder: Embedder, texts: list[str]) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in embedder.name)
    return directory / f"{safe}-{len(texts)}-{cache_key(embedder, texts)[:24]}.npy"


async def embed_cached(
    embedder: Embedder,
    texts: list[str],
    cache_dir: Path | None = None,
    *,
    stats: EmbedStats | None = None,
) -> np.ndarray:
    """`texts` embedded by the started `embedder` (float32 rows, L2-normalized), read from the
    cache in `cache_dir` (default CACHE_DIR) when it holds them, else embedded and stored."""
    path = cache_path(cache_dir or CACHE_DIR, embedder, texts)
    if path.is_file():
        cached = np.load(path)
        if cached.shape == (len(texts), embedder.dim):
            if stats is not None:
                stats.cached += len(texts)
            return cached
    started = time.perf_counter()
    chunks = [await embedder.embed_many(texts[i : i + CHUNK]) for i in range(0, len(texts), CHUNK)]
    vectors = np.zeros((0, embedder.dim), dtype=np.float32)
    if chunks:
        vectors = np.ascontiguousarray(np.concatenate(chunks), dtype=np.float32)
    if stats is not None:
        stats.seconds += time.perf_counter() - started
        stats.embedded += len(texts)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npy")
    np.save(partial, vectors)
    os.replace(partial, path)  # a reader never sees half a file
    return vectors

"""bench/routing_embeddings.py: vectors are read back from the cache, never stale ones."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from routing_embeddings import EmbedStats, embed_cached

from gateway.embedding.embedder import HashEmbedder


async def test_a_second_call_reads_the_vectors_back(tmp_path: Path) -> None:
    embedder, stats = HashEmbedder(), EmbedStats()
    first = await embed_cached(embedder, ["one", "two"], tmp_path, stats=stats)
    again = await embed_cached(embedder, ["one", "two"], tmp_path, stats=stats)
    assert np.array_equal(first, again) and first.shape == (2, embedder.dim)
    assert (stats.embedded, stats.cached) == (2, 2)
    assert len(list(tmp_path.glob("*.npy"))) == 1


async def test_other_texts_or_another_embedder_are_embedded_afresh(tmp_path: Path) -> None:
    stats = EmbedStats()
    await embed_cached(HashEmbedder(), ["one", "two"], tmp_path, stats=stats)
    await embed_cached(HashEmbedder(), ["one", "three"], tmp_path, stats=stats)
    await embed_cached(HashEmbedder(), ["onetwo"], tmp_path, stats=stats)
    wider = await embed_cached(HashEmbedder(dim=32), ["one", "two"], tmp_path, stats=stats)
    assert wider.shape == (2, 32)
    assert stats.cached == 0 and stats.embedded == 7
    assert len(list(tmp_path.glob("*.npy"))) == 4

import numpy as np
import pytest

from gateway.cache.index import FlatIndex, ScopedIndex

RNG = np.random.default_rng(7)


def unit(n: int, dim: int = 32) -> np.ndarray:
    v = RNG.normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_flat_search_is_exact_and_removal_keeps_the_rest() -> None:
    index = FlatIndex(32)
    vectors = unit(100)
    for i, v in enumerate(vectors):
        index.add(i, v)
    assert index.search(vectors[42], 1) == [(42, pytest.approx(1.0, abs=1e-5))]
    index.remove(42)
    index.remove(0)
    assert len(index) == 98
    assert 42 not in [i for i, _ in index.search(vectors[42], 5)]
    assert index.search(vectors[99], 1)[0][0] == 99  # the row moved into a hole is found


def test_scopes_never_see_each_other() -> None:
    index = ScopedIndex(32, approximate_above=1000)
    v = unit(1)[0]
    index.add("tenant-a", 1, v)
    assert index.search("tenant-b", v) == []
    assert index.search("tenant-a", v)[0][0] == 1


async def test_large_scope_moves_to_hnsw_and_keeps_recall() -> None:
    index = ScopedIndex(32, approximate_above=300)
    vectors = unit(2000)
    for i, v in enumerate(vectors):
        index.add("s", i, v)
    await index.wait_for_builds()
    assert type(index._scopes["s"]).__name__ == "HnswIndex"
    # Near-duplicates of stored vectors (cosine ~0.97) must find their original.
    noisy = vectors[:200] + 0.25 * unit(200)
    noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
    found = sum(index.search("s", q, 1)[0][0] == i for i, q in enumerate(noisy))
    assert found >= 198


async def test_removals_in_hnsw_are_hidden_and_compacted() -> None:
    index = ScopedIndex(32, approximate_above=50)
    vectors = unit(200)
    for i, v in enumerate(vectors):
        index.add("s", i, v)
    await index.wait_for_builds()
    for i in range(100):
        index.remove(i)
    assert index.search("s", vectors[5], 1)[0][0] != 5
    index.add("s", 500, vectors[5])  # an add triggers the compacting rebuild
    await index.wait_for_builds()
    assert index.search("s", vectors[5], 1)[0][0] == 500
    assert index.scopes() == {"s": 101}

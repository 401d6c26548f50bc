"""Cache entries for store tests: unit vectors from a seed, entries numbered within a scope."""

from __future__ import annotations

import time

import numpy as np

from gateway.cache.store import CacheEntry

DIM = 16


def vector(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def entry(n: int, scope: str = "s", tenant: str = "t", ttl: float = 3600) -> CacheEntry:
    return CacheEntry(
        scope=scope,
        exact_key=f"{scope}:{n}",
        tenant=tenant,
        model="m",
        text=f"question {n}",
        response={"answer": n},
        expires_at=time.time() + ttl,
        vector=vector(n),
        embedder="e",
    )

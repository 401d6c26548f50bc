"""What every knowledge base gives the pipeline: passages for a query, best first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True, slots=True)
class Passage:
    """One retrieved chunk. `score` is a similarity in [-1, 1] (cosine for embedded bases)."""

    text: str
    score: float
    source: str  # file path relative to the ingested folder, or the retriever's document id
    title: str | None = None


class RetrievalFailed(Exception):
    """Retrieval could not answer (error, timeout, open breaker): the request goes to level 3."""


class KnowledgeBase(Protocol):
    name: str

    async def search(self, query: str, vector: np.ndarray | None, top_k: int) -> list[Passage]:
        """Passages best first. `vector` is the query's embedding when the request already has
        one (the embedded base reuses it, the HTTP one ignores it). Raises RetrievalFailed."""
        ...

    async def start(self) -> None:
        """Open files or sessions; must not block the loop for long."""
        ...

    async def close(self) -> None: ...

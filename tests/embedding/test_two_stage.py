"""Two-stage embedding: quick vectors decide the clear cases, the exact model the close calls.

Scripted embedders give each text a chosen cosine to the stored question, for the quick and the
exact model apart, so each case sits where the test wants it relative to the threshold (0.94)
and the margins (0.06 below, 0.03 above)."""

from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from gateway.cache.embedded_store import EmbeddedStore
from gateway.cache.service import SemanticCache
from gateway.config import CachePolicy, ModelRoute
from gateway.context import RequestContext
from gateway.embedding.two_stage import Margins, TwoStageEmbedder
from gateway.wire import chat_completion, usage

DIM = 4
STORED = "How do I reset my password?"
THRESHOLD = 0.94
MARGINS = Margins(below=0.06, above=0.03)


def at_cosine(cosine: float) -> np.ndarray:
    """A unit vector with this cosine to the stored question's (the first axis)."""
    return np.array([cosine, np.sqrt(1 - cosine**2), 0, 0], dtype=np.float32)


class Scripted:
    """Texts get the vector at their scripted cosine; counts the texts it embeds."""

    dim, window_tokens, max_chars = DIM, 128, 768

    def __init__(self, name: str, cosines: dict[str, float], fail: bool = False) -> None:
        self.name, self.cosines, self.fail = name, cosines, fail
        self.embedded: list[str] = []
        self.closed = False

    async def start(self) -> None:
        if self.fail:
            raise RuntimeError("no quantizer here")

    async def embed(self, text: str) -> np.ndarray:
        self.embedded.append(text)
        return at_cosine(self.cosines.get(text, 0.0))

    async def embed_many(self, texts: list[str]) -> np.ndarray:
        return np.stack([await self.embed(t) for t in texts])

    async def fits(self, text: str) -> bool:
        return True

    async def close(self) -> None:
        self.closed = True


# question: (quick cosine, exact cosine) to the stored one
CASES = {
    STORED: (1.0, 1.0),
    "How can I reset my password?": (0.92, 0.95),  # close call, exact says hit
    "How could I reset my password?": (0.955, 0.93),  # close call, exact says miss
    "How should I reset my password?": (0.98, 0.975),  # clearly over: no exact check
    "How would I reset my password?": (0.85, 0.86),  # clearly under: no exact check
}
ANSWER = chat_completion(
    "m", {"role": "assistant", "content": "Use the link."}, "stop", usage(9, 3)
)


def embedders(quick_fails: bool = False) -> tuple[Scripted, Scripted]:
    quick = Scripted("minilm", {t: q for t, (q, _) in CASES.items()}, fail=quick_fails)
    exact = Scripted("minilm", {t: e for t, (_, e) in CASES.items()})
    return quick, exact


def _route() -> ModelRoute:
    policy = CachePolicy(enabled=True, similarity_threshold=THRESHOLD)
    return ModelRoute("m", "p", "m", "chat", policy)


def _body(text: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}]}


async def ask(cache: SemanticCache, text: str) -> RequestContext:
    ctx = RequestContext(request_id="r", endpoint="chat", tenant="t")
    plan = cache.plan(ctx, _route(), _body(text), "default")
    assert plan is not None
    if await cache.lookup(ctx, plan) is None:
        cache.keep(ctx, plan, ANSWER)
        await cache.flush()
    return ctx


async def cache_with(quick: Scripted, exact: Scripted) -> SemanticCache:
    two_stage = TwoStageEmbedder(quick, exact, MARGINS)  # type: ignore[arg-type]
    cache = SemanticCache(EmbeddedStore(None, 100, 1000), two_stage)
    await cache.start()
    await cache.wait_ready()
    await two_stage.wait_quick()
    await ask(cache, STORED)
    return cache


@pytest.fixture
async def staged() -> AsyncIterator[tuple[SemanticCache, Scripted, Scripted]]:
    quick, exact = embedders()
    cache = await cache_with(quick, exact)
    yield cache, quick, exact
    await cache.close()


async def test_a_close_call_below_the_threshold_is_a_hit_when_the_exact_model_says_so(
    staged: tuple[SemanticCache, Scripted, Scripted],
) -> None:
    cache, _, exact = staged
    ctx = await ask(cache, "How can I reset my password?")
    assert ctx.cache_result == "hit-semantic" and ctx.cache_exact_checks == 1
    assert ctx.cache_similarity == pytest.approx(0.95, abs=1e-5)  # the exact cosine
    assert exact.embedded == ["How can I reset my password?", STORED]


async def test_a_close_call_over_the_threshold_is_a_miss_when_the_exact_model_says_so(
    staged: tuple[SemanticCache, Scripted, Scripted],
) -> None:
    cache, _, _ = staged
    ctx = await ask(cache, "How could I reset my password?")
    assert ctx.cache_result == "miss"
    assert ctx.cache_similarity == pytest.approx(0.93, abs=1e-5)


async def test_clear_cases_are_decided_by_the_quick_vectors_alone(
    staged: tuple[SemanticCache, Scripted, Scripted],
) -> None:
    cache, quick, exact = staged
    assert isinstance(cache.embedder, TwoStageEmbedder) and cache.embedder.quick_state == "on"
    assert (await ask(cache, "How should I reset my password?")).cache_result == "hit-semantic"
    far = await ask(cache, "How would I reset my password?")
    assert far.cache_result == "miss" and far.cache_exact_checks == 0
    assert far.cache_similarity == pytest.approx(0.85, abs=1e-5)
    assert exact.embedded == []
    assert quick.embedded[-1] == "How would I reset my password?"


async def test_each_text_is_embedded_exactly_once_for_its_close_calls(
    staged: tuple[SemanticCache, Scripted, Scripted],
) -> None:
    cache, _, exact = staged
    await ask(cache, "How could I reset my password?")
    await ask(cache, "How can I reset my password?")
    await ask(cache, "How can I reset my password?")  # asked again: nothing new to embed
    assert exact.embedded == [
        "How could I reset my password?",
        STORED,
        "How can I reset my password?",
    ]


async def test_without_the_quick_model_the_exact_one_embeds_everything() -> None:
    quick, exact = embedders(quick_fails=True)
    cache = await cache_with(quick, exact)
    try:
        assert isinstance(cache.embedder, TwoStageEmbedder)
        assert cache.embedder.margins == Margins(0.0, 0.0)
        assert cache.embedder.quick_state == "failed" and quick.closed
        # the exact cosines decide, with no second look
        assert (await ask(cache, "How can I reset my password?")).cache_result == "hit-semantic"
        assert (await ask(cache, "How could I reset my password?")).cache_result == "miss"
        assert exact.embedded == [  # the stored question once a lookup had it to compare
            "How can I reset my password?",
            STORED,
            "How could I reset my password?",
        ]
    finally:
        await cache.close()

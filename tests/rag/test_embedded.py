"""The embedded knowledge base: search mechanics with the hash embedder, versions on disk,
and switching to a re-ingested version while searches go on."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from gateway.config import KnowledgeBaseConfig
from gateway.embedding.embedder import HashEmbedder
from gateway.rag import embedded
from gateway.rag.base import KnowledgeBase, Passage, RetrievalFailed
from gateway.rag.embedded import CURRENT, EmbeddedKnowledgeBase, kb_path, read_current
from gateway.rag.ingest import ingest

DOCS = {
    "refunds.md": "# Refunds\n\nRefunds are paid back to the original card within 30 days.",
    "shipping.txt": "Parcels ship from the warehouse in Rotterdam by courier.",
    "api/limits.html": "<title>Rate limits</title><p>Each API key may send 60 requests.</p>",
}
CONFIG = KnowledgeBaseConfig(chunk_chars=200, overlap_chars=20)


def write_docs(folder: Path, docs: dict[str, str]) -> Path:
    for name, text in docs.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


async def build(tmp_path: Path, docs: dict[str, str], embedder: HashEmbedder) -> Path:
    source = write_docs(tmp_path / f"src-{time.monotonic_ns()}", docs)
    base = tmp_path / "kb"
    await ingest("docs", CONFIG, base, source, embedder, progress=False)
    return base


@pytest.fixture
def embedder() -> HashEmbedder:
    return HashEmbedder(dim=128)


@pytest.fixture
async def kb(tmp_path: Path, embedder: HashEmbedder) -> AsyncIterator[EmbeddedKnowledgeBase]:
    base = await build(tmp_path, DOCS, embedder)
    kb = EmbeddedKnowledgeBase("docs", base, embedder, check_interval=0)
    await kb.start()
    yield kb
    await kb.close()


async def wait_for_version(kb: EmbeddedKnowledgeBase, version: str) -> None:
    deadline = time.monotonic() + 10
    while kb.version != version:
        assert time.monotonic() < deadline, f"still on {kb.version}, want {version}"
        await kb.search("anything", None, 1)
        await asyncio.sleep(0.01)


def test_it_is_a_knowledge_base(embedder: HashEmbedder, tmp_path: Path) -> None:
    base: KnowledgeBase = EmbeddedKnowledgeBase("docs", tmp_path, embedder)
    assert base.name == "docs"


def test_kb_path_is_the_configured_path_or_data_kb_name() -> None:
    assert kb_path("docs", KnowledgeBaseConfig()) == Path("data/kb/docs")
    assert kb_path("docs", KnowledgeBaseConfig(path="/srv/kb")) == Path("/srv/kb")


async def test_search_finds_the_chunk_about_the_query_best_first(
    kb: EmbeddedKnowledgeBase,
) -> None:
    passages = await kb.search("how many requests may an API key send", None, 3)
    assert len(passages) == 3
    assert passages[0] == Passage(
        "Each API key may send 60 requests.", passages[0].score, "api/limits.html", "Rate limits"
    )
    scores = [p.score for p in passages]
    assert scores == sorted(scores, reverse=True)
    assert all(-1 <= s <= 1 for s in scores)
    refund = (await kb.search("refunds paid back to the original card", None, 1))[0]
    assert (refund.source, refund.title) == ("refunds.md", "Refunds")
    assert refund.score > 0.5


async def test_a_given_vector_is_used_instead_of_embedding_the_query(
    kb: EmbeddedKnowledgeBase, embedder: HashEmbedder
) -> None:
    vector = embedder.vector("Parcels ship from the warehouse in Rotterdam")
    passages = await kb.search("about refunds", vector, 1)
    assert passages[0].source == "shipping.txt"


async def test_top_k_larger_than_the_base_returns_everything(kb: EmbeddedKnowledgeBase) -> None:
    assert len(await kb.search("x", None, 50)) == 3


async def test_a_base_that_was_never_ingested_fails_searches_with_what_to_do(
    tmp_path: Path, embedder: HashEmbedder
) -> None:
    kb = EmbeddedKnowledgeBase("manuals", tmp_path / "nothing-here", embedder)
    await kb.start()  # does not raise
    with pytest.raises(RetrievalFailed) as err:
        await kb.search("q", None, 4)
    assert str(err.value) == (
        "knowledge base 'manuals' has not been ingested: run `gateway kb ingest manuals PATH`"
    )
    await kb.close()


async def test_a_base_ingested_after_start_is_picked_up(
    tmp_path: Path, embedder: HashEmbedder
) -> None:
    kb = EmbeddedKnowledgeBase("docs", tmp_path / "kb", embedder, check_interval=0)
    await kb.start()
    with pytest.raises(RetrievalFailed, match="has not been ingested"):
        await kb.search("q", None, 1)
    await build(tmp_path, DOCS, embedder)
    assert len(await kb.search("refunds", None, 1)) == 1  # waits for the first load
    await kb.close()


@pytest.mark.parametrize(
    "other", [HashEmbedder(dim=64), HashEmbedder(dim=128, ngram=4)], ids=["dim", "name"]
)
async def test_an_index_built_by_another_embedder_asks_for_a_reingest(
    tmp_path: Path, embedder: HashEmbedder, other: HashEmbedder
) -> None:
    if other.dim == embedder.dim:
        other.name = "another-model"
    base = await build(tmp_path, DOCS, embedder)
    kb = EmbeddedKnowledgeBase("docs", base, other)
    await kb.start()
    with pytest.raises(RetrievalFailed) as err:
        await kb.search("refunds", None, 1)
    assert "ingested with embedder hash-128 (dim 128)" in str(err.value)
    assert "re-ingest it with `gateway kb ingest docs PATH`" in str(err.value)
    with pytest.raises(RetrievalFailed, match="re-ingest"):  # a wrong-sized vector, too
        await kb.search("refunds", np.ones(64, dtype=np.float32), 1)
    await kb.close()


async def test_a_broken_version_fails_searches_without_raising_on_start(
    tmp_path: Path, embedder: HashEmbedder
) -> None:
    base = await build(tmp_path, DOCS, embedder)
    version = read_current(base)
    assert version is not None
    (base / version / "chunks.jsonl").write_text('{"text": "only one row"}\n')
    kb = EmbeddedKnowledgeBase("docs", base, embedder)
    await kb.start()
    with pytest.raises(RetrievalFailed, match=r"could not be loaded \(version .* is inconsistent"):
        await kb.search("q", None, 1)
    await kb.close()


async def test_a_reingest_is_picked_up_by_an_open_base(
    kb: EmbeddedKnowledgeBase, tmp_path: Path, embedder: HashEmbedder
) -> None:
    first = kb.version
    await build(tmp_path, {"new.txt": "Gift cards never expire."}, embedder)
    new = read_current(tmp_path / "kb")
    assert new is not None and new != first
    await wait_for_version(kb, new)
    passages = await kb.search("gift cards", None, 5)
    assert [p.source for p in passages] == ["new.txt"]


async def test_current_is_stat_at_most_once_per_interval(
    tmp_path: Path, embedder: HashEmbedder
) -> None:
    base = await build(tmp_path, DOCS, embedder)
    kb = EmbeddedKnowledgeBase("docs", base, embedder, check_interval=0.3)
    await kb.start()
    first = kb.version
    await build(tmp_path, {"new.txt": "Gift cards never expire."}, embedder)
    for _ in range(20):  # within the interval: still the old version, never an error
        assert len(await kb.search("refunds", None, 3)) == 3
    assert kb.version == first
    await asyncio.sleep(0.35)
    await wait_for_version(kb, read_current(base) or "")
    await kb.close()


async def test_a_broken_new_version_keeps_the_old_one_in_force(
    kb: EmbeddedKnowledgeBase, tmp_path: Path
) -> None:
    first = kb.version
    (tmp_path / "kb" / "v-broken").mkdir()
    (tmp_path / "kb" / CURRENT).write_text("v-broken\n")
    for _ in range(5):
        assert len(await kb.search("refunds", None, 1)) == 1
        await asyncio.sleep(0.01)
    assert kb.version == first


async def test_searches_during_reingests_always_see_one_complete_version(
    kb: EmbeddedKnowledgeBase, tmp_path: Path, embedder: HashEmbedder
) -> None:
    """Readers race several re-ingests; every answer comes whole from one version."""
    versions = {
        tag: {f"{tag}-{i}.txt": f"Version {tag} document {i}. " * 30 for i in range(40)}
        for tag in ("alpha", "beta")
    }
    seen: set[str] = set()
    done = asyncio.Event()

    async def reader() -> None:
        while not done.is_set():
            passages = await kb.search("Version document", None, 50)
            tags = {p.source.split("-")[0] for p in passages}
            if len(passages) != len(DOCS):  # not the fixture's first version
                assert len(passages) == 50 and len(tags) == 1, tags  # whole, never a mix
                seen.update(tags)
            await asyncio.sleep(0)

    readers = [asyncio.create_task(reader()) for _ in range(4)]
    for tag in ("alpha", "beta", "alpha", "beta"):
        await build(tmp_path, versions[tag], embedder)
        await wait_for_version(kb, read_current(tmp_path / "kb") or "")
    done.set()
    await asyncio.gather(*readers)
    assert {"alpha", "beta"} <= seen


async def test_a_large_base_is_searched_off_the_event_loop(
    kb: EmbeddedKnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embedded, "_SEARCH_OFF_LOOP_ABOVE", 0)
    calls = []
    to_thread = asyncio.to_thread

    async def spy(fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(fn)
        return await to_thread(fn, *args, **kwargs)

    monkeypatch.setattr(embedded.asyncio, "to_thread", spy)
    assert (await kb.search("refunds", None, 1))[0].source == "refunds.md"
    assert calls


async def test_an_embedder_failure_is_a_retrieval_failure(
    kb: EmbeddedKnowledgeBase, embedder: HashEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(text: str) -> np.ndarray:
        raise RuntimeError("model gone")

    monkeypatch.setattr(embedder, "embed", broken)
    with pytest.raises(RetrievalFailed, match="embedding the query failed: model gone"):
        await kb.search("refunds", None, 1)

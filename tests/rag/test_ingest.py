"""Ingest: what gets read and skipped, and the version switch that readers rely on."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from gateway.config import KnowledgeBaseConfig
from gateway.embedding.embedder import HashEmbedder
from gateway.rag import embedded
from gateway.rag import ingest as ingest_module
from gateway.rag.embedded import CURRENT, load_version, read_current
from gateway.rag.ingest import IngestError, ingest, source_files

CONFIG = KnowledgeBaseConfig(chunk_chars=200, overlap_chars=20)


def write(folder: Path, files: dict[str, str | bytes]) -> Path:
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return folder


def versions(base: Path) -> list[str]:
    return sorted(p.name for p in base.iterdir() if p.is_dir())


@pytest.fixture
def embedder() -> HashEmbedder:
    return HashEmbedder(dim=32)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return write(
        tmp_path / "docs",
        {
            "b/guide.md": "---\ntitle: t\n---\n# Guide\n\n" + "Step one is easy. " * 40,
            "a.txt": "Plain notes.",
            "c/page.html": "<title>Page</title><p>Hello from HTML.</p>",
            "report.pdf": b"%PDF-1.7",
            "c/latin1.txt": "caf\xe9".encode("latin-1"),
            ".git/config": "[core]",
            ".hidden.md": "# secret",
        },
    )


async def test_a_folder_becomes_a_complete_version(
    tmp_path: Path, source: Path, embedder: HashEmbedder
) -> None:
    base = tmp_path / "kb"
    report = await ingest("docs", CONFIG, base, source, embedder, progress=False)
    assert (report.documents, report.skipped) == (
        3,
        [("c/latin1.txt", "not UTF-8 (invalid byte at offset 3)"),
         ("report.pdf", "unsupported file type '.pdf'")],
    )  # fmt: skip
    assert report.version_path == base / (read_current(base) or "")
    assert report.seconds > 0
    version = load_version(base, report.version_path.name)
    assert version.index.ntotal == report.chunks > 3  # the guide is several chunks
    sources = [c.source for c in version.chunks]
    assert sources == sorted(sources)  # files in a stable order, paths relative to the folder
    assert sources[0] == "a.txt" and sources[-1] == "c/page.html"
    assert {c.title for c in version.chunks} == {"a", "Guide", "Page"}
    manifest = json.loads((report.version_path / "manifest.json").read_text())
    assert manifest == {
        "embedder": "hash-32",
        "dim": 32,
        "chunks": report.chunks,
        "documents": 3,
        "created": manifest["created"],
        "chunk_chars": 200,
        "overlap_chars": 20,
        "format": 1,
    }


async def test_a_single_file_is_recorded_by_its_name(
    tmp_path: Path, source: Path, embedder: HashEmbedder
) -> None:
    report = await ingest("docs", CONFIG, tmp_path / "kb", source / "a.txt", embedder, False)
    assert report.documents == 1
    assert [c.source for c in load_version(tmp_path / "kb", report.version_path.name).chunks] == [
        "a.txt"
    ]


def test_hidden_files_and_folders_are_not_walked(source: Path) -> None:
    root, files = source_files(source)
    assert root == source
    assert [f.relative_to(source).as_posix() for f in files] == [
        "a.txt", "b/guide.md", "c/latin1.txt", "c/page.html", "report.pdf",
    ]  # fmt: skip


async def test_reingest_switches_current_and_keeps_only_the_previous_version(
    tmp_path: Path, source: Path, embedder: HashEmbedder
) -> None:
    base = tmp_path / "kb"
    names = []
    for _ in range(4):
        report = await ingest("docs", CONFIG, base, source, embedder, progress=False)
        names.append(report.version_path.name)
        assert read_current(base) == names[-1]
        load_version(base, names[-1])  # complete
    assert len(set(names)) == 4
    assert versions(base) == sorted(names[-2:])  # the current one and the one before


async def test_pruning_leaves_other_files_alone_but_removes_crashed_staging(
    tmp_path: Path, source: Path, embedder: HashEmbedder
) -> None:
    base = tmp_path / "kb"
    (base / "notes").mkdir(parents=True)
    (base / "v-mine").mkdir()
    (base / ".tmp-v20200101-000000-abcdef").mkdir()  # a run that crashed mid-write
    report = await ingest("docs", CONFIG, base, source, embedder, progress=False)
    assert versions(base) == sorted(["notes", "v-mine", report.version_path.name])


class FailingEmbedder(HashEmbedder):
    """Fails on the n-th call, after some vectors were made."""

    def __init__(self, fail_on: int) -> None:
        super().__init__(dim=32)
        self.calls = 0
        self.fail_on = fail_on

    async def embed_many(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        if self.calls == self.fail_on:
            raise RuntimeError("embedder crashed")
        return await super().embed_many(texts)


async def test_a_failed_run_leaves_the_previous_version_in_force(
    tmp_path: Path, source: Path, embedder: HashEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = tmp_path / "kb"
    first = (await ingest("docs", CONFIG, base, source, embedder, False)).version_path.name
    monkeypatch.setattr(ingest_module, "EMBED_BATCH", 2)
    with pytest.raises(RuntimeError, match="embedder crashed"):
        await ingest("docs", CONFIG, base, source, FailingEmbedder(fail_on=2), False)
    assert read_current(base) == first
    assert versions(base) == [first]


@pytest.mark.parametrize("stage", ["writing files", "switching CURRENT"])
async def test_a_failed_write_leaves_no_version_behind(
    tmp_path: Path,
    source: Path,
    embedder: HashEmbedder,
    monkeypatch: pytest.MonkeyPatch,
    stage: str,
) -> None:
    base = tmp_path / "kb"
    first = (await ingest("docs", CONFIG, base, source, embedder, False)).version_path.name

    def disk_full(*args: object) -> None:
        raise OSError(28, "No space left on device")

    if stage == "writing files":  # the files are written, flushing them fails
        monkeypatch.setattr(embedded, "_fsync", disk_full)
    else:
        monkeypatch.setattr(ingest_module, "set_current", disk_full)
    with pytest.raises(OSError, match="No space left"):
        await ingest("docs", CONFIG, base, source, embedder, False)
    assert read_current(base) == first
    assert [p.name for p in base.iterdir() if p.is_dir()] == [first]  # no staging left either


async def test_a_source_with_nothing_supported_is_an_error_and_changes_nothing(
    tmp_path: Path, source: Path, embedder: HashEmbedder
) -> None:
    base = tmp_path / "kb"
    first = (await ingest("docs", CONFIG, base, source, embedder, False)).version_path.name
    empty = write(tmp_path / "empty", {"x.pdf": b"%PDF", "y.docx": b"PK"})
    with pytest.raises(IngestError, match=r"nothing to ingest in .*empty: no readable .*2 skipped"):
        await ingest("docs", CONFIG, base, empty, embedder, False)
    with pytest.raises(IngestError, match="nothing to ingest"):
        await ingest("docs", CONFIG, tmp_path / "kb2", tmp_path / "empty", embedder, False)
    assert read_current(base) == first
    assert not (tmp_path / "kb2" / CURRENT).exists()


async def test_a_missing_source_and_an_http_base_are_errors(
    tmp_path: Path, embedder: HashEmbedder
) -> None:
    with pytest.raises(IngestError, match="does not exist"):
        await ingest("docs", CONFIG, tmp_path / "kb", tmp_path / "nope", embedder, False)
    http = KnowledgeBaseConfig(type="http", url="http://retriever")
    with pytest.raises(IngestError, match="not embedded"):
        await ingest("docs", http, tmp_path / "kb", tmp_path, embedder, False)


async def test_two_ingests_of_one_base_cannot_run_at_once(
    tmp_path: Path, source: Path, embedder: HashEmbedder
) -> None:
    gate = asyncio.Event()

    class SlowEmbedder(HashEmbedder):
        async def embed_many(self, texts: list[str]) -> np.ndarray:
            await gate.wait()
            return await super().embed_many(texts)

    base = tmp_path / "kb"
    first = asyncio.create_task(ingest("docs", CONFIG, base, source, SlowEmbedder(32), False))
    await asyncio.sleep(0.05)
    with pytest.raises(IngestError, match="another ingest of 'docs' is running"):
        await ingest("docs", CONFIG, base, source, embedder, False)
    gate.set()
    await first


async def test_progress_goes_to_stderr_only_when_asked(
    tmp_path: Path, source: Path, embedder: HashEmbedder, capsys: pytest.CaptureFixture[str]
) -> None:
    await ingest("docs", CONFIG, tmp_path / "kb", source, embedder, progress=False)
    assert capsys.readouterr() == ("", "")
    await ingest("docs", CONFIG, tmp_path / "kb", source, embedder, progress=True)
    out, err = capsys.readouterr()
    assert out == ""
    assert "embedding docs" in err

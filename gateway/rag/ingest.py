"""Build a new version of an embedded knowledge base from a file or folder, then make it live.

Order matters for readers: the version is written completely under a staging name, renamed,
and only then does CURRENT move to it (atomically). A run that fails at any point before that
leaves CURRENT, and so the version a running gateway serves, as it was. After the switch, older
versions are deleted except the previous one, which a gateway may still be loading from.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from tqdm import tqdm

from gateway.rag.chunking import split_text
from gateway.rag.embedded import (
    Chunk,
    Manifest,
    VersionError,
    new_version_name,
    prune,
    read_current,
    set_current,
    write_version,
)
from gateway.rag.loaders import SUPPORTED, LoadError, load

if TYPE_CHECKING:
    from gateway.config.knowledge_bases import KnowledgeBaseConfig
    from gateway.embedding.embedder import Embedder

log = logging.getLogger("gateway.rag.ingest")

EMBED_BATCH = 64  # texts per embed_many call: one progress step


class IngestError(Exception):
    """The run failed before anything changed; the message says why, for the user."""


@dataclass(frozen=True, slots=True)
class IngestReport:
    documents: int
    chunks: int
    skipped: list[tuple[str, str]]  # (path relative to the source, reason)
    seconds: float
    version_path: Path


async def ingest(
    name: str,
    config: KnowledgeBaseConfig,
    base_path: Path,
    source: Path,
    embedder: Embedder,
    progress: bool,
) -> IngestReport:
    """Ingest `source` (a file or a folder, recursively) into a new version under `base_path`.

    Raises IngestError (nothing supported to ingest, another ingest running) and lets the
    embedder's and the file system's errors through; in every case CURRENT is untouched."""
    began = time.perf_counter()
    if config.type != "embedded":
        raise IngestError(f"knowledge base '{name}' is not embedded (type {config.type})")
    source = Path(source)
    if not source.exists():
        raise IngestError(f"{source} does not exist")
    with _exclusive(name, base_path):
        documents, chunks, skipped = await asyncio.to_thread(_read_source, source, config)
        if not chunks:
            kinds = ", ".join(sorted(SUPPORTED))
            raise IngestError(
                f"nothing to ingest in {source}: no readable {kinds} files"
                + (f" ({len(skipped)} skipped)" if skipped else "")
            )
        await embedder.start()
        _warn_if_truncated(embedder, config)
        vectors = await _embed(name, embedder, [_embedding_text(c) for c in chunks], progress)
        manifest = Manifest(
            embedder=embedder.name,
            dim=int(vectors.shape[1]),
            chunks=len(chunks),
            documents=documents,
            created=datetime.now(UTC).isoformat(timespec="seconds"),
            chunk_chars=config.chunk_chars,
            overlap_chars=config.overlap_chars,
        )
        version_path = await asyncio.to_thread(_publish, base_path, manifest, vectors, chunks)
    return IngestReport(documents, len(chunks), skipped, time.perf_counter() - began, version_path)


def source_files(source: Path) -> tuple[Path, list[Path]]:
    """(the folder paths are recorded relative to, the files in a stable order). Hidden files
    and folders (a name starting with '.', e.g. .git) are not looked at; links to folders are
    not followed."""
    if not source.is_dir():
        return source.parent, [source]
    found: list[Path] = []
    for root, dirs, files in os.walk(source):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found.extend(Path(root) / f for f in files if not f.startswith("."))
    return source, sorted(found, key=lambda p: p.relative_to(source).as_posix())


def _read_source(
    source: Path, config: KnowledgeBaseConfig
) -> tuple[int, list[Chunk], list[tuple[str, str]]]:
    root, files = source_files(source)
    documents = 0
    chunks: list[Chunk] = []
    skipped: list[tuple[str, str]] = []
    for file in files:
        relative = file.relative_to(root).as_posix()
        try:
            text, title = load(file)
        except LoadError as exc:
            skipped.append((relative, str(exc)))
            continue
        documents += 1
        for piece in split_text(text, config.chunk_chars, config.overlap_chars):
            chunks.append(Chunk(piece, relative, title))
    return documents, chunks, skipped


def _embedding_text(chunk: Chunk) -> str:
    """A chunk from the middle of a document rarely names its subject: the title does. It is
    embedded with the chunk (not stored in it) unless the chunk already starts with it."""
    title = chunk.title
    if not title or title.casefold() in chunk.text[: len(title) + 80].casefold():
        return chunk.text
    return f"{title}\n\n{chunk.text}"


def _warn_if_truncated(embedder: Embedder, config: KnowledgeBaseConfig) -> None:
    """An embedder reads a bounded prefix of each text; the rest of a longer chunk is stored
    and returned, but cannot be found (MiniLM: 128 tokens, at most 768 characters)."""
    reads = getattr(embedder, "max_chars", None)
    if isinstance(reads, int) and config.chunk_chars > reads:
        log.warning(
            "chunk_chars is %d but embedder %s reads at most %d characters of a text (fewer "
            "when its token limit comes first): the end of longer chunks will not be found; "
            "consider chunk_chars of about %d",
            config.chunk_chars, embedder.name, reads, reads * 2 // 3,
        )  # fmt: skip


async def _embed(name: str, embedder: Embedder, texts: list[str], progress: bool) -> np.ndarray:
    rows: list[np.ndarray] = []
    with tqdm(
        total=len(texts),
        desc=f"embedding {name}",
        unit="chunk",
        file=sys.stderr,
        disable=not progress,
        leave=False,
    ) as bar:
        for i in range(0, len(texts), EMBED_BATCH):
            batch = texts[i : i + EMBED_BATCH]
            vectors = np.asarray(await embedder.embed_many(batch), dtype=np.float32)
            if vectors.ndim != 2 or vectors.shape[0] != len(batch) or vectors.shape[1] < 1:
                raise IngestError(f"embedder {embedder.name} returned shape {vectors.shape}")
            rows.append(vectors)
            bar.update(len(batch))
    return np.concatenate(rows)


def _publish(path: Path, manifest: Manifest, vectors: np.ndarray, chunks: list[Chunk]) -> Path:
    """Write the version, switch CURRENT to it, prune. Blocking: runs in a worker thread."""
    try:
        previous = read_current(path)
    except VersionError as exc:  # a damaged CURRENT is replaced below: nothing to keep
        log.warning("%s: %s", path, exc)
        previous = None
    name = new_version_name()
    while (path / name).exists():  # same second, same random suffix: vanishingly rare
        name = new_version_name()
    final = write_version(path, name, manifest, vectors, chunks)
    try:
        set_current(path, name)
    except BaseException:
        shutil.rmtree(final, ignore_errors=True)
        raise
    keep = {name} if previous is None else {name, previous}
    with contextlib.suppress(OSError):
        prune(path, keep)
    return final


@contextlib.contextmanager
def _exclusive(name: str, path: Path) -> Iterator[None]:
    """One ingest per base at a time: two would prune each other's versions."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no advisory locks, no protection
        yield
        return
    with (path / ".lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise IngestError(f"another ingest of '{name}' is running ({path})") from None
        yield

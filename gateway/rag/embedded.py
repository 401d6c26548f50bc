"""The embedded knowledge base: a faiss index built by `gateway kb ingest`, searched in-process.

On disk, one directory per knowledge base, one immutable subdirectory per ingest:

    <path>/CURRENT                  the name of the version in force (one line)
    <path>/<version>/index.faiss    IndexFlatIP over L2-normalized vectors (inner product = cosine)
    <path>/<version>/chunks.jsonl   {"text", "source", "title"} per row, in index order
    <path>/<version>/manifest.json  embedder, dim, counts, created, chunk settings

An ingest writes a whole new version, then replaces CURRENT (os.replace: atomic), so a reader
sees the old version or the new one, never a mix. A running gateway stats CURRENT at most once
a second on the search path and, when it changed, loads the new version in a worker thread
while searches keep using the old one; the swap is one assignment on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import re
import secrets
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from gateway.config.paths import DEFAULT_KB_ROOT
from gateway.rag.base import Passage, RetrievalFailed

if TYPE_CHECKING:
    from gateway.config.knowledge_bases import KnowledgeBaseConfig
    from gateway.embedding.embedder import Embedder

log = logging.getLogger("gateway.rag.embedded")

CURRENT = "CURRENT"
INDEX_FILE = "index.faiss"
CHUNKS_FILE = "chunks.jsonl"
MANIFEST_FILE = "manifest.json"
FORMAT = 1
DEFAULT_ROOT = DEFAULT_KB_ROOT  # data/kb, beside the config (gateway/config/paths.py)
CHECK_INTERVAL = 1.0  # seconds between stats of CURRENT on the search path
# Flat search costs one multiply-add per stored float: past this many (~10k MiniLM chunks,
# about a millisecond) a search runs in a worker thread instead of on the event loop.
_SEARCH_OFF_LOOP_ABOVE = 4_000_000
_VERSION_NAME = re.compile(r"^v\d{8}-\d{6}-[0-9a-f]{6}$")  # ours: the only ones pruned
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def kb_path(name: str, config: KnowledgeBaseConfig) -> Path:
    """Where an embedded knowledge base lives: absolute once loaded from a file (relative paths
    resolve beside the config, gateway/config/paths.py); relative to the working directory in
    a config with no file."""
    return Path(config.path) if config.path else DEFAULT_ROOT / name


def reingest_hint(name: str) -> str:
    return f"`gateway kb ingest {name} PATH`"


class VersionError(Exception):
    """A version on disk is missing, incomplete or inconsistent."""


@dataclass(frozen=True, slots=True)
class Chunk:
    text: str
    source: str  # relative to the ingested folder
    title: str | None


@dataclass(frozen=True, slots=True)
class Manifest:
    embedder: str
    dim: int
    chunks: int
    documents: int
    created: str  # ISO 8601, UTC
    chunk_chars: int
    overlap_chars: int
    format: int = FORMAT

    @classmethod
    def parse(cls, raw: bytes) -> Manifest:
        data = orjson.loads(raw)
        if not isinstance(data, dict):
            raise VersionError("bad manifest")
        if data.get("format") != FORMAT:
            raise VersionError(f"unknown manifest format {data.get('format')!r}")
        try:
            return cls(**{k: data[k] for k in cls.__dataclass_fields__})
        except (KeyError, TypeError) as exc:
            raise VersionError(f"bad manifest: {exc}") from None


@dataclass(frozen=True, slots=True)
class Version:
    name: str
    manifest: Manifest
    index: Any  # faiss.IndexFlatIP
    chunks: list[Chunk]


def new_version_name() -> str:
    return time.strftime("v%Y%m%d-%H%M%S-", time.gmtime()) + secrets.token_hex(3)


def read_current(path: Path) -> str | None:
    """The version CURRENT names, or None when the base was never ingested."""
    try:
        name = (path / CURRENT).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise VersionError(f"cannot read {CURRENT}: {exc}") from None
    if not _SAFE_NAME.match(name):
        raise VersionError(f"{CURRENT} names no valid version ({name[:40]!r})")
    return name


def load_version(path: Path, name: str) -> Version:
    """Read one version fully into memory (blocking: run it in a worker thread)."""
    import faiss

    directory = path / name
    try:
        manifest = Manifest.parse((directory / MANIFEST_FILE).read_bytes())
        with (directory / CHUNKS_FILE).open("rb") as rows:
            chunks = [_chunk(orjson.loads(line)) for line in rows if line.strip()]
        index = faiss.read_index(str(directory / INDEX_FILE))
    except VersionError:
        raise
    except (OSError, ValueError, RuntimeError) as exc:  # faiss raises RuntimeError
        raise VersionError(f"version {name}: {str(exc).splitlines()[0][:200]}") from None
    if not (index.ntotal == len(chunks) == manifest.chunks and index.d == manifest.dim):
        raise VersionError(
            f"version {name} is inconsistent: {index.ntotal} vectors of dim {index.d}, "
            f"{len(chunks)} chunks, manifest says {manifest.chunks} of dim {manifest.dim}"
        )
    return Version(name, manifest, index, chunks)


def _chunk(row: Any) -> Chunk:
    if not isinstance(row, dict) or not isinstance(row.get("text"), str):
        raise VersionError("bad row in chunks.jsonl")
    title = row.get("title")
    return Chunk(row["text"], str(row.get("source", "")), title if isinstance(title, str) else None)


def write_version(
    path: Path, name: str, manifest: Manifest, vectors: np.ndarray, chunks: list[Chunk]
) -> Path:
    """Write a complete version under a temporary name, then rename it into place.

    Blocking. CURRENT is not touched: `set_current` makes the version live."""
    import faiss

    if vectors.shape != (len(chunks), manifest.dim) or manifest.chunks != len(chunks):
        raise ValueError("vectors, chunks and manifest disagree")
    staging = path / f".tmp-{name}"
    staging.mkdir(parents=True)
    try:
        index = faiss.IndexFlatIP(manifest.dim)
        index.add(np.ascontiguousarray(vectors, dtype=np.float32))
        faiss.write_index(index, str(staging / INDEX_FILE))
        with (staging / CHUNKS_FILE).open("wb") as out:
            for chunk in chunks:
                out.write(orjson.dumps(asdict(chunk)) + b"\n")
        (staging / MANIFEST_FILE).write_bytes(
            orjson.dumps(asdict(manifest), option=orjson.OPT_INDENT_2) + b"\n"
        )
        for file in (INDEX_FILE, CHUNKS_FILE, MANIFEST_FILE):
            _fsync(staging / file)
        _fsync(staging)
        final = path / name
        staging.rename(final)
        _fsync(path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final


def set_current(path: Path, name: str) -> None:
    """Point CURRENT at a version, atomically (readers see the old name or the new one)."""
    staging = path / f".{CURRENT}.{os.getpid()}.tmp"
    staging.write_text(name + "\n", encoding="utf-8")
    _fsync(staging)
    os.replace(staging, path / CURRENT)
    _fsync(path)


def prune(path: Path, keep: set[str]) -> list[str]:
    """Delete versions (and staging leftovers of crashed runs) not in `keep`. Only names this
    module makes are touched, so a misconfigured path never loses anyone else's files."""
    removed = []
    for entry in sorted(path.iterdir()):
        ours = _VERSION_NAME.match(entry.name) or entry.name.startswith(".tmp-v")
        if ours and entry.is_dir() and not entry.is_symlink() and entry.name not in keep:
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
    return removed


def _fsync(path: Path) -> None:
    """Flush a file or directory to disk (directories: POSIX only)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # e.g. a directory on Windows
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


class EmbeddedKnowledgeBase:
    """A KnowledgeBase over the version CURRENT names, following re-ingests while it runs."""

    def __init__(
        self,
        name: str,
        path: Path,
        embedder: Embedder,
        *,
        check_interval: float = CHECK_INTERVAL,
    ) -> None:
        self.name = name
        self.path = Path(path)
        self.embedder = embedder
        self._check_interval = check_interval
        self._version: Version | None = None
        self._problem = f"knowledge base '{name}' has not been ingested: run {reingest_hint(name)}"
        self._seen: tuple[int, int, int] | None = None  # CURRENT's stat at the last (re)load
        self._checked = -math.inf
        self._loading: asyncio.Task[None] | None = None

    @property
    def version(self) -> str | None:
        """The version searches use now (None: nothing loaded)."""
        return self._version.name if self._version is not None else None

    async def start(self) -> None:
        """Load the version in force, in a worker thread. Never raises: a base that is not
        ingested (or broken) makes searches raise RetrievalFailed saying what to do."""
        self._checked = time.monotonic()
        await asyncio.shield(self._load_in_background())

    async def close(self) -> None:
        task, self._loading = self._loading, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._version = None

    async def search(self, query: str, vector: np.ndarray | None, top_k: int) -> list[Passage]:
        self._poll()
        version = self._version
        if version is None and self._loading is not None:
            await asyncio.shield(self._loading)  # nothing older to answer from: wait for it
            version = self._version
        if version is None:
            raise RetrievalFailed(self._problem)
        if vector is None:
            try:
                vector = await self.embedder.embed(query)
            except Exception as exc:
                raise RetrievalFailed(f"embedding the query failed: {exc}") from exc
        query_row = np.ascontiguousarray(vector, dtype=np.float32).reshape(1, -1)
        self._check_embedder(version.manifest, query_row.shape[1])
        k = min(top_k, len(version.chunks))
        if k <= 0:
            return []
        if version.index.ntotal * version.manifest.dim > _SEARCH_OFF_LOOP_ABOVE:
            scores, ids = await asyncio.to_thread(_flat_search, version.index, query_row, k)
        else:
            scores, ids = _flat_search(version.index, query_row, k)
        return [
            _passage(version.chunks[int(i)], float(s))
            for i, s in zip(ids[0], scores[0], strict=True)
            if i >= 0
        ]

    def _check_embedder(self, manifest: Manifest, dim: int) -> None:
        if manifest.embedder == self.embedder.name and manifest.dim == dim:
            return
        raise RetrievalFailed(
            f"knowledge base '{self.name}' was ingested with embedder {manifest.embedder} "
            f"(dim {manifest.dim}) but the gateway embeds with {self.embedder.name} "
            f"(dim {dim}): re-ingest it with {reingest_hint(self.name)}"
        )

    def _poll(self) -> None:
        """Stat CURRENT at most once per interval; when it changed, load in the background."""
        now = time.monotonic()
        if now - self._checked < self._check_interval or self._loading is not None:
            return
        self._checked = now
        if self._signature() != self._seen:
            self._load_in_background()

    def _load_in_background(self) -> asyncio.Task[None]:
        if self._loading is None:
            self._loading = asyncio.get_running_loop().create_task(
                self._reload(), name=f"kb-load-{self.name}"
            )
        return self._loading

    async def _reload(self) -> None:
        try:
            for _ in range(3):  # CURRENT may move again while a version loads
                signature = self._signature()
                loaded = self._version.name if self._version is not None else None
                try:
                    version = await asyncio.to_thread(_load_current, self.path, loaded)
                except VersionError as exc:
                    if self._signature() != signature:
                        continue
                    self._seen = signature
                    self._failed(str(exc))
                    return
                self._seen = signature
                if version is not None:
                    self._version = version
                    log.info(
                        "knowledge base %s: version %s (%d chunks from %d documents)",
                        self.name, version.name, version.manifest.chunks,
                        version.manifest.documents,
                    )  # fmt: skip
                return
        except Exception as exc:  # never let a reload take the base down
            self._failed(f"unexpected {type(exc).__name__}: {exc}")
        finally:
            self._loading = None

    def _failed(self, reason: str) -> None:
        if self._version is not None:
            log.warning(
                "knowledge base %s: keeping version %s, the new one failed to load: %s",
                self.name, self._version.name, reason,
            )  # fmt: skip
            return
        self._problem = (
            f"knowledge base '{self.name}' could not be loaded ({reason}): "
            f"re-ingest with {reingest_hint(self.name)}"
        )
        log.warning("%s", self._problem)

    def _signature(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path / CURRENT)
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)


def _load_current(path: Path, loaded: str | None) -> Version | None:
    """The version CURRENT names, or None when it is the one already loaded or there is none
    (never ingested, or deleted under a running gateway: the loaded one stays)."""
    name = read_current(path)
    if name is None or name == loaded:
        return None
    return load_version(path, name)


def _flat_search(index: Any, query_row: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """One query on one thread. faiss splits even a single query's flat scan across OpenMP
    threads (measured at 200k x 384 on 2 cores: 32 ms wall and 62 ms CPU with 2 threads,
    24 ms with 1), and the thread count is per calling thread, so it is set where we search."""
    import faiss

    faiss.omp_set_num_threads(1)
    scores, ids = index.search(query_row, k)
    return scores, ids


def _passage(chunk: Chunk, score: float) -> Passage:
    return Passage(chunk.text, max(-1.0, min(1.0, score)), chunk.source, chunk.title)

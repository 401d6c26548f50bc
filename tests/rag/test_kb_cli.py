"""`gateway kb ingest` as a user runs it: `python -m gateway kb ingest` in a subprocess."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gateway.rag.embedded import load_version, read_current
from gateway.testing.harness.configs import write_config
from gateway.testing.harness.starters import run_gateway_cli

ROOT = Path(__file__).resolve().parents[2]


def _gateway(*args: str) -> subprocess.CompletedProcess[str]:
    return run_gateway_cli(*args, timeout=120)


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(
        tmp_path,
        {
            "providers": {"d": {"type": "demo"}},
            "models": [{"name": "x", "provider": "d"}],
            # the hash embedder: instant, for mechanics
            "cache": {"store": {"type": "memory"}, "embedder": {"type": "hash"}},
            "knowledge_bases": {
                "docs": {"path": str(tmp_path / "kb")},
                "web": {"type": "http", "url": "http://127.0.0.1:9/search"},
            },
        },
    )


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "refunds.md").write_text("# Refunds\n\nWithin 30 days.")
    (folder / "sub" / "ship.txt").write_text("Ships in two days.")
    (folder / "scan.pdf").write_bytes(b"%PDF-1.7")
    return folder


def test_ingest_builds_the_base_and_summarizes(tmp_path: Path, config: Path, docs: Path) -> None:
    result = _gateway("kb", "ingest", "docs", str(docs), "--config", str(config), "--quiet")
    assert result.returncode == 0, result.stderr
    version = read_current(tmp_path / "kb")
    assert version is not None
    assert result.stdout.startswith(
        "Ingested 2 documents into knowledge base 'docs': 2 chunks, 1 file skipped, in "
    )
    assert f"Version {version} is now current in {tmp_path / 'kb'}" in result.stdout
    assert "  skipped scan.pdf: unsupported file type '.pdf'" in result.stdout
    assert result.stderr == ""  # --quiet: no progress bar
    assert [c.source for c in load_version(tmp_path / "kb", version).chunks] == [
        "refunds.md",
        "sub/ship.txt",
    ]


def test_progress_is_shown_on_stderr_without_quiet(config: Path, docs: Path) -> None:
    result = _gateway("kb", "ingest", "docs", str(docs), "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert "embedding docs" in result.stderr


@pytest.mark.parametrize(
    ("name", "path", "message"),
    [
        ("nope", "docs", "gateway: no knowledge base 'nope' in {config} (configured: docs, web)"),
        ("web", "docs", "gateway: knowledge base 'web' is type http"),
        ("docs", "missing", "gateway: {tmp}/missing: no such file or directory"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(
    tmp_path: Path, config: Path, docs: Path, name: str, path: str, message: str
) -> None:
    result = _gateway("kb", "ingest", name, str(tmp_path / path), "--config", str(config))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(message.format(config=config, tmp=tmp_path))
    assert not (tmp_path / "kb").exists()


def test_nothing_to_ingest_exits_1_and_changes_nothing(tmp_path: Path, config: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "a.pdf").write_bytes(b"%PDF")
    result = _gateway("kb", "ingest", "docs", str(empty), "--config", str(config))
    assert result.returncode == 1
    assert "nothing to ingest" in result.stderr
    assert read_current(tmp_path / "kb") is None


def test_an_invalid_config_exits_1(tmp_path: Path, docs: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("knowledge_bases: {docs: {chunk_chars: 5}}\n")
    result = _gateway("kb", "ingest", "docs", str(docs), "--config", str(bad))
    assert result.returncode == 1
    assert "invalid configuration" in result.stderr

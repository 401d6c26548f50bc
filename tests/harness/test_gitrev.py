"""An older commit's files are exported as they were, and the checkout is named by its commit."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gateway.testing.harness.gitrev import checkout_state, export, git, short_commit


def _init_repo(path: Path) -> None:
    for args in (["init", "-q"], ["config", "user.email", "t@t"], ["config", "user.name", "t"]):
        git(*args, repo=path)


def test_export_gives_the_file_as_it_was_at_the_older_commit(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    _init_repo(repo)
    (repo / "pkg" / "mod.py").write_text("OLD = 1\n")
    git("add", "pkg", repo=repo)
    git("commit", "-q", "-m", "old", repo=repo)
    old = short_commit(repo=repo)
    (repo / "pkg" / "mod.py").write_text("NEW = 2\n")
    git("commit", "-q", "-am", "new", repo=repo)

    assert export(old, "pkg", tmp_path / "out", repo=repo) == old
    assert (tmp_path / "out" / "pkg" / "mod.py").read_text() == "OLD = 1\n"
    assert short_commit("HEAD~1", repo=repo) == old != short_commit(repo=repo)


def test_checkout_state_says_when_the_path_has_uncommitted_changes(tmp_path: Path) -> None:
    _init_repo(tmp_path)
    (tmp_path / "a.txt").write_text("a\n")
    git("add", "a.txt", repo=tmp_path)
    git("commit", "-q", "-m", "a", repo=tmp_path)
    head = short_commit(repo=tmp_path)
    assert checkout_state("a.txt", repo=tmp_path) == f"HEAD {head}"
    (tmp_path / "a.txt").write_text("changed\n")
    assert checkout_state("a.txt", repo=tmp_path) == f"HEAD {head} + uncommitted changes in a.txt"


def test_an_unknown_ref_is_an_error(tmp_path: Path) -> None:
    _init_repo(tmp_path)
    with pytest.raises(subprocess.CalledProcessError):
        short_commit("no-such-ref", repo=tmp_path)

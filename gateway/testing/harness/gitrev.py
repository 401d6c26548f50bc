"""The code a benchmark measures, named by git: the checkout's commit and whether a path in it
has uncommitted changes, and a path as it was at an older commit, exported (`git archive`) to
measure beside today's, so uncommitted work cannot leak into the older numbers."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

from gateway.testing.harness.starters import REPO_ROOT


def git(*args: str, repo: Path = REPO_ROOT) -> bytes:
    """`git -C repo ARGS...`'s output; CalledProcessError when git fails."""
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=True).stdout


def short_commit(ref: str = "HEAD", repo: Path = REPO_ROOT) -> str:
    """The abbreviated commit `ref` names (a branch, tag, commit or `HEAD~2`)."""
    return git("rev-parse", "--short", f"{ref}^{{commit}}", repo=repo).decode().strip()


def checkout_state(path: str, repo: Path = REPO_ROOT) -> str:
    """ "HEAD <commit>", and " + uncommitted changes in <path>" when the checkout's `path`
    differs from it (another session may be editing it while a benchmark runs)."""
    dirty = git("status", "--porcelain", "--", path, repo=repo).strip()
    return f"HEAD {short_commit(repo=repo)}" + (
        f" + uncommitted changes in {path}" if dirty else ""
    )


def export(ref: str, path: str, dest: Path, repo: Path = REPO_ROOT) -> str:
    """`path` (a file or directory of the repository) as it was at `ref`, written under `dest`
    at the same relative place; the commit it came from."""
    commit = short_commit(ref, repo)
    with tarfile.open(fileobj=io.BytesIO(git("archive", commit, path, repo=repo))) as archive:
        archive.extractall(dest, filter="data")
    return commit

"""What an ordinary machine installs: pip resolving against PyPI alone (no pip configuration, no
local wheels or indexes: this machine's CPU-only torch would hide the problem), with
`--dry-run --report`. The default install pulls no torch, no CUDA library and none of the
heavy packages that came with sentence-transformers, which the sentence-transformers extra
names; nor does README's test command (the tests that need torch are marked: tests/tiers.py).
Needs PyPI (tests/tiers.py: process, slow)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.deploy.manifests import ROOT

HEAVY = {"torch", "triton", "sentence-transformers", "transformers", "scipy", "scikit-learn"}
HEAVY |= {"sympy"}


def _plain_pypi_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return env | {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def resolve(tmp_path: Path, extras: str = "") -> list[dict[str, Any]]:
    """pip's report of every package `pip install -c constraints.txt .[extras]` would install on
    an empty Python."""
    # pip 23 downloads every wheel to read its metadata (~30 s for the default install). The
    # project's metadata alone (pyproject.toml, its readme): nothing built here.
    project = tmp_path / "project"
    (project / "gateway").mkdir(parents=True)
    (project / "gateway" / "__init__.py").touch()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, project / name)
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed"]
    command += ["--quiet", "--report", str(report), "-c", str(ROOT / "constraints.txt")]
    command.append(f"{project}[{extras}]" if extras else str(project))
    done = subprocess.run(
        command, capture_output=True, text=True, env=_plain_pypi_env(), timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    installs: list[dict[str, Any]] = json.loads(report.read_text())["install"]
    return installs


def _name(item: dict[str, Any]) -> str:
    return str(item["metadata"]["name"]).lower().replace("_", "-")


def test_neither_the_default_install_nor_the_readme_test_command_pulls_torch(
    tmp_path: Path,
) -> None:
    """One resolution (each takes 15-30 s): README's test command installs the default
    dependencies and its extras, so what it leaves out the default install leaves out too."""
    readme = (ROOT / "README.md").read_text()
    quickstart = readme.split("## Quickstart", 1)[1].split("```", 2)[1]
    test_command = next(line for line in quickstart.splitlines() if "python -m pytest" in line)
    extras = re.search(r"-e '\.\[([^]]+)\]'", test_command)
    assert extras, test_command
    # The other step installs tests/requirements-no-deps.txt without dependencies: nothing more.
    installs = resolve(tmp_path, extras[1])
    names = {_name(item) for item in installs}
    assert "semantic-gateway" in names
    assert {"onnxruntime", "tokenizers", "numpy", "faiss-cpu"} <= names  # the default install
    assert {"pytest", "openai-agents", "llama-index-core"} <= names  # the test extras
    assert names & HEAVY == set()
    assert [n for n in names if n.startswith(("nvidia-", "cuda-"))] == []
    # ... while the sentence-transformers extra names them, as the metadata pip read says
    # (resolving it would download the CUDA build of torch, gigabytes, on every run).
    ours = next(item for item in installs if _name(item) == "semantic-gateway")
    extra = [
        r for r in ours["metadata"]["requires_dist"] if 'extra == "sentence-transformers"' in r
    ]
    assert any(r.startswith("sentence-transformers") for r in extra), extra

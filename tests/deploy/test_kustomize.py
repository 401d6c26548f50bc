"""`kubectl apply -k deploy/k8s` sends a gateway that can run: every object there, in one
namespace, wired to each other (Service -> pods, HPA -> Deployment, probes -> the gateway's
endpoints), the config and policies mounted where the container reads them and equal to
deploy/scaleout's files, and the container locked down (non-root, read-only root).

Each check runs on `kubectl kustomize`'s rendering (tests/tiers.py marks it process) and on
the files read directly (fast; what is left where kubectl is missing)."""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.config import build_settings, load_settings
from gateway.config.environment import named_variables, placeholder_problems
from gateway.config.placeholders import placeholder
from gateway.server.exposure import reaches_other_machines
from tests.deploy.manifests import (
    SCALEOUT,
    Manifest,
    container,
    grace_needed,
    kubectl,
    one,
    render_from_files,
    render_with_kubectl,
)

Check = Callable[[list[Manifest]], None]
CONFIG = SCALEOUT / "config.yaml"


def _gateway(objects: list[Manifest]) -> tuple[Manifest, Manifest]:
    deployment = one(objects, "Deployment", "gateway")
    return deployment, container(deployment, "gateway")


def _config_arg(gateway: Manifest) -> Path:
    args = gateway.get("args") or gateway.get("command") or []
    return Path(args[args.index("--config") + 1])


def _mounted(deployment: Manifest, gateway: Manifest, path: Path) -> tuple[Manifest, Path]:
    """The volume mounted over `path` (the deepest mount containing it) and `path` inside it."""
    mounts = [m for m in gateway["volumeMounts"] if path.is_relative_to(m["mountPath"])]
    assert mounts, f"nothing is mounted over {path}"
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    volume = next(v for v in volumes if v["name"] == mount["name"])
    return volume, path.relative_to(mount["mountPath"])


def every_object_is_there_in_one_namespace(objects: list[Manifest]) -> None:
    namespaces = [o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"]
    assert len(namespaces) == 1
    for kind, name in [
        ("Deployment", "gateway"),
        ("Deployment", "redis"),
        ("Service", "gateway"),
        ("Service", "redis"),
        ("HorizontalPodAutoscaler", "gateway"),
        ("Secret", "gateway-keys"),
        ("ConfigMap", "gateway-config"),
        ("ConfigMap", "gateway-policies"),
    ]:
        assert one(objects, kind, name)["metadata"].get("namespace") == namespaces[0], name


def the_config_is_mounted_where_the_gateway_reads_it(objects: list[Manifest]) -> None:
    deployment, gateway = _gateway(objects)
    volume, key = _mounted(deployment, gateway, _config_arg(gateway))
    config_map = one(objects, "ConfigMap", volume["configMap"]["name"])
    # One source of truth: the ConfigMap is deploy/scaleout/config.yaml, byte for byte.
    assert config_map["data"][str(key)] == CONFIG.read_text()


def the_policies_are_mounted_where_the_config_looks(objects: list[Manifest]) -> None:
    deployment, gateway = _gateway(objects)
    policies = Path(load_settings(CONFIG).file.policies.dir)
    volume, inside = _mounted(deployment, gateway, policies)
    assert inside == Path(".")
    config_map = one(objects, "ConfigMap", volume["configMap"]["name"])
    shipped = {p.name: p.read_text() for p in (SCALEOUT / "policies").glob("*.y*ml")}
    assert config_map.get("data", {}) == shipped  # every policy file listed, none stale


def the_secret_holds_every_key_the_config_names(objects: list[Manifest]) -> None:
    _, gateway = _gateway(objects)
    secret = one(objects, "Secret", "gateway-keys")
    assert {"secretRef": {"name": "gateway-keys"}} in gateway["envFrom"]
    named = {variable for variable, _, _ in named_variables(load_settings(CONFIG).file)}
    assert named
    assert named <= set(secret.get("stringData", {})) | set(secret.get("data", {}))


def every_caller_needs_a_key_from_the_secret(objects: list[Manifest]) -> None:
    # The replicas listen where other machines reach them: tenant keys, not anonymous callers.
    file = load_settings(CONFIG).file
    assert reaches_other_machines(file.server.host)
    assert file.auth.keys and not file.auth.anonymous
    secret = one(objects, "Secret", "gateway-keys")["stringData"]
    assert {key.env for key in file.auth.keys} <= set(secret)
    # As shipped, every value is a placeholder, so an unfilled Secret stops the pods at start
    # (naming each variable) instead of serving with a key anyone can read here ...
    assert all(placeholder(value) for value in secret.values())
    problems = placeholder_problems(file, secret)
    assert {p.split()[0] for p in problems} == set(secret)
    with pytest.raises(ValueError):
        build_settings(file, str(CONFIG), secret)
    # ... and filled in, as the --dry-run recipe in secret.yaml does, it loads.
    filled = {name: secrets.token_hex(32) for name in secret}
    settings = build_settings(file, str(CONFIG), filled)
    assert set(settings.tenant_by_key_hash.values()) == {key.tenant for key in file.auth.keys}


def probes_and_ports_meet_the_gateway(objects: list[Manifest]) -> None:
    deployment, gateway = _gateway(objects)
    server = load_settings(CONFIG).server
    ports = {p["name"]: p["containerPort"] for p in gateway["ports"]}
    assert ports == {"http": server.port}
    assert gateway["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert gateway["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert gateway["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(server.port)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] >= grace_needed(server)


def services_and_the_autoscaler_find_their_pods(objects: list[Manifest]) -> None:
    deployment, _ = _gateway(objects)
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    service = one(objects, "Service", "gateway")
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    target = one(objects, "HorizontalPodAutoscaler", "gateway")["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "gateway")
    # The Redis the config names is the Service here.
    url = load_settings(CONFIG).file.redis.url
    host, port = re.fullmatch(r"redis://([\w.-]+):(\d+)/\d+", url).groups()  # type: ignore[union-attr]
    redis = one(objects, "Service", host)
    assert int(port) in {p["port"] for p in redis["spec"]["ports"]}
    redis_pods = one(objects, "Deployment", host)["spec"]["template"]["metadata"]["labels"]
    assert redis["spec"]["selector"].items() <= redis_pods.items()


def the_gateway_runs_locked_down(objects: list[Manifest]) -> None:
    deployment, gateway = _gateway(objects)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001  # the Dockerfile's user
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    own = gateway["securityContext"]
    assert own["readOnlyRootFilesystem"] is True
    assert own["allowPrivilegeEscalation"] is False
    assert own["capabilities"]["drop"] == ["ALL"]
    # What it writes has somewhere to go: data/ (beside the config's relative paths) and /tmp.
    writable = {
        m["mountPath"]
        for m in gateway["volumeMounts"]
        if "emptyDir" in _mounted(deployment, gateway, Path(m["mountPath"]))[0]
    }
    assert writable == {"/app/data", "/tmp"}


CHECKS: list[Check] = [
    every_object_is_there_in_one_namespace,
    the_config_is_mounted_where_the_gateway_reads_it,
    the_policies_are_mounted_where_the_config_looks,
    the_secret_holds_every_key_the_config_names,
    every_caller_needs_a_key_from_the_secret,
    probes_and_ports_meet_the_gateway,
    services_and_the_autoscaler_find_their_pods,
    the_gateway_runs_locked_down,
]
IDS = [check.__name__ for check in CHECKS]


@pytest.fixture(scope="module")
def kubectl_rendered() -> list[Manifest]:
    if not kubectl():
        pytest.skip("kubectl is not installed: the files are checked directly instead")
    return render_with_kubectl()


@pytest.mark.parametrize("check", CHECKS, ids=IDS)
def test_kubectl_kustomize(kubectl_rendered: list[Manifest], check: Check) -> None:
    check(kubectl_rendered)


@pytest.mark.parametrize("check", CHECKS, ids=IDS)
def test_the_files_read_directly(check: Check) -> None:
    check(render_from_files())

"""The shipped deployment files agree with the gateway: the scale-out config validates, every
replica is scraped and balanced, probes hit the gateway's endpoints, grace periods cover the
drain."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from gateway.config import load_settings

ROOT = Path(__file__).resolve().parents[1]
SCALEOUT = ROOT / "deploy" / "scaleout"
K8S = ROOT / "deploy" / "k8s"


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
    assert int(grace.removesuffix("s")) > settings.drain_seconds + settings.shutdown_timeout_seconds


def test_kubernetes_probes_and_grace_period() -> None:
    deployment = yaml.safe_load((K8S / "deployment.yaml").read_text())
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    server = load_settings(SCALEOUT / "config.yaml").server
    assert pod["terminationGracePeriodSeconds"] > (
        server.drain_seconds + server.shutdown_timeout_seconds
    )
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert load_settings(SCALEOUT / "config.yaml").file.policies.dir in mounts
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    for resource in kustomization["resources"]:
        assert list(yaml.safe_load_all((K8S / resource).read_text()))

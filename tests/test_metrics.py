"""/metrics against docs/METRICS.md, and label values that stay bounded."""

import contextlib
import re
import urllib.request
from pathlib import Path

import openai
from prometheus_client.parser import text_string_to_metric_families

from gateway.testing.harness.inprocess import GatewayServer
from tests.clients import sdk_client

DOC = Path(__file__).resolve().parents[1] / "docs" / "METRICS.md"


def _scrape(gw: GatewayServer) -> str:
    with urllib.request.urlopen(gw.url + "/metrics", timeout=10) as response:
        return str(response.read().decode())


def _exported(text: str) -> set[str]:
    names = set()
    for family in text_string_to_metric_families(text):
        suffix = "_total" if family.type == "counter" else ""
        names.add(family.name + suffix)
    return names


def test_every_metric_is_documented_and_every_documented_metric_exists(gw: GatewayServer) -> None:
    client = sdk_client(gw.url, "k")
    client.chat.completions.create(model="demo", messages=[{"role": "user", "content": "x"}])
    documented = set(re.findall(r"^\| `(gateway_[a-z_]+)`", DOC.read_text(), re.MULTILINE))
    assert _exported(_scrape(gw)) == documented


def test_model_labels_never_carry_client_strings(gw: GatewayServer) -> None:
    client = sdk_client(gw.url, "k")
    for i in range(20):
        with contextlib.suppress(openai.NotFoundError):
            client.chat.completions.create(
                model=f"made-up-{i}", messages=[{"role": "user", "content": "x"}]
            )
    text = _scrape(gw)
    assert "made-up" not in text
    configured = set(gw.settings.routes) | {"none"}
    for model in re.findall(r'model="([^"]*)"', text):
        assert model in configured

"""The Grafana dashboards: they parse, every panel is titled, described and has a unit, they
use the provisioned datasource, and their PromQL selects only metrics docs/METRICS.md
documents. (tests/observability/test_prometheus.py runs the same expressions on Prometheus.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.observability.promql import (
    DASHBOARDS,
    ROOT,
    alert_rules,
    base_name,
    dashboard_exprs,
    documented_metrics,
    load_dashboard,
    metric_names,
    panels,
)

DATASOURCE = {"type": "prometheus", "uid": "prometheus"}


def test_both_dashboards_exist() -> None:
    assert {p.name for p in DASHBOARDS} >= {"gateway-overview.json", "gateway-cost.json"}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_panel_is_titled_described_and_has_a_unit(path: Path) -> None:
    board = load_dashboard(path)
    assert board["uid"] and board["title"] and board["schemaVersion"] >= 36
    found = panels(board)
    assert found, "a dashboard without panels"
    ids = [panel["id"] for panel in found]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    for panel in found:
        where = f"{path.name}: panel {panel.get('title')!r}"
        assert panel.get("title"), f"{where} has no title"
        assert panel.get("description"), f"{where} has no description"
        defaults = panel.get("fieldConfig", {}).get("defaults", {})
        assert defaults.get("unit"), f"{where} has no unit"
        assert defaults.get("thresholds", {}).get("steps"), f"{where} has no thresholds"
        assert panel.get("datasource") == DATASOURCE, f"{where}: datasource by uid prometheus"
        assert panel.get("targets"), f"{where} has no query"
        for target in panel["targets"]:
            assert target.get("expr"), f"{where}: a target without an expression"
            assert target.get("datasource") == DATASOURCE, f"{where}: target datasource"
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_template_variables_query_the_provisioned_datasource(path: Path) -> None:
    board = load_dashboard(path)
    text = path.read_text()
    assert "DS_PROMETHEUS" not in text, "no import-time datasource input: provisioning uses uid"
    variables = board["templating"]["list"]
    assert any(v["name"] == "model" for v in variables)
    documented = documented_metrics()
    for variable in variables:
        assert variable["datasource"] == DATASOURCE
        metric = re.fullmatch(r"label_values\((\w+), *(\w+)\)", variable["definition"])
        assert metric, f"${variable['name']}: a label_values(metric, label) query"
        assert metric.group(1) in documented, f"${variable['name']} reads {metric.group(1)}"
        assert f"${variable['name']}" in text.replace(variable["definition"], ""), "used"


def test_every_expression_selects_only_documented_metrics() -> None:
    documented = documented_metrics()
    assert len(documented) > 20, "the METRICS.md table was read"
    exprs = dashboard_exprs() + [("alerts.yml", r["alert"], r["expr"]) for r in alert_rules()]
    for source, title, expr in exprs:
        names = metric_names(expr)
        assert names, f"{source} {title!r}: no metric found in {expr!r}"
        unknown = {n for n in names if base_name(n, documented) not in documented}
        assert not unknown, f"{source} {title!r} uses undocumented metrics {unknown}: {expr}"


def test_the_expression_parser_sees_through_promql() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (le, model) (rate(gateway_request_duration_seconds_bucket"
        '{model=~"$model", endpoint="chat"}[$__rate_interval]))) / on(model) group_left '
        "up offset 1h or vector(1e6)"
    )
    assert metric_names(expr) == {"gateway_request_duration_seconds_bucket", "up"}
    documented = documented_metrics()
    assert base_name("gateway_request_duration_seconds_bucket", documented) == (
        "gateway_request_duration_seconds"
    )
    assert base_name("gateway_requests_total", documented) == "gateway_requests_total"


def test_alert_rules_are_annotated() -> None:
    rules = alert_rules()
    assert {r["alert"] for r in rules} == {
        "GatewayUpstreamBreakerOpen",
        "GatewayHighErrorRatio",
        "GatewayHighLatencyP99",
        "GatewayCacheHitRateCollapse",
        "GatewayCachePrecisionBelowBudget",
        "GatewayCacheTenantPrecisionBelowBudget",
        "GatewayLevel4Degradation",
        "GatewayConfigReloadRefused",
        "GatewayConnectionsRefused",
    }
    for rule in rules:
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule.get("for"), f"{rule['alert']} fires only after a while"


def test_provisioning_points_at_the_dashboards_and_the_datasource() -> None:
    grafana = ROOT / "grafana" / "provisioning"
    datasource = yaml.safe_load((grafana / "datasources" / "prometheus.yml").read_text())
    (source,) = datasource["datasources"]
    assert (source["uid"], source["type"]) == ("prometheus", "prometheus")
    assert source["url"] == "http://prometheus:9090"
    provider = yaml.safe_load((grafana / "dashboards" / "gateway.yml").read_text())["providers"]
    compose = yaml.safe_load((ROOT / "deploy" / "docker-compose.yml").read_text())
    mounts = compose["services"]["grafana"]["volumes"]
    assert f"../grafana/dashboards:{provider[0]['options']['path']}:ro" in mounts
    assert "../grafana/provisioning:/etc/grafana/provisioning:ro" in mounts
    assert set(compose["services"]) == {"gateway", "prometheus", "grafana"}

"""Shared helpers of the observability tests: the dashboards, their PromQL expressions, the
alert rules, and the metric names docs/METRICS.md documents."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "grafana" / "dashboards").glob("*.json"))
ALERTS = ROOT / "deploy" / "alerts.yml"
METRICS_DOC = ROOT / "docs" / "METRICS.md"

Json = dict[str, Any]

# Words of PromQL that look like names but are not metrics.
_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool",
    "and", "or", "unless", "offset", "inf", "nan", "atan2",
}  # fmt: skip
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def documented_metrics() -> dict[str, str]:
    """Metric name -> type, from the table in docs/METRICS.md."""
    rows = re.findall(r"^\| `(gateway_[a-z_]+)` \| (\w+) \|", METRICS_DOC.read_text(), re.M)
    return dict(rows)


def load_dashboard(path: Path) -> Json:
    board: Json = json.loads(path.read_text())
    return board


def panels(board: Json) -> list[Json]:
    """Every panel that shows data (rows excluded; panels inside collapsed rows included)."""
    found: list[Json] = []
    for panel in board.get("panels", []):
        if panel.get("type") == "row":
            found.extend(panel.get("panels", []))
        else:
            found.append(panel)
    return found


def dashboard_exprs() -> list[tuple[str, str, str]]:
    """(dashboard file, panel title, expression) for every target of every panel."""
    return [
        (path.name, panel["title"], target["expr"])
        for path in DASHBOARDS
        for panel in panels(load_dashboard(path))
        for target in panel.get("targets", [])
    ]


def alert_rules() -> list[Json]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects (functions, keywords, labels, durations and
    Grafana variables removed)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals (label values, regexes)
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range and subquery windows
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\$\{?\w+\}?", "", text)  # Grafana variables
    names = set()
    for match in re.finditer(r"(?<![\w.:])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])(?!\s*\()", text):
        if match.group(1).lower() not in _KEYWORDS:
            names.add(match.group(1))
    return names


def base_name(name: str, documented: dict[str, str]) -> str:
    """A histogram's `_bucket`/`_sum`/`_count` series back to its documented name."""
    for suffix in _HISTOGRAM_SUFFIXES:
        base = name.removesuffix(suffix)
        if base != name and documented.get(base) == "histogram":
            return base
    return name


def substitute(expr: str, values: dict[str, str] | None = None) -> str:
    """An expression with Grafana's variables replaced, ready for Prometheus's query API."""
    replacements = {
        "__rate_interval": "1m",
        "__interval": "15s",
        "__range": "5m",
        **(values or {}),
    }
    return re.sub(
        r"\$\{?(\w+)\}?",
        lambda m: replacements.get(m.group(1), ".*"),
        expr,
    )

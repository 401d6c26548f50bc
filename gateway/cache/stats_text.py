"""What `gateway cache stats` prints of a running gateway's cache verification: a readable
block per model from GET /admin/cache/stats's `verification` (ModelVerification.as_json), the
model's pooled figures first, then each tenant's own threshold and precision."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Json = dict[str, Any]


def verification_lines(verification: Mapping[str, Json]) -> list[str]:
    if not verification:
        return ["verification: no model verifies its cache hits (cache.verify.sample_rate)"]
    lines = ["verification:"]
    for model, state in sorted(verification.items()):
        lines.extend(_model_lines(model, state))
    return lines


def _model_lines(model: str, state: Json) -> list[str]:
    configured, effective = state["configured_threshold"], state["effective_threshold"]
    raised = " (raised by verification)" if effective > configured else ""
    budget = state["max_error_rate"]
    within = state.get("within_budget")
    precision = state["precision"]
    explored = state["explored"]
    if precision["point"] is None:
        measured = "precision: no verdicts yet"
    else:
        measured = (
            f"precision {precision['point']:.3f} [{precision['lower']:.3f}, "
            f"{precision['upper']:.3f}] on {precision['verified']} verdicts "
            f"({precision['disagreements']} disagreeing, effective n {precision['effective_n']})"
        )
    verdict = "unknown (too few verdicts)" if within is None else ("yes" if within else "NO")
    tenants = [_tenant_line(name, own) for name, own in sorted(state.get("tenants", {}).items())]
    return [
        f"  {model}:",
        f"    threshold {configured:.4f} configured -> {effective:.4f} effective{raised}",
        f"    {measured}",
        f"    budget {budget:.1%} wrong (lower bound >= {1 - budget:.3f}): "
        f"within budget: {verdict}",
        f"    sample rate {state['sample_rate']:.1%}; explored {explored['verified']} held-back "
        f"candidates, {explored['agreeing']} agreeing",
        *(["    per tenant (each moves only its own threshold):"] if tenants else []),
        *tenants,
    ]


def _tenant_line(name: str, own: Json) -> str:
    precision = own["precision"]
    measured = (
        "no verdicts yet"
        if precision["point"] is None
        else f"precision {precision['point']:.3f} on {precision['verified']} verdicts "
        f"({precision['disagreements']} disagreeing)"
    )
    return f"      {name}: threshold {own['effective_threshold']:.4f}, {measured}"

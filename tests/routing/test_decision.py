"""`x-gateway-route`: today's fields first and unchanged (clients parse them), then the predicted
loss, the terms that moved it and the nearest exemplar; ASCII whatever the names."""

from __future__ import annotations

from gateway.routing.decision import RouteDecision

PARTS = {
    "bias": -2.5,
    "last_user_tokens": 0.61,
    "embedding": -0.2,
    "math": 0.33,
    "questions": 0.05,
    "exemplars": -0.1,
}


def fields(header: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in header.split("; "))


def test_todays_fields_come_first_then_loss_drivers_and_nearest() -> None:
    decision = RouteDecision(
        "auto", "cheap", 0, 0.12345, "score", PARTS, nearest=(0.812, 0.9), variant="minilm"
    )
    header = decision.header()
    assert header.startswith("alias=auto; model=cheap; tier=0; score=0.123; reason=score; ")
    got = fields(header)
    assert got["loss"] == got["score"] == "0.123"
    assert got["drivers"] == "last_user_tokens:+0.61,math:+0.33,embedding:-0.20"
    assert got["nearest"] == "0.81/0.90"
    assert got["variant"] == "minilm"  # which fitted model scored it


def test_the_bias_is_never_a_driver_however_large() -> None:
    decision = RouteDecision("auto", "cheap", 0, 0.1, "score", {"bias": -9.0, "math": 0.01})
    assert decision.drivers() == [("math", 0.01)]


def test_without_terms_or_voters_those_fields_are_left_out() -> None:
    header = RouteDecision("auto", "strong", 1, 0.6, "escalated:tools", {"bias": -1.0}).header()
    assert set(fields(header)) == {"alias", "model", "tier", "score", "reason", "loss"}


def test_the_header_is_ascii_and_still_splits_with_any_configured_name() -> None:
    odd = {"bias": -1.0, "数学; x=1": 0.5}
    decision = RouteDecision("自动", "模型; tier=9", 1, 0.7, "score", odd, nearest=(0.5, 0.5))
    header = decision.header()
    assert header.isascii()
    got = fields(header)
    assert got["tier"] == "1" and got["reason"] == "score"
    assert got["drivers"].endswith(":+0.50") and "; " not in got["drivers"]

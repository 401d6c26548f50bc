"""What is retried, how long the gateway waits, and in what order deployments are tried."""

from __future__ import annotations

import time
from collections import Counter
from email.utils import formatdate

import pytest

from gateway.config import Deployment, RetryConfig
from gateway.errors import (
    GatewayError,
    InvalidRequest,
    ProviderMisconfigured,
    UpstreamError,
    UpstreamTimeout,
)
from gateway.resilience.executor import _weighted_order
from gateway.resilience.retry import (
    Backoff,
    Outcome,
    classify,
    failure_reason,
    retry_after_seconds,
)


def rate_limited(retry_after: str | None = None) -> GatewayError:
    headers = {"Retry-After": retry_after} if retry_after is not None else None
    return GatewayError("slow down", status=429, headers=headers)


def misconfigured(code: str) -> ProviderMisconfigured:
    return ProviderMisconfigured("x", code=code, provider="p")


@pytest.mark.parametrize(
    ("err", "outcome", "reason"),
    [
        (UpstreamError("boom"), Outcome.RETRY, "server_error"),
        (UpstreamTimeout("slow"), Outcome.RETRY, "timeout"),
        (rate_limited(), Outcome.RETRY, "rate_limited"),
        (UpstreamError("x", code="upstream_unreachable"), Outcome.RETRY, "unreachable"),
        (UpstreamError("x", code="upstream_invalid_response"), Outcome.RETRY, "invalid_response"),
        (misconfigured("upstream_auth_failed"), Outcome.MOVE_ON, "auth_failed"),
        (misconfigured("upstream_model_unknown"), Outcome.MOVE_ON, "model_unknown"),
        (misconfigured("upstream_not_found"), Outcome.MOVE_ON, "not_found"),
        (misconfigured("upstream_unreachable"), Outcome.MOVE_ON, "unreachable"),
        (InvalidRequest("bad"), Outcome.GIVE_UP, "client_error"),
        (GatewayError("gone", status=404), Outcome.GIVE_UP, "client_error"),
    ],
)
def test_classification(err: GatewayError, outcome: Outcome, reason: str) -> None:
    assert classify(err) is outcome
    assert failure_reason(err) == reason


def test_retry_after_in_seconds_or_as_a_date() -> None:
    assert retry_after_seconds(rate_limited("3")) == 3.0
    assert retry_after_seconds(rate_limited("0.5")) == 0.5
    assert retry_after_seconds(rate_limited()) is None
    assert retry_after_seconds(rate_limited("soon")) is None
    in_ten = retry_after_seconds(rate_limited(formatdate(time.time() + 10, usegmt=True)))
    assert in_ten is not None and 8 <= in_ten <= 10
    past = retry_after_seconds(rate_limited(formatdate(time.time() - 100, usegmt=True)))
    assert past == 0.0


def test_backoff_grows_exponentially_with_jitter_up_to_the_cap() -> None:
    backoff = Backoff(RetryConfig(attempts=10, initial_backoff_ms=100, max_backoff_ms=1000))
    err = UpstreamError("boom")
    for attempt, ceiling in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (8, 1.0)]:
        delays = [backoff.delay(attempt, err) for _ in range(200)]
        assert all(d is not None and ceiling / 2 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 100, "jittered, not lockstep"


def test_backoff_stops_at_the_attempt_limit_and_for_client_errors() -> None:
    backoff = Backoff(RetryConfig(attempts=3))
    assert backoff.delay(2, UpstreamError("boom")) is not None
    assert backoff.delay(3, UpstreamError("boom")) is None
    assert backoff.delay(1, InvalidRequest("bad")) is None
    assert backoff.delay(1, misconfigured("upstream_auth_failed")) is None


def test_retry_after_is_obeyed_up_to_the_configured_maximum() -> None:
    backoff = Backoff(RetryConfig(attempts=3, max_retry_after_seconds=5))
    assert backoff.delay(1, rate_limited("4")) == 4.0
    assert backoff.delay(1, rate_limited("6")) is None, "longer: try elsewhere instead"


def test_weighted_order_puts_each_first_in_proportion_to_its_weight() -> None:
    heavy, light = Deployment("a", "m", 3.0), Deployment("b", "m", 1.0)
    firsts = Counter(_weighted_order((heavy, light))[0] for _ in range(4000))
    assert 0.72 <= firsts[heavy] / 4000 <= 0.78
    assert sorted(d.provider for d in _weighted_order((heavy, light))) == ["a", "b"]

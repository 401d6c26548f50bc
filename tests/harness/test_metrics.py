"""Reading /metrics as a scraper does."""

from __future__ import annotations

from gateway.testing.harness.metrics import metric_value

EXPOSITION = """\
# TYPE gateway_requests_total counter
gateway_requests_total{model="a",status="200"} 3.0
gateway_requests_total{model="a",status="500"} 1.0
gateway_requests_total{model="b",status="200"} 5.0
# TYPE gateway_lookup_seconds histogram
gateway_lookup_seconds_bucket{le="+Inf"} 4.0
gateway_lookup_seconds_sum 0.5
gateway_lookup_seconds_count 4.0
"""


def test_series_are_summed_over_the_labels_not_given() -> None:
    assert metric_value(EXPOSITION, "gateway_requests_total") == 9.0
    assert metric_value(EXPOSITION, "gateway_requests_total", model="a") == 4.0
    assert metric_value(EXPOSITION, "gateway_requests_total", model="a", status="500") == 1.0
    assert metric_value(EXPOSITION, "gateway_lookup_seconds_sum") == 0.5
    assert metric_value(EXPOSITION, "gateway_requests_total", model="c") == 0.0

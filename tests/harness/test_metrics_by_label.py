"""A metric's samples from the Prometheus text format, summed by the labels asked for."""

from __future__ import annotations

from gateway.testing.harness.metrics import by_label, samples

TEXT = """\
# HELP gateway_cache_lookups_total Cache lookups.
# TYPE gateway_cache_lookups_total counter
gateway_cache_lookups_total{model="a",result="miss"} 3.0
gateway_cache_lookups_total{model="b",result="miss"} 2.0
gateway_cache_lookups_total{model="b",result="hit_exact"} 4.0
# HELP gateway_requests_total Requests.
# TYPE gateway_requests_total counter
gateway_requests_total{model="a"} 9.0
"""


def test_only_the_named_metric_by_its_labels() -> None:
    found = samples(TEXT, "gateway_cache_lookups_total")
    assert found == {
        (("model", "a"), ("result", "miss")): 3.0,
        (("model", "b"), ("result", "miss")): 2.0,
        (("model", "b"), ("result", "hit_exact")): 4.0,
    }


def test_summed_over_the_other_labels() -> None:
    found = samples(TEXT, "gateway_cache_lookups_total")
    assert by_label(found, "result") == {"miss": 5.0, "hit_exact": 4.0}
    assert by_label(found, "model", "result")["b miss"] == 2.0

"""Reading a Prometheus exposition (GET /metrics) the way a scraper does."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def metric_value(exposition: str, sample: str, **labels: str) -> float:
    """The value of one sample (e.g. `gateway_shed_total`, `..._seconds_sum`) summed over the
    series whose labels include `labels`; 0.0 when there is none."""
    return sum(
        s.value
        for family in text_string_to_metric_families(exposition)
        for s in family.samples
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
    )

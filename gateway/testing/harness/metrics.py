"""Reading a Prometheus exposition (GET /metrics) the way a scraper does."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from gateway.testing.harness.sync_http import http

Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs


def metric_value(exposition: str, sample: str, **labels: str) -> float:
    """The value of one sample (e.g. `gateway_shed_total`, `..._seconds_sum`) summed over the
    series whose labels include `labels`; 0.0 when there is none."""
    return sum(
        s.value
        for family in text_string_to_metric_families(exposition)
        for s in family.samples
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
    )


def samples(exposition: str, sample: str) -> dict[Labels, float]:
    """Every series of one sample, by its labels."""
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(exposition)
        for s in family.samples
        if s.name == sample
    }


def by_label(found: dict[Labels, float], *names: str) -> dict[str, float]:
    """`found` summed over every label but `names`, keyed by their values joined by a space
    (e.g. by_label(samples(text, "gateway_upstream_failures_total"), "deployment", "reason"))."""
    out: dict[str, float] = {}
    for labels, value in found.items():
        key = " ".join(dict(labels).get(n, "") for n in names)
        out[key] = out.get(key, 0.0) + value
    return out


def scrape(base_url: str, sample: str, timeout: float = 10.0) -> dict[Labels, float]:
    """`samples` of `base_url`/metrics; raises on a status other than 200."""
    reply = http("GET", base_url + "/metrics", timeout=timeout)
    if reply.status != 200:
        raise RuntimeError(f"GET {base_url}/metrics: HTTP {reply.status}")
    return samples(reply.body.decode(), sample)

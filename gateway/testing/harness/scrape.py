"""One metric's samples read from a server's /metrics page (the Prometheus text format), for a
benchmark or test that counts what a server says it did (cache lookups by result, upstream
failures by reason) next to what its clients saw."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from gateway.testing.harness.sync_http import http

Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs


def samples(text: str, name: str) -> dict[Labels, float]:
    """The samples named `name` (with its suffix, e.g. `..._total`) in `text`, by labels."""
    out: dict[Labels, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                out[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def scrape(base_url: str, name: str, timeout: float = 10.0) -> dict[Labels, float]:
    """`samples` of `base_url`/metrics; raises on a status other than 200."""
    reply = http("GET", base_url + "/metrics", timeout=timeout)
    if reply.status != 200:
        raise RuntimeError(f"GET {base_url}/metrics: HTTP {reply.status}")
    return samples(reply.body.decode(), name)


def by_label(found: dict[Labels, float], *names: str) -> dict[str, float]:
    """`found` summed over every label but `names`, keyed by their values joined by a space."""
    out: dict[str, float] = {}
    for labels, value in found.items():
        key = " ".join(dict(labels).get(n, "") for n in names)
        out[key] = out.get(key, 0.0) + value
    return out

"""Semantic-hit latency over HTTP with cache verification on and off, in the same run.

Two gateway processes behind one fake upstream (bench/cache_perf_hit.py's harness): one with
verification off, one with `verify: {sample_rate: 1.0}` (every semantic hit drawn: the worst
case for the hit path; the shadow calls themselves run after the response). Both are filled
with the same questions; the rewordings served as semantic hits by both are then sent in
rounds, alternating which gateway goes first, one request at a time. Prints the medians, the
on/off ratio and the difference, and the shadow calls the "on" gateway made.

    python bench/cache_verify_latency.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import aiohttp
from cache_perf_hit import MODEL, request_body, set_upstream_latency
from cache_questions import FILLER, PAIRS

from gateway.testing.harness.cached_gateway import (
    ask,
    cache_header,
    fill,
    semantic_hits,
    start_cached_gateway,
)
from gateway.testing.harness.metrics import metric_value
from gateway.testing.harness.procstat import machine_line
from gateway.testing.harness.starters import start_fake_upstream
from gateway.testing.harness.stats import median
from gateway.testing.harness.sync_http import http

VERIFY = {"sample_rate": 1.0, "max_per_minute": 100_000}


async def timed(session: aiohttp.ClientSession, base: str, text: str) -> float | None:
    """The latency of one semantic hit in ms, or None when it was not one."""
    started = time.perf_counter()
    outcome = await ask(session, base + "/v1/chat/completions", request_body(text))
    elapsed = (time.perf_counter() - started) * 1000
    return elapsed if cache_header(outcome) == "hit-semantic" else None


async def run(rounds: int) -> None:
    print(machine_line())
    with tempfile.TemporaryDirectory(prefix="verify-latency-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        fake = stack.enter_context(start_fake_upstream(work))
        set_upstream_latency(fake.url, 0.0)
        gateways = {
            "off": stack.enter_context(
                start_cached_gateway(work, fake.url + "/v1", MODEL, name="gateway-off")
            ),
            "on": stack.enter_context(
                start_cached_gateway(
                    work, fake.url + "/v1", MODEL, name="gateway-on", verify=VERIFY
                )
            ),
        }
        stored = [q for q, _ in PAIRS] + FILLER
        rewordings = [t for _, t in PAIRS]
        async with aiohttp.ClientSession() as session:
            hits: set[str] | None = None
            for gw in gateways.values():
                await fill(session, gw.url, stored, request_body)
                found = set((await semantic_hits(session, gw.url, rewordings, request_body)).hits)
                hits = found if hits is None else hits & found
            assert hits, "no rewording is a semantic hit on both gateways"
            times: dict[str, list[float]] = {"off": [], "on": []}
            for r in range(rounds):
                for i, text in enumerate(sorted(hits)):
                    order = ("off", "on") if (i + r) % 2 else ("on", "off")
                    for name in order:
                        ms = await timed(session, gateways[name].url, text)
                        if ms is not None:
                            times[name].append(ms)
        on_metrics = http("GET", gateways["on"].url + "/metrics").body.decode()
        shadow = metric_value(on_metrics, "gateway_cache_shadow_calls_total", model=MODEL)
    off, on = median(times["off"]), median(times["on"])
    counts = f"off {len(times['off'])}, on {len(times['on'])}"
    print(f"\nsemantic hits timed: {counts} ({len(hits)} texts, {rounds} rounds)")
    print("| verification | median ms |\n|---|---|")
    print(f"| off | {off:.2f} |\n| on (every hit drawn) | {on:.2f} |")
    print(
        f"\nmedian on/off {on / off:.2f}, difference {on - off:+.2f} ms; shadow calls {shadow:.0f}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    asyncio.run(run(parser.parse_args().rounds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

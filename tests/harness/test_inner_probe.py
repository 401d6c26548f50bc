"""The probe inside a server process: loaded by the environment alone, it reports the
process's asyncio tasks and threads without the server's help."""

from __future__ import annotations

import collections
import sys
import time
from pathlib import Path

from gateway.testing.harness.inner_probe import containers, probe_env, read_probe
from gateway.testing.harness.process import Server

# A stand-in server: an event loop with five sleeping tasks, nothing that knows of the probe.
LOOP = """
import asyncio
async def nap():
    await asyncio.sleep(60)
async def main():
    tasks = [asyncio.create_task(nap()) for _ in range(5)]
    print("up", flush=True)
    await asyncio.gather(*tasks)
asyncio.run(main())
"""


def test_a_child_started_with_its_environment_reports_its_tasks(tmp_path: Path) -> None:
    out = tmp_path / "probe.json"
    env = probe_env(tmp_path, out)
    with Server("loop", [sys.executable, "-c", LOOP], tmp_path, env) as server:
        server.wait_ready(lambda: "up" if "up" in server.output() else None, timeout=20)
        deadline = time.monotonic() + 20
        while not read_probe(out) and time.monotonic() < deadline:
            time.sleep(0.2)
        sample = read_probe(out)
    assert sample["tasks"] == 6, sample  # main() and its five naps
    assert sample["top_tasks"]["nap"] == 5
    assert sample["threads"] >= 2  # the loop's and the probe's
    assert sample["store"] == {} and sample["store_type"] is None  # no gateway cache here


def test_nothing_is_read_before_the_first_sample(tmp_path: Path) -> None:
    assert read_probe(tmp_path / "missing.json") == {}


def test_containers_are_measured_by_length() -> None:
    class Store:
        def __init__(self) -> None:
            self.entries = {"a": 1, "b": 2}
            self.order = collections.deque([1, 2, 3])
            self.name = "not a container"

        def __len__(self) -> int:
            return 2

    assert containers(Store()) == {"entries": 2, "order": 3, "__len__": 2}

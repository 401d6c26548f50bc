"""Slow and idle clients against one gateway process (`gateway serve`, uvloop, the demo
provider): one connection sending its request headers a byte a second, and `--idle`
connections that never send a byte, followed for `--seconds`; how long the dribbler lived, how
many idle connections were still open every 5 s, and how many were refused at once.

    python bench/slow_clients.py --seconds 100 --idle 2000     # the defaults: 60 s, 75 s
    python bench/slow_clients.py --max-connections 1000 --seconds 10 --idle 2000
    python bench/slow_clients.py --root /path/to/another/checkout  # the same, other code

docs/RELIABILITY.md ("Slow and idle clients") holds the numbers, before and after.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from gateway.testing.harness.configs import write_config
from gateway.testing.harness.options import option, parse_options
from gateway.testing.harness.starters import REPO_ROOT, listening, spawn_gateway

SAMPLE_SECONDS = 5.0


@dataclass(frozen=True)
class Options:
    seconds: float = option(100.0, "how long to follow the connections")
    idle: int = option(2000, "connections that never send")
    max_connections: int | None = option(None, "server.max_connections (default: the config's)")
    root: Path = option(REPO_ROOT, "the checkout whose gateway runs")


def config(opts: Options) -> dict[str, Any]:
    server: dict[str, Any] = {"host": "127.0.0.1", "port": 0, "access_log": False}
    if opts.max_connections is not None:
        server["max_connections"] = opts.max_connections
    return {
        "server": {**server, "watch_config": False},
        "providers": {"demo": {"type": "demo"}},
        "models": [{"name": "demo", "provider": "demo"}],
    }


async def dribble(host: str, port: int, seconds: float) -> float:
    """Seconds until the gateway closed the connection (`seconds` if it did not)."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: bench\r\nX-Slow: ")
    started = time.monotonic()
    try:
        while time.monotonic() - started < seconds:
            writer.write(b"a")
            try:
                if not await asyncio.wait_for(reader.read(65536), 1.0):
                    break
            except TimeoutError:
                continue
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()
    return min(time.monotonic() - started, seconds)


async def measure(opts: Options, host: str, port: int) -> dict[str, Any]:
    dribbler = asyncio.create_task(dribble(host, port, opts.seconds))
    idle = [await asyncio.open_connection(host, port) for _ in range(opts.idle)]
    await asyncio.sleep(1.0)
    refused = 0
    for reader, _ in idle:
        if reader._buffer.startswith(b"HTTP/1.1 503"):  # type: ignore[attr-defined]
            refused += 1
    reads = [asyncio.create_task(reader.read()) for reader, _ in idle]
    started, samples = time.monotonic(), []
    while time.monotonic() - started < opts.seconds:
        await asyncio.sleep(SAMPLE_SECONDS)
        still_open = sum(not read.done() for read in reads)
        samples.append((round(time.monotonic() - started), still_open))
        print(f"  {samples[-1][0]:>4} s: {still_open} idle connections open", flush=True)
    lived = await dribbler
    for task in reads:
        task.cancel()
    for _, writer in idle:
        writer.close()
    return {"dribbler_lived_s": round(lived, 1), "refused": refused, "open_by_time": samples}


def main(argv: list[str] | None = None) -> int:
    opts = parse_options(Options, argv, __doc__)
    with tempfile.TemporaryDirectory(prefix="gateway-slow-") as tmp:
        workdir = Path(tmp)
        path = write_config(workdir, config(opts))
        gateway = listening(spawn_gateway(workdir, path, root=opts.root), 60)
        try:
            host, port = gateway.url.removeprefix("http://").rsplit(":", 1)
            result = uvloop.run(measure(opts, host, int(port)))
        finally:
            gateway.stop()
    print(
        f"dribbler lived {result['dribbler_lived_s']} s (followed {opts.seconds:g} s); "
        f"refused at once {result['refused']} of {opts.idle}; idle connections open by time: "
        f"{result['open_by_time']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

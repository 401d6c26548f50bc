"""Running a fake server from the command line (`python -m gateway.testing.fake_...`)."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable


def run_fake(
    description: str, default_port: int, start: Callable[[str, int], Awaitable[str]]
) -> None:
    """Parse --host/--port, `start` the fake (it returns the line to print), serve until ^C."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=default_port)
    args = parser.parse_args()

    async def run() -> None:
        print(await start(args.host, args.port), flush=True)
        await asyncio.Event().wait()

    try:
        import uvloop

        uvloop.run(run())
    except KeyboardInterrupt:
        pass

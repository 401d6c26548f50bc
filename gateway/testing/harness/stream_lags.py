"""How long the cache's Redis Stream events take to arrive, seen from outside the replicas: a
follower process (`python -m gateway.testing.harness.stream_lags URL OUT STREAM...`) reads
every new event of the streams and appends "write_ts lag_seconds" lines to OUT (the writer's
clock is in the event, `ts`), flushed once a second; `StreamLags` reads them back by window.
"""

from __future__ import annotations

import bisect
import contextlib
import sys
import time
from pathlib import Path
from typing import Any

import redis


def follow(url: str, out: Path, streams: list[str]) -> None:
    """Until killed: each new event's write time and delay, from the newest event on."""
    client = redis.Redis.from_url(url)
    last: dict[Any, Any] = {}
    for stream in streams:
        newest: Any = client.xrevrange(stream, count=1)
        last[stream] = newest[0][0] if newest else b"0-0"
    with out.open("a") as f:
        while True:
            replies: Any = client.xread(last, count=1000, block=1000)
            now = time.time()
            for stream, events in replies:
                for event_id, fields in events:
                    last[stream.decode()] = event_id
                    ts = fields.get(b"ts")
                    if ts:
                        f.write(f"{float(ts):.6f} {now - float(ts):.6f}\n")
            f.flush()


class StreamLags:
    """The follower's samples, looked up by write-time window."""

    def __init__(self, path: Path) -> None:
        pairs = []
        with contextlib.suppress(OSError):
            for line in path.read_text().splitlines():
                with contextlib.suppress(ValueError):
                    ts, lag = line.split()
                    pairs.append((float(ts), float(lag)))
        pairs.sort()
        self.ts = [p[0] for p in pairs]
        self.lags = [p[1] for p in pairs]

    def window(self, start: float, end: float) -> list[float]:
        """The lags (seconds) of the events written between `start` and `end` (unix time)."""
        return self.lags[bisect.bisect_left(self.ts, start) : bisect.bisect_right(self.ts, end)]


if __name__ == "__main__":
    follow(sys.argv[1], Path(sys.argv[2]), sys.argv[3:])

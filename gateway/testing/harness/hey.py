"""hey (Debian package `hey`) as an external load generator: one fixed request body sent by C
workers for N requests (`-n`) or S seconds (`-z`), in its own process, so the load's CPU never
counts against the server measured and no Python client sits between the two.

Its per-request rows (`-o csv`: response time, status code, start offset) become the harness's
`LoadResult`, so benchmarks print the same tables and statistics for both generators. hey only
sends one body: load that must miss the cache (a new prompt each time) comes from `load.py`.
What the rows cannot say: a request that failed without an HTTP answer has no row, so with
`-n` the missing rows are counted as errors; with `-z` they cannot be (hey's summary would
list them, the CSV does not).
"""

from __future__ import annotations

import asyncio
import csv
import io
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gateway.testing.harness.load import JSON_HEADERS, LoadResult


class HeyError(RuntimeError):
    """hey exited with an error (its stderr is the message)."""


def hey_path() -> str | None:
    """The hey binary on PATH, None when it is not installed."""
    return shutil.which("hey")


@dataclass(frozen=True)
class HeyRun:
    """One hey run: `count` requests in all, or for `seconds` (which wins, as in hey)."""

    url: str
    body: bytes
    concurrency: int
    count: int | None = None
    seconds: float | None = None
    headers: Mapping[str, str] = field(default_factory=lambda: dict(JSON_HEADERS))
    timeout_s: int = 60

    @property
    def expected(self) -> int | None:
        """How many requests hey sends with `-n`: each worker sends count // concurrency."""
        if self.seconds is not None or self.count is None:
            return None
        return self.count // self.concurrency * self.concurrency

    def argv(self, body_file: Path, binary: str = "hey") -> list[str]:
        if self.seconds is None and self.count is None:
            raise ValueError("a hey run needs a count or a duration")
        if self.count is not None and self.count < self.concurrency:
            raise ValueError("hey sends at least one request per worker: count >= concurrency")
        argv = [binary, "-m", "POST", "-D", str(body_file), "-c", str(self.concurrency)]
        argv += ["-t", str(self.timeout_s), "-o", "csv"]
        for name, value in self.headers.items():
            if name.lower() == "content-type":
                argv += ["-T", value]
            else:
                argv += ["-H", f"{name}: {value}"]
        if self.seconds is not None:
            argv += ["-z", f"{self.seconds:.3f}s"]
        else:
            argv += ["-n", str(self.count)]
        return [*argv, self.url]


def parse_csv(text: str, expected: int | None = None, ok_status: int = 200) -> LoadResult:
    """hey's `-o csv` rows as a `LoadResult`: rows with `ok_status` are latencies, other
    statuses errors, and so are rows missing from `expected` (requests without an answer).
    The run's length is from the first request's start to the last answer's end."""
    result = LoadResult()
    rows = list(csv.DictReader(io.StringIO(text)))
    for row in rows:
        if int(row["status-code"]) == ok_status:
            result.latencies_s.append(float(row["response-time"]))
        else:
            result.errors += 1
    if expected is not None:
        result.errors += max(0, expected - len(rows))
    if rows:
        starts = [float(r["offset"]) for r in rows]
        ends = [float(r["offset"]) + float(r["response-time"]) for r in rows]
        result.seconds = max(ends) - min(starts)
    return result


async def run_hey(run: HeyRun, ok_status: int = 200) -> LoadResult:
    """Run hey to its end (without blocking the event loop) and read its rows."""
    binary = hey_path()
    if binary is None:
        raise HeyError("hey is not installed (Debian package `hey`)")
    with tempfile.TemporaryDirectory(prefix="hey-") as tmp:
        body_file = Path(tmp) / "body"
        body_file.write_bytes(run.body)
        proc = await asyncio.create_subprocess_exec(
            *run.argv(body_file, binary),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
    if proc.returncode != 0:
        raise HeyError(f"hey exited with {proc.returncode}: {err.decode(errors='replace')}")
    return parse_csv(out.decode(), run.expected, ok_status)

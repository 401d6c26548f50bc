"""A py-spy profile of a server process while a benchmark loads it, and what the profile says.

`recording` attaches `py-spy record -f raw --threads` to a pid for the block (stopped with
SIGINT when the block ends, which makes py-spy write what it has). The raw format is one
collapsed stack per line, "thread (TID): NAME;frame;frame... COUNT", each frame "function
(file:line)". `summary` reads it: each thread's share of the samples, the functions with
the largest inclusive share (a function counts once per stack it is on, whatever its line)
and those most often running themselves (innermost): the text docs/BENCHMARKS.md quotes to
show where a path's time goes. py-spy leaves idle threads out, but a thread blocked in C
(SQLite, a socket) can count as busy: the CPU split by thread comes from /proc instead.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_LINE = re.compile(r"^(?P<stack>.*) (?P<count>\d+)$")
_FRAME_LINE = re.compile(r":\d+\)$")
# Innermost frames that are waiting, though py-spy counts them as busy: an executor's worker
# blocked on its queue (SimpleQueue.get, in C) between jobs.
IDLE_LEAVES = frozenset({"_worker (concurrent/futures/thread.py)"})


def py_spy_path() -> str | None:
    return shutil.which("py-spy")


@dataclass(frozen=True)
class Stack:
    thread: str  # the Python thread's name, as py-spy's --threads gives it
    frames: tuple[str, ...]  # outermost first, each "function (file)" without the line
    count: int


def parse_raw(text: str) -> list[Stack]:
    """py-spy's raw (collapsed) output; lines in another shape are skipped."""
    stacks = []
    for line in text.splitlines():
        found = _LINE.match(line.strip())
        if not found:
            continue
        parts = found["stack"].split(";")
        thread = parts[0].split(": ", 1)[-1] if parts[0].startswith("thread (") else ""
        frames = parts[1:] if parts[0].startswith("thread (") else parts
        unlined = tuple(_FRAME_LINE.sub(")", f) for f in frames)
        stacks.append(Stack(thread, unlined, int(found["count"])))
    return stacks


def shares_by_thread(stacks: list[Stack]) -> list[tuple[str, float]]:
    """Each thread's share of all samples, largest first."""
    counts: Counter[str] = Counter()
    for stack in stacks:
        counts[stack.thread] += stack.count
    total = sum(counts.values()) or 1
    return [(name, n / total) for name, n in counts.most_common()]


def top_inclusive(stacks: list[Stack], n: int = 30) -> list[tuple[str, float]]:
    """The `n` functions on the most samples (share of all samples), largest first."""
    counts: Counter[str] = Counter()
    for stack in stacks:
        for frame in set(stack.frames):
            counts[frame] += stack.count
    total = sum(s.count for s in stacks) or 1
    return [(frame, c / total) for frame, c in counts.most_common(n)]


def top_self(stacks: list[Stack], n: int = 15) -> list[tuple[str, float]]:
    """The `n` functions most often innermost (running themselves), share of all samples."""
    counts: Counter[str] = Counter()
    for stack in stacks:
        counts[stack.frames[-1] if stack.frames else "(no frame)"] += stack.count
    total = sum(s.count for s in stacks) or 1
    return [(frame, c / total) for frame, c in counts.most_common(n)]


def summary(text: str, n: int = 30) -> str:
    """Threads, then the top functions inclusive and by self time, of a raw profile (idle
    executor workers left out)."""
    every = parse_raw(text)
    stacks = [s for s in every if not s.frames or s.frames[-1] not in IDLE_LEAVES]
    samples = sum(s.count for s in stacks)
    idle = sum(s.count for s in every) - samples
    lines = [f"{samples} samples ({idle} more of executor workers waiting for a job, left out)"]
    lines += ["", "share  thread"]
    lines += [f"{share:5.1%}  {name}" for name, share in shares_by_thread(stacks)]
    lines += ["", "share  function (inclusive)"]
    lines += [f"{share:5.1%}  {frame}" for frame, share in top_inclusive(stacks, n)]
    lines += ["", "share  function (self)"]
    lines += [f"{share:5.1%}  {frame}" for frame, share in top_self(stacks, n // 2)]
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def recording(
    pid: int, out: Path, max_seconds: float, rate: int = 200, native: bool = False
) -> Iterator[Path]:
    """py-spy samples `pid` into `out` (raw format) for the block, at most `max_seconds`."""
    binary = py_spy_path()
    if binary is None:
        raise RuntimeError("py-spy is not installed (pip install py-spy)")
    argv = [binary, "record", "-p", str(pid), "-d", str(max(1, round(max_seconds)))]
    argv += ["-r", str(rate), "-f", "raw", "--threads", "-o", str(out)]
    argv += ["--native"] if native else []
    log = out.with_suffix(".py-spy.log")
    with log.open("wb") as sink:
        spy = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT)
    try:
        yield out
    finally:
        if spy.poll() is None:
            spy.send_signal(signal.SIGINT)  # py-spy writes the samples it has, then exits
        spy.wait(30)
    if not out.exists():
        raise RuntimeError(f"py-spy wrote no profile: {log.read_text(errors='replace')[-2000:]}")

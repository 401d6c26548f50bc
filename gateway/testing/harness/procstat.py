"""What a benchmark reads of processes and the machine from /proc (Linux): CPU time (of a
process and of each of its threads), memory, threads, open files, child processes, the load
average.

A server's CPU time per request hardly moves when other work shares the cores, unlike its
latency, so it shows the server's own cost; the load average is printed so a reader can judge
the machine's noise. Each reading is NaN (or 0) once the process is gone.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path


def _clock_ticks() -> int:
    return os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / _clock_ticks()


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """User + system CPU seconds so far of each of a process's threads, summed by thread name
    (/proc/PID/task/TID/comm: the names gateway/util/threads.py gives its workers; the event
    loop's thread is the process's own name). Empty once the process is gone."""
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended between the listing and the reading
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / _clock_ticks()
    return out


class CpuWatch:
    """A process's CPU time over a stretch of a benchmark, whole and by thread: started when
    made, read by `per_request`."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._total, self._threads = cpu_seconds(pid), thread_cpu_seconds(pid)

    def per_request(self, count: int) -> tuple[float, dict[str, float]]:
        """CPU ms per request since the start, and the same by thread name (NaN for none)."""
        total, threads = cpu_seconds(self.pid), thread_cpu_seconds(self.pid)
        by_thread = {
            name: _ms_per(self._threads.get(name, 0.0), now, count) for name, now in threads.items()
        }
        return _ms_per(self._total, total, count), by_thread


def _ms_per(before: float, after: float, count: int) -> float:
    return (after - before) * 1000 / count if count else math.nan


def machine_busy() -> float:
    """Busy CPU seconds of all cores since boot (everything but idle and iowait)."""
    try:
        first = Path("/proc/stat").read_text().split("\n", 1)[0]
        fields = [int(x) for x in first.split()[1:]]
    except (OSError, ValueError):
        return math.nan
    busy = sum(fields[:8]) - fields[3] - fields[4]  # user..steal, minus idle and iowait
    return busy / _clock_ticks()


def _status_field(pid: int, name: str) -> int | None:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith(name + ":"):
            return int(line.split()[1])
    return None


def rss_mb(pid: int) -> float:
    """Resident memory in MiB."""
    kib = _status_field(pid, "VmRSS")
    return math.nan if kib is None else kib / 1024


def threads(pid: int) -> int:
    return _status_field(pid, "Threads") or 0


def open_files(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def children(pid: int) -> list[int]:
    """Direct children of a process (e.g. nginx's workers)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError, ValueError):
            out += [int(p) for p in (task / "children").read_text().split()]
    return out


def load_average() -> str:
    """The 1/5/15-minute load average, as /proc/loadavg gives it."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def machine_line() -> str:
    """Date, architecture, cores, Python and load: the line a benchmark starts its output with."""
    return (
        f"date {time.strftime('%Y-%m-%d %H:%M')}, {platform.machine()}, {os.cpu_count()} "
        f"cores, python {platform.python_version()}, load {os.getloadavg()[0]:.2f}"
    )


@contextlib.contextmanager
def busy_core(seconds: float = 300) -> Iterator[int]:
    """A process spinning on one core for the block (never longer than `seconds`): what the
    code under test meets when another thread or process keeps a core busy. Yields its pid."""
    code = f"import time\nend = time.time() + {seconds}\nwhile time.time() < end:\n    pass\n"
    spin = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(0.2)  # let it get going
        yield spin.pid
    finally:
        spin.kill()
        spin.wait()

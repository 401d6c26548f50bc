"""What the bench scripts share: servers run as subprocesses on loopback ports, HTTP probes, and
the measurements taken of them. Scripts run as `python bench/NAME.py` import it as `procs`
(bench/ is on sys.path then)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

JSON_HEADERS = {"Content-Type": "application/json"}


class Server:
    """A subprocess on a loopback port, its output in a log file, stopped in `stop()`."""

    def __init__(
        self, name: str, argv: list[str], workdir: Path, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.log_path = workdir / f"{name}.log"
        self._log = self.log_path.open("wb")
        # Own session: stop() signals the group of this one child and nothing else.
        self.proc = subprocess.Popen(
            argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            cwd=workdir,
            start_new_session=True,
        )

    def wait_ready(self, probe: Callable[[], str | None], timeout: float) -> str:
        """Poll `probe` until it gives the server's base URL; fail with the log's tail."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.proc.returncode}):\n{self.tail()}")
            url = probe()
            if url:
                return url
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} not ready after {timeout:.0f} s:\n{self.tail()}")

    def log_url(self) -> str | None:
        """The URL from a 'listening on http://HOST:PORT' line, once printed."""
        match = re.search(rb"listening on (http://[\w.:\[\]]+)", self.log_path.read_bytes())
        return match.group(1).decode() if match else None

    def tail(self, lines: int = 20) -> str:
        """The last `lines` lines of the log."""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """SIGTERM to the process group, SIGKILL after 10 s; closes the log."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._log.close()


def pythonpath(root: Path) -> str:
    """PYTHONPATH with `root` first (it beats an editable install), then what was set before."""
    return os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)


def free_port() -> int:
    """A loopback port free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_ok(url: str) -> bool:
    """Whether a GET of `url` answers 200 within 2 s."""
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def post_json(url: str, data: object) -> None:
    """POST `data` as JSON (10 s timeout), the response read and dropped; raises on failure."""
    req = urllib.request.Request(url, data=json.dumps(data).encode(), headers=JSON_HEADERS)
    with urllib.request.urlopen(req, timeout=10) as resp:
        resp.read()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (NaN once it is gone). Unlike latency, this
    hardly moves when other work shares the cores, so it shows a server's own cost."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_average() -> str:
    """The 1/5/15-minute load average, printed so a reader can judge the machine's noise."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile of `values` in seconds, in milliseconds (NaN when empty)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)] * 1000


def fmt(value: float, spec: str) -> str:
    """`value` formatted by `spec`, or "-" for NaN."""
    return "-" if math.isnan(value) else format(value, spec)

"""One subprocess on a loopback port: its output in a log file, a readiness probe, a clean stop.

Every server a test or benchmark runs as a process (the gateway, the fake upstream, the bare
forwarder, redis-server, Prometheus, nginx) is a `Server`; the named starters in
`harness.starters`, `harness.redis_server`, `harness.prometheus` and `harness.nginx` build the
command line and the probe.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

from gateway.testing.harness.sync_http import http_ok

Probe = Callable[[], str | None]
"""Returns the server's base URL once it answers, None before."""

_LISTENING = re.compile(rb"listening on (http://[\w.:\[\]]+)")


def free_port() -> int:
    """A loopback port nothing listens on now (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def pythonpath(root: Path) -> str:
    """PYTHONPATH with `root` first (it beats an editable install), then what was set before."""
    return os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)


def answers(url: str, path: str = "/healthz") -> Probe:
    """A probe: `url` once `url + path` answers 200."""
    return lambda: url if http_ok(url + path) else None


class ServerError(RuntimeError):
    """A server exited before it was ready, or was not ready in time; the message ends with
    the tail of its log."""


class Server:
    """A subprocess in its own process group, its output in `workdir/NAME.log`; it runs in
    `workdir` too unless `cwd` says otherwise (relative paths in a config resolve there)."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        workdir: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.workdir = workdir
        self.cwd = cwd or workdir
        self.env = {**os.environ, **(env or {})}
        self.log_path = workdir / f"{name}.log"
        self.url = ""
        self.proc = self._spawn()

    def _spawn(self) -> subprocess.Popen[bytes]:
        # A file, not a pipe: a pipe nobody reads fills up and blocks the server. Appended to,
        # so a restarted server's log keeps what the first run said.
        with self.log_path.open("ab") as log:
            # Its own session: stop() signals this child's group and nothing else.
            return subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self, probe: Probe, timeout: float, poll: float = 0.05) -> str:
        """Poll `probe` until it gives a URL (kept as `url`); a `ServerError` with the log's
        tail if the process exits first or `timeout` seconds pass."""
        deadline = time.monotonic() + timeout
        while True:
            if not self.running:
                raise ServerError(f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}")
            url = probe()
            if url:
                self.url = url
                return url
            if time.monotonic() >= deadline:
                raise ServerError(f"{self.name} not ready after {timeout:g} s:\n{self.tail()}")
            time.sleep(poll)

    def log_url(self) -> str | None:
        """A probe: the URL of a 'listening on http://HOST:PORT' line, once printed."""
        try:
            found = _LISTENING.search(self.log_path.read_bytes())
        except OSError:
            return None
        return found.group(1).decode() if found else None

    def output(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 30) -> str:
        """The last `lines` lines of the log."""
        return "\n".join(self.output().splitlines()[-lines:])

    def send_signal(self, signum: int) -> None:
        """Send `signum` to the process group (e.g. SIGHUP to reload)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signum)

    def kill(self) -> None:
        """SIGKILL, no chance to clean up: the process crashed, as far as its clients know."""
        self.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def restart(self) -> None:
        """Start the same command again (after `stop` or `kill`); `wait_ready` again after."""
        if self.running:
            raise ServerError(f"{self.name} is still running (pid {self.pid})")
        self.proc = self._spawn()

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM to the process group, SIGKILL after `timeout` seconds; the exit status."""
        if self.running:
            self.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.send_signal(signal.SIGKILL)
                self.proc.wait(5)
        return self.proc.returncode

    def __enter__(self) -> Server:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

"""A throwaway `redis-server` on a free loopback port, for tests of state shared through Redis.

Nothing is persisted (no RDB snapshots, no AOF) and its working directory is a temporary one,
removed when the server stops.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from subprocess import DEVNULL

import redis

from tests.processes import free_port, stop

REDIS_SERVER = "redis-server"


def redis_server_path() -> str | None:
    return shutil.which(REDIS_SERVER)


@contextmanager
def redis_server(start_timeout: float = 10.0) -> Iterator[str]:
    """Run a redis-server until the block ends; yields its URL (redis://127.0.0.1:PORT/0)."""
    executable = redis_server_path()
    if executable is None:
        raise FileNotFoundError(f"{REDIS_SERVER} is not on PATH")
    with tempfile.TemporaryDirectory(prefix="gateway-redis-") as workdir:
        port = free_port()
        # `--save ''` and `--appendonly no`: nothing is persisted; `--dir` keeps any file it
        # might still write out of the working tree.
        args = [executable, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "no", "--dir", workdir]
        log_path = Path(workdir) / "redis.log"  # a file: a pipe nobody reads could fill up
        with log_path.open("wb") as log:
            proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=DEVNULL)
        url = f"redis://127.0.0.1:{port}/0"
        try:
            wait_until_ready(proc, url, log_path, start_timeout)
            yield url
        finally:
            stop(proc)


def wait_until_ready(
    proc: subprocess.Popen[bytes], url: str, log_path: Path, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    client = redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
    try:
        while True:
            if proc.poll() is not None:
                output = log_path.read_text(errors="replace")
                raise RuntimeError(f"redis-server exited with {proc.returncode}:\n{output}")
            try:
                if client.ping():
                    return
            except redis.ConnectionError:
                pass
            if time.monotonic() >= deadline:
                raise TimeoutError(f"redis-server did not answer PING at {url} in {timeout} s")
            time.sleep(0.02)
    finally:
        client.close()

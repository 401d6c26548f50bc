"""A throwaway `redis-server` on a free loopback port, for state shared through Redis.

Nothing is persisted (no RDB snapshots, no AOF), so a restart starts empty, as a crashed
Redis without persistence does; its files stay in the working directory it is given.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from gateway.testing.harness.process import Server, free_port

REDIS_SERVER = "redis-server"
INSTALL_HINT = "redis-server is not on PATH (Debian/Ubuntu: apt-get install -y redis-server)"


def redis_server_path() -> str | None:
    return shutil.which(REDIS_SERVER)


class RedisServer:
    """redis-server on a fixed port: `start`, `kill` (a crash) and `start` again keep the URL."""

    def __init__(self, workdir: Path, port: int | None = None, name: str = "redis") -> None:
        executable = redis_server_path()
        if executable is None:
            raise FileNotFoundError(INSTALL_HINT)
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        # `--save ''` and `--appendonly no`: nothing persisted; `--dir`: any file it might
        # still write stays out of the working tree.
        self._argv = [executable, "--port", str(self.port), "--bind", "127.0.0.1"]
        self._argv += ["--save", "", "--appendonly", "no", "--dir", str(workdir)]
        self._workdir, self._name = workdir, name
        self.server: Server | None = None

    @property
    def pid(self) -> int:
        assert self.server is not None, "not started"
        return self.server.pid

    def start(self, timeout: float = 10.0) -> RedisServer:
        """Start it (again, after `kill` or `stop`) and wait until it answers PING."""
        if self.server is None:
            self.server = Server(self._name, self._argv, self._workdir)
        else:
            self.server.restart()
        client = redis.Redis.from_url(self.url, socket_timeout=0.5, socket_connect_timeout=0.5)
        try:
            self.server.wait_ready(lambda: self.url if _pings(client) else None, timeout, 0.02)
        except BaseException:
            self.server.stop()
            raise
        finally:
            client.close()
        return self

    def kill(self) -> None:
        """SIGKILL: Redis crashes, as far as its clients can tell."""
        if self.server is not None:
            self.server.kill()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


@contextmanager
def redis_server(timeout: float = 10.0) -> Iterator[RedisServer]:
    """A started redis-server in a temporary directory until the block ends."""
    with tempfile.TemporaryDirectory(prefix="gateway-redis-") as workdir:
        server = RedisServer(Path(workdir)).start(timeout)
        try:
            yield server
        finally:
            server.stop()

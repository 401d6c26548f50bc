"""The stream follower: every event added after it starts is recorded with its delay, and
read back by the window its write time falls in."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from gateway.testing.harness.redis_server import redis_server, redis_server_path
from gateway.testing.harness.starters import python_server
from gateway.testing.harness.stream_lags import StreamLags


def test_windows_select_by_write_time(tmp_path: Path) -> None:
    path = tmp_path / "lags.txt"
    path.write_text("100.0 0.002\n101.0 0.004\nnot a line\n102.5 0.010\n")
    lags = StreamLags(path)
    assert lags.window(100.5, 102.5) == [0.004, 0.010]
    assert lags.window(0, 99) == []
    assert StreamLags(tmp_path / "missing.txt").window(0, 1e12) == []


@pytest.mark.skipif(redis_server_path() is None, reason="redis-server is not installed")
def test_the_follower_records_each_new_event_of_every_stream(tmp_path: Path) -> None:
    out = tmp_path / "lags.txt"
    with redis_server() as server:
        client = redis.Redis.from_url(server.url)
        client.xadd("a:events", {"ts": str(time.time() - 100)})  # before the follower: skipped
        argv = ["-m", "gateway.testing.harness.stream_lags", server.url, str(out)]
        with python_server("follower", tmp_path, [*argv, "a:events", "b:events"]):
            time.sleep(1.5)  # it has read the newest ids
            started = time.time()
            for stream in ("a:events", "b:events", "a:events"):
                client.xadd(stream, {"ts": str(time.time())})
            deadline = time.monotonic() + 10
            while len(StreamLags(out).window(started, time.time())) < 3:
                assert time.monotonic() < deadline, out.read_text() if out.exists() else "none"
                time.sleep(0.2)
        lags = StreamLags(out)
        assert lags.window(0, started) == []
        assert len(lags.window(started, time.time())) == 3
        assert all(0 <= lag < 2 for lag in lags.window(started, time.time()))

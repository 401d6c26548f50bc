"""The subprocess handle: readiness, errors that carry the log, and a stop that reaches the
whole process group."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from gateway.testing.harness.process import Server, ServerError, free_port


def python(tmp_path: Path, name: str, code: str) -> Server:
    return Server(name, [sys.executable, "-c", code], tmp_path)


def test_a_server_that_exits_early_fails_with_its_log_tail(tmp_path: Path) -> None:
    code = "import sys; print('line one'); print('config is broken: no providers'); sys.exit(3)"
    server = python(tmp_path, "broken", code)
    with pytest.raises(ServerError) as failure:
        server.wait_ready(server.log_url, timeout=20)
    message = str(failure.value)
    assert "broken exited with 3" in message
    assert "config is broken: no providers" in message


def test_a_server_that_never_gets_ready_times_out_with_its_log(tmp_path: Path) -> None:
    code = "import time; print('still loading', flush=True); time.sleep(60)"
    with python(tmp_path, "silent", code) as server:
        started = time.monotonic()
        with pytest.raises(ServerError, match=r"not ready after 0\.5 s") as failure:
            server.wait_ready(server.log_url, timeout=0.5)
        assert time.monotonic() - started < 5
        assert "still loading" in str(failure.value)
    assert not server.running


def test_the_listening_line_gives_the_url(tmp_path: Path) -> None:
    code = "import time; print('x listening on http://127.0.0.1:4321', flush=True); time.sleep(60)"
    with python(tmp_path, "talker", code) as server:
        assert server.wait_ready(server.log_url, timeout=20) == "http://127.0.0.1:4321"
        assert server.url == "http://127.0.0.1:4321"


def test_stop_kills_a_group_that_ignores_sigterm(tmp_path: Path) -> None:
    # The child ignores SIGTERM and has a grandchild: both must be gone after stop().
    code = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('grandchild', child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    server = python(tmp_path, "stubborn", code)
    server.wait_ready(lambda: "up" if "grandchild" in server.output() else None, timeout=20)
    grandchild = int(server.output().split()[-1])
    assert server.stop(timeout=0.5) == -signal.SIGKILL
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)


def test_restart_runs_the_command_again_and_keeps_the_log(tmp_path: Path) -> None:
    server = python(tmp_path, "twice", "print('run', flush=True)")
    server.proc.wait(20)
    with pytest.raises(ServerError, match="still running"):
        running = python(tmp_path, "long", "import time; time.sleep(60)")
        try:
            running.restart()
        finally:
            running.stop()
    server.restart()
    server.proc.wait(20)
    assert server.output().count("run") == 2


def test_free_port_is_free(tmp_path: Path) -> None:
    import socket

    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # raises if something holds it


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by init) counts as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

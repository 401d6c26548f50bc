"""/proc readings of this process, and a core kept busy."""

from __future__ import annotations

import math
import os
import time

from gateway.testing.harness.procstat import (
    busy_core,
    cpu_seconds,
    load_average,
    machine_line,
    open_files,
    rss_mb,
    thread_cpu_seconds,
    threads,
)
from gateway.util.threads import single_worker


def test_a_busy_core_shows_in_the_spinners_cpu_time() -> None:
    with busy_core(seconds=5) as pid:
        time.sleep(0.5)
        spent = cpu_seconds(pid)
    assert spent > 0.2  # spinning, not sleeping (0.7 s of wall time, most of it on a core)
    assert math.isnan(cpu_seconds(pid))  # gone once the block ends


def test_this_process_is_read_from_proc() -> None:
    pid = os.getpid()
    assert rss_mb(pid) > 10 and threads(pid) >= 1 and open_files(pid) >= 3
    assert len(load_average().split()) == 3
    assert f"{os.cpu_count()} cores" in machine_line()


def test_cpu_time_is_read_per_thread_by_its_os_name() -> None:
    def spin() -> None:
        end = time.thread_time() + 0.05
        while time.thread_time() < end:
            pass

    with single_worker("bench-spinner") as pool:
        pool.submit(spin).result()
        by_name = thread_cpu_seconds(os.getpid())
    assert by_name["bench-spinner"] >= 0.04  # its own 50 ms, give or take a clock tick
    assert sum(by_name.values()) <= cpu_seconds(os.getpid()) + 0.02
    assert thread_cpu_seconds(2**22 + 1) == {}  # no such process

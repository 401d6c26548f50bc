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
    threads,
)


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

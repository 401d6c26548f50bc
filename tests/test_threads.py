import sys
import threading
from pathlib import Path

import pytest

from gateway.util.threads import limit_blas_threads, single_worker


@pytest.mark.skipif(sys.platform != "linux", reason="OS thread names are read from /proc")
def test_a_single_worker_is_named_for_the_os() -> None:
    pool = single_worker("embed-test")
    try:
        tid = pool.submit(threading.get_native_id).result()
        comm = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
        assert comm == "embed-test"
        assert (
            pool.submit(lambda: threading.current_thread().name).result().startswith("embed-test")
        )
    finally:
        pool.shutdown()


def test_blas_is_limited_to_one_thread() -> None:
    import numpy  # noqa: F401  (loads the BLAS library the limit applies to)
    from threadpoolctl import threadpool_info

    limiter = limit_blas_threads()
    try:
        blas = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
        assert blas and set(blas) == {1}
    finally:
        limiter.restore_original_limits()

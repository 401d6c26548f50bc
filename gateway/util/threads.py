"""Worker threads the operating system can tell apart.

Python (before 3.14) names its threads only for itself: in /proc, top and py-spy every thread
of the gateway is "python". A benchmark reading CPU time per thread from /proc/PID/task, or an
operator running `top -H`, needs to know which one is the embedder and which the store writer.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

_PR_SET_NAME = 15  # prctl(2): the calling thread's name, 15 bytes at most
_libc = (
    ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True) if sys.platform == "linux" else None
)


def name_this_thread(name: str) -> None:
    """Give the calling thread an OS-visible name (Linux; elsewhere a no-op)."""
    if _libc is not None:
        _libc.prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)


def single_worker(name: str) -> ThreadPoolExecutor:
    """One worker thread, named `name` for Python and for the OS."""
    return ThreadPoolExecutor(
        max_workers=1, thread_name_prefix=name, initializer=name_this_thread, initargs=(name,)
    )


def limit_blas_threads() -> Any:
    """One BLAS thread per process. The gateway's matrix products are small (a query against
    a scope's vectors, exemplars): a second BLAS thread only helps on an idle core, and the
    embedder and the event loop keep both busy. Measured on 5,000 stored vectors: 0.42 ms of
    CPU per search with one thread, 0.9 to 5 ms with two (the other core busy: 15 ms wall).
    ONNX Runtime and faiss set their own threads (1 each) and are not affected. Returns what
    restores the earlier limits (`restore_original_limits()`), or None without threadpoolctl."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - a dependency; without it numpy keeps its default
        return None
    return threadpool_limits(limits=1, user_api="blas")

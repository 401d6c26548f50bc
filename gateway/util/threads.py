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

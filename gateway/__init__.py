"""An OpenAI-compatible LLM gateway."""

import os

# The gateway's vector math is one small product per request (a scope's vectors times one
# query) on the event loop: BLAS threads only add wake-ups and contention there (measured:
# a 3,000-entry scan took 2.5 ms of CPU and 15 ms wall on two OpenBLAS threads, 0.28 ms on
# one). Set before numpy is first imported; an explicit setting wins.
for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

__version__ = "0.1.0"

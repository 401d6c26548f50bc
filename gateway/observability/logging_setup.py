"""The gateway's logging as `gateway serve` sets it up: INFO lines on stderr, and libraries'
start-up chatter kept out.

faiss's loader logs at INFO each CPU build it tries and cannot load ("Could not load library
with AVX2 support ...", tried in that order on every machine) before the one it loads: noise
at every start. Its logger is held at WARNING, so a faiss that cannot load at all (logged at
ERROR, then an ImportError) still shows.
"""

from __future__ import annotations

import logging
import sys

QUIETED = ("faiss.loader",)


def configure_logging(level: int = logging.INFO) -> None:
    logging.basicConfig(level=level, format="%(message)s", stream=sys.stderr)
    for name in QUIETED:
        logging.getLogger(name).setLevel(logging.WARNING)

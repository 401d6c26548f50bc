"""Warnings about a failure that repeats on every request (a store, a retriever or Redis being
away): at most one per interval and key, the next one saying how many were held back, so the
log says what is wrong without flooding."""

from __future__ import annotations

import logging
import math
import time

WARN_EVERY_SECONDS = 30.0


class ThrottledWarnings:
    def __init__(self, log: logging.Logger, seconds: float = WARN_EVERY_SECONDS) -> None:
        self._log = log
        self._seconds = seconds
        self._last: dict[str, tuple[float, int]] = {}  # key -> (last warning, held back since)

    def warning(self, message: str, *args: object, key: str = "") -> None:
        now = time.monotonic()
        last, held = self._last.get(key, (-math.inf, 0))
        if now - last < self._seconds:
            self._last[key] = (last, held + 1)
            return
        if held:
            message += " (%d more failures since the last warning)"
            args = (*args, held)
        self._log.warning(message, *args)
        self._last[key] = (now, 0)

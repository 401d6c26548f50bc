"""Whether a part that shares state through Redis (breakers, rate limits) can reach it.

After a failed call Redis is left alone for a second, so an outage costs no latency; the part
works on local state meanwhile, and says so in one warning per interval. A call that works
again (or a ping, see gateway/state/shared.py) ends it.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from gateway.observability.logthrottle import ThrottledWarnings

if TYPE_CHECKING:
    from redis import Redis

PAUSE_AFTER_FAILURE = 1.0


class RedisHealth:
    """`part` names the part in the log ("rate limits"); `meanwhile` says what it does while
    Redis is away ("admitting requests unlimited")."""

    def __init__(self, log: logging.Logger, part: str, meanwhile: str) -> None:
        self.up = True
        self._log = log
        self._part = part
        self._meanwhile = meanwhile
        self._paused_until = 0.0
        self._warnings = ThrottledWarnings(log)

    def paused(self) -> bool:
        """Within a second of a failure: Redis is not asked."""
        return time.monotonic() < self._paused_until

    def ok(self) -> None:
        """A call to Redis worked."""
        if not self.up:
            self._log.warning("%s: Redis is back, using the shared state again", self._part)
        self.up = True

    def recovered(self) -> None:
        """Redis answered a ping: end the pause too."""
        self.ok()
        self._paused_until = 0.0

    def failed(self, err: BaseException, what: str = "call") -> None:
        self.up = False
        self._paused_until = time.monotonic() + PAUSE_AFTER_FAILURE
        self._warnings.warning(
            "%s: Redis %s failed, %s: %r", self._part, what, self._meanwhile, err
        )

    def probe(self, redis: Redis) -> bool:
        """Ping Redis (blocking: call it off the event loop): an answer marks it up, a failure
        down (readiness must not wait for a request to find out)."""
        try:
            redis.ping()
        except (RedisError, OSError) as err:
            self.failed(err, "ping")
            return False
        self.recovered()
        return True

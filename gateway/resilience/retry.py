"""What is worth retrying, and how long to wait: exponential backoff with jitter, or the
upstream's own Retry-After when it gives one."""

from __future__ import annotations

import random
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from enum import Enum
from time import time

from gateway.config import RetryConfig
from gateway.errors import GatewayError, ProviderMisconfigured

# Error codes that are their own failure reason (a bounded set: they are metric labels).
_REASONS = frozenset(
    (
        "upstream_unreachable",
        "upstream_auth_failed",
        "upstream_model_unknown",
        "upstream_not_found",
        "upstream_invalid_response",
    )
)


class Outcome(Enum):
    RETRY = "retry"  # worth another try here (429, 5xx, timeout, broken connection)
    MOVE_ON = "move_on"  # this deployment will not do; the next one might
    GIVE_UP = "give_up"  # the request itself is wrong (4xx): every deployment would say so


def classify(err: GatewayError) -> Outcome:
    if isinstance(err, ProviderMisconfigured):
        return Outcome.MOVE_ON  # our key, model or URL for it is wrong; a retry cannot fix it
    if err.status == 429 or err.status >= 500:
        return Outcome.RETRY
    return Outcome.GIVE_UP


def failure_reason(err: GatewayError) -> str:
    """A bounded label for metrics and logs."""
    if err.status == 429:
        return "rate_limited"
    if err.status == 504:
        return "timeout"
    if err.code in _REASONS:
        return err.code.removeprefix("upstream_")
    if err.status >= 500:
        return "server_error"
    return "client_error"


def retry_after_seconds(err: GatewayError) -> float | None:
    """Retry-After as seconds (it may be a number or an HTTP date), if the upstream sent it."""
    value = err.headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time())
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class Backoff:
    config: RetryConfig

    def delay(self, attempt: int, err: GatewayError) -> float | None:
        """Seconds to wait before the retry that follows failed attempt `attempt` (1-based),
        or None when this deployment should not be tried again."""
        if attempt >= self.config.attempts or classify(err) is not Outcome.RETRY:
            return None
        asked = retry_after_seconds(err)
        if asked is not None:
            return asked if asked <= self.config.max_retry_after_seconds else None
        ceiling = min(
            self.config.max_backoff_ms, self.config.initial_backoff_ms * 2 ** (attempt - 1)
        )
        # "Equal jitter": at least half the exponential step, so retries stay spaced out,
        # randomized so that many clients do not retry in lockstep.
        return random.uniform(ceiling / 2, ceiling) / 1000

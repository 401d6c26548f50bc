"""The sliding minute of tokens per minute, as both backends count it (redis_backend.py has
it again, in Lua): two fixed-minute counters, the previous one weighted by how much of it the
sliding minute still covers."""

from __future__ import annotations

WINDOW_SECONDS = 60.0


def roll_window(
    window: int | None, current: float, previous: float, index: int
) -> tuple[float, float]:
    """(current, previous) minute counters as of minute `index`, from those of `window`."""
    if window == index:
        return current, previous
    if window == index - 1:
        return 0.0, current
    return 0.0, 0.0


def tokens_wait(previous: float, current: float, elapsed: float, need: int, limit: int) -> float:
    """Seconds until `need` more tokens fit in the sliding minute (0: they fit now), `elapsed`
    seconds into the current minute. The sliding minute holds `previous` weighted by the part
    of the previous minute it still covers, plus `current`. A request larger than the whole
    limit is checked as exactly the limit, so it goes once the minute is empty."""
    need = max(1, min(need, limit))
    if previous * (1 - elapsed / WINDOW_SECONDS) + current + need <= limit:
        return 0.0
    if current + need <= limit:  # fits once enough of the previous minute slides out
        return (previous + current + need - limit) * WINDOW_SECONDS / previous - elapsed
    # Only after this minute ends, and enough of it slides out in the next one.
    return WINDOW_SECONDS - elapsed + (current + need - limit) * WINDOW_SECONDS / current

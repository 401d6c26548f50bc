"""Small numeric helpers shared by the learned parts (the router's score, the cache's judge)."""

from __future__ import annotations

import math


def logistic(x: float) -> float:
    """1 / (1 + e^-x), without overflow for any x (a policy may set a weight far out)."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)

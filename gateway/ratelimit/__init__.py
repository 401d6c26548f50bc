"""Per-tenant rate limits: requests per second (token bucket), requests in flight, and tokens
per (sliding) minute, kept in memory or in Redis shared by replicas.

    permit = await limiter.acquire(tenant, limits, estimated_prompt_tokens)  # or RateLimited
    async with permit:
        ...  # call the upstream
        await permit.record_tokens(completion_tokens)

A request is admitted only if every limit admits it, and a refused one consumes nothing.
"""

from gateway.ratelimit.backend import Refusal
from gateway.ratelimit.limiter import Permit, RateLimited, RateLimiter, unpaid_tokens

__all__ = ["Permit", "RateLimited", "RateLimiter", "Refusal", "unpaid_tokens"]

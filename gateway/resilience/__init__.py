"""Staying up when upstreams do not: circuit breakers, retries with backoff, fallback chains."""

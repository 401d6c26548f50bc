"""The only place an aiohttp ClientSession is created: one per provider or external service,
each with a bounded pool."""

from __future__ import annotations

import aiohttp

from gateway.config import ProviderSettings


def make_client_session(
    *,
    connect_timeout: float,
    total_timeout: float,
    max_connections: int,
    read_timeout: float | None = None,
) -> aiohttp.ClientSession:
    """A session for one remote service. Call it on the running loop (the session binds to it)."""
    connector = aiohttp.TCPConnector(
        limit=max_connections,
        limit_per_host=max_connections,
        ttl_dns_cache=300,
        keepalive_timeout=30,
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(
            total=total_timeout, connect=connect_timeout, sock_read=read_timeout
        ),
        auto_decompress=True,
        raise_for_status=False,
        # The client's own fields pass through untouched; we never want cookies kept.
        cookie_jar=aiohttp.DummyCookieJar(),
    )


def make_session(settings: ProviderSettings) -> aiohttp.ClientSession:
    t = settings.timeouts
    return make_client_session(
        connect_timeout=t.connect,
        total_timeout=t.total,
        max_connections=settings.max_connections,
        read_timeout=t.read,
    )

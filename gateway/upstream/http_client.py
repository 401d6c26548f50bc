"""The only place an aiohttp ClientSession is created: one per provider, bounded pool."""

from __future__ import annotations

import aiohttp

from gateway.config import ProviderSettings


def make_session(settings: ProviderSettings) -> aiohttp.ClientSession:
    t = settings.timeouts
    connector = aiohttp.TCPConnector(
        limit=settings.max_connections,
        limit_per_host=settings.max_connections,
        ttl_dns_cache=300,
        keepalive_timeout=30,
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=t.total, connect=t.connect, sock_read=t.read),
        auto_decompress=True,
        raise_for_status=False,
        # The client's own fields pass through untouched; we never want cookies kept.
        cookie_jar=aiohttp.DummyCookieJar(),
    )

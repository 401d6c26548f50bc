"""Plain blocking HTTP for probes and control calls (urllib, no proxy): readiness checks,
configuring a fake over its control API, reading an admin endpoint. Load goes through
`harness.load` instead."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Straight to loopback: an HTTP(S)_PROXY in the environment must not intercept these.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: dict[str, str]  # lower-cased names
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def http(
    method: str,
    url: str,
    body: Any = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 10.0,
) -> Reply:
    """One request, `body` sent as JSON; an HTTP error status is a `Reply` too, not raised."""
    data = None if body is None else json.dumps(body).encode()
    sent = {"Content-Type": "application/json"} if data is not None else {}
    request = urllib.request.Request(
        url, data=data, method=method, headers={**sent, **(headers or {})}
    )
    try:
        with _OPENER.open(request, timeout=timeout) as resp:
            return Reply(resp.status, _lower(resp.headers.items()), resp.read())
    except urllib.error.HTTPError as err:
        with err:
            return Reply(err.code, _lower(err.headers.items()), err.read())


def _lower(items: Any) -> dict[str, str]:
    return {k.lower(): v for k, v in items}


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """Whether a GET of `url` answers 200 within `timeout` seconds."""
    try:
        return http("GET", url, timeout=timeout).status == 200
    except OSError:
        return False


def get_json(url: str, headers: Mapping[str, str] | None = None, timeout: float = 10.0) -> Any:
    """GET `url`'s JSON; raises on a status other than 200."""
    reply = http("GET", url, headers=headers, timeout=timeout)
    if reply.status != 200:
        raise RuntimeError(f"GET {url}: HTTP {reply.status}: {reply.body[:300]!r}")
    return reply.json()


def post_json(url: str, data: Any, headers: Mapping[str, str] | None = None) -> Any:
    """POST `data` as JSON, the answer's JSON back (None if it has no body); raises on a
    status other than 200."""
    reply = http("POST", url, data, headers, timeout=30)
    if reply.status != 200:
        raise RuntimeError(f"POST {url}: HTTP {reply.status}: {reply.body[:300]!r}")
    return reply.json() if reply.body else None

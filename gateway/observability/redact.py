"""Config as the admin API shows it: every value that may be a secret replaced.

Keys themselves never sit in config (only the names of the environment variables holding
them), but two places can carry secrets inline: extra HTTP headers (`headers:` of providers
and knowledge bases) and credentials inside URLs (`redis://:password@host`,
`https://user:token@host`). Both are redacted wherever they appear.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

REDACTED = "<redacted>"


def redacted(value: Any) -> Any:
    """A copy of dumped config (dicts, lists, scalars) with header values and URL
    credentials replaced."""
    if isinstance(value, dict):
        return {k: _redact_field(k, v) for k, v in value.items()}
    if isinstance(value, list):
        return [redacted(v) for v in value]
    if isinstance(value, str) and "://" in value and "@" in value:
        return without_credentials(value)
    return value


def _redact_field(key: str, value: Any) -> Any:
    if key == "headers" and isinstance(value, dict):
        return dict.fromkeys(value, REDACTED)
    return redacted(value)


def without_credentials(url: str) -> str:
    """The URL with whatever stands before the host's `@` replaced (the host, port and path
    kept as written, IPv6 brackets included); anything unparsable is redacted whole."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return REDACTED
    _, at, host = parts.netloc.rpartition("@")
    if not at:
        return url
    return urlunsplit(parts._replace(netloc=f"{REDACTED}@{host}"))

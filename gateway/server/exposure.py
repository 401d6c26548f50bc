"""Who can reach the gateway without a key. On loopback only this machine's programs can, so a
config without tenant keys serves them anonymously (the quickstart). On an address other
machines reach (0.0.0.0, ::, a LAN address, a name that resolves to one) the same config would
serve anyone who finds the port: `gateway serve` refuses to start there unless the config says
`auth.anonymous: true`, and a reload that drops the last key there is refused the same way.
"""

from __future__ import annotations

import ipaddress
import socket

from gateway.config.auth import AuthConfig


def reaches_other_machines(host: str) -> bool:
    """Whether listening on `host` accepts connections from other machines: an empty host or a
    wildcard is every interface, a name counts by every address it resolves to. A name that
    does not resolve cannot be listened on at all: False, so that listen.py says why."""
    try:
        found = socket.getaddrinfo(
            host or None, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except (OSError, UnicodeError):
        return False
    return any(not _loopback(str(info[4][0])) for info in found)


def _loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address.partition("%")[0])  # fe80::1%eth0: the scope is not ours
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


def open_to_anyone(auth: AuthConfig, host: str) -> str | None:
    """The refusal, in one line with its fixes, when `auth` would let callers in without a
    key on `host` (an address other machines reach); None when it lists keys or says so."""
    if auth.keys or auth.anonymous:
        return None
    where = host or "every address"
    return (
        f"refusing to serve {where} without keys: anyone who reaches it would be tenant "
        f"{auth.anonymous_tenant!r}; list keys in auth.keys, set auth.anonymous: true to allow "
        "it, or listen on 127.0.0.1 (--host or server.host)"
    )

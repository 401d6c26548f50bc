"""Why the gateway could not listen, in one line a newcomer can act on (no traceback): a busy
port, a host name that does not resolve, an address of another machine, a port below 1024."""

from __future__ import annotations

import errno
import socket


class ListenError(Exception):
    """The socket could not be bound; the message says where, why and what to do."""


def listen_problem(exc: OSError, host: str, port: int) -> str:
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"  # an IPv6 address
    if isinstance(exc, socket.gaierror):
        return (
            f"cannot listen on {where}: the host {host!r} does not resolve; give an address "
            "of this machine with --host or server.host (127.0.0.1, or 0.0.0.0 for all)"
        )
    if exc.errno == errno.EADDRINUSE:
        return (
            f"cannot listen on {where}: the port is already in use (another gateway "
            "running?); stop it, or choose another port with --port or server.port"
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        return (
            f"cannot listen on {where}: permission denied (ports below 1024 need root or "
            "CAP_NET_BIND_SERVICE); choose a port from 1024 with --port or server.port"
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return (
            f"cannot listen on {where}: {host!r} is not an address of this machine; use "
            "--host or server.host (127.0.0.1, or 0.0.0.0 for all)"
        )
    return f"cannot listen on {where}: {exc.strerror or exc}"

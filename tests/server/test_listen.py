"""Why the gateway cannot listen, in one line that says where and what to do."""

import errno
import socket

import pytest

from gateway.server.listen import listen_problem


@pytest.mark.parametrize(
    ("error", "says"),
    [
        (OSError(errno.EADDRINUSE, "address already in use"), "already in use"),
        (OSError(errno.EACCES, "permission denied"), "ports below 1024"),
        (OSError(errno.EADDRNOTAVAIL, "cannot assign"), "not an address of this machine"),
        (socket.gaierror(socket.EAI_NONAME, "Name or service not known"), "does not resolve"),
        (OSError(errno.ENOBUFS, "No buffer space available"), "No buffer space available"),
    ],
)
def test_each_reason_is_one_line_naming_host_and_port(error: OSError, says: str) -> None:
    line = listen_problem(error, "example.test", 8080)
    assert line.startswith("cannot listen on example.test:8080: ")
    assert says in line and "\n" not in line


def test_an_ipv6_address_is_bracketed() -> None:
    line = listen_problem(OSError(errno.EADDRINUSE, "in use"), "::1", 8080)
    assert line.startswith("cannot listen on [::1]:8080: ")

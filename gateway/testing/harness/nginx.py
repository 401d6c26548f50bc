"""nginx as a load balancer in front of gateway replicas: a generated config in a working
directory (`nginx -c CONF -p DIR -g 'daemon off;'`), one listener per group of members.

Streams pass through as they come (`proxy_buffering off`), connections to the members are kept
alive, and each answer names the member that served it (`X-Upstream-Addr`).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gateway.testing.harness.process import Server, answers, free_port

SEARCH_PATH = "/usr/sbin:/usr/local/sbin:/usr/bin:/usr/local/bin"
INSTALL_HINT = "nginx is not installed (Debian/Ubuntu: apt-get install -y nginx)"
# One line per request: who served it and how long it took, buffered so it costs little.
ACCESS_FORMAT = (
    '\'$remote_addr [$time_local] "$request" $status '
    "$upstream_addr $request_time $upstream_response_time'"
)


def nginx_path() -> str | None:
    return shutil.which("nginx", path=SEARCH_PATH)


@dataclass(frozen=True)
class Balancer:
    """One listener on `port`, balancing round-robin over `members` (base URLs)."""

    port: int
    members: Sequence[str]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def balancers(*groups: Sequence[str]) -> list[Balancer]:
    """A balancer on a free port for each group of members."""
    return [Balancer(free_port(), group) for group in groups]


def nginx_config(
    workdir: Path,
    listeners: Sequence[Balancer],
    *,
    workers: int = 1,
    keepalive: int = 128,
    access_log: bool = False,
    read_timeout_s: int = 120,
) -> str:
    d = workdir
    log = f"  access_log {d}/nginx-access.log bench buffer=64k flush=1s;\n" if access_log else ""
    blocks = []
    for n, listener in enumerate(listeners, 1):
        members = "".join(f"    server {m.removeprefix('http://')};\n" for m in listener.members)
        blocks.append(
            f"  upstream group{n} {{\n{members}    keepalive {keepalive};\n"
            "    keepalive_requests 1000000;\n  }\n"
            "  server {\n"
            f"    listen 127.0.0.1:{listener.port};\n"
            "    location / {\n"
            f"      proxy_pass http://group{n};\n"
            "      proxy_http_version 1.1;\n"
            '      proxy_set_header Connection "";\n'
            "      proxy_buffering off;\n"
            f"      proxy_read_timeout {read_timeout_s}s;\n"
            "      add_header X-Upstream-Addr $upstream_addr always;\n"
            "    }\n"
            "  }\n"
        )
    return (
        f"worker_processes {workers};\n"
        f"pid {d}/nginx.pid;\n"
        f"error_log {d}/nginx-error.log warn;\n"
        "events { worker_connections 4096; }\n"
        "http {\n"
        f"  log_format bench {ACCESS_FORMAT};\n"
        + (log or "  access_log off;\n")
        + f"  client_body_temp_path {d}/nginx-client-body;\n"
        f"  proxy_temp_path {d}/nginx-proxy;\n"
        f"  fastcgi_temp_path {d}/nginx-fastcgi;\n"
        f"  uwsgi_temp_path {d}/nginx-uwsgi;\n"
        f"  scgi_temp_path {d}/nginx-scgi;\n"
        "  keepalive_requests 1000000;\n" + "".join(blocks) + "}\n"
    )


def start_nginx(
    workdir: Path,
    listeners: Sequence[Balancer],
    *,
    workers: int = 1,
    keepalive: int = 128,
    access_log: bool = False,
    timeout: float = 15.0,
) -> Server:
    """nginx with `nginx_config`, once every listener passes /healthz through to a member."""
    binary = nginx_path()
    if binary is None:
        raise FileNotFoundError(INSTALL_HINT)
    conf = workdir / "nginx.conf"
    text = nginx_config(
        workdir, listeners, workers=workers, keepalive=keepalive, access_log=access_log
    )
    conf.write_text(text, encoding="utf-8")
    server = Server(
        "nginx", [binary, "-c", str(conf), "-p", str(workdir), "-g", "daemon off;"], workdir
    )
    try:
        for listener in listeners:
            server.wait_ready(answers(listener.url), timeout)
    except BaseException:
        server.stop()
        raise
    if listeners:
        server.url = listeners[0].url
    return server

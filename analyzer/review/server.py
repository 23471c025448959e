"""Serve the review application with uvicorn (one process: the sessions and the sign-in
limits live in it). Loopback by default; TLS by uvicorn's own settings or a reverse proxy."""

from __future__ import annotations

import grp
import logging
import os
import socket
from pathlib import Path

import uvicorn

from analyzer.review.app import create_app
from analyzer.review.settings import ReviewConfigError, ReviewSettings

log = logging.getLogger(__name__)


def uvicorn_config(settings: ReviewSettings) -> uvicorn.Config:
    """uvicorn's settings: address, TLS files, and whose forwarded headers to believe."""
    return uvicorn.Config(
        create_app(settings), host=settings.host, port=settings.port, workers=1,
        ssl_keyfile=settings.ssl_keyfile or None, ssl_certfile=settings.ssl_certfile or None,
        # Only a configured proxy may name the client (the per-address sign-in limit counts
        # it); anyone else's X-Forwarded-For is ignored. On a Unix socket (mode 0660) every
        # connection is the proxy's, so its headers are believed (uvicorn sees no address).
        proxy_headers=bool(settings.trusted_proxy or settings.unix_socket),
        forwarded_allow_ips="*" if settings.unix_socket else settings.trusted_proxy or None,
        server_header=False, log_config=None, access_log=True,
        # SIGTERM: requests in flight get this long, then are cancelled (a PDF render is a
        # process that is killed), so a stop ends within seconds (issue 33).
        timeout_graceful_shutdown=settings.limits.graceful_shutdown_s,
        # Slow or idle clients: a cap on what is served at once (503 past it), idle
        # connections closed, a bound on buffered headers. Timeouts on reading a slow client's
        # headers and body are the reverse proxy's (docs/DEPLOY.md, "Security").
        limit_concurrency=settings.limits.max_connections,
        timeout_keep_alive=settings.limits.keep_alive_s,
        # h11 (not httptools) is the HTTP implementation that applies the header bound.
        http="h11", h11_max_incomplete_event_size=settings.limits.max_header_bytes)


def listening_socket(host: str, port: int) -> socket.socket:
    """The bound, listening socket, or ReviewConfigError naming the address and why (so the
    log never says the application is on an address it could not take)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ReviewConfigError(f"cannot listen on {host}:{port} (config keys 'host' and "
                                f"'port'): {exc.strerror or exc}") from exc
    return sock


def unix_listening_socket(path: str, group: str = "") -> socket.socket:
    """A listening Unix socket at ``path``, mode 0660 and of ``group`` when given (a stale
    socket left by a killed server is replaced; any other file there is refused), or
    ReviewConfigError naming the key and why."""
    target = Path(path)
    gid = -1
    if group:
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError as exc:
            raise ReviewConfigError(f"config key 'unix_socket_group': no group {group!r} on "
                                    "this machine") from exc
    if target.is_socket():
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            if probe.connect_ex(path) == 0:
                raise ReviewConfigError(f"config key 'unix_socket': a server already listens "
                                        f"on {path}")
        target.unlink()
    elif target.exists() or target.is_symlink():
        raise ReviewConfigError(f"config key 'unix_socket': {path} exists and is not a "
                                "socket; remove it or choose another path")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_mask = os.umask(0o117)  # created 0660: never a moment open to everyone
    try:
        sock.bind(path)
        os.chmod(path, 0o660)
        if gid != -1:
            os.chown(path, -1, gid)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ReviewConfigError(f"cannot listen on the Unix socket {path} (config key "
                                f"'unix_socket'): {exc.strerror or exc}") from exc
    finally:
        os.umask(old_mask)
    return sock


def serve(settings: ReviewSettings) -> None:
    """Run until SIGINT or SIGTERM (uvicorn handles both)."""
    scheme = "https" if settings.ssl_certfile else "http"
    if settings.unix_socket:
        sock = unix_listening_socket(settings.unix_socket, settings.unix_socket_group)
        where = f"the Unix socket {settings.unix_socket} ({scheme})"
    else:
        sock = listening_socket(settings.host, settings.port)
        where = f"{scheme}://{settings.host}:{settings.port}/"
    log.info("review application on %s (case file %s, InfluxDB %s)", where,
             settings.cases_db, settings.influx.url)
    uvicorn.Server(uvicorn_config(settings)).run(sockets=[sock])

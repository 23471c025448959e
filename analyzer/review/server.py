"""Serve the review application with uvicorn (one process: the sessions and the sign-in
limits live in it). Loopback by default; TLS by uvicorn's own settings or a reverse proxy."""

from __future__ import annotations

import logging
import socket

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
        # it); anyone else's X-Forwarded-For is ignored.
        proxy_headers=bool(settings.trusted_proxy),
        forwarded_allow_ips=settings.trusted_proxy or None,
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


def serve(settings: ReviewSettings) -> None:
    """Run until SIGINT or SIGTERM (uvicorn handles both)."""
    sock = listening_socket(settings.host, settings.port)
    scheme = "https" if settings.ssl_certfile else "http"
    log.info("review application on %s://%s:%d/ (case file %s, InfluxDB %s)", scheme,
             settings.host, settings.port, settings.cases_db, settings.influx.url)
    uvicorn.Server(uvicorn_config(settings)).run(sockets=[sock])

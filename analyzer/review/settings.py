"""The review application's configuration file (TOML): where it listens, the case file,
InfluxDB, sessions and sign-in limits. ``barkwatch review --describe`` prints every key."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from analyzer.errors import AnalyzerError
from analyzer.reports.paper import ReportSettings
from analyzer.review.limits import LoadLimits
from analyzer.store import InfluxSettings
from sensor.configfile import describe, load, setting


@dataclass(frozen=True)
class ReviewSettings:
    """Everything ``barkwatch review`` needs."""

    host: str = setting("127.0.0.1", "address to listen on (loopback: put a TLS reverse proxy "
                        "in front for other machines)")
    port: int = setting(8600, "TCP port", 1, 65535)
    cases_db: str = setting("barkwatch-cases.sqlite", "the case file (SQLite)")
    session_key_file: str = setting(
        "", "file holding the key that signs session cookies (created, mode 0600, if "
        "missing); empty: a new key at each start, which signs everyone out")
    session_idle_s: int = setting(1800, "a session unused this long expires, s", 60, 86400)
    session_max_s: int = setting(43200, "a session expires this long after sign-in, s",
                                 300, 604800)
    secure_cookies: bool = setting(False, "mark the session cookie Secure on every "
                                   "response; without it the cookie is Secure whenever the "
                                   "request came over HTTPS (ssl_certfile, or a trusted_proxy's"
                                   " X-Forwarded-Proto: https)")
    max_body_bytes: int = setting(65536, "largest request body accepted; larger is refused "
                                  "413 before it is read or parsed (a 4,000-character note "
                                  "fits), bytes", 1024, 16777216)
    max_failures_per_account: int = setting(5, "failed sign-ins of one account from one "
                                            "client address before each further attempt "
                                            "must wait (sign_in_delay_s, doubling)", 1, 1000)
    max_failures_per_address: int = setting(20, "failed sign-ins from one client address "
                                            "(any account) before each further attempt "
                                            "must wait", 1, 100000)
    failure_window_s: float = setting(900.0, "failures are forgotten this long after the "
                                      "last one; refused attempts are audited once per "
                                      "address and window, s", 10.0, 86400.0)
    sign_in_delay_s: float = setting(1.0, "the first wait past the free failures; it doubles "
                                     "with each further failure, s", 0.1, 60.0)
    sign_in_max_delay_s: float = setting(300.0, "the longest wait between sign-in attempts "
                                         "(barkwatch review unlock-user clears it), s",
                                         1.0, 3600.0)
    trusted_proxy: str = setting(
        "", "address of a reverse proxy whose X-Forwarded-For/-Proto to believe (the client "
        "address the limits count); empty: none")
    unix_socket: str = setting(
        "", "listen on this Unix socket instead of host:port, for a reverse proxy on the same "
        "machine: the socket is mode 0660, so only its owner and unix_socket_group can send "
        "requests, and the proxy's X-Forwarded-For/-Proto are believed (no local process can "
        "forge them, as any can with trusted_proxy = \"127.0.0.1\"); empty: TCP")
    unix_socket_group: str = setting("", "group given the Unix socket (the proxy's, e.g. "
                                     "www-data); empty: the server's own")
    ssl_keyfile: str = setting("", "TLS private key (PEM) for uvicorn's own TLS; empty: none")
    ssl_certfile: str = setting("", "TLS certificate chain (PEM) for uvicorn's own TLS")
    plot_points: int = setting(1500, "most points per series a finding's plot asks InfluxDB "
                               "for (GROUP BY time sized to fit)", 100, 20000)
    verification_reuse_s: float = setting(
        60.0, "a link verified this recently is shown with that check and its time instead "
        "of being recomputed again, and a device's frames counted per past day are reused "
        "as long; 0: recompute on every view", 0.0, 3600.0)
    influx: InfluxSettings = setting(InfluxSettings(), "database")
    limits: LoadLimits = setting(LoadLimits(), "report renders, plot queries, stopping")
    report: ReportSettings = setting(ReportSettings(), "the evidence report: its paper")


class ReviewConfigError(AnalyzerError):
    """The configuration is unusable (the message names the key)."""


def load_review_settings(path: str) -> ReviewSettings:
    """Load and check a review configuration file."""
    settings = load(ReviewSettings, path)
    if bool(settings.ssl_keyfile) != bool(settings.ssl_certfile):
        raise ReviewConfigError("config keys 'ssl_keyfile' and 'ssl_certfile' go together: "
                                "set both or neither")
    if settings.unix_socket and settings.trusted_proxy:
        raise ReviewConfigError("config keys 'unix_socket' and 'trusted_proxy' exclude each "
                                "other: on a Unix socket every request comes from the proxy, "
                                "whose forwarded headers are believed; remove trusted_proxy")
    if settings.unix_socket_group and not settings.unix_socket:
        raise ReviewConfigError("config key 'unix_socket_group' needs 'unix_socket'")
    written = [key for key in INFLUX_WRITE_KEYS
               if getattr(settings.influx, key) != getattr(InfluxSettings(), key)]
    if written:
        raise ReviewConfigError(
            f"config key 'influx.{written[0]}' is the analyzer's (how it writes); the review "
            "application only reads InfluxDB: remove it (barkwatch review --describe lists "
            "the keys it takes)")
    return settings


# InfluxSettings' keys about writing: the analyzer's, never the review application's.
INFLUX_WRITE_KEYS = ("batch_points", "batch_bytes", "retry_max_s", "refused_points_file",
                     "refused_points_max_bytes")


def describe_review_settings() -> str:
    """Every key the review application takes, with its default and description."""
    return "\n".join(line for line in describe(ReviewSettings)
                     if line.split(" = ")[0].removeprefix("influx.") not in INFLUX_WRITE_KEYS)


def session_key(settings: ReviewSettings) -> str:
    """The cookie-signing key: read from ``session_key_file`` (created 0600 with 32 random
    bytes if missing), or a fresh one when no file is configured."""
    if not settings.session_key_file:
        return secrets.token_hex(32)
    path = Path(settings.session_key_file)
    if not path.exists():
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:
            raise ReviewConfigError(f"config key 'session_key_file': cannot create {path}: "
                                    f"{exc}") from exc
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(32) + "\n")
    if path.stat().st_mode & 0o077:
        raise ReviewConfigError(f"config key 'session_key_file': {path} is readable by others; "
                                "chmod 600 it (anyone who reads it can forge sessions)")
    key = path.read_text(encoding="utf-8").strip()
    if len(key) < 32:
        raise ReviewConfigError(f"config key 'session_key_file': {path} holds fewer than 32 "
                                "characters")
    return key

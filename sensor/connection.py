"""The broker connection's state and, when it fails, why, in words an installer can act on.

paho-mqtt 2.x, run by ``loop_start`` after ``connect_async``, catches the OSError of a failed
connection attempt on its network thread and calls ``on_connect_fail`` without it, logging
only "Connection failed, retrying" at DEBUG (``loop_forever`` in paho/mqtt/client.py). A
refused port, a certificate issued for another name or an unknown CA left no trace on the
client. :class:`WatchedClient` keeps paho's own retry loop (capped exponential backoff, set
by ``reconnect_delay_set``) and hands each attempt's outcome to a :class:`BrokerLink`, which
names the cause and logs it at WARNING: at once when it first happens or changes, then every
``REPEAT_LOG_S`` while it lasts.

``broker_state`` (in the sensor's heartbeat and the analyzer's ``analyzer_stats``):

============  ==========================================================================
connecting    no attempt has finished yet
connected     the broker accepted the connection (CONNACK success)
refused       nothing listens at host:port (TCP connection refused)
unreachable   no answer in time, no route, or the host name does not resolve
tls_failed    TLS handshake failed: certificate not valid for the host name, not signed by
              the CA in ``mqtt.tls_ca``, expired, or a plain (non-TLS) listener
auth_failed   the broker refused the login: bad user name or password, not authorized
rejected      the broker refused the connection for another reason (busy, protocol)
closed        the broker closed the connection before answering CONNECT (plain MQTT sent
              to a TLS listener, for one)
disconnected  an established connection was lost
============  ==========================================================================
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import paho.mqtt.client as mqtt

from sensor.config import MqttSettings

log = logging.getLogger(__name__)

REPEAT_LOG_S = 60.0  # a failure that goes on is logged again at most this often
# OpenSSL verify codes (include/openssl/x509_vfy.h) that mean "not signed by a CA we trust".
UNTRUSTED_ISSUER = {2, 18, 19, 20, 21}
HOSTNAME_MISMATCH, IP_MISMATCH = 62, 64
CERT_NOT_YET_VALID, CERT_EXPIRED = 9, 10
# CONNACK reasons that concern the login: MQTT 5 (134 bad user name or password, 135 not
# authorized, 138 banned, 140 bad authentication method) and MQTT 3.1.1 (4 and 5).
AUTH_REASONS = {134, 135, 138, 140}
AUTH_REASONS_V311 = {4, 5}


class BrokerState(enum.StrEnum):
    """Where the connection to the broker stands (see the module's table)."""

    CONNECTING = "connecting"
    CONNECTED = "connected"
    REFUSED = "refused"
    UNREACHABLE = "unreachable"
    TLS_FAILED = "tls_failed"
    AUTH_FAILED = "auth_failed"
    REJECTED = "rejected"
    CLOSED = "closed"
    DISCONNECTED = "disconnected"


def describe_connect_error(exc: OSError, settings: MqttSettings) -> tuple[BrokerState, str]:
    """The state a failed connection attempt leaves and a sentence saying why and what to
    check. ``exc`` is what opening the socket or the TLS handshake raised."""
    where = f"{settings.host}:{settings.port}"
    if isinstance(exc, ssl.SSLCertVerificationError):
        reason = exc.verify_message or exc.reason or str(exc)
        code = exc.verify_code
        if code in (HOSTNAME_MISMATCH, IP_MISMATCH):
            text = (
                f"the broker's certificate is not valid for {settings.host!r} ({reason}); "
                "set mqtt.host to a name or address the certificate names, or add this one "
                "with 'barkwatch ca renew-server --server-name'"
            )
        elif code in UNTRUSTED_ISSUER:
            text = (
                f"the broker's certificate is not signed by the CA in mqtt.tls_ca "
                f"({settings.tls_ca}): {reason}; install the deployment's ca.crt"
            )
        elif code in (CERT_EXPIRED, CERT_NOT_YET_VALID):
            text = (
                f"{reason} (the broker's certificate, or this machine's clock is wrong); "
                "renew it with 'barkwatch ca renew-server'"
            )
        else:
            text = f"the broker's certificate was refused: {reason}"
        return BrokerState.TLS_FAILED, f"TLS verification failed: {text}"
    if settings.tls_ca and isinstance(
        exc, ssl.SSLError | ConnectionResetError | BrokenPipeError
    ):
        # A plain listener reads the ClientHello as a broken MQTT packet and hangs up.
        detail = getattr(exc, "reason", None) or exc.strerror or str(exc)
        return BrokerState.TLS_FAILED, (
            f"TLS handshake failed ({detail}): is {where} a plain (non-TLS) listener? "
            "Devices use the broker's TLS listener (8883 unless 'broker init --device-port' "
            "chose another)"
        )
    if isinstance(exc, ConnectionRefusedError):
        return BrokerState.REFUSED, (
            f"connection refused: nothing listens on {where}; check mqtt.host, mqtt.port "
            "and that the broker runs"
        )
    if isinstance(exc, socket.gaierror):
        return BrokerState.UNREACHABLE, (
            f"cannot resolve the host name {settings.host!r}: {exc.strerror}"
        )
    if isinstance(exc, TimeoutError):
        return BrokerState.UNREACHABLE, (
            f"no answer from {where} in time (a firewall, a wrong address, or a TLS "
            "handshake that never finished)"
        )
    return BrokerState.UNREACHABLE, f"cannot reach {where}: {exc.strerror or exc}"


def describe_connack(reason: Any, settings: MqttSettings) -> tuple[BrokerState, str]:
    """The state and explanation of a CONNACK that refused the connection."""
    code = int(getattr(reason, "value", reason))
    v311 = settings.protocol == "mqttv311"
    if code in (AUTH_REASONS_V311 if v311 else AUTH_REASONS):
        if not settings.username:
            return BrokerState.AUTH_FAILED, (
                f"the broker refused an anonymous login ({reason}): set mqtt.username and "
                "its password"
            )
        return BrokerState.AUTH_FAILED, (
            f"the broker refused user {settings.username!r} ({reason}): a wrong password, "
            "or a user the broker does not know (never added, rotated or revoked); after "
            "'barkwatch device rotate' install the new mqtt-password"
        )
    return BrokerState.REJECTED, f"the broker refused the connection ({reason})"


@dataclass(frozen=True)
class LinkStatus:
    """A consistent snapshot of a :class:`BrokerLink`."""

    state: BrokerState
    error: str  # the last failure, "" before any
    failures: int  # failed connection attempts since start

    def fields(self) -> dict[str, Any]:
        """Heartbeat / stats fields: ``broker_state``, ``broker_error``, ``connect_failures``."""
        return {
            "broker_state": str(self.state),
            "broker_error": self.error,
            "connect_failures": self.failures,
        }

    def __str__(self) -> str:
        if self.state is BrokerState.CONNECTED or not self.error:
            return f"broker_state={self.state}"
        return f"broker_state={self.state} ({self.error})"


class BrokerLink:
    """The state of one client's connection to the broker, told by paho's callbacks.

    Callers feed it: :meth:`attempting` and :meth:`attempt_failed` (from
    :class:`WatchedClient`), :meth:`connack` (``on_connect``) and :meth:`disconnected`
    (``on_disconnect``). All run on paho's network thread; :meth:`status` may be read from
    any thread. ``clock``: monotonic seconds, for how often a lasting failure is logged.
    """

    def __init__(
        self, name: str, settings: MqttSettings, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.name = name
        self.settings = settings
        self._clock = clock
        self._lock = threading.Lock()
        self._state = BrokerState.CONNECTING
        self._error = ""
        self._failures = 0
        self._awaiting_connack = False
        self._refused_by_connack = False
        self._logged: tuple[BrokerState, str] | None = None
        self._logged_at = 0.0
        self._since_logged = 0
        self._broker = settings  # with the host and port tried or reached last

    @property
    def where(self) -> str:
        """host:port of the broker tried or reached last."""
        return f"{self._broker.host}:{self._broker.port}"

    def trying(self, host: str, port: int) -> None:
        """The next attempts go to ``host``:``port`` (another node of a clustered broker)."""
        if (host, port) != (self._broker.host, self._broker.port):
            self._broker = dataclasses.replace(self.settings, host=host, port=port)

    def status(self) -> LinkStatus:
        """State, last error and failure count, read together."""
        with self._lock:
            return LinkStatus(self._state, self._error, self._failures)

    def attempting(self) -> None:
        """A connection attempt starts (socket, TLS, CONNECT)."""
        with self._lock:
            self._awaiting_connack = True
            self._refused_by_connack = False

    def attempt_failed(self, exc: OSError) -> None:
        """Opening the socket or the TLS handshake raised ``exc``; paho retries later."""
        self._awaiting_connack = False
        self._fail(*describe_connect_error(exc, self._broker))

    def connack(self, reason: Any) -> bool:
        """The broker's CONNACK arrived; True when it accepted the connection."""
        if not reason.is_failure:
            with self._lock:
                failures, self._state = self._failures, BrokerState.CONNECTED
                self._awaiting_connack = False
                self._logged = None  # the next failure is news again
            if failures:
                log.info("%s reached the broker at %s after %d failed attempt(s)",
                         self.name, self.where, failures)
            return True
        self._refused_by_connack = True
        self._fail(*describe_connack(reason, self.settings))
        return False

    def disconnected(self, reason: Any, stopping: bool = False) -> bool:
        """The connection ended. True when an established connection was lost (not an
        attempt that failed, not a disconnect asked for by ``stopping``)."""
        with self._lock:
            awaiting, refused = self._awaiting_connack, self._refused_by_connack
            self._awaiting_connack = self._refused_by_connack = False
        if stopping:
            return False
        if refused:
            # paho closes after a refusing CONNACK and reports that as "Protocol error"
            # (MQTT 5) or "Unspecified error": the refusal was already reported.
            log.debug("%s: connection closed after the broker's refusal (%s)", self.name, reason)
            return False
        if awaiting:  # no CONNACK on this connection
            hint = (
                "" if self.settings.tls_ca else
                f"; if {self.where} is a TLS listener, set mqtt.tls_ca to the deployment's CA"
            )
            self._fail(
                BrokerState.CLOSED,
                f"the broker closed the connection before answering CONNECT{hint}",
            )
            return False
        with self._lock:
            self._state = BrokerState.DISCONNECTED
            self._error = f"connection lost ({reason})"
        log.warning("%s lost the broker at %s (%s); reconnecting with backoff up to %d s",
                    self.name, self.where, reason, self.settings.reconnect_max_s)
        return True

    def _fail(self, state: BrokerState, text: str) -> None:
        now = self._clock()
        with self._lock:
            self._state, self._error = state, text
            self._failures += 1
            news = self._logged != (state, text)
            due = news or now - self._logged_at >= REPEAT_LOG_S
            self._since_logged += 1
            attempts = self._since_logged
            if due:
                self._logged, self._logged_at, self._since_logged = (state, text), now, 0
        if not due:
            log.debug("%s cannot connect to the broker at %s: %s", self.name, self.where, text)
            return
        still = "" if news else f" (still, {attempts} attempts since the last report)"
        log.warning(
            "%s cannot connect to the broker at %s: %s%s; retrying with backoff up to %d s",
            self.name, self.where, text, still, self.settings.reconnect_max_s,
        )


class WatchedClient(mqtt.Client):
    """paho's client, telling ``link`` about every connection attempt and its failure, and
    taking the next of ``brokers`` (a clustered broker's nodes) for each attempt after the
    first.

    paho's network thread calls :meth:`reconnect` for each attempt and swallows the OSError
    it raises (see the module's docstring); here it is passed to ``link`` first. It calls it
    again only after an attempt failed or the connection was lost, so every call but the first
    moves on to the next node: a dead node's devices reach another one at their next attempt
    (1 s after the loss, then with backoff), and a live node is kept for as long as it lasts.
    """

    link: BrokerLink
    brokers: list[tuple[str, int]] = []  # (host, port) in the order tried; empty: as connected
    _attempts = 0

    def reconnect(self) -> mqtt.MQTTErrorCode:
        link = getattr(self, "link", None)
        if self._attempts and len(self.brokers) > 1:
            host, port = self.brokers[self._attempts % len(self.brokers)]
            # paho's setters refuse while its state is "connection lost" or "connecting",
            # which is every state a retry starts from; reconnect() closes the old socket
            # and opens the new one from these two fields, as after connect_async().
            self._host, self._port = host, port
            if link is not None:
                log.info("%s: trying the broker at %s:%d next", link.name, host, port)
        self._attempts += 1
        if link is not None:
            link.trying(self.host, self.port)
            link.attempting()
        try:
            return super().reconnect()
        except OSError as exc:
            if link is not None:
                link.attempt_failed(exc)
            raise

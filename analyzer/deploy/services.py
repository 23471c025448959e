"""Start real Mosquitto and InfluxDB as child processes on free loopback ports.

Used by the tests, the demo and the documentation. Each service keeps its state in a
directory it is given (a temporary one by default), can be stopped and started again on the
same port with the same state (to test outages), and is stopped cleanly by ``close`` or by
leaving the ``with`` block, also when the code inside raised. A missing binary raises
:class:`ServiceError` naming the Debian package to install; nothing is ever skipped.

Mosquitto runs in one of two modes, both from ``broker_config/``:

- plain (the default, for most tests and the demo): one loopback listener, anonymous
  access, plus the shared settings of ``broker_config/barkwatch.conf``;
- secured (``security=``): exactly the deployment's configuration, rendered from
  ``broker_config/security.conf.in`` by :func:`analyzer.deploy.provision.render_broker_config`
  with loopback ports: a TLS listener for devices, a loopback listener for the analyzer,
  passwords and the ACL. :class:`LocalDeployment` provisions the files it needs (CA, server
  certificate for 127.0.0.1, password file, ACL) in a directory, with the same functions
  the ``barkwatch ca|broker|device`` commands use.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from analyzer.deploy.provision import (
    ANALYZER_USER,
    BROKER_CONFIG_DIR,
    BrokerFiles,
    DeviceBundle,
    add_device,
    init_broker,
    init_pki,
    render_broker_config,
)
from analyzer.errors import ServiceError
from sensor.config import MqttSettings

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A TCP port on the loopback interface that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def _binary(name: str, package: str) -> str:
    path = shutil.which(name) or next(
        (str(p) for p in (Path("/usr/sbin") / name, Path("/usr/bin") / name) if p.exists()), None
    )
    if path is None:
        raise ServiceError(f"{name} is not installed; install it with 'apt-get install {package}'")
    return path


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((LOOPBACK, port)) == 0


class _ChildService:
    """A server run as a child process; subclasses say how to configure and probe it."""

    name = "service"

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = state_dir / f"{self.name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def ready(self) -> bool:
        raise NotImplementedError

    def start(self, timeout_s: float = 30.0) -> None:
        """Start the process and wait until it answers; raise ServiceError with its log."""
        if self.process is not None and self.process.poll() is None:
            return
        with open(self.log_path, "ab") as log_file:
            self.process = subprocess.Popen(
                self.command(),
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServiceError(
                    f"{self.name} exited with status {self.process.returncode} at start-up; "
                    f"its log ({self.log_path}):\n{self.log_tail()}"
                )
            if self.ready():
                log.debug("%s ready", self.name)
                return
            time.sleep(0.01)
        self.stop()
        raise ServiceError(
            f"{self.name} did not answer within {timeout_s:.0f} s; log:\n{self.log_tail()}"
        )

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop the process (SIGTERM, then SIGKILL after ``timeout_s``)."""
        if self.process is None or self.process.poll() is not None:
            self.process = None
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=timeout_s)
        self.process = None

    def restart(self) -> None:
        """Stop and start again on the same port with the same state."""
        self.stop()
        self.start()

    @property
    def running(self) -> bool:
        """Whether the child process is alive."""
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        """The last lines the service wrote."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


class Mosquitto(_ChildService):
    """Mosquitto from ``broker_config/``: plain loopback listener on ``port``, or, with
    ``security``, the deployment's configuration: TLS for devices on ``tls_port`` and the
    analyzer's loopback listener on ``port``, both authenticated."""

    name = "mosquitto"

    def __init__(
        self,
        state_dir: Path,
        port: int | None = None,
        extra_config: str = "",
        security: BrokerFiles | None = None,
    ) -> None:
        super().__init__(state_dir)
        self.binary = _binary("mosquitto", "mosquitto")
        self.port = port or free_port()
        self.tls_port: int | None = None
        self.config_path = state_dir / "mosquitto.conf"
        self.pid_file = state_dir / "mosquitto.pid"
        # As root Mosquitto drops to user 'mosquitto', which could neither write this
        # directory nor read 0600 files of root's.
        user = "user root\n" if os.geteuid() == 0 else ""
        header = (
            f"# written by analyzer.deploy.services for a local test or demo broker\n{user}"
            f"pid_file {self.pid_file}\npersistence_location {state_dir}/\n{extra_config}\n"
        )
        if security is None:
            shared = (BROKER_CONFIG_DIR / "barkwatch.conf").read_text()
            body = f"listener {self.port} {LOOPBACK}\nallow_anonymous true\n{shared}"
        else:
            self.tls_port = free_port()
            body = render_broker_config(security, self.tls_port, LOOPBACK, self.port)
        self.config_path.write_text(header + body)

    def command(self) -> list[str]:
        return [self.binary, "-c", str(self.config_path)]

    def ready(self) -> bool:
        return _port_open(self.port) and (self.tls_port is None or _port_open(self.tls_port))

    def reload(self) -> None:
        """SIGHUP: re-read the password file and ACL, keeping other clients connected."""
        if self.process is None or self.process.poll() is not None:
            raise ServiceError("mosquitto is not running; nothing to reload")
        self.process.send_signal(signal.SIGHUP)


class LocalDeployment:
    """A complete secured deployment in one directory, for tests and demos.

    Made with the provisioning functions behind ``barkwatch ca init``, ``broker init`` and
    ``device add``: a CA, a server certificate for 127.0.0.1 (Python's ``ssl`` matches an
    address only against IP subject-alternative names), the password file with the
    analyzer's user, the ACL, and device bundles under ``devices/``.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pki_dir = root / "pki"
        self.files = BrokerFiles(root / "broker")
        self.devices_dir = root / "devices"
        self.analyzer_password_file = root / "analyzer-mqtt-password"
        if not self.files.password_file.exists():
            # Files stay with the current user: the launcher runs Mosquitto as that user.
            init_pki(self.pki_dir, self.files, [LOOPBACK], broker_user=None)
            init_broker(
                self.files,
                root / "barkwatch.conf",
                self.analyzer_password_file,
                broker_user=None,
                analyzer_owner=None,
            )

    def add_device(self, device_id: str) -> DeviceBundle:
        """Provision ``device_id`` (the broker must be reloaded to accept it)."""
        return add_device(self.files, self.devices_dir, device_id, LOOPBACK, broker_user=None)

    def analyzer_mqtt(self, broker: Mosquitto, **overrides: Any) -> MqttSettings:
        """The analyzer's settings for ``broker``'s loopback listener."""
        values: dict[str, Any] = {
            "host": LOOPBACK,
            "port": broker.port,
            "username": ANALYZER_USER,
            "password_env": "",
            "password_file": str(self.analyzer_password_file),
        }
        return MqttSettings(**{**values, **overrides})

    def device_mqtt(self, device_id: str, broker: Mosquitto, **overrides: Any) -> MqttSettings:
        """A device's settings for ``broker``'s TLS listener, from its bundle."""
        bundle = DeviceBundle(self.devices_dir / device_id)
        values: dict[str, Any] = {
            "host": LOOPBACK,
            "port": broker.tls_port,
            "username": device_id,
            "password_env": "",
            "password_file": str(bundle.password_file),
            "tls_ca": str(bundle.ca_cert),
        }
        return MqttSettings(**{**values, **overrides})


class InfluxDB(_ChildService):
    """InfluxDB 1.x (Debian ``influxdb``) with its HTTP API on a loopback port."""

    name = "influxdb"

    def __init__(self, state_dir: Path, port: int | None = None, auth: bool = False) -> None:
        """``auth``: authentication on, as docs/DEPLOY.md configures a deployment's."""
        super().__init__(state_dir)
        self.binary = _binary("influxd", "influxdb")
        self.port = port or free_port()
        self.rpc_port = free_port()
        self.config_path = state_dir / "influxdb.conf"
        self.config_path.write_text(
            "reporting-disabled = true\n"
            f'bind-address = "{LOOPBACK}:{self.rpc_port}"\n'
            f'[meta]\n  dir = "{state_dir}/meta"\n'
            f'[data]\n  dir = "{state_dir}/data"\n  wal-dir = "{state_dir}/wal"\n'
            "  query-log-enabled = false\n"
            f'[http]\n  bind-address = "{LOOPBACK}:{self.port}"\n  log-enabled = false\n'
            f"  auth-enabled = {'true' if auth else 'false'}\n"
            "[monitor]\n  store-enabled = false\n"
            # As docs/DEPLOY.md configures a deployment's: a query running past the clients'
            # 10 s timeout is stopped by InfluxDB itself (issue 33: abandoned wide zooms kept
            # computing and grew it from 0.46 to 3.2 GB).
            '[coordinator]\n  query-timeout = "10s"\n  log-queries-after = "5s"\n'
            "[continuous_queries]\n  log-enabled = false\n"
        )

    @property
    def url(self) -> str:
        """Base URL of the HTTP API."""
        return f"http://{LOOPBACK}:{self.port}"

    def command(self) -> list[str]:
        return [self.binary, "-config", str(self.config_path)]

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/ping", timeout=0.5) as response:
                return bool(response.status == 204)
        except (urllib.error.URLError, OSError):
            return False


class Services(contextlib.AbstractContextManager["Services"]):
    """Mosquitto and InfluxDB together, state under one directory, stopped on exit."""

    def __init__(self, state_dir: str | Path | None = None, secure: bool = False) -> None:
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if state_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="barkwatch-services-")
            state_dir = self._tmp.name
        root = Path(state_dir)
        self.deployment = LocalDeployment(root / "deployment") if secure else None
        security = self.deployment.files if self.deployment else None
        self.broker = Mosquitto(root / "mosquitto", security=security)
        self.influx = InfluxDB(root / "influxdb")

    def start(self) -> Services:
        """Start both services and wait until each answers."""
        try:
            self.broker.start()
            self.influx.start()
        except BaseException:
            self.close()
            raise
        log.info("mosquitto on %s:%d, influxdb on %s", LOOPBACK, self.broker.port, self.influx.url)
        return self

    def close(self) -> None:
        """Stop both services and remove a temporary state directory."""
        for service in (self.broker, self.influx):
            try:
                service.stop()
            except Exception:  # keep stopping the others
                log.exception("stopping %s failed", service.name)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> Services:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

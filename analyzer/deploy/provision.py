"""Provisioning a deployment: broker configuration, the analyzer's and devices' credentials.

Everything the ``barkwatch ca|broker|device`` commands do, as functions the tests and the
local launcher call too. Files and their permissions (defaults are a Debian layout):

=================================================  ======  ====================================
file                                               mode    who reads it
=================================================  ======  ====================================
``/etc/barkwatch/pki/ca.key``                      0600    nobody running; keep it offline
``/etc/barkwatch/pki/ca.crt``                      0644    copied to the broker and devices
``/etc/mosquitto/barkwatch/server.key``            0600    Mosquitto (owner ``mosquitto``)
``/etc/mosquitto/barkwatch/server.crt``, ca.crt    0644    Mosquitto, ``device add``
``/etc/mosquitto/barkwatch/passwd``                0600    Mosquitto (owner ``mosquitto``)
``/etc/mosquitto/barkwatch/barkwatch.acl``         0644    Mosquitto
``/etc/mosquitto/barkwatch/deployment.toml``       0644    ``device add|rotate`` (ports)
``/etc/mosquitto/conf.d/barkwatch.conf``           0644    Mosquitto
``/etc/barkwatch/analyzer-mqtt-password``          0600    the analyzer (owner ``barkwatch``)
``/etc/barkwatch/devices/<device>/``               0700    root; copied onto the device
=================================================  ======  ====================================

A device bundle holds ``sensor.toml`` (no secret in it), ``ca.crt`` and ``mqtt-password``
(0600). Passwords are never printed or logged; they exist only in those 0600 files and, as
hashes, in the broker's password file.

``deployment.toml`` holds the deployment's saved settings: the ports and address ``broker init``
rendered, so that ``device add`` writes the device port chosen there into each bundle.

The ACL needs no per-device lines (its patterns use the user name, which is the device id),
so adding or revoking a device only changes the password file. Mosquitto re-reads that file
and the ACL on SIGHUP, keeps every other client connected and drops any client whose
credentials are gone: :func:`reload_broker`.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import string
import tomllib
from dataclasses import dataclass
from pathlib import Path

import tomlkit

from analyzer.deploy.passwords import PasswordFile, new_password, read_password_file
from analyzer.deploy.pki import (
    CA_DAYS,
    SERVER_DAYS,
    CertificateAuthority,
    create_ca,
    issue_server_certificate,
)
from analyzer.errors import ProvisioningError
from analyzer.files import write_file
from sensor.wire import DEVICE_ID_PATTERN

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
BROKER_CONFIG_DIR = ROOT / "broker_config"
SENSOR_EXAMPLE = ROOT / "deploy" / "sensor.example.toml"

ANALYZER_USER = "barkwatch.analyzer"  # the '.' keeps it apart from every device id
COMMAND_ROOT = "barkwatch/cmd/v1"  # devices read COMMAND_ROOT/<device>/#; outside the data tree
DEVICE_PORT = 8883
LOCAL_PORT = 1883
BROKER_USER = "mosquitto"
SERVICE_USER = "barkwatch"
DEFAULT_BROKER_DIR = Path("/etc/mosquitto/barkwatch")
DEFAULT_PKI_DIR = Path("/etc/barkwatch/pki")
DEFAULT_DEVICES_DIR = Path("/etc/barkwatch/devices")
DEFAULT_CONF = Path("/etc/mosquitto/conf.d/barkwatch.conf")
DEFAULT_ANALYZER_PASSWORD = Path("/etc/barkwatch/analyzer-mqtt-password")
DEFAULT_PID_FILE = Path("/run/mosquitto/mosquitto.pid")  # Debian's mosquitto.conf sets it
DEVICE_ETC = "/etc/barkwatch"  # where a bundle's files go on the device
RELOAD_HOW = (
    "'sudo systemctl reload mosquitto' (Debian's service), "
    "'sudo kill -HUP $(pidof mosquitto)' (a broker started by hand), or the command again "
    "with --pid-file naming the pid_file of the broker's configuration"
)


def command_topic(device_id: str) -> str:
    """Root of the command subtree only ``device_id`` may read (and the analyzer write)."""
    return f"{COMMAND_ROOT}/{device_id}"


@dataclass(frozen=True)
class BrokerFiles:
    """The files one broker's security configuration names, all in one directory."""

    directory: Path = DEFAULT_BROKER_DIR

    @property
    def certfile(self) -> Path:
        """The server certificate (0644)."""
        return self.directory / "server.crt"

    @property
    def keyfile(self) -> Path:
        """The server's private key (0600, owned by the broker's user)."""
        return self.directory / "server.key"

    @property
    def ca_cert(self) -> Path:
        """A copy of the project CA certificate, handed to devices."""
        return self.directory / "ca.crt"

    @property
    def password_file(self) -> Path:
        """Mosquitto's password file (0600, owned by the broker's user)."""
        return self.directory / "passwd"

    @property
    def acl_file(self) -> Path:
        """The installed copy of ``broker_config/barkwatch.acl``."""
        return self.directory / "barkwatch.acl"

    @property
    def cluster_password_file(self) -> Path:
        """The clustered broker's bcrypt hashes (analyzer.deploy.cluster), if it has one."""
        return self.directory / "cluster-passwd"

    @property
    def settings_file(self) -> Path:
        """The deployment's saved settings (:class:`DeploymentSettings`), 0644."""
        return self.directory / "deployment.toml"


@dataclass(frozen=True)
class DeploymentSettings:
    """What ``broker init`` chose, saved for the commands that come after it."""

    device_port: int = DEVICE_PORT
    device_address: str = ""
    local_port: int = LOCAL_PORT

    def save(self, files: BrokerFiles) -> None:
        """Write them to ``files.settings_file``."""
        document = tomlkit.document()
        document.add(tomlkit.comment(
            "The deployment's saved settings, written by 'barkwatch broker init' (which "
            "renders the"))
        document.add(tomlkit.comment(
            "broker's configuration from them); 'barkwatch device add|rotate' put "
            "device_port into each bundle."))
        for key, value in vars(self).items():
            document[key] = value
        write_file(files.settings_file, tomlkit.dumps(document).encode(), 0o644)

    @classmethod
    def load(cls, files: BrokerFiles) -> DeploymentSettings | None:
        """The saved settings; None when ``broker init`` has not saved any. Raise
        ProvisioningError naming the file and key when they cannot be used."""
        path = files.settings_file
        try:
            document = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ProvisioningError(f"cannot read the deployment's settings {path}: {exc}") from exc
        defaults = cls()

        def port(key: str, default: int) -> int:
            value = document.pop(key, default)
            if type(value) is not int or not 1 <= value <= 65535:
                raise ProvisioningError(f"{path}: {key} = {value!r} is not a port (1-65535)")
            return value

        address = document.pop("device_address", defaults.device_address)
        if not isinstance(address, str):
            raise ProvisioningError(f"{path}: device_address = {address!r} is not a string")
        settings = cls(port("device_port", defaults.device_port), address,
                       port("local_port", defaults.local_port))
        if document:
            raise ProvisioningError(f"{path}: unknown key(s) {', '.join(sorted(document))}")
        return settings


def render_broker_config(
    files: BrokerFiles,
    device_port: int = DEVICE_PORT,
    device_address: str = "",
    local_port: int = LOCAL_PORT,
) -> str:
    """The deployment's Mosquitto configuration: ``security.conf.in`` filled in, followed by
    ``barkwatch.conf``. ``device_address`` empty: the TLS listener binds every interface."""
    template = string.Template((BROKER_CONFIG_DIR / "security.conf.in").read_text())
    try:
        security = template.substitute(
            device_port=device_port,
            device_address=device_address,
            local_port=local_port,
            certfile=files.certfile,
            keyfile=files.keyfile,
            password_file=files.password_file,
            acl_file=files.acl_file,
        )
    except (KeyError, ValueError) as exc:
        raise ProvisioningError(f"broker_config/security.conf.in: bad placeholder {exc}") from exc
    shared = (BROKER_CONFIG_DIR / "barkwatch.conf").read_text()
    lines = [line.rstrip() for line in f"{security}\n{shared}".splitlines()]
    return "\n".join(lines) + "\n"


def init_pki(
    pki_dir: Path,
    files: BrokerFiles,
    server_names: list[str],
    broker_user: str | None = BROKER_USER,
    ca_days: int = CA_DAYS,
    server_days: int = SERVER_DAYS,
) -> None:
    """Create the deployment's CA in ``pki_dir`` (``ca.key`` 0600, ``ca.crt``) and the
    broker's certificate for ``server_names`` in ``files`` (key 0600, owned by
    ``broker_user``); copy ``ca.crt`` next to it for ``device add``. Refuses to replace a CA.
    """
    pki_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(pki_dir, 0o700)
    create_ca(pki_dir / "ca.crt", pki_dir / "ca.key", f"Barkwatch CA {server_names[0]}", ca_days)
    renew_server_certificate(pki_dir, files, server_names, broker_user, server_days)


def renew_server_certificate(
    pki_dir: Path,
    files: BrokerFiles,
    server_names: list[str],
    broker_user: str | None = BROKER_USER,
    server_days: int = SERVER_DAYS,
) -> None:
    """Issue a new broker certificate and key with the existing CA (renewal, new names).
    Mosquitto reads them at start: restart it afterwards."""
    ca = CertificateAuthority.load(pki_dir / "ca.crt", pki_dir / "ca.key")
    issue_server_certificate(
        ca, files.certfile, files.keyfile, server_names, server_days, broker_user
    )
    write_file(files.ca_cert, (pki_dir / "ca.crt").read_bytes(), 0o644)


def init_broker(
    files: BrokerFiles,
    conf_path: Path,
    analyzer_password_path: Path,
    device_port: int = DEVICE_PORT,
    device_address: str = "",
    local_port: int = LOCAL_PORT,
    broker_user: str | None = BROKER_USER,
    analyzer_owner: str | None = SERVICE_USER,
    rotate_analyzer: bool = False,
) -> bool:
    """Write the broker configuration, ACL and the deployment's saved settings (ports), and
    make sure the analyzer has credentials.

    Safe to run again: the configuration and ACL are rewritten, the password file and the
    analyzer's password are kept unless ``rotate_analyzer``. Return whether a new analyzer
    password was written (to ``analyzer_password_path``, 0600, owned by ``analyzer_owner``).
    """
    for needed in (files.certfile, files.keyfile):
        if not needed.exists():
            raise ProvisioningError(f"{needed} is missing: run 'barkwatch ca init' first")
    config = render_broker_config(files, device_port, device_address, local_port)
    write_file(conf_path, config.encode(), 0o644)
    DeploymentSettings(device_port, device_address, local_port).save(files)
    write_file(files.acl_file, (BROKER_CONFIG_DIR / "barkwatch.acl").read_bytes(), 0o644)
    with PasswordFile(files.password_file, owner=broker_user) as passwords:
        if ANALYZER_USER in passwords and not rotate_analyzer:
            log.info("analyzer user %s exists; its password is kept", ANALYZER_USER)
            return False
        password = new_password()
        passwords.set_password(ANALYZER_USER, password)
        write_file(analyzer_password_path, (password + "\n").encode(), 0o600, analyzer_owner)
    log.info("analyzer password written to %s (0600)", analyzer_password_path)
    return True


@dataclass(frozen=True)
class DeviceBundle:
    """What a device needs, in one directory: copy its files to ``DEVICE_ETC`` on the device."""

    directory: Path

    @property
    def config(self) -> Path:
        """The sensor configuration (no secret in it)."""
        return self.directory / "sensor.toml"

    @property
    def ca_cert(self) -> Path:
        """The project CA certificate the device trusts."""
        return self.directory / "ca.crt"

    @property
    def password_file(self) -> Path:
        """The device's MQTT password (0600)."""
        return self.directory / "mqtt-password"


def check_device_id(device_id: str) -> None:
    """Raise ProvisioningError unless ``device_id`` is a valid device id (= MQTT user)."""
    if not DEVICE_ID_PATTERN.match(device_id):
        raise ProvisioningError(
            f"{device_id!r} is not a valid device id (lower-case letters, digits, '-' and "
            "'_', starting with a letter or digit, at most 64 characters)"
        )


def device_config_text(device_id: str, broker_host: str, broker_port: int) -> str:
    """``deploy/sensor.example.toml`` with the device id and broker settings of this device;
    comments and every other setting stay as in the example."""
    document = tomlkit.parse(SENSOR_EXAMPLE.read_text(encoding="utf-8"))
    document["device_id"] = device_id
    if "mqtt" not in document:
        document["mqtt"] = tomlkit.table()
    mqtt = document["mqtt"]
    if not isinstance(mqtt, dict):
        raise ProvisioningError(f"{SENSOR_EXAMPLE}: 'mqtt' is not a table")
    mqtt["host"] = broker_host
    mqtt["port"] = broker_port
    mqtt["username"] = device_id
    mqtt["password_file"] = f"{DEVICE_ETC}/mqtt-password"
    mqtt["tls_ca"] = f"{DEVICE_ETC}/ca.crt"
    mqtt["protocol"] = "mqttv5"
    return tomlkit.dumps(document)


def add_device(
    files: BrokerFiles,
    devices_dir: Path,
    device_id: str,
    broker_host: str,
    broker_port: int | None = None,
    broker_user: str | None = BROKER_USER,
    rotate: bool = False,
) -> DeviceBundle:
    """Create credentials for ``device_id``, add them to the password file and write its
    bundle under ``devices_dir``: ``sensor.toml``, ``ca.crt`` and ``mqtt-password``.
    ``broker_port`` None: the device port ``broker init`` saved (:func:`device_port`).

    ``rotate``: the device must exist and gets a new password (its old one stops working at
    the next broker reload); only ``mqtt-password`` is written, because the device's
    installed ``sensor.toml`` holds its site's ``[audio]`` and ``[calibration]``, which a new
    one would overwrite. The broker is not reloaded here.
    """
    check_device_id(device_id)
    if not files.ca_cert.exists():
        raise ProvisioningError(f"{files.ca_cert} is missing: run 'barkwatch ca init' first")
    bundle = DeviceBundle(devices_dir / device_id)
    with PasswordFile(files.password_file, owner=broker_user) as passwords:
        if device_id in passwords and not rotate:
            raise ProvisioningError(
                f"device {device_id!r} already exists in {files.password_file}; "
                "use 'barkwatch device rotate' for a new password"
            )
        if rotate and device_id not in passwords:
            raise ProvisioningError(f"there is no device {device_id!r} to rotate")
        password = new_password()
        devices_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        bundle.directory.mkdir(mode=0o700, exist_ok=True)
        os.chmod(bundle.directory, 0o700)
        write_file(bundle.password_file, (password + "\n").encode(), 0o600)
        if not rotate:
            write_file(bundle.ca_cert, files.ca_cert.read_bytes(), 0o644)
            port = device_port(files) if broker_port is None else broker_port
            text = device_config_text(device_id, broker_host, port)
            write_file(bundle.config, text.encode(), 0o644)
            from sensor.config import load_sensor_config  # heavy (numpy, scipy): only here

            load_sensor_config(str(bundle.config))  # the bundle must be a valid configuration
        passwords.set_password(device_id, password)
        if files.cluster_password_file.exists():  # a clustered broker: its hash as well
            from analyzer.deploy.cluster import set_cluster_password

            set_cluster_password(files.cluster_password_file, device_id, password)
    action = "rotated" if rotate else "added"
    log.info("device %s %s; bundle in %s", device_id, action, bundle.directory)
    return bundle


def rotate_device(
    files: BrokerFiles, devices_dir: Path, device_id: str, broker_user: str | None = BROKER_USER
) -> DeviceBundle:
    """Give ``device_id`` a new password, written to its bundle's ``mqtt-password`` alone
    (see :func:`add_device`)."""
    return add_device(files, devices_dir, device_id, "", broker_user=broker_user, rotate=True)


def device_port(files: BrokerFiles) -> int:
    """The port devices connect to: the one ``broker init`` saved, else the default 8883."""
    saved = DeploymentSettings.load(files)
    if saved is None:
        log.warning("%s does not exist (run 'barkwatch broker init'); devices get port %d",
                    files.settings_file, DEVICE_PORT)
        return DEVICE_PORT
    return saved.device_port


def revoke_device(files: BrokerFiles, devices_dir: Path, device_id: str) -> None:
    """Remove ``device_id`` from the password file and delete its bundle (which holds its
    password). After :func:`reload_broker` it is disconnected and cannot connect again."""
    check_device_id(device_id)
    with PasswordFile(files.password_file) as passwords:
        if device_id not in passwords:
            raise ProvisioningError(f"there is no device {device_id!r} in {files.password_file}")
        passwords.remove(device_id)
        if files.cluster_password_file.exists():
            from analyzer.deploy.cluster import set_cluster_password

            set_cluster_password(files.cluster_password_file, device_id, None)
    bundle = devices_dir / device_id
    if bundle.is_dir():
        shutil.rmtree(bundle)
    log.info("device %s revoked", device_id)


def list_devices(files: BrokerFiles) -> list[str]:
    """Device ids in the password file, sorted (the analyzer's user is not a device)."""
    users = read_password_file(files.password_file)
    return sorted(user for user in users if DEVICE_ID_PATTERN.match(user))


def reload_broker(pid_file: Path = DEFAULT_PID_FILE) -> bool:
    """Send SIGHUP to the Mosquitto whose pid is in ``pid_file``: it re-reads the password
    file and ACL without dropping other clients. False when there is no pid file (the
    caller tells the operator to reload); ProvisioningError when the pid is not Mosquitto's.
    """
    try:
        pid = int(pid_file.read_text().strip())
    except FileNotFoundError:
        return False
    except (OSError, ValueError) as exc:
        raise ProvisioningError(f"cannot read a process id from {pid_file}: {exc}") from exc
    try:
        name = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        name = ""
    if name != "mosquitto":
        raise ProvisioningError(
            f"{pid_file} names process {pid}, which is not a running mosquitto; "
            "reload the broker yourself (systemctl reload mosquitto)"
        )
    try:
        os.kill(pid, signal.SIGHUP)
    except OSError as exc:
        raise ProvisioningError(f"cannot signal mosquitto (pid {pid}): {exc.strerror}") from exc
    log.info("sent SIGHUP to mosquitto (pid %d): it re-reads the password file and ACL", pid)
    return True

"""``barkwatch ca|broker|device``: set up a secured deployment and manage device credentials.

Argument parsing and operator-facing output only; the work is in :mod:`analyzer.deploy.provision`.
Nothing here prints or logs a password: each is written once, to a 0600 file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analyzer.deploy import CA_DAYS, SERVER_DAYS, owner_of, provision
from analyzer.errors import ProvisioningError

INSTALL_ON_DEVICE = """\
Install it on the device (as root; the sensor runs as user barkwatch):
  install -d -m 755 {etc}
  install -m 644 sensor.toml ca.crt {etc}/
  install -m 600 -o barkwatch -g barkwatch mqtt-password {etc}/
Then check it there with: barkwatch-sensor validate-config --config {etc}/sensor.toml
The bundle holds the only copy of the password: delete it once installed."""
INSTALL_ROTATED = """\
Install only the new mqtt-password on the device (as root), not a new sensor.toml: the
installed one holds the site's [audio] and [calibration]:
  install -m 600 -o barkwatch -g barkwatch mqtt-password {etc}/
No restart is needed: the sensor re-reads it before its next connection attempt.
The bundle holds the only copy of the password: delete it once installed."""
# What a change that the broker has not re-read means, per command.
NOT_APPLIED = {
    "add": "the new device cannot connect yet",
    "rotate": "the old password still works and the new one does not",
    "revoke": "the revoked device can still connect",
}


def _port(text: str) -> int:
    """A TCP port number from the command line (argparse type)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (1-65535)")
    return value


def _broker_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--broker-dir",
        type=Path,
        default=provision.DEFAULT_BROKER_DIR,
        help="the broker's certificate, key, password file and ACL "
        f"(default {provision.DEFAULT_BROKER_DIR})",
    )


def _devices_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--devices-dir",
        type=Path,
        default=provision.DEFAULT_DEVICES_DIR,
        help=f"where device bundles are written (default {provision.DEFAULT_DEVICES_DIR})",
    )


def _reload(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--pid-file",
        type=Path,
        default=provision.DEFAULT_PID_FILE,
        help="Mosquitto's pid file; it gets SIGHUP to re-read passwords and ACL "
        f"(default {provision.DEFAULT_PID_FILE}, which Debian's mosquitto.conf sets). When "
        "it cannot be signalled, the command exits with status 1 and says how to reload",
    )
    parser.add_argument(
        "--no-reload", action="store_true", help="change the files only; reload the broker later"
    )


def _broker_user(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--broker-user",
        default=provision.BROKER_USER,
        help="user Mosquitto runs as: it gets the files it must read (default mosquitto)",
    )


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``ca``, ``broker`` and ``device`` commands to ``barkwatch``."""
    ca = sub.add_parser(
        "ca",
        help="the deployment's certificate authority and the broker's certificate",
        description="Devices trust only the deployment's own CA. 'init' creates it "
        "(PKI_DIR/ca.key, mode 0600, owned by you: it signs server certificates and nothing "
        "running needs it, so keep it offline afterwards) and the broker's certificate and key "
        "(BROKER_DIR/server.crt, server.key 0600 owned by the broker's user). 'renew-server' "
        "issues a new broker certificate with the existing CA.",
    )
    ca_sub = ca.add_subparsers(dest="action")
    for action, text in (
        ("init", "create the CA and the broker's certificate for a new deployment"),
        ("renew-server", "issue a new broker certificate (expiry, new names); restart after"),
    ):
        command = ca_sub.add_parser(action, help=text, description=text)
        command.add_argument(
            "--server-name",
            action="append",
            required=True,
            metavar="NAME",
            help="host name or IP address devices use for the broker; repeat for several",
        )
        command.add_argument(
            "--pki-dir",
            type=Path,
            default=provision.DEFAULT_PKI_DIR,
            help=f"where the CA lives (default {provision.DEFAULT_PKI_DIR}, mode 0700)",
        )
        _broker_dir(command)
        _broker_user(command)
        command.add_argument(
            "--server-days", type=int, default=SERVER_DAYS, help="server certificate life"
        )
        if action == "init":
            command.add_argument("--ca-days", type=int, default=CA_DAYS, help="CA life in days")

    broker = sub.add_parser("broker", help="the broker's configuration and the analyzer's login")
    broker_sub = broker.add_subparsers(dest="action")
    init = broker_sub.add_parser(
        "init",
        help="write Mosquitto's configuration and ACL; create the analyzer's credentials",
        description="Render broker_config/security.conf.in plus barkwatch.conf into one "
        "Mosquitto configuration file, install the ACL next to the password file, and "
        "create the analyzer's MQTT user (its password goes to a 0600 file owned by the "
        "analyzer's service user). Safe to run again: an existing analyzer password is kept "
        "unless --rotate-analyzer. Restart Mosquitto afterwards.",
    )
    _broker_dir(init)
    _broker_user(init)
    init.add_argument(
        "--conf",
        type=Path,
        default=provision.DEFAULT_CONF,
        help=f"configuration file to write (default {provision.DEFAULT_CONF})",
    )
    init.add_argument(
        "--device-port",
        type=_port,
        default=provision.DEVICE_PORT,
        help="port of the TLS listener for devices (default 8883); saved in "
        "BROKER_DIR/deployment.toml, where 'device add' takes it from",
    )
    init.add_argument(
        "--device-address", default="", help="address the TLS listener binds; default all"
    )
    init.add_argument(
        "--local-port",
        type=_port,
        default=provision.LOCAL_PORT,
        help="loopback listener for a co-located analyzer (default 1883)",
    )
    init.add_argument(
        "--analyzer-password-file",
        type=Path,
        default=provision.DEFAULT_ANALYZER_PASSWORD,
        help=f"where the analyzer's password goes (default {provision.DEFAULT_ANALYZER_PASSWORD})",
    )
    init.add_argument(
        "--analyzer-user",
        default=provision.SERVICE_USER,
        help="service user that reads that file (default barkwatch)",
    )
    init.add_argument("--rotate-analyzer", action="store_true", help="new analyzer password")

    device = sub.add_parser(
        "device",
        help="add, rotate, revoke and list device credentials",
        description="A device's MQTT user name is its device id. The ACL's patterns give it "
        "its own topics only, so only the password file changes; the broker re-reads it on "
        "SIGHUP without dropping other clients, and disconnects a revoked device at once.",
    )
    device_sub = device.add_subparsers(dest="action")
    for action, text in (
        ("add", "create a device's credentials and its ready configuration bundle"),
        ("rotate", "give a device a new password (its bundle's mqtt-password only); the old "
         "password stops working"),
    ):
        command = device_sub.add_parser(action, help=text, description=text)
        command.add_argument("name", help="device id: [a-z0-9][a-z0-9_-]*, at most 64")
        if action == "add":
            command.add_argument(
                "--broker-host",
                required=True,
                help="broker name or address the device uses; the broker's certificate must "
                "name it (barkwatch ca init --server-name)",
            )
            command.add_argument(
                "--broker-port",
                type=_port,
                help="port the device connects to (default: the --device-port 'broker init' "
                "saved in BROKER_DIR/deployment.toml, else 8883)",
            )
        _broker_dir(command)
        _devices_dir(command)
        _broker_user(command)
        _reload(command)
    revoke = device_sub.add_parser(
        "revoke",
        help="remove a device's credentials (a stolen device, a retired one)",
        description="Remove the device from the password file, delete its bundle and "
        "reload the broker, which disconnects the device and refuses it from then on.",
    )
    revoke.add_argument("name", help="device id")
    _broker_dir(revoke)
    _devices_dir(revoke)
    _reload(revoke)
    listing = device_sub.add_parser(
        "list",
        help="list provisioned devices",
        description="Print the device ids in the broker's password file, one a line; with "
        "none, say so on standard error (standard output stays empty).",
    )
    _broker_dir(listing)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run a ``ca``, ``broker`` or ``device`` command; return the exit status."""
    files = provision.BrokerFiles(args.broker_dir) if hasattr(args, "broker_dir") else None
    if files is None or args.action is None:
        parser.error(f"'{args.command}' needs an action; see barkwatch {args.command} --help")
    if args.command == "ca":
        return _ca(args, files)
    if args.command == "broker":
        return _broker(args, files)
    return _device(args, files)


def _ca(args: argparse.Namespace, files: provision.BrokerFiles) -> int:
    if args.action == "init":
        provision.init_pki(
            args.pki_dir, files, args.server_name, args.broker_user, args.ca_days, args.server_days
        )
        print(
            f"CA created: {args.pki_dir / 'ca.crt'} (public), {args.pki_dir / 'ca.key'} "
            f"(0600, {owner_of(args.pki_dir / 'ca.key')})"
        )
        print("  The CA key signs server certificates only: keep it offline from now on.")
    else:
        provision.renew_server_certificate(
            args.pki_dir, files, args.server_name, args.broker_user, args.server_days
        )
        print("Restart Mosquitto to use the new certificate: systemctl restart mosquitto")
    print(f"Broker certificate: {files.certfile}, key {files.keyfile} "
          f"(0600, {owner_of(files.keyfile)})")
    print(f"  valid for: {', '.join(args.server_name)}")
    return 0


def _broker(args: argparse.Namespace, files: provision.BrokerFiles) -> int:
    created = provision.init_broker(
        files,
        args.conf,
        args.analyzer_password_file,
        args.device_port,
        args.device_address,
        args.local_port,
        args.broker_user,
        args.analyzer_user,
        args.rotate_analyzer,
    )
    print(f"Mosquitto configuration: {args.conf}; ACL: {files.acl_file}")
    print(f"Password file: {files.password_file} (0600, {owner_of(files.password_file)})")
    print(f"Saved settings: {files.settings_file} (device port {args.device_port})")
    if created:
        print(
            f"Analyzer user {provision.ANALYZER_USER}: password in "
            f"{args.analyzer_password_file} (0600, {owner_of(args.analyzer_password_file)})"
        )
    print("Restart Mosquitto to apply: systemctl restart mosquitto")
    return 0


def _device(args: argparse.Namespace, files: provision.BrokerFiles) -> int:
    if args.action == "list":
        names = provision.list_devices(files)
        for name in names:
            print(name)
        if not names:
            print(f"no devices in {files.password_file} (add one with 'barkwatch device add')",
                  file=sys.stderr)
        return 0
    if args.action == "revoke":
        provision.revoke_device(files, args.devices_dir, args.name)
        print(f"device {args.name} revoked: removed from {files.password_file}, bundle deleted")
    elif args.action == "rotate":
        bundle = provision.rotate_device(files, args.devices_dir, args.name, args.broker_user)
        print(f"device {args.name} has a new password: {bundle.password_file} (0600)")
        print(INSTALL_ROTATED.format(etc=provision.DEVICE_ETC))
    else:
        port = provision.device_port(files) if args.broker_port is None else args.broker_port
        bundle = provision.add_device(
            files, args.devices_dir, args.name, args.broker_host, port, args.broker_user
        )
        print(f"device {args.name} added; bundle: {bundle.directory}/")
        print(f"  sensor.toml (broker {args.broker_host}:{port}), ca.crt, mqtt-password (0600)")
        print(INSTALL_ON_DEVICE.format(etc=provision.DEVICE_ETC))
    return _apply(args)


def _apply(args: argparse.Namespace) -> int:
    """Make the broker re-read the password file; exit status 1 when it could not be told
    (the change has not taken effect, and the operator must reload it)."""
    if args.no_reload:
        print(f"Not reloaded (--no-reload): {NOT_APPLIED[args.action]} until Mosquitto "
              f"re-reads its password file: {provision.RELOAD_HOW}.")
        return 0
    try:
        reloaded = provision.reload_broker(args.pid_file)
        if not reloaded:
            raise ProvisioningError(f"there is no Mosquitto pid file at {args.pid_file}")
    except ProvisioningError as exc:
        print(
            f"barkwatch: error: the password file changed, but the broker was not told: {exc}."
            f"\nUntil Mosquitto re-reads it, {NOT_APPLIED[args.action]}. Reload it now: "
            f"{provision.RELOAD_HOW}.",
            file=sys.stderr,
        )
        return 1
    print("Mosquitto reloaded (SIGHUP); other clients stay connected.")
    return 0

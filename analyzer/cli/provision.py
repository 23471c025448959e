"""``barkwatch ca|broker|device``: set up a secured deployment and manage device credentials.

Argument parsing and operator-facing output only; the work is in :mod:`analyzer.deploy.provision`.
Nothing here prints or logs a password: each is written once, to a 0600 file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analyzer.deploy import CA_DAYS, SERVER_DAYS, provision
from analyzer.errors import ProvisioningError

INSTALL_ON_DEVICE = """\
Install it on the device (as root; the sensor runs as user barkwatch):
  install -d -m 755 {etc}
  install -m 644 sensor.toml ca.crt {etc}/
  install -m 600 -o barkwatch -g barkwatch mqtt-password {etc}/
Then check it there with: barkwatch-sensor validate-config --config {etc}/sensor.toml
The bundle holds the only copy of the password: delete it once installed."""


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
        f"(default {provision.DEFAULT_PID_FILE})",
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
    init.add_argument("--device-port", type=int, default=provision.DEVICE_PORT)
    init.add_argument(
        "--device-address", default="", help="address the TLS listener binds; default all"
    )
    init.add_argument(
        "--local-port",
        type=int,
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
        ("rotate", "give a device a new password and bundle; the old password stops working"),
    ):
        command = device_sub.add_parser(action, help=text, description=text)
        command.add_argument("name", help="device id: [a-z0-9][a-z0-9_-]*, at most 64")
        command.add_argument(
            "--broker-host", required=True, help="broker name or address the device uses"
        )
        command.add_argument("--broker-port", type=int, default=provision.DEVICE_PORT)
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
    listing = device_sub.add_parser("list", help="list provisioned devices")
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
        print(f"CA created: {args.pki_dir / 'ca.crt'} (public), {args.pki_dir / 'ca.key'} (0600)")
        print("  The CA key signs server certificates only: keep it offline from now on.")
    else:
        provision.renew_server_certificate(
            args.pki_dir, files, args.server_name, args.broker_user, args.server_days
        )
        print("Restart Mosquitto to use the new certificate: systemctl restart mosquitto")
    print(f"Broker certificate: {files.certfile}, key {files.keyfile} (0600, {args.broker_user})")
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
    print(f"Password file: {files.password_file}")
    if created:
        print(
            f"Analyzer user {provision.ANALYZER_USER}: password in "
            f"{args.analyzer_password_file} (0600, {args.analyzer_user})"
        )
    print("Restart Mosquitto to apply: systemctl restart mosquitto")
    return 0


def _device(args: argparse.Namespace, files: provision.BrokerFiles) -> int:
    if args.action == "list":
        for name in provision.list_devices(files):
            print(name)
        return 0
    if args.action == "revoke":
        provision.revoke_device(files, args.devices_dir, args.name)
        print(f"device {args.name} revoked: removed from {files.password_file}, bundle deleted")
    else:
        bundle = provision.add_device(
            files,
            args.devices_dir,
            args.name,
            args.broker_host,
            args.broker_port,
            args.broker_user,
            rotate=args.action == "rotate",
        )
        done = "has a new password" if args.action == "rotate" else "added"
        print(f"device {args.name} {done}; bundle: {bundle.directory}/")
        print("  sensor.toml, ca.crt, mqtt-password (0600)")
        print(INSTALL_ON_DEVICE.format(etc=provision.DEVICE_ETC))
    return _apply(args)


def _apply(args: argparse.Namespace) -> int:
    if args.no_reload:
        print("Not reloaded: run 'systemctl reload mosquitto' for the change to take effect.")
        return 0
    try:
        reloaded = provision.reload_broker(args.pid_file)
    except ProvisioningError as exc:
        print(f"barkwatch: error: the files changed, but {exc}", file=sys.stderr)
        return 1
    if reloaded:
        print("Mosquitto reloaded (SIGHUP); other clients stay connected.")
    else:
        print(
            f"No Mosquitto pid file at {args.pid_file}: run 'systemctl reload mosquitto' "
            "for the change to take effect.",
            file=sys.stderr,
        )
    return 0

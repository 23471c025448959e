"""``barkwatch cluster init|render``: the clustered broker's credentials and node configurations.

The work is in :mod:`analyzer.deploy.cluster`; docs/SCALE.md says how to run the nodes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from analyzer.deploy import provision
from analyzer.deploy.cluster import (
    ClusterLayout,
    NodeAddress,
    init_cluster_passwords,
    render_cluster,
)
from analyzer.errors import ProvisioningError


def _node(text: str) -> NodeAddress:
    """``NAME=HOST:CLIENT:MQTT:ROUTE[:MONITOR]`` (argparse type)."""
    name, equals, rest = text.partition("=")
    parts = rest.rsplit(":", 4) if rest.count(":") >= 4 else rest.rsplit(":", 3)
    if not equals or len(parts) not in (4, 5) or not all(p.isdecimal() for p in parts[1:]):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not NAME=HOST:CLIENT_PORT:MQTT_PORT:ROUTE_PORT[:MONITOR_PORT]")
    ports = [int(p) for p in parts[1:]]
    return NodeAddress(name, parts[0], *ports)


def add_cluster_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``cluster`` to ``barkwatch``."""
    cluster = sub.add_parser(
        "cluster", help="the clustered broker (NATS): credentials and node configurations",
        description="'init' creates BROKER_DIR/cluster-passwd with the analyzer's user (its "
        "password from --analyzer-password-file); from then on 'barkwatch device add' also "
        "writes each new device's bcrypt hash there (devices added before: 'device rotate'). "
        "'render' writes one nats-server configuration per node from it (docs/SCALE.md).")
    actions = cluster.add_subparsers(dest="action")
    init = actions.add_parser("init", help="start the cluster's password file")
    render = actions.add_parser("render", help="write every node's configuration")
    for parser in (init, render):
        parser.add_argument("--broker-dir", type=Path, default=provision.DEFAULT_BROKER_DIR,
                            help=f"the deployment's broker files (default "
                            f"{provision.DEFAULT_BROKER_DIR})")
    init.add_argument("--analyzer-password-file", type=Path,
                      default=provision.DEFAULT_ANALYZER_PASSWORD,
                      help="the analyzer's MQTT password, which it also uses for the cluster")
    render.add_argument("--node", type=_node, action="append", required=True,
                        metavar="NAME=HOST:CLIENT:MQTT:ROUTE[:MONITOR]",
                        help="one per node (1, or 3 or more)")
    render.add_argument("--partitions", type=int, default=8,
                        help="P: partitions of the fleet (the analyzers' [cluster] partitions)")
    render.add_argument("--out", type=Path, required=True, help="folder for NAME.conf")
    render.add_argument("--state-dir", type=Path, default=Path("/var/lib/nats"),
                        help="JetStream's storage; each node uses STATE_DIR/NAME")


def run_cluster(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run ``barkwatch cluster ...``; return the exit status."""
    files = provision.BrokerFiles(args.broker_dir) if args.action else None
    if files is None:
        parser.error("'cluster' needs an action: init or render")
    if args.action == "init":
        try:
            password = args.analyzer_password_file.read_text().strip()
        except OSError as exc:
            raise ProvisioningError(f"cannot read {args.analyzer_password_file}: "
                                    f"{exc.strerror}") from exc
        init_cluster_passwords(files.cluster_password_file, password)
        print(f"{files.cluster_password_file}: created; devices added from now on are in it")
        return 0
    layout = ClusterLayout(tuple(args.node), args.partitions)
    for path in render_cluster(layout, args.out, args.state_dir, files.certfile,
                               files.keyfile, files.cluster_password_file):
        print(path)
    print("analyzers: [cluster] servers = \"" + ",".join(layout.client_urls()) + "\"")
    return 0

"""A clustered broker: three (or more) NATS nodes that partition the fleet by device.

Mosquitto stays the single-machine broker (``broker_config/``, :mod:`analyzer.deploy.provision`).
Past one machine, ``nats-server`` (Debian 2.9.10) takes its place (docs/SCALE.md):

- each node serves MQTT over TLS to the sensors (paho-mqtt, unchanged: the same topics,
  credentials and ACL shape), the NATS protocol to the analyzers, and routes to the others;
- a subject mapping sends each device's frames, heartbeats and status to partition
  ``{{partition(P, device)}}`` of ``P``: ``barkwatch.v1.frames.<device>`` becomes
  ``bwp.<k>.frames.<device>`` (k = 0 .. P-1, a hash of the device id alone, so all of one
  device's topics land in one partition);
- a JetStream stream ``BARKWATCH`` (replicated on three nodes) keeps them until an analyzer
  has stored them (:mod:`analyzer.ingest.cluster`).

Device credentials come from ``barkwatch device add`` as for Mosquitto: it also writes each
device's password as a bcrypt hash (what nats-server checks) into ``cluster-passwd`` beside
Mosquitto's password file once ``barkwatch cluster init`` has created that file; the node
configurations are rendered from it, with per-device permissions equal to the Mosquitto ACL.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from analyzer.errors import ProvisioningError
from analyzer.files import write_file

log = logging.getLogger(__name__)

STREAM = "BARKWATCH"
PARTITION_ROOT = "bwp"  # bwp.<k>.<kind>.<device>
KINDS = ("frames", "heartbeat", "status", "bearing_check")
MAX_PARTITIONS = 1024
ANALYZER_USER = "barkwatch.analyzer"
BCRYPT_ROUNDS = 11  # nats-server's own default cost; every connect pays it once
NODE_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")


@dataclass(frozen=True)
class NodeAddress:
    """Where one node listens; all on ``host`` (a loopback or LAN address)."""

    name: str
    host: str
    client_port: int  # NATS protocol: analyzers
    mqtt_port: int  # MQTT over TLS: sensors
    route_port: int  # the other nodes
    monitor_port: int = 0  # HTTP /healthz, /jsz; 0: none


@dataclass(frozen=True)
class ClusterLayout:
    """The cluster's nodes and how many partitions the fleet is split into."""

    nodes: tuple[NodeAddress, ...]
    partitions: int = 8
    cluster_name: str = "barkwatch"

    def __post_init__(self) -> None:
        if len(self.nodes) < 1:
            raise ProvisioningError("a cluster needs at least one node")
        if len(self.nodes) == 2:
            raise ProvisioningError(
                "a cluster of 2 nodes cannot lose one (JetStream's replicas need a majority): "
                "use 1 or 3 or more")
        if not 1 <= self.partitions <= MAX_PARTITIONS:
            raise ProvisioningError(f"partitions = {self.partitions} is not between 1 and "
                                    f"{MAX_PARTITIONS}")
        names = [node.name for node in self.nodes]
        for node in self.nodes:
            if not NODE_NAME.match(node.name):
                raise ProvisioningError(f"node name {node.name!r}: lower-case letters, digits "
                                        "and '-', at most 32 characters")
            for what, port in (("client", node.client_port), ("mqtt", node.mqtt_port),
                               ("route", node.route_port)):
                if not 1 <= port <= 65535:
                    raise ProvisioningError(f"node {node.name}: {what} port {port} is not a "
                                            "port number (1-65535)")
        if len(set(names)) != len(names):
            raise ProvisioningError(f"node names repeat: {names}")
        ports = [(n.host, p) for n in self.nodes
                 for p in (n.client_port, n.mqtt_port, n.route_port, n.monitor_port) if p]
        if len(set(ports)) != len(ports):
            raise ProvisioningError("two listeners share one address and port: "
                                    + ", ".join(f"{h}:{p}" for h, p in ports))

    @property
    def replicas(self) -> int:
        """Copies of each stored message: 3 where there are 3 or more nodes."""
        return min(3, len(self.nodes))

    def client_urls(self) -> list[str]:
        """What an analyzer's ``[cluster] servers`` lists."""
        return [f"tls://{node.host}:{node.client_port}" for node in self.nodes]


def loopback_layout(base_port: int, nodes: int = 3, partitions: int = 8) -> ClusterLayout:
    """Nodes ``n1``.. on 127.0.0.1, four ports each from ``base_port`` (tests, benchmark)."""
    return ClusterLayout(tuple(
        NodeAddress(f"n{i + 1}", "127.0.0.1", base_port + 4 * i, base_port + 4 * i + 1,
                    base_port + 4 * i + 2, base_port + 4 * i + 3)
        for i in range(nodes)), partitions)


def hash_password(password: str) -> str:
    """The bcrypt hash nats-server checks ``password`` against (cost ``BCRYPT_ROUNDS``)."""
    try:
        import bcrypt
    except ImportError as exc:  # the cluster extra: pip install 'barkwatch[cluster]'
        raise ProvisioningError("bcrypt is not installed: pip install 'barkwatch[cluster]'"
                                ) from exc
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(BCRYPT_ROUNDS)).decode()


def read_cluster_passwords(path: Path) -> dict[str, str]:
    """``{user: bcrypt hash}`` of ``cluster-passwd``; ProvisioningError naming what is wrong."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ProvisioningError(f"{path} is missing: run 'barkwatch cluster init' first") from exc
    except (OSError, ValueError) as exc:
        raise ProvisioningError(f"{path} is not a cluster password file: {exc}") from exc
    if not isinstance(data, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and v.startswith("$2")
            for k, v in data.items()):
        raise ProvisioningError(f"{path}: expected a JSON object of user: bcrypt hash")
    return data


def set_cluster_password(path: Path, user: str, password: str | None) -> None:
    """Add, replace (``password``) or remove (None) ``user`` in ``cluster-passwd``."""
    users = read_cluster_passwords(path)
    if password is None:
        users.pop(user, None)
    else:
        users[user] = hash_password(password)
    write_file(path, (json.dumps(users, indent=1, sort_keys=True) + "\n").encode(), 0o600)


def init_cluster_passwords(path: Path, analyzer_password: str) -> None:
    """Create ``cluster-passwd`` with the analyzers' user; devices are added by
    ``barkwatch device add`` from then on. Refuses to overwrite one."""
    if path.exists():
        raise ProvisioningError(f"{path} exists already")
    write_file(path, b"{}\n", 0o600)
    set_cluster_password(path, ANALYZER_USER, analyzer_password)


def _quote(text: str) -> str:
    return json.dumps(text)  # NATS configuration strings accept JSON's quoting


def partition_of(device_id: str, partitions: int) -> int:
    """The partition (0-based) nats-server's ``{{partition(P, wildcard)}}`` puts ``device_id``
    in: FNV-1a (32 bits) of the token, modulo ``P``."""
    value = 0x811C9DC5
    for byte in device_id.encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value % partitions


def partition_subject(partition: int, kind: str, device_id: str) -> str:
    """The subject a device's message on ``barkwatch/v1/<kind>/<device>`` is stored under."""
    return f"{PARTITION_ROOT}.{partition}.{kind}.{device_id}"


def _users(passwords: dict[str, str], partitions: int) -> str:
    lines = []
    for user, hashed in sorted(passwords.items()):
        if user == ANALYZER_USER or user.startswith(ANALYZER_USER + "-"):
            # Analyzers consume the stream, keep ownership leases and publish confirmations.
            perms = ""
        else:
            # The ACL of broker_config/barkwatch.acl in NATS subjects. Permissions apply to
            # the subject after the mapping, so a device may publish only into its own
            # partition (a topic naming another partition directly is refused).
            publish = [partition_subject(partition_of(user, partitions), kind, user)
                       for kind in KINDS]
            # $MQTT.sub.>: the delivery subjects of the JetStream consumer nats-server makes
            # for an MQTT QoS 1 subscription (without it the subscription is refused and the
            # sensor never hears its confirmations).
            subscribe = [f"barkwatch.cmd.v1.{user}.>", "$MQTT.sub.>"]
            perms = (f", permissions: {{publish: {json.dumps(publish)}, "
                     f"subscribe: {json.dumps(subscribe)}}}")
        lines.append(f"    {{user: {_quote(user)}, password: {_quote(hashed)}{perms}}}")
    return "\n".join(lines)


def render_node_config(layout: ClusterLayout, node: NodeAddress, store_dir: Path,
                       certfile: Path, keyfile: Path, passwords: dict[str, str],
                       max_file_store_bytes: int = 10 * 1024**3) -> str:
    """The ``nats-server -c`` configuration of ``node``."""
    if node not in layout.nodes:
        raise ProvisioningError(f"node {node.name} is not in the layout")
    routes = ", ".join(f"nats-route://{other.host}:{other.route_port}"
                       for other in layout.nodes if other is not node)
    tls = f"tls {{ cert_file: {_quote(str(certfile))}, key_file: {_quote(str(keyfile))} }}"
    partition_tokens = "{{partition(" + str(layout.partitions) + ",1)}}"
    mappings = "\n".join(
        f"  \"barkwatch.v1.{kind}.*\": \"{PARTITION_ROOT}.{partition_tokens}.{kind}."
        "{{wildcard(1)}}\"" for kind in KINDS)
    cluster = ""
    if len(layout.nodes) > 1:
        cluster = (f"cluster {{\n  name: {_quote(layout.cluster_name)}\n"
                   f"  listen: \"{node.host}:{node.route_port}\"\n  routes: [{routes}]\n}}\n")
    monitor = f"http: \"{node.host}:{node.monitor_port}\"\n" if node.monitor_port else ""
    # The MQTT sessions and retained messages live in JetStream streams whose replica count,
    # left unset, is the number of nodes routed when the first device connects: a cluster
    # still forming made them R2, and a node's death then stalled them (no quorum), so no
    # sensor could connect to the survivors (found by the node-kill test). Set it.
    replicas = (f"\n  stream_replicas: {min(3, len(layout.nodes))}"
                if len(layout.nodes) > 1 else "")
    return f"""# Barkwatch cluster node {node.name} (from barkwatch cluster render)
server_name: {_quote(node.name)}
listen: "{node.host}:{node.client_port}"
{monitor}{tls}
max_payload: 1MB
jetstream {{
  store_dir: {_quote(str(store_dir))}
  max_memory_store: 256MB
  max_file_store: {max_file_store_bytes}
}}
{cluster}mqtt {{
  listen: "{node.host}:{node.mqtt_port}"
  {tls}
  # A QoS 1 message not acknowledged by an MQTT subscriber within this is sent again.
  ack_wait: "30s"{replicas}
}}
# Each device's data topics go to one of {layout.partitions} partitions, by its id alone.
mappings {{
{mappings}
}}
authorization {{
  users: [
{_users(passwords, layout.partitions)}
  ]
}}
"""


def render_cluster(layout: ClusterLayout, out_dir: Path, state_dir: Path, certfile: Path,
                   keyfile: Path, passwords_file: Path) -> list[Path]:
    """Write ``<out_dir>/<node>.conf`` for every node (JetStream state in
    ``<state_dir>/<node>``); returns the files written."""
    passwords = read_cluster_passwords(passwords_file)
    if not any(user.startswith(ANALYZER_USER) for user in passwords):
        raise ProvisioningError(f"{passwords_file} holds no analyzer user ({ANALYZER_USER})")
    for path, what in ((certfile, "server certificate"), (keyfile, "server key")):
        if not path.exists():
            raise ProvisioningError(f"the {what} {path} is missing (barkwatch broker init "
                                    "issues it; list every node's address in --host)")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for node in layout.nodes:
        path = out_dir / f"{node.name}.conf"
        text = render_node_config(layout, node, state_dir / node.name, certfile, keyfile,
                                  passwords)
        write_file(path, text.encode(), 0o600)  # holds password hashes
        written.append(path)
    log.info("cluster of %d node(s), %d partitions: %s", len(layout.nodes), layout.partitions,
             ", ".join(str(p) for p in written))
    return written

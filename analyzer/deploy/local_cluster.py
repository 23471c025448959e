"""A clustered broker on loopback for tests and benchmarks: NATS nodes as child processes.

Built on a :class:`~analyzer.deploy.services.LocalDeployment` (its CA, server certificate for
127.0.0.1, analyzer password and device bundles): ``cluster-passwd`` is created beside the
Mosquitto password file, so every device added afterwards (``deployment.add_device``) gets
its bcrypt hash there, as ``barkwatch device add`` does in a deployment; :meth:`render`
writes the nodes' configurations from it.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path
from typing import Any

from analyzer.deploy.cluster import (
    ClusterLayout,
    NodeAddress,
    init_cluster_passwords,
    render_cluster,
)
from analyzer.deploy.provision import ANALYZER_USER
from analyzer.deploy.services import (
    LOOPBACK,
    LocalDeployment,
    _binary,
    _ChildService,
    _port_open,
    free_port,
)
from sensor.config import MqttSettings


class NatsNode(_ChildService):
    """One ``nats-server`` node of a rendered cluster."""

    name = "nats"

    def __init__(self, state_dir: Path, config_path: Path, node: NodeAddress) -> None:
        super().__init__(state_dir)
        self.binary = _binary("nats-server", "nats-server")
        self.config_path = config_path
        self.node = node
        self.log_path = state_dir / f"{node.name}.log"

    def command(self) -> list[str]:
        return [self.binary, "-c", str(self.config_path)]

    def ready(self) -> bool:
        return _port_open(self.node.client_port) and _port_open(self.node.mqtt_port)

    def kill(self) -> None:
        """SIGKILL: a node that dies without closing anything."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=15)
        self.process = None

    def reload(self) -> None:
        """SIGHUP: re-read the configuration (new device credentials)."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGHUP)


class LocalCluster(contextlib.AbstractContextManager["LocalCluster"]):
    """``nodes`` NATS nodes on free loopback ports, state under ``root``."""

    def __init__(self, root: Path, deployment: LocalDeployment, nodes: int = 3,
                 partitions: int = 8) -> None:
        self.root = root
        self.deployment = deployment
        self.layout = ClusterLayout(tuple(
            NodeAddress(f"n{i + 1}", LOOPBACK, free_port(), free_port(), free_port())
            for i in range(nodes)), partitions)
        passwords = deployment.files.cluster_password_file
        if not passwords.exists():
            password = deployment.analyzer_password_file.read_text().strip()
            init_cluster_passwords(passwords, password)
        self.nodes: list[NatsNode] = []

    def render(self) -> None:
        """(Re)write every node's configuration from the deployment's current devices."""
        files = self.deployment.files
        configs = render_cluster(self.layout, self.root / "conf", self.root / "jetstream",
                                 files.certfile, files.keyfile, files.cluster_password_file)
        if not self.nodes:
            self.nodes = [NatsNode(self.root / "logs", path, node)
                          for path, node in zip(configs, self.layout.nodes, strict=True)]

    def start(self) -> LocalCluster:
        """Render and start every node; each answers on its client and MQTT ports."""
        self.render()
        try:
            for node in self.nodes:
                node.start()
        except BaseException:
            self.close()
            raise
        return self

    def reload(self) -> None:
        """Render again and have every running node re-read its configuration."""
        self.render()
        for node in self.nodes:
            node.reload()

    def servers(self) -> str:
        """The analyzers' ``[cluster] servers``."""
        return ",".join(self.layout.client_urls())

    def analyzer_toml(self, journal_dir: Path | None = None, **cluster: Any) -> str:
        """The ``[mqtt]`` and ``[cluster]`` tables of an analyzer configuration."""
        values = {"servers": self.servers(), "partitions": self.layout.partitions,
                  "journal_dir": str(journal_dir or ""), **cluster}
        lines = [f"{key} = {value!r}" if isinstance(value, str) else f"{key} = {value}"
                 for key, value in values.items()]
        return (f'[mqtt]\nusername = "{ANALYZER_USER}"\npassword_env = ""\n'
                f'password_file = "{self.deployment.analyzer_password_file}"\n'
                f'tls_ca = "{self.deployment.files.ca_cert}"\n'
                "[cluster]\n" + "\n".join(lines).replace("'", '"') + "\n")

    def device_mqtt(self, device_id: str, node: int, fallbacks: bool = False) -> MqttSettings:
        """A device's settings for node ``node``'s (0-based) MQTT TLS listener; with
        ``fallbacks``, the other nodes' listeners as its ``fallback_brokers``."""
        address = self.layout.nodes[node]

        class _Listener:
            tls_port = address.mqtt_port

        others = [n for k, n in enumerate(self.layout.nodes) if k != node] if fallbacks else []
        return self.deployment.device_mqtt(
            device_id, _Listener(), protocol="mqttv311",  # type: ignore[arg-type]
            fallback_brokers=",".join(f"{n.host}:{n.mqtt_port}" for n in others))

    def close(self) -> None:
        """Stop every node."""
        for node in self.nodes:
            node.stop()

    def __exit__(self, *exc: object) -> None:
        self.close()

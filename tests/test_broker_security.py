"""Broker security with a real Mosquitto started from broker_config/ (the deployment's own
configuration, rendered with temporary paths and loopback ports).

Waits are bounded (``wait_until``); a message that must never arrive is shown absent by a
barrier: a later message on the same connection that does arrive, which the broker would
have queued after it.
"""

from __future__ import annotations

import dataclasses
import os
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest

from analyzer.config import AnalyzerConfig
from analyzer.deploy.pki import create_ca
from analyzer.deploy.provision import command_topic, list_devices
from analyzer.deploy.services import LocalDeployment, Mosquitto, Services
from analyzer.ingest.service import Analyzer
from analyzer.store.influx import InfluxClient, InfluxSettings
from sensor.bearing_report import bearing_check_topic
from sensor.config import MqttSettings, load_sensor_config
from sensor.confirmations import stored_topic
from sensor.frames import frames_from_samples
from sensor.oneshot import PublishError, publish_once
from sensor.outbox import Outbox
from sensor.publisher import CONFIRM_BY_BROKER, FramePublisher, connect_async, make_client
from sensor.wire import encode_frame, frame_topic, heartbeat_topic, status_topic
from tests.conftest import sine, wait_until

BIN = Path(sys.executable).parent
SUCCESS = 0
NOT_AUTHORIZED = 135
NO_MATCHING_SUBSCRIBERS = 16


class Probe:
    """A real MQTT client, made by the production ``make_client``, that records its CONNACKs,
    disconnects, PUBACK reason codes and received messages."""

    def __init__(
        self, settings: MqttSettings, client_id: str = "", persistent: bool = False
    ) -> None:
        self.connacks: list[int] = []
        self.disconnects = 0
        self.messages: list[tuple[str, bytes]] = []
        self.pubacks: dict[int, int] = {}
        self.subacks: list[int] = []
        self._lock = threading.Lock()
        name = client_id or f"probe-{settings.username or 'anonymous'}-{id(self)}"
        self.client = make_client(name, settings, persistent=persistent)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_publish = self._on_publish
        self.client.on_subscribe = self._on_subscribe
        self.client.on_message = self._on_message
        connect_async(self.client, settings, persistent=persistent)
        self.client.loop_start()

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        self.connacks.append(int(reason.value))

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, reason: Any, p: Any) -> None:
        self.disconnects += 1

    def _on_publish(self, client: Any, userdata: Any, mid: int, reason: Any, p: Any) -> None:
        self.pubacks[mid] = int(reason.value)

    def _on_subscribe(self, client: Any, userdata: Any, mid: int, reasons: Any, p: Any) -> None:
        self.subacks.append(mid)

    def _on_message(self, client: Any, userdata: Any, message: mqtt.MQTTMessage) -> None:
        with self._lock:
            self.messages.append((message.topic, bytes(message.payload)))

    def wait_connected(self) -> Probe:
        wait_until(lambda: SUCCESS in self.connacks, 30, "a successful CONNACK")
        return self

    def wait_refused(self) -> int:
        wait_until(lambda: bool(self.connacks), 30, "a CONNACK")
        return self.connacks[0]

    def publish(self, topic: str, payload: bytes) -> int:
        """Publish at QoS 1; return the PUBACK's reason code."""
        info = self.client.publish(topic, payload, qos=1)
        wait_until(lambda: info.mid in self.pubacks, 30, f"the PUBACK for {topic}")
        return self.pubacks[info.mid]

    def subscribe(self, *topics: str) -> None:
        result, mid = self.client.subscribe([(topic, 1) for topic in topics])
        assert result == mqtt.MQTT_ERR_SUCCESS
        wait_until(lambda: mid in self.subacks, 30, "the SUBACK")

    def received(self, topic: str) -> bool:
        with self._lock:
            return any(t == topic for t, _ in self.messages)

    def topics(self) -> set[str]:
        with self._lock:
            return {topic for topic, _ in self.messages}

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture
def deployment(tmp_path: Path) -> LocalDeployment:
    """CA, server certificate for 127.0.0.1, password file, ACL; devices dev-a and dev-b."""
    deployed = LocalDeployment(tmp_path / "deployment")
    deployed.add_device("dev-a")
    deployed.add_device("dev-b")
    return deployed


@pytest.fixture
def probes() -> Iterator[list[Probe]]:
    """Collects probes to close after the test."""
    made: list[Probe] = []
    yield made
    for probe in made:
        probe.close()


def _private_file(path: Path, text: str) -> str:
    path.write_text(text + "\n")
    path.chmod(0o600)
    return str(path)


def test_anonymous_and_wrong_password_connections_are_refused_on_both_listeners(
    deployment: LocalDeployment, broker: Mosquitto, probes: list[Probe], tmp_path: Path
) -> None:
    device = deployment.device_mqtt("dev-a", broker)
    wrong = _private_file(tmp_path / "wrong", "not-the-password")
    for settings in (
        dataclasses.replace(device, username=""),
        dataclasses.replace(device, password_file=wrong),
        dataclasses.replace(deployment.analyzer_mqtt(broker), username=""),
        deployment.analyzer_mqtt(broker, password_file=wrong),
    ):
        probe = Probe(settings)
        probes.append(probe)
        assert probe.wait_refused() == NOT_AUTHORIZED, settings
    probes.append(Probe(device))
    assert probes[-1].wait_connected().connacks == [SUCCESS]


def listening_analyzer(deployment: LocalDeployment, broker: Mosquitto,
                       probes: list[Probe]) -> Probe:
    """The analyzer's credentials, connected and subscribed to every data topic."""
    analyzer = Probe(deployment.analyzer_mqtt(broker)).wait_connected()
    probes.append(analyzer)
    analyzer.subscribe("barkwatch/v1/#")
    return analyzer


def test_a_device_publishing_into_another_devices_topics_never_reaches_the_analyzer(
    deployment: LocalDeployment, broker: Mosquitto, probes: list[Probe]
) -> None:
    analyzer = listening_analyzer(deployment, broker, probes)
    device_a = Probe(deployment.device_mqtt("dev-a", broker)).wait_connected()
    device_b = Probe(deployment.device_mqtt("dev-b", broker)).wait_connected()
    probes += [device_a, device_b]
    forged = [
        frame_topic("dev-b"),
        status_topic("dev-b"),
        heartbeat_topic("dev-b"),
        bearing_check_topic("dev-b"),
        "barkwatch/v1/frames/dev-b/extra",
        "barkwatch/v1/frames/dev-a/extra",
        "barkwatch/v1/other/dev-a",
        command_topic("dev-b") + "/calibrate",
        command_topic("dev-a") + "/calibrate",
        stored_topic("dev-b"),  # a forged confirmation would make dev-b delete unstored frames
        stored_topic("dev-a"),
    ]
    # MQTT 5: the broker reports each refusal as reason 135.
    assert [device_a.publish(topic, b"forged") for topic in forged] == [NOT_AUTHORIZED] * 11
    assert device_b.publish(frame_topic("dev-b"), b"genuine") == SUCCESS
    wait_until(lambda: analyzer.received(frame_topic("dev-b")), 30, "dev-b's own frame")
    assert analyzer.messages == [(frame_topic("dev-b"), b"genuine")]
    # Refused, not thrown out (max_queued_messages 0 would make 2.0.11 disconnect it).
    assert device_a.disconnects == 0


def test_a_device_sends_its_own_bearing_check_over_tls_and_the_analyzer_reads_it(
    deployment: LocalDeployment, broker: Mosquitto, probes: list[Probe]
) -> None:
    analyzer = listening_analyzer(deployment, broker, probes)
    publish_once(deployment.device_mqtt("dev-a", broker), "dev-a-check",
                 bearing_check_topic("dev-a"), b"a's check", retain=True, timeout_s=30)
    wait_until(lambda: analyzer.received(bearing_check_topic("dev-a")), 30, "a's check")
    with pytest.raises(PublishError, match="ACL refused .*dev-b.* to user 'dev-a'"):
        publish_once(deployment.device_mqtt("dev-a", broker), "dev-a-check",
                     bearing_check_topic("dev-b"), b"forged", retain=True, timeout_s=30)


def test_a_device_cannot_read_another_devices_data_or_commands(
    deployment: LocalDeployment, broker: Mosquitto, probes: list[Probe]
) -> None:
    analyzer = Probe(deployment.analyzer_mqtt(broker)).wait_connected()
    device_a = Probe(deployment.device_mqtt("dev-a", broker)).wait_connected()
    device_b = Probe(deployment.device_mqtt("dev-b", broker)).wait_connected()
    probes += [analyzer, device_a, device_b]
    analyzer.subscribe("barkwatch/v1/#")
    device_b.subscribe(command_topic("dev-b") + "/#")
    device_a.subscribe(
        frame_topic("dev-b"),
        command_topic("dev-b") + "/#",
        "barkwatch/v1/#",
        "barkwatch/cmd/v1/#",
        "#",
    )
    assert device_b.publish(frame_topic("dev-b"), b"b's data") == SUCCESS
    assert analyzer.publish(stored_topic("dev-b"), b"b's confirmation") == SUCCESS
    assert analyzer.publish(command_topic("dev-b") + "/calibrate", b"for b") == SUCCESS
    wait_until(lambda: analyzer.received(frame_topic("dev-b")), 30, "b's frame at the analyzer")
    wait_until(lambda: device_b.received(command_topic("dev-b") + "/calibrate"), 30, "b's command")
    assert device_b.received(stored_topic("dev-b"))  # the analyzer's confirmation reaches b
    # Barrier: a's own command arrives after anything the broker queued for a before it.
    assert analyzer.publish(command_topic("dev-a") + "/ping", b"for a") == SUCCESS
    wait_until(lambda: device_a.received(command_topic("dev-a") + "/ping"), 30, "a's command")
    assert device_a.topics() == {command_topic("dev-a") + "/ping"}


def test_tls_connects_only_to_a_broker_certified_by_the_project_ca_under_its_address(
    deployment: LocalDeployment, broker: Mosquitto, probes: list[Probe], tmp_path: Path
) -> None:
    device = deployment.device_mqtt("dev-a", broker)
    probes.append(Probe(device).wait_connected())

    create_ca(tmp_path / "other-ca.crt", tmp_path / "other-ca.key", "someone else's CA")
    other_ca = dataclasses.replace(device, tls_ca=str(tmp_path / "other-ca.crt"))
    system_store = make_client("system", dataclasses.replace(device, tls_ca=""))
    system_store.tls_set_context(ssl.create_default_context())  # does not know the project CA
    refused = [
        (make_client("other-ca", other_ca), "127.0.0.1"),
        (system_store, "127.0.0.1"),
        # The host name is checked: the certificate names 127.0.0.1, not localhost.
        (make_client("by-name", device), "localhost"),
    ]
    for client, host in refused:
        with pytest.raises(ssl.SSLCertVerificationError):
            client.connect(host, broker.tls_port or 0, keepalive=5)

    # Plain MQTT to the TLS port gets no CONNACK: the broker drops the connection.
    plain = Probe(dataclasses.replace(device, tls_ca=""))
    probes.append(plain)
    wait_until(lambda: plain.disconnects >= 1, 30, "the broker to drop plain MQTT")
    assert SUCCESS not in plain.connacks


def test_an_oversized_packet_is_refused_and_never_delivered(
    deployment: LocalDeployment, broker: Mosquitto, probes: list[Probe]
) -> None:
    analyzer = listening_analyzer(deployment, broker, probes)
    # MQTT 3.1.1 sends it whatever the broker announced; 70 kB > max_packet_size (66,560).
    sender = Probe(deployment.device_mqtt("dev-a", broker, protocol="mqttv311")).wait_connected()
    sender.client.publish(frame_topic("dev-a"), os.urandom(70_000), qos=1)
    wait_until(lambda: sender.disconnects >= 1, 30, "the broker to disconnect the sender")
    sender.close()
    device = Probe(deployment.device_mqtt("dev-a", broker)).wait_connected()
    probes.append(device)
    assert device.publish(frame_topic("dev-a"), b"small") == SUCCESS
    wait_until(lambda: analyzer.received(frame_topic("dev-a")), 30, "the small frame")
    assert analyzer.messages == [(frame_topic("dev-a"), b"small")]


def test_no_device_can_take_over_the_analyzers_session_by_its_client_id(
    deployment: LocalDeployment, broker: Mosquitto, probes: list[Probe]
) -> None:
    analyzer = Probe(deployment.analyzer_mqtt(broker), "barkwatch-analyzer").wait_connected()
    intruder = Probe(deployment.device_mqtt("dev-a", broker), "barkwatch-analyzer")
    probes += [analyzer, intruder.wait_connected()]
    # The broker handled the intruder's CONNECT before its CONNACK; the analyzer still works.
    # 16, "no matching subscribers": accepted (any reason code below 128 is a success).
    assert analyzer.publish(command_topic("dev-a") + "/ping", b"") == NO_MATCHING_SUBSCRIBERS
    assert analyzer.disconnects == 0


def test_a_denied_frame_is_logged_counted_and_dropped_from_the_outbox(
    deployment: LocalDeployment, broker: Mosquitto, tmp_path: Path
) -> None:
    outbox = Outbox(tmp_path / "outbox.sqlite")
    for seq in range(5):
        outbox.put(seq, b"frame %d" % seq)
    # Misconfigured: dev-a's credentials, but publishing as dev-b.
    publisher = FramePublisher("dev-b", deployment.device_mqtt("dev-a", broker), outbox,
                               confirm=CONFIRM_BY_BROKER)
    publisher.start()
    try:
        assert publisher.wait_drained(timeout_s=60)
        assert publisher.heartbeat()["denied"] == 5
    finally:
        publisher.stop()
        outbox.close()
    assert (publisher.denied, publisher.acknowledged) == (5, 0)


def test_after_a_rotation_the_sensor_resumes_once_its_new_password_is_installed(
    deployment: LocalDeployment, broker: Mosquitto, tmp_path: Path
) -> None:
    installed = Path(_private_file(tmp_path / "installed", ""))
    bundle_password = deployment.devices_dir / "dev-a" / "mqtt-password"
    installed.write_text(bundle_password.read_text())
    settings = deployment.device_mqtt("dev-a", broker, password_file=str(installed),
                                      reconnect_max_s=1)
    outbox = Outbox(tmp_path / "outbox.sqlite")
    publisher = FramePublisher("dev-a", settings, outbox, confirm=CONFIRM_BY_BROKER)
    publisher.start()
    try:
        wait_until(lambda: publisher.connects == 1, 30, "the sensor to connect")
        rotate = subprocess.run(
            [BIN / "barkwatch", "device", "rotate", "dev-a",
             "--broker-dir", deployment.files.directory, "--devices-dir",
             deployment.devices_dir, "--pid-file", broker.pid_file],
            capture_output=True, text=True, timeout=60,
        )
        assert rotate.returncode == 0, rotate.stderr
        wait_until(lambda: not publisher.connected, 30, "the broker to drop the old password")
        outbox.put(0, b"measured meanwhile")
        installed.write_text(bundle_password.read_text())  # the new bundle, installed
        assert publisher.wait_drained(timeout_s=60)
        assert (publisher.connects, publisher.acknowledged) == (2, 1)
    finally:
        publisher.stop()
        outbox.close()


def test_revoking_a_device_cuts_it_off_and_keeps_everyone_else_connected(
    deployment: LocalDeployment, broker: Mosquitto, probes: list[Probe], tmp_path: Path
) -> None:
    analyzer = Probe(deployment.analyzer_mqtt(broker)).wait_connected()
    device_a = Probe(deployment.device_mqtt("dev-a", broker)).wait_connected()
    stolen_settings = deployment.device_mqtt("dev-b", broker)
    stolen_password = Path(stolen_settings.password_file).read_text().strip()
    stolen = Probe(stolen_settings).wait_connected()
    probes += [analyzer, device_a, stolen]
    analyzer.subscribe("barkwatch/v1/#")

    revoke = subprocess.run(
        [BIN / "barkwatch", "device", "revoke", "dev-b",
         "--broker-dir", deployment.files.directory, "--devices-dir", deployment.devices_dir,
         "--pid-file", broker.pid_file],
        capture_output=True, text=True, timeout=60,
    )
    assert revoke.returncode == 0, revoke.stderr
    assert stolen_password not in revoke.stdout + revoke.stderr
    wait_until(lambda: stolen.disconnects >= 1, 30, "the broker to drop the revoked device")
    again = Probe(
        dataclasses.replace(
            stolen_settings,
            password_file=_private_file(tmp_path / "stolen", stolen_password),
            tls_ca=str(deployment.files.ca_cert),  # the bundle is gone
        )
    )
    probes.append(again)
    assert again.wait_refused() == NOT_AUTHORIZED
    assert list_devices(deployment.files) == ["dev-a"]
    assert device_a.publish(frame_topic("dev-a"), b"still here") == SUCCESS
    wait_until(lambda: analyzer.received(frame_topic("dev-a")), 30, "dev-a's frame")
    assert (analyzer.disconnects, device_a.disconnects) == (0, 0)


def test_a_device_added_while_the_broker_runs_connects_with_its_bundle(
    deployment: LocalDeployment, broker: Mosquitto, probes: list[Probe]
) -> None:
    device_a = Probe(deployment.device_mqtt("dev-a", broker)).wait_connected()
    probes.append(device_a)
    add = subprocess.run(
        [BIN / "barkwatch", "device", "add", "dev-c", "--broker-host", "127.0.0.1",
         "--broker-port", str(broker.tls_port),
         "--broker-dir", deployment.files.directory, "--devices-dir", deployment.devices_dir,
         "--pid-file", broker.pid_file],
        capture_output=True, text=True, timeout=60,
    )
    assert add.returncode == 0, add.stderr
    bundle = deployment.devices_dir / "dev-c"
    config = load_sensor_config(str(bundle / "sensor.toml"))
    assert (config.device_id, config.mqtt.username) == ("dev-c", "dev-c")
    assert (config.mqtt.host, config.mqtt.port) == ("127.0.0.1", broker.tls_port)
    password = (bundle / "mqtt-password").read_text().strip()
    assert password not in add.stdout + add.stderr
    assert (bundle / "mqtt-password").stat().st_mode & 0o777 == 0o600
    # The bundle's files go to /etc/barkwatch on a device; here they stay in the bundle.
    settings = dataclasses.replace(
        config.mqtt,
        password_env="",
        password_file=str(bundle / "mqtt-password"),
        tls_ca=str(bundle / "ca.crt"),
    )
    device_c = Probe(settings).wait_connected()
    probes.append(device_c)
    assert device_c.publish(frame_topic("dev-c"), b"hello") == NO_MATCHING_SUBSCRIBERS
    assert device_a.disconnects == 0


def _stored_seqs(services: Services, device: str) -> list[int]:
    series = InfluxClient(InfluxSettings(url=services.influx.url)).query(
        f"SELECT seq FROM level WHERE device = '{device}'"
    )
    return sorted(row[1] for row in series[0]["values"]) if series else []


def test_frames_published_while_the_analyzer_is_away_all_arrive_also_across_a_broker_restart(
    tmp_path: Path,
) -> None:
    now_ns = time.time_ns()
    signal = sine(1000.0, 0.1, 24.0, 48000)
    frames = list(frames_from_samples(signal, 48000, 100.0, "yard-1", now_ns - 60 * 10**9))
    with Services(tmp_path / "services", secure=True) as services:
        deployment = services.deployment
        assert deployment is not None
        deployment.add_device("yard-1")
        services.broker.reload()
        mqtt_analyzer = deployment.analyzer_mqtt(services.broker, keepalive_s=5, reconnect_max_s=1)
        config = AnalyzerConfig(
            stats_interval_s=1.0,
            mqtt=mqtt_analyzer,
            influx=InfluxSettings(url=services.influx.url, retry_max_s=0.5, timeout_s=2.0),
        )
        device = deployment.device_mqtt("yard-1", services.broker, reconnect_max_s=1)
        outbox = Outbox(tmp_path / "outbox.sqlite")

        def publish(first: int, last: int) -> None:
            for frame in frames[first:last]:
                outbox.put(frame.seq, encode_frame(frame))
            publisher = FramePublisher("yard-1", device, outbox, heartbeat_interval_s=3600,
                                       confirm=CONFIRM_BY_BROKER)
            publisher.start()
            try:
                assert publisher.wait_drained(timeout_s=60)  # the broker has every frame
            finally:
                publisher.stop()
            assert publisher.denied == 0

        first = Analyzer(config)  # creates the persistent session, sees frame 0, goes away
        first.start()
        try:
            publish(0, 1)
            wait_until(lambda: first.counters.frames_stored == 1, what="frame 0 stored")
        finally:
            first.stop()
        publish(1, 12)  # queued for the absent analyzer ...
        services.broker.restart()  # ... and kept across a restart
        publish(12, 24)
        outbox.close()
        second = Analyzer(config)
        second.start()
        try:
            wait_until(lambda: second.counters.frames_stored >= 23, what="23 queued frames")
        finally:
            second.stop()
        assert _stored_seqs(services, "yard-1") == list(range(24))
        assert second.counters.implausible_time == 0

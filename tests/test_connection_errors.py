"""A sensor or analyzer that cannot reach the broker says why, at WARNING, and keeps trying.

Real Mosquitto (the deployment's secured configuration from ``broker_config/``, or a plain
loopback broker) and real sockets; each case is a mistake an installer makes: a wrong port,
a host name the certificate does not cover, another CA, the plain listener instead of the
TLS one, plain MQTT to the TLS listener, a wrong password. Waits are bounded
(``wait_until``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from analyzer.config import AnalyzerConfig
from analyzer.deploy.pki import create_ca
from analyzer.deploy.services import LocalDeployment, Mosquitto, Services, free_port
from analyzer.ingest.service import Analyzer
from analyzer.store import InfluxClient, InfluxSettings
from sensor.config import MqttSettings
from sensor.connection import REPEAT_LOG_S, BrokerLink, BrokerState
from sensor.outbox import Outbox
from sensor.publisher import CONFIRM_BY_BROKER, FramePublisher
from tests.conftest import wait_until

LINK_LOGGER = "sensor.connection"


@pytest.fixture
def deployment(tmp_path: Path) -> LocalDeployment:
    """CA, server certificate for 127.0.0.1 only, password file, ACL; device dev-a."""
    deployed = LocalDeployment(tmp_path / "deployment")
    deployed.add_device("dev-a")
    return deployed


@pytest.fixture
def publishers(tmp_path: Path) -> Iterator[list[FramePublisher]]:
    """Collects started publishers to stop after the test."""
    made: list[FramePublisher] = []
    yield made
    for publisher in made:
        publisher.stop()
        publisher.outbox.close()


def _start(publishers: list[FramePublisher], tmp_path: Path,
           settings: MqttSettings) -> FramePublisher:
    outbox = Outbox(tmp_path / f"outbox-{len(publishers)}.sqlite")
    outbox.put(0, b"a frame waiting for the broker")
    publisher = FramePublisher("dev-a", dataclasses.replace(settings, reconnect_max_s=1), outbox,
                               confirm=CONFIRM_BY_BROKER)
    publishers.append(publisher)
    publisher.start()
    return publisher


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == LINK_LOGGER and r.levelno == logging.WARNING]


def _wait_for_warning(caplog: pytest.LogCaptureFixture, text: str) -> str:
    wait_until(lambda: any(text in message for message in _warnings(caplog)), 30,
               f"a WARNING with {text!r}")
    return next(message for message in _warnings(caplog) if text in message)


def _private_file(path: Path, text: str) -> str:
    path.write_text(text + "\n")
    path.chmod(0o600)
    return str(path)


def test_a_sensor_pointed_at_a_port_nobody_listens_on_logs_connection_refused(
    tmp_path: Path, publishers: list[FramePublisher], caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    publisher = _start(publishers, tmp_path, MqttSettings(host="127.0.0.1", port=port))
    message = _wait_for_warning(caplog, "connection refused")
    assert f"127.0.0.1:{port}" in message and "mqtt.port" in message
    wait_until(lambda: publisher.heartbeat()["connect_failures"] >= 3, 30, "three attempts")
    heartbeat = publisher.heartbeat()
    assert heartbeat["broker_state"] == "refused"
    assert "connection refused" in heartbeat["broker_error"]
    # It keeps retrying, and the same failure is not logged again at every attempt.
    assert len(_warnings(caplog)) == 1


def test_a_sensor_keeps_retrying_and_connects_once_the_broker_starts(
    tmp_path: Path, publishers: list[FramePublisher], caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    publisher = _start(publishers, tmp_path, MqttSettings(host="127.0.0.1", port=port))
    _wait_for_warning(caplog, "connection refused")
    late = Mosquitto(tmp_path / "late-broker", port=port)
    late.start()
    try:
        assert publisher.wait_drained(timeout_s=60)
        status = publisher.link.status()
        assert status.state is BrokerState.CONNECTED and status.failures >= 1
        assert publisher.heartbeat()["broker_state"] == "connected"
    finally:
        late.stop()


def test_a_host_name_the_broker_certificate_does_not_cover_is_named_as_a_tls_mismatch(
    deployment: LocalDeployment, broker: Mosquitto, tmp_path: Path,
    publishers: list[FramePublisher], caplog: pytest.LogCaptureFixture,
) -> None:
    # The certificate names 127.0.0.1; the installer wrote localhost.
    settings = deployment.device_mqtt("dev-a", broker, host="localhost")
    publisher = _start(publishers, tmp_path, settings)
    message = _wait_for_warning(caplog, "TLS verification failed")
    assert "not valid for 'localhost'" in message
    assert publisher.heartbeat()["broker_state"] == "tls_failed"


def test_a_broker_certificate_from_another_ca_is_named_as_untrusted(
    deployment: LocalDeployment, broker: Mosquitto, tmp_path: Path,
    publishers: list[FramePublisher], caplog: pytest.LogCaptureFixture,
) -> None:
    create_ca(tmp_path / "other-ca.crt", tmp_path / "other-ca.key", "someone else's CA")
    settings = deployment.device_mqtt("dev-a", broker, tls_ca=str(tmp_path / "other-ca.crt"))
    publisher = _start(publishers, tmp_path, settings)
    message = _wait_for_warning(caplog, "TLS verification failed")
    assert f"not signed by the CA in mqtt.tls_ca ({tmp_path / 'other-ca.crt'})" in message
    assert publisher.heartbeat()["broker_state"] == "tls_failed"


def test_tls_to_the_plain_listener_is_reported_as_a_failed_handshake(
    deployment: LocalDeployment, broker: Mosquitto, tmp_path: Path,
    publishers: list[FramePublisher], caplog: pytest.LogCaptureFixture,
) -> None:
    settings = deployment.device_mqtt("dev-a", broker, port=broker.port)  # the loopback one
    publisher = _start(publishers, tmp_path, settings)
    message = _wait_for_warning(caplog, "TLS handshake failed")
    assert "plain (non-TLS) listener" in message
    assert publisher.heartbeat()["broker_state"] == "tls_failed"


def test_plain_mqtt_to_the_tls_listener_is_reported_as_closed_before_connack(
    deployment: LocalDeployment, broker: Mosquitto, tmp_path: Path,
    publishers: list[FramePublisher], caplog: pytest.LogCaptureFixture,
) -> None:
    settings = deployment.device_mqtt("dev-a", broker, tls_ca="")
    publisher = _start(publishers, tmp_path, settings)
    message = _wait_for_warning(caplog, "closed the connection before answering CONNECT")
    assert "set mqtt.tls_ca" in message
    assert publisher.heartbeat()["broker_state"] == "closed"


def test_a_wrong_password_is_reported_as_a_refused_login_without_a_protocol_error(
    deployment: LocalDeployment, broker: Mosquitto, tmp_path: Path,
    publishers: list[FramePublisher], caplog: pytest.LogCaptureFixture,
) -> None:
    wrong = _private_file(tmp_path / "wrong", "not-the-password")
    publisher = _start(publishers, tmp_path,
                       deployment.device_mqtt("dev-a", broker, password_file=wrong))
    message = _wait_for_warning(caplog, "refused user 'dev-a'")
    assert "Not authorized" in message
    wait_until(lambda: publisher.heartbeat()["connect_failures"] >= 2, 30, "a second attempt")
    assert publisher.heartbeat()["broker_state"] == "auth_failed"
    # paho turns a refusing CONNACK into a disconnect it calls "Protocol error".
    assert "Protocol error" not in caplog.text


def test_the_analyzer_pointed_at_a_dead_port_says_refused_in_its_stats_and_analyzer_stats(
    services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="analyzer.ingest.service")
    port = free_port()
    config = AnalyzerConfig(
        stats_interval_s=1.0,
        mqtt=MqttSettings(host="127.0.0.1", port=port, reconnect_max_s=1),
        influx=InfluxSettings(url=services.influx.url),
    )
    analyzer = Analyzer(config)
    analyzer.start()
    try:
        _wait_for_warning(caplog, f"cannot connect to the broker at 127.0.0.1:{port}")
        wait_until(lambda: any(m.startswith("analyzer: broker_state=refused (connection refused")
                               for m in caplog.messages), 30, "a stats line saying refused")
        assert not any(m.startswith("analyzer: broker_state=connected") for m in caplog.messages)
    finally:
        analyzer.stop()
    client = InfluxClient(InfluxSettings(url=services.influx.url))
    series = client.query("SELECT broker_state, broker_error, connect_failures "
                          "FROM analyzer_stats ORDER BY time DESC LIMIT 1")
    _, state, error, failures = series[0]["values"][0]
    assert state == "refused" and "connection refused" in error and failures >= 1


def test_a_lasting_failure_is_logged_at_once_then_at_most_every_repeat_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    link = BrokerLink("sensor", MqttSettings(port=1), clock=lambda: now[0])
    refused = ConnectionRefusedError(111, "Connection refused")
    for _ in range(5):  # five attempts within the interval: one report
        link.attempting()
        link.attempt_failed(refused)
        now[0] += REPEAT_LOG_S / 10
    assert len(_warnings(caplog)) == 1
    now[0] += REPEAT_LOG_S
    link.attempting()
    link.attempt_failed(refused)
    assert len(_warnings(caplog)) == 2 and "still, 5 attempts" in _warnings(caplog)[-1]
    assert link.status().failures == 6 and link.status().state is BrokerState.REFUSED

"""The service launcher: real processes on free loopback ports, stopped cleanly."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from analyzer.deploy import services as services_module
from analyzer.deploy.provision import BROKER_CONFIG_DIR, render_broker_config
from analyzer.deploy.services import LocalDeployment, Mosquitto, Services
from analyzer.errors import ServiceError


def _answers(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_both_services_answer_and_are_gone_after_the_block(tmp_path: Path) -> None:
    with Services(tmp_path) as running:
        ports = (running.broker.port, running.influx.port)
        assert all(_answers(port) for port in ports)
        assert running.influx.ready()
    assert not any(_answers(port) for port in ports)


def test_services_stop_when_the_code_inside_fails(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), Services(tmp_path) as running:
        port = running.broker.port
        raise RuntimeError("a failing test")
    assert not _answers(port)


def test_restart_keeps_port_and_state(tmp_path: Path) -> None:
    with Services(tmp_path) as running:
        port = running.broker.port
        running.broker.restart()
        assert running.broker.port == port and _answers(port)
        assert (tmp_path / "mosquitto" / "mosquitto.db").exists()


def test_missing_binary_names_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(services_module.shutil, "which", lambda name: None)
    monkeypatch.setattr(services_module, "Path", _NoSuchPath)
    with pytest.raises(ServiceError, match="apt-get install mosquitto"):
        Mosquitto(tmp_path)


class _NoSuchPath(type(Path())):  # type: ignore[misc]
    def exists(self) -> bool:  # type: ignore[override]
        return False


def test_broken_config_reports_the_log(tmp_path: Path) -> None:
    broker = Mosquitto(tmp_path)
    broker.config_path.write_text("no_such_option 1\n")
    with pytest.raises(ServiceError, match="exited with status"):
        broker.start()


def test_plain_and_secured_brokers_share_broker_config_and_the_secured_one_is_the_deployments(
    tmp_path: Path,
) -> None:
    shared = (BROKER_CONFIG_DIR / "barkwatch.conf").read_text()
    plain = Mosquitto(tmp_path / "plain")
    assert shared in plain.config_path.read_text()
    deployment = LocalDeployment(tmp_path / "deployment")
    secured = Mosquitto(tmp_path / "secured", security=deployment.files)
    assert secured.tls_port is not None
    rendered = render_broker_config(deployment.files, secured.tls_port, "127.0.0.1", secured.port)
    assert secured.config_path.read_text().endswith(rendered)
    with Services(tmp_path / "services", secure=True) as running:
        assert running.broker.tls_port is not None
        assert _answers(running.broker.port) and _answers(running.broker.tls_port)
        assert running.broker.pid_file.read_text().strip() == str(running.broker.process.pid)

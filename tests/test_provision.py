"""Provisioning: CA and server certificate, password file, device bundles, broker config,
the commands that drive them, and the client-side secret and TLS settings."""

from __future__ import annotations

import ipaddress
import os
import shutil
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509

from analyzer.cli.main import main as barkwatch
from analyzer.deploy.passwords import (
    PasswordFile,
    check_password,
    hash_password,
    read_password_file,
)
from analyzer.deploy.provision import (
    ANALYZER_USER,
    BrokerFiles,
    DeploymentSettings,
    add_device,
    init_broker,
    init_pki,
    list_devices,
    reload_broker,
    render_broker_config,
    revoke_device,
)
from analyzer.errors import ProvisioningError
from analyzer.files import owner_of
from sensor.config import MqttSettings, load_sensor_config
from sensor.errors import ConfigError
from sensor.publisher import PubackOutcome, puback_outcome
from sensor.tls import tls_context

BIN = Path(sys.executable).parent


@pytest.fixture
def files(tmp_path: Path) -> BrokerFiles:
    """A provisioned broker directory (CA, server certificate, ACL, analyzer user)."""
    broker = BrokerFiles(tmp_path / "broker")
    init_pki(tmp_path / "pki", broker, ["127.0.0.1", "broker.example.org"], broker_user=None)
    init_broker(broker, tmp_path / "barkwatch.conf", tmp_path / "analyzer-password",
                broker_user=None, analyzer_owner=None)
    return broker


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_our_hash_format_is_the_one_mosquitto_passwd_writes(tmp_path: Path) -> None:
    # mosquitto_passwd's batch mode puts the password in argv: fine for a test password only.
    path = tmp_path / "passwd"
    subprocess.run(["mosquitto_passwd", "-c", "-b", path, "someone", "s3cret"], check=True)
    theirs = read_password_file(path)["someone"]
    ours = hash_password("s3cret")
    assert theirs.split("$")[:3] == ours.split("$")[:3] == ["", "7", "101"]
    assert check_password("s3cret", theirs) and not check_password("s3cret!", theirs)
    assert check_password("s3cret", ours) and not check_password("", ours)


def test_private_keys_and_secrets_are_0600_and_the_certificate_names_ip_and_dns(
    files: BrokerFiles, tmp_path: Path
) -> None:
    assert _mode(tmp_path / "pki" / "ca.key") == 0o600
    assert _mode(tmp_path / "pki") == 0o700
    assert _mode(files.keyfile) == _mode(files.password_file) == 0o600
    assert _mode(tmp_path / "analyzer-password") == 0o600
    certificate = x509.load_pem_x509_certificate(files.certfile.read_bytes())
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert names.get_values_for_type(x509.DNSName) == ["broker.example.org"]
    password = (tmp_path / "analyzer-password").read_text().strip()
    assert check_password(password, read_password_file(files.password_file)[ANALYZER_USER])


def test_an_existing_ca_is_never_replaced(files: BrokerFiles, tmp_path: Path) -> None:
    with pytest.raises(ProvisioningError, match="refusing to replace"):
        init_pki(tmp_path / "pki", files, ["127.0.0.1"], broker_user=None)


def test_broker_init_again_keeps_the_analyzer_password(files: BrokerFiles, tmp_path: Path) -> None:
    before = (tmp_path / "analyzer-password").read_text()
    assert not init_broker(files, tmp_path / "barkwatch.conf", tmp_path / "analyzer-password",
                           broker_user=None, analyzer_owner=None)
    assert (tmp_path / "analyzer-password").read_text() == before


def test_rendered_config_is_the_template_plus_the_shared_settings(files: BrokerFiles) -> None:
    text = render_broker_config(files, device_port=8883, device_address="", local_port=1883)
    assert "${" not in text
    assert "\nlistener 8883\n" in text and "\nlistener 1883 127.0.0.1\n" in text
    assert "\nallow_anonymous false\n" in text
    assert f"\npassword_file {files.password_file}\n" in text
    assert f"\nacl_file {files.acl_file}\n" in text
    assert "\nmax_packet_size 66560\n" in text and "\npersistence true\n" in text


def test_device_add_writes_a_valid_bundle_without_the_password_in_its_config(
    files: BrokerFiles, tmp_path: Path
) -> None:
    bundle = add_device(files, tmp_path / "devices", "yard-7", "broker.example.org",
                        broker_user=None)
    config = load_sensor_config(str(bundle.config))
    assert (config.device_id, config.mqtt.username, config.mqtt.protocol) == (
        "yard-7", "yard-7", "mqttv5")
    assert (config.mqtt.host, config.mqtt.port) == ("broker.example.org", 8883)
    assert config.mqtt.tls_ca == "/etc/barkwatch/ca.crt"
    password = bundle.password_file.read_text().strip()
    assert len(password) >= 40 and password not in bundle.config.read_text()
    assert _mode(bundle.directory) == 0o700 and _mode(bundle.password_file) == 0o600
    assert bundle.ca_cert.read_bytes() == files.ca_cert.read_bytes()
    assert check_password(password, read_password_file(files.password_file)["yard-7"])
    assert list_devices(files) == ["yard-7"]


@pytest.mark.parametrize("name", ["Yard-7", "yard 7", "../etc", ANALYZER_USER, "", "-x"])
def test_device_add_refuses_names_that_are_not_device_ids(
    files: BrokerFiles, tmp_path: Path, name: str
) -> None:
    with pytest.raises(ProvisioningError, match="not a valid device id"):
        add_device(files, tmp_path / "devices", name, "127.0.0.1", broker_user=None)


def test_rotate_replaces_the_password_and_add_refuses_a_duplicate(
    files: BrokerFiles, tmp_path: Path
) -> None:
    first = add_device(files, tmp_path / "d", "yard-7", "127.0.0.1", broker_user=None)
    old = first.password_file.read_text().strip()
    with pytest.raises(ProvisioningError, match="already exists"):
        add_device(files, tmp_path / "d", "yard-7", "127.0.0.1", broker_user=None)
    with pytest.raises(ProvisioningError, match="no device 'yard-8' to rotate"):
        add_device(files, tmp_path / "d", "yard-8", "127.0.0.1", broker_user=None, rotate=True)
    add_device(files, tmp_path / "d", "yard-7", "127.0.0.1", broker_user=None, rotate=True)
    new = first.password_file.read_text().strip()
    stored = read_password_file(files.password_file)["yard-7"]
    assert new != old and check_password(new, stored) and not check_password(old, stored)


def test_revoke_removes_credentials_and_bundle_and_names_an_unknown_device(
    files: BrokerFiles, tmp_path: Path
) -> None:
    bundle = add_device(files, tmp_path / "d", "yard-7", "127.0.0.1", broker_user=None)
    add_device(files, tmp_path / "d", "yard-8", "127.0.0.1", broker_user=None)
    revoke_device(files, tmp_path / "d", "yard-7")
    assert list_devices(files) == ["yard-8"] and not bundle.directory.exists()
    assert ANALYZER_USER in read_password_file(files.password_file)
    with pytest.raises(ProvisioningError, match="there is no device 'yard-7'"):
        revoke_device(files, tmp_path / "d", "yard-7")


def test_password_file_rewrite_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "passwd"
    with PasswordFile(path) as passwords:
        passwords.set_password("a", "x")
    path.chmod(0o640)
    with PasswordFile(path) as passwords:
        passwords.set_password("b", "y")
        with pytest.raises(ProvisioningError, match="cannot go into a password file"):
            passwords.set_password("c:d", "z")
    assert _mode(path) == 0o640 and list(read_password_file(path)) == ["a", "b"]


def test_device_add_writes_the_device_port_broker_init_saved(tmp_path: Path) -> None:
    files = BrokerFiles(tmp_path / "broker")
    init_pki(tmp_path / "pki", files, ["127.0.0.1"], broker_user=None)
    init_broker(files, tmp_path / "barkwatch.conf", tmp_path / "analyzer-password",
                device_port=18883, broker_user=None, analyzer_owner=None)
    assert DeploymentSettings.load(files) == DeploymentSettings(device_port=18883)
    assert "\nlistener 18883\n" in (tmp_path / "barkwatch.conf").read_text()
    saved = add_device(files, tmp_path / "d", "yard-7", "127.0.0.1", broker_user=None)
    chosen = add_device(files, tmp_path / "d", "yard-8", "127.0.0.1", 8884, broker_user=None)
    assert load_sensor_config(str(saved.config)).mqtt.port == 18883
    assert load_sensor_config(str(chosen.config)).mqtt.port == 8884


def test_saved_settings_that_are_not_usable_are_named_with_file_and_key(
    files: BrokerFiles,
) -> None:
    files.settings_file.write_text("device_port = 70000\n")
    with pytest.raises(ProvisioningError, match=r"deployment.toml: device_port = 70000 is not a"):
        add_device(files, files.directory / "d", "yard-7", "127.0.0.1", broker_user=None)


def test_rotate_writes_only_the_new_password_and_says_to_install_only_it(
    files: BrokerFiles, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    devices = tmp_path / "devices"
    add_device(files, devices, "yard-7", "127.0.0.1", broker_user=None)
    shutil.rmtree(devices / "yard-7")  # installed, then deleted as the docs say
    assert barkwatch(["device", "rotate", "yard-7", "--broker-dir", str(files.directory),
                      "--devices-dir", str(devices), "--no-reload"]) == 0
    out = capsys.readouterr().out
    assert sorted(p.name for p in (devices / "yard-7").iterdir()) == ["mqtt-password"]
    assert "install -m 600 -o barkwatch -g barkwatch mqtt-password /etc/barkwatch/" in out
    assert "install -m 644 sensor.toml" not in out and "not a new sensor.toml" in out


def test_revoke_without_a_pid_file_exits_1_and_says_how_to_reload(
    files: BrokerFiles, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    add_device(files, tmp_path / "devices", "yard-7", "127.0.0.1", broker_user=None)
    status = barkwatch(["device", "revoke", "yard-7", "--broker-dir", str(files.directory),
                        "--devices-dir", str(tmp_path / "devices"),
                        "--pid-file", str(tmp_path / "absent.pid")])
    err = capsys.readouterr().err
    assert status == 1
    assert f"no Mosquitto pid file at {tmp_path / 'absent.pid'}" in err
    assert "the revoked device can still connect" in err
    assert "systemctl reload mosquitto" in err and "kill -HUP" in err
    assert list_devices(files) == []  # the file did change


def test_device_list_says_so_when_there_are_no_devices(
    files: BrokerFiles, capsys: pytest.CaptureFixture[str]
) -> None:
    assert barkwatch(["device", "list", "--broker-dir", str(files.directory)]) == 0
    out, err = capsys.readouterr()
    assert out == "" and f"no devices in {files.password_file}" in err


def test_broker_init_reports_who_really_owns_the_analyzer_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    files = BrokerFiles(tmp_path / "broker")
    init_pki(tmp_path / "pki", files, ["127.0.0.1"], broker_user=None)
    password = tmp_path / "analyzer-password"
    assert barkwatch(["broker", "init", "--broker-dir", str(files.directory),
                      "--conf", str(tmp_path / "barkwatch.conf"), "--analyzer-password-file",
                      str(password), "--analyzer-user", "no-such-user-here"]) == 0
    out = capsys.readouterr().out
    # As root the file stays root's (the user does not exist); otherwise it is the caller's.
    assert f"{password} (0600, {owner_of(password)})" in out
    assert "no-such-user-here" not in out
    assert f".{password.name}." not in caplog.text  # no temporary file named in the warning


def test_reload_refuses_a_pid_that_is_not_mosquitto(tmp_path: Path) -> None:
    assert reload_broker(tmp_path / "absent.pid") is False
    (tmp_path / "mine.pid").write_text(f"{os.getpid()}\n")
    with pytest.raises(ProvisioningError, match="not a running mosquitto"):
        reload_broker(tmp_path / "mine.pid")


def test_the_commands_set_up_a_deployment_and_never_print_a_password(tmp_path: Path) -> None:
    broker = ["--broker-dir", str(tmp_path / "broker")]
    devices = ["--devices-dir", str(tmp_path / "devices")]
    steps = [
        ["ca", "init", "--server-name", "127.0.0.1", "--pki-dir", str(tmp_path / "pki"), *broker],
        ["broker", "init", *broker, "--conf", str(tmp_path / "barkwatch.conf"),
         "--analyzer-password-file", str(tmp_path / "analyzer-password")],
        ["device", "add", "yard-7", "--broker-host", "127.0.0.1", *broker, *devices,
         "--no-reload"],
        ["device", "list", *broker],
    ]
    outputs = []
    for step in steps:
        done = subprocess.run([BIN / "barkwatch", *step], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout + done.stderr)
    assert outputs[-1].splitlines()[-1] == "yard-7"
    secrets = [(tmp_path / "analyzer-password").read_text().strip(),
               (tmp_path / "devices" / "yard-7" / "mqtt-password").read_text().strip()]
    assert not any(secret in output for secret in secrets for output in outputs)
    unknown = subprocess.run([BIN / "barkwatch", "device", "revoke", "yard-9", *broker, *devices,
                              "--no-reload"], capture_output=True, text=True, timeout=120)
    assert unknown.returncode == 1 and "there is no device 'yard-9'" in unknown.stderr


def test_password_comes_from_the_environment_first_then_a_private_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("from-file\n")
    secret.chmod(0o600)
    settings = MqttSettings(password_env="BARKWATCH_TEST_PASSWORD", password_file=str(secret))
    monkeypatch.delenv("BARKWATCH_TEST_PASSWORD", raising=False)
    assert settings.password() == "from-file"
    monkeypatch.setenv("BARKWATCH_TEST_PASSWORD", "from-env")
    assert settings.password() == "from-env"
    monkeypatch.delenv("BARKWATCH_TEST_PASSWORD")
    secret.chmod(0o644)
    with pytest.raises(ConfigError, match="readable by group or others"):
        settings.password()
    with pytest.raises(ConfigError, match="'mqtt.password_file': cannot read"):
        MqttSettings(password_env="", password_file=str(tmp_path / "none")).password()
    assert "from-file" not in repr(settings)


def test_there_is_no_way_to_skip_verifying_the_broker(files: BrokerFiles, tmp_path: Path) -> None:
    config = tmp_path / "sensor.toml"
    config.write_text('device_id = "d"\n[mqtt]\ntls_insecure = true\n')
    with pytest.raises(ConfigError, match="'mqtt.tls_insecure' is unknown"):
        load_sensor_config(str(config))
    context = tls_context(str(files.ca_cert))
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2


@pytest.mark.parametrize(
    ("reason", "outcome"),
    [(0, PubackOutcome.STORED), (16, PubackOutcome.STORED), (135, PubackOutcome.DENIED),
     (128, PubackOutcome.RETRY), (151, PubackOutcome.RETRY), (153, PubackOutcome.RETRY)],
)
def test_only_not_authorized_drops_a_frame(reason: int, outcome: PubackOutcome) -> None:
    assert puback_outcome(reason) is outcome

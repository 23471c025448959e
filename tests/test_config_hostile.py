"""Configuration files a clumsy user or an attacker might write: every one is refused with the
file or the key path and the reason, by the loaders and by the commands that check them."""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

import pytest
import soundfile

from analyzer import cli as analyzer_cli
from analyzer.acoustics.site import load_site, site_template
from analyzer.cli.demo import run_demo
from analyzer.config import AnalyzerConfig, InfluxSettings, load_analyzer_config
from analyzer.deploy.passwords import read_password_file
from analyzer.deploy.services import Services
from analyzer.errors import ProvisioningError
from sensor import cli as sensor_cli
from sensor.config import MqttSettings, load_sensor_config
from sensor.errors import ConfigError
from sensor.frames import frames_from_samples
from sensor.publisher import make_client
from sensor.wire import encode_frame, frame_topic
from tests.conftest import publish_through_analyzer, sine

SENSOR = 'device_id = "yard-7"\n'
SITE = site_template("yard-7", source_to_sensor_m=8.0, source_to_boundary_m=12.0)


def _write(tmp_path: Path, text: str | bytes, name: str = "c.toml") -> str:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return str(path)


def _site_with(line: str) -> str:
    """The valid record with one key's line replaced."""
    key = line.split(" = ")[0]
    return "\n".join(line if old.startswith(key + " = ") else old for old in SITE.splitlines())


@pytest.mark.parametrize(
    ("loader", "text", "key"),
    [
        (load_analyzer_config, "[detector]\non_threshold = nan\n", "detector.on_threshold"),
        (load_analyzer_config, "[detector]\noff_threshold = -nan\n", "detector.off_threshold"),
        (load_analyzer_config, "[influx]\ntimeout_s = inf\n", "influx.timeout_s"),
        (load_sensor_config, SENSOR + "[calibration]\nfull_scale_db = nan\n",
         "calibration.full_scale_db"),
        (load_sensor_config, SENSOR + "heartbeat_interval_s = -inf\n", "heartbeat_interval_s"),
        (load_site, _site_with("temperature_c = nan"), "temperature_c"),
        (load_site, _site_with("source_to_sensor_m = +inf"), "source_to_sensor_m"),
    ],
)
def test_a_non_finite_number_is_refused_with_its_key_path(
    tmp_path: Path, loader: object, text: str, key: str
) -> None:
    with pytest.raises(ConfigError, match=rf"'{key}': [-+]?(nan|inf) is not a finite number"):
        loader(_write(tmp_path, text))  # type: ignore[operator]


def test_an_integer_too_large_for_a_float_is_refused_with_its_key_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'influx.timeout_s': an integer of 400 digits is too"):
        load_analyzer_config(_write(tmp_path, "[influx]\ntimeout_s = " + "9" * 400 + "\n"))


@pytest.mark.parametrize("loader", [load_analyzer_config, load_sensor_config, load_site])
def test_a_file_that_is_not_utf8_is_refused_with_its_name_and_byte_offset(
    tmp_path: Path, loader: object
) -> None:
    path = _write(tmp_path, b'device_id = "yard-7"\naddress = "Caf\xe9"\n')
    where = r"is not UTF-8 .* 0xe9 at offset 35 \(line 2\)"
    with pytest.raises(ConfigError, match=re.escape(path) + " " + where):
        loader(path)  # type: ignore[operator]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("\ufeff" + SENSOR, "starts with a byte order mark"),
        ("x = " + "[" * 100_000 + "\n", "nested too deeply"),
        ("x = " + "9" * 5000 + "\n", "an integer of more than 4300 digits"),
        (SENSOR + "[mqtt]\nport = 1883\x00\n", "not valid TOML"),
    ],
)
def test_a_file_tomllib_cannot_read_is_refused_with_its_name(
    tmp_path: Path, text: str, reason: str
) -> None:
    path = _write(tmp_path, text.encode())
    with pytest.raises(ConfigError, match=rf"config file {re.escape(path)} .*{re.escape(reason)}"):
        load_sensor_config(path)


@pytest.mark.parametrize(
    ("argv", "text", "message"),
    [
        (["barkwatch", "analyzer", "validate-config", "--config"],
         "[detector]\non_threshold = nan\n",
         "'detector.on_threshold': nan is not a finite number"),
        (["barkwatch", "analyzer", "validate-config", "--config"], b"client_id = '\xff'\n",
         "is not UTF-8 text (TOML must be): byte 0xff at offset 13 (line 1)"),
        (["barkwatch", "site", "validate"], _site_with("temperature_c = nan"),
         "'temperature_c': nan is not a finite number"),
        (["barkwatch", "site", "show"], _site_with("humidity_pct = inf"),
         "'humidity_pct': inf is not a finite number"),
        (["barkwatch", "site", "validate"], b"address = '\xc3'\n", "is not UTF-8 text"),
        (["barkwatch", "analyze", "missing.wav", "--config"], "[detector]\nmin_duration_s = nan\n",
         "'detector.min_duration_s': nan is not a finite number"),
        (["barkwatch-sensor", "validate-config", "--config"],
         SENSOR + "[calibration]\nfull_scale_db = nan\n",
         "'calibration.full_scale_db': nan is not a finite number"),
        (["barkwatch-sensor", "validate-config", "--config"], b"device_id = '\x80'\n",
         "is not UTF-8 text"),
    ],
)
def test_each_command_exits_non_zero_naming_the_bad_key_or_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], text: str | bytes,
    message: str,
) -> None:
    path = _write(tmp_path, text)
    main = sensor_cli.main if argv[0] == "barkwatch-sensor" else analyzer_cli.main
    assert main([*argv[1:], path]) == 1
    captured = capsys.readouterr()
    assert message in captured.err
    assert "Traceback" not in captured.err and "valid" not in captured.out


def test_analyze_refuses_a_site_record_with_nan_before_printing_any_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    site = _write(tmp_path, _site_with("temperature_c = nan"))
    assert analyzer_cli.main(["analyze", str(tmp_path / "missing.wav"), "--site", site]) == 1
    captured = capsys.readouterr()
    assert "'temperature_c': nan is not a finite number" in captured.err
    assert captured.out == ""


def test_site_create_refuses_a_distance_that_is_not_finite_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = tmp_path / "site.toml"
    with pytest.raises(SystemExit) as exit_info:
        analyzer_cli.main(["site", "create", str(record), "--device", "yard-7",
                           "--sensor-m", "8", "--boundary-m", "nan"])
    assert exit_info.value.code == 2
    assert "argument --boundary-m: nan is not a finite number" in capsys.readouterr().err
    assert not record.exists()


def test_a_valid_site_record_still_prints_finite_json(tmp_path: Path) -> None:
    record = load_site(_write(tmp_path, SITE))
    values = json.loads(json.dumps(record.as_dict(), allow_nan=False))
    assert all(math.isfinite(v) for v in values.values() if isinstance(v, float))


def _with_password_file(tmp_path: Path, mode: int) -> tuple[str, str]:
    secret = tmp_path / "mqtt-password"
    secret.write_text("s3cret\n")
    secret.chmod(mode)
    mqtt = f'[mqtt]\nusername = "yard-7"\npassword_env = ""\npassword_file = "{secret}"\n'
    return mqtt, str(secret)


@pytest.mark.parametrize(
    ("argv", "head"),
    [(["analyzer", "validate-config", "--config"], ""),
     (["validate-config", "--config"], SENSOR)],
)
def test_validate_config_refuses_a_world_readable_password_file_as_run_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], head: str
) -> None:
    mqtt, secret = _with_password_file(tmp_path, 0o644)
    path = _write(tmp_path, head + mqtt)
    main = analyzer_cli.main if argv[0] == "analyzer" else sensor_cli.main
    assert main([*argv, path]) == 1
    refusal = f"'mqtt.password_file': {secret} is readable by group or others (mode 644)"
    assert refusal in capsys.readouterr().err
    # run refuses it in the same words when it makes its client
    settings = load_sensor_config(path).mqtt if head else load_analyzer_config(path).mqtt
    with pytest.raises(ConfigError, match=r"readable by group or others \(mode 644\)"):
        make_client("run", settings)


def test_validate_config_passes_a_private_password_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mqtt, _ = _with_password_file(tmp_path, 0o600)
    path = _write(tmp_path, SENSOR + mqtt)
    assert sensor_cli.main(["validate-config", "--config", path]) == 0
    assert f"{path}: valid" in capsys.readouterr().out


def test_validate_config_refuses_a_user_name_without_a_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, '[mqtt]\nusername = "barkwatch.analyzer"\npassword_env = ""\n')
    assert analyzer_cli.main(["analyzer", "validate-config", "--config", path]) == 1
    assert "'mqtt.username' is 'barkwatch.analyzer' but there is no password" in (
        capsys.readouterr().err)


def test_validate_config_refuses_a_ca_file_run_cannot_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, SENSOR + f'[mqtt]\ntls_ca = "{tmp_path / "no-ca.crt"}"\n')
    assert sensor_cli.main(["validate-config", "--config", path]) == 1
    assert "'mqtt.tls_ca': cannot load CA certificate" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "path_suffix", "reason"),
    [(b"\xff\xfepassword\n", "", "is not UTF-8 text (byte offset 0)"),
     (b"s3cret\n", "\x00", "is not a usable path")],
)
def test_a_password_file_that_cannot_be_used_is_refused_by_key(
    tmp_path: Path, content: bytes, path_suffix: str, reason: str
) -> None:
    secret = tmp_path / "mqtt-password"
    secret.write_bytes(content)
    secret.chmod(0o600)
    settings = MqttSettings(username="yard-7", password_env="",
                            password_file=str(secret) + path_suffix)
    with pytest.raises(ConfigError, match=rf"'mqtt.password_file': .*{re.escape(reason)}"):
        settings.login()


def test_a_broker_password_file_that_is_not_utf8_is_refused_by_name(tmp_path: Path) -> None:
    passwords = tmp_path / "passwd"
    passwords.write_bytes(b"yard-7:$7$\xff\n")
    reason = f"{passwords} is not UTF-8 text: byte offset 10"
    with pytest.raises(ProvisioningError, match=re.escape(reason)):
        read_password_file(passwords)


@pytest.mark.parametrize(
    ("where", "device", "message"),
    [("missing-dir/site.toml", "yard-7", "cannot write {path}: No such file or directory"),
     ("site.toml", "Yard 7", "--device 'Yard 7' is not a valid device id")],
)
def test_site_create_refuses_what_it_cannot_write_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str, device: str, message: str
) -> None:
    record = tmp_path / where
    assert analyzer_cli.main(["site", "create", str(record), "--device", device]) == 1
    assert message.format(path=record) in capsys.readouterr().err
    assert not record.exists()


def test_the_demo_says_its_broker_is_anonymous_and_a_deployment_refuses_that(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recording = tmp_path / "tone.wav"
    soundfile.write(recording, sine(1000.0, 0.1, 2.0, 48000), 48000)
    assert run_demo(str(recording)) == 0
    printed = capsys.readouterr().out
    start_up = " ".join(printed[: printed.index("[2/4]")].split())
    assert "lets anyone publish without a login" in start_up
    assert "a deployment uses broker_config/, where anonymous clients are refused" in start_up


@pytest.mark.parametrize(
    "argv",
    [["calibrate", "--calibrator", "x", "--input", "tone.wav", "--level", "nan"],
     ["calibrate", "--calibrator", "x", "--input", "tone.wav", "--seconds", "inf"],
     ["run", "--input", "tone.wav", "--duration", "nan"]],
)
def test_a_sensor_option_that_is_not_finite_is_refused_and_the_config_is_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    config = _write(tmp_path, SENSOR)
    with pytest.raises(SystemExit) as exit_info:
        sensor_cli.main([*argv, "--config", config])
    assert exit_info.value.code == 2
    assert f"argument {argv[-2]}: {argv[-1]} is not a finite number" in capsys.readouterr().err
    assert Path(config).read_text() == SENSOR


def test_an_installation_record_that_is_not_utf8_leaves_the_live_analyzer_storing(
    services: Services, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sites = tmp_path / "sites"
    sites.mkdir()
    (sites / "dev-s.toml").write_bytes(SITE.replace("yard-7", "dev-s").encode() + b"# \xff\n")
    start_ns = time.time_ns() - 10 * 10**9
    frames = frames_from_samples(sine(1000.0, 0.1, 3.0, 48000), 48000, 100.0,
                                 device_id="dev-s", start_ns=start_ns)
    config = AnalyzerConfig(
        mqtt=MqttSettings(port=services.broker.port, keepalive_s=5, reconnect_max_s=1),
        influx=InfluxSettings(url=services.influx.url, retry_max_s=0.5, timeout_s=2.0),
        sites_dir=str(sites),
    )
    publish_through_analyzer(config, frame_topic("dev-s"), [encode_frame(f) for f in frames],
                             stored=3)
    assert f"installation record {sites / 'dev-s.toml'} is unusable" in caplog.text
    assert "is not UTF-8 text (TOML must be): byte 0xff" in caplog.text

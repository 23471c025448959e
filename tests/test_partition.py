"""Several analyzers share one fleet: ``partition = "K/N"`` (docs/SCALE.md)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
import zlib
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest

from analyzer.config import Partition, load_analyzer_config, parse_partition
from analyzer.deploy.services import Services
from analyzer.store.influx import InfluxClient, InfluxSettings
from sensor.errors import ConfigError
from sensor.frames import frames_from_samples
from sensor.wire import Frame, encode_frame, frame_topic, status_topic
from tests.conftest import sine, wait_until

BIN = Path(sys.executable).parent
# Known answers: share = CRC-32 of the id modulo 2, plus 1 (zlib.crc32(b"fleet-a") % 2 == 1).
FLEET = {"fleet-a": 2, "fleet-b": 2, "fleet-c": 2, "fleet-d": 1, "fleet-e": 1, "fleet-f": 1}
FRAMES_PER_DEVICE = 4


def test_a_device_belongs_to_the_share_its_crc32_names() -> None:
    for device, share in FLEET.items():
        assert zlib.crc32(device.encode()) % 2 + 1 == share
        assert Partition(share, 2).owns(device)
        assert not Partition(3 - share, 2).owns(device)


def test_every_device_belongs_to_exactly_one_of_n_shares() -> None:
    devices = [f"sensor-{i:04d}" for i in range(1000)]
    for count in (1, 2, 3, 7):
        owners = [[k for k in range(1, count + 1) if Partition(k, count).owns(d)]
                  for d in devices]
        assert all(len(found) == 1 for found in owners)


def test_partition_is_read_from_the_configuration_file(tmp_path: Path) -> None:
    path = tmp_path / "analyzer.toml"
    path.write_text('partition = "2/3"\n')
    assert load_analyzer_config(str(path)).share == Partition(2, 3)


@pytest.mark.parametrize(
    ("text", "reason"),
    [("", "not of the form K/N"), ("2", "not of the form K/N"), ("1/2/3", "not of the form K/N"),
     ("a/b", "not of the form K/N"), ("-1/2", "not of the form K/N"),
     ("0/2", "K = 0 in '0/2' is not between 1 and N = 2"),
     ("3/2", "K = 3 in '3/2' is not between 1 and N = 2"),
     ("1/0", "N = 0 in '1/0' is not between 1 and 1024"),
     ("1/2000", "N = 2000 in '1/2000' is not between 1 and 1024")],
)
def test_a_malformed_partition_is_refused_naming_the_key(
    tmp_path: Path, text: str, reason: str
) -> None:
    path = tmp_path / "analyzer.toml"
    path.write_text(f'partition = "{text}"\n')
    with pytest.raises(ConfigError, match="config key 'partition'") as error:
        load_analyzer_config(str(path))
    assert reason in str(error.value)


def test_parse_partition_reads_k_of_n() -> None:
    assert parse_partition("1/1") == Partition(1, 1)
    assert str(parse_partition("3/4")) == "3/4"


def fleet_frames(start_ns: int) -> dict[str, list[Frame]]:
    """FRAMES_PER_DEVICE frames of a 1 kHz tone through the sensor's frame code, per device."""
    template = list(frames_from_samples(sine(1000.0, 0.05, FRAMES_PER_DEVICE, 48000), 48000,
                                        100.0, "fleet-a", start_ns))
    return {device: [dataclasses.replace(f, device_id=device) for f in template]
            for device in FLEET}


def analyzer_process(services: Services, tmp_path: Path, share: int) -> subprocess.Popen[bytes]:
    config = tmp_path / f"analyzer-{share}.toml"
    config.write_text(
        f'client_id = "analyzer-{share}"\npartition = "{share}/2"\nstats_interval_s = 1.0\n'
        f'[mqtt]\nport = {services.broker.port}\n[influx]\nurl = "{services.influx.url}"\n'
    )
    with open(tmp_path / f"analyzer-{share}.log", "wb") as log:  # the child keeps its copy
        return subprocess.Popen([BIN / "barkwatch", "analyzer", "run", "--config", config],
                                stdout=log, stderr=subprocess.STDOUT)


def latest_stats(influx: InfluxClient, analyzer: str) -> dict[str, int | str]:
    """The analyzer's last ``analyzer_stats`` point: the counters this test checks."""
    series = influx.query(
        "SELECT frames_stored, status_changes, other_partition, broker_state FROM "
        f"analyzer_stats WHERE analyzer = '{analyzer}' ORDER BY time DESC LIMIT 1")
    if not series:
        return {}
    return dict(zip(series[0]["columns"][1:], series[0]["values"][0][1:], strict=True))


def subscribed(influx: InfluxClient, analyzer: str) -> bool:
    # The analyzer subscribes in the same callback that makes its state "connected", before
    # any frame of the test is published.
    return latest_stats(influx, analyzer).get("broker_state") == "connected"


def test_two_analyzer_processes_store_each_frame_once_each_device_by_its_own_analyzer(
    services: Services, tmp_path: Path
) -> None:
    influx = InfluxClient(InfluxSettings(url=services.influx.url))
    influx.create_database()  # the analyzers make it too; here so that polling can begin at once
    analyzers = [analyzer_process(services, tmp_path, share) for share in (1, 2)]
    try:
        wait_until(lambda: all(subscribed(influx, f"analyzer-{k}") for k in (1, 2)),
                   timeout_s=60, what="both analyzers to subscribe")
        publisher = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2)
        publisher.connect("127.0.0.1", services.broker.port)
        publisher.loop_start()
        for device, frames in fleet_frames(time.time_ns() - 60_000_000_000).items():
            publisher.publish(status_topic(device), "online", qos=1).wait_for_publish(10)
            for frame in frames:
                publisher.publish(frame_topic(device), encode_frame(frame), qos=1) \
                    .wait_for_publish(10)
        publisher.disconnect()
        publisher.loop_stop()
        mine = {k: sum(1 for share in FLEET.values() if share == k) for k in (1, 2)}
        expected = {
            k: {"frames_stored": mine[k] * FRAMES_PER_DEVICE, "status_changes": mine[k],
                "other_partition": (len(FLEET) - mine[k]) * (FRAMES_PER_DEVICE + 1),
                "broker_state": "connected"}
            for k in (1, 2)
        }
        wait_until(lambda: all(latest_stats(influx, f"analyzer-{k}") == expected[k]
                               for k in (1, 2)), timeout_s=60, what=f"stats {expected}")
    finally:
        for process in analyzers:
            process.terminate()
        for process in analyzers:
            process.wait(timeout=30)
    for device in FLEET:
        seqs = influx.query(f"SELECT seq FROM level WHERE device = '{device}'")
        assert sorted(row[1] for row in seqs[0]["values"]) == list(range(FRAMES_PER_DEVICE))
        status = influx.query(f"SELECT online FROM sensor_status WHERE device = '{device}'")
        assert len(status[0]["values"]) == 1

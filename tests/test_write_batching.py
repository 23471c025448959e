"""How the analyzer writes to InfluxDB at a steady trickle of frames: several frames to a
request (a batch waits ``FLUSH_LINGER_S`` for more while the inbox is empty), over one
kept-alive connection that survives InfluxDB restarting. Real Mosquitto and InfluxDB."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest

from analyzer.deploy.services import Services
from analyzer.errors import InfluxRejected, InfluxUnavailable
from analyzer.store.influx import InfluxClient, InfluxSettings
from sensor.wire import encode_frame, frame_topic
from tests.conftest import wait_until
from tests.test_end_to_end import analyzer_config
from tests.test_hostile_messages import Publisher, frames_of, run_analyzer

FRAMES = 30


def test_frames_trickling_in_are_written_several_to_a_request_and_each_stored_once(
    services: Services,
) -> None:
    config = analyzer_config(services)
    analyzer = run_analyzer(config)
    requests_with_levels: list[int] = []
    write = analyzer.influx.write_request

    def counted(lines: Sequence[str]) -> None:
        levels = sum(line.startswith("level,") for line in lines)
        if levels:
            requests_with_levels.append(levels)
        write(lines)

    analyzer.influx.write_request = counted  # type: ignore[method-assign]
    publisher = Publisher(config)
    try:
        sent = []
        for frame in frames_of("trickle-1", FRAMES):  # 0.15 s in all, not waiting for PUBACKs
            sent.append(publisher.client.publish(frame_topic("trickle-1"), encode_frame(frame),
                                                 qos=1))
            time.sleep(0.005)  # the inbox runs empty between frames
        for info in sent:
            info.wait_for_publish(timeout=10)
        wait_until(lambda: analyzer.counters.frames_stored == FRAMES, what="every frame")
    finally:
        publisher.close()
        analyzer.stop()
    assert sum(requests_with_levels) == FRAMES
    assert len(requests_with_levels) <= FRAMES // 2  # not one request a frame
    client = InfluxClient(InfluxSettings(url=services.influx.url))
    series = client.query("SELECT seq FROM level WHERE device = 'trickle-1'")
    assert [row[1] for row in series[0]["values"]] == list(range(FRAMES))
    assert analyzer.counters.duplicates == 0


def _line(seq: int) -> str:
    return f"probe,device=p seq={seq}i {1_700_000_000_000_000_000 + seq}"


def _seqs(client: InfluxClient) -> list[int]:
    series = client.query("SELECT seq FROM probe")
    return [row[1] for row in series[0]["values"]] if series else []


def test_writes_share_one_connection_and_go_on_after_influxdb_restarts(
    services: Services,
) -> None:
    client = InfluxClient(InfluxSettings(url=services.influx.url, timeout_s=5.0))
    client.create_database()
    client.write_lines([_line(0)])
    kept = client._connection().sock
    assert kept is not None
    port = kept.getsockname()[1]
    client.write_lines([_line(1)])
    assert client._connection().sock is not None
    assert client._connection().sock.getsockname()[1] == port  # the same connection
    services.influx.restart()  # the kept connection is dead now
    client.write_lines([_line(2)])
    assert _seqs(client) == [0, 1, 2]


def test_kept_connection_errors_read_as_before(services: Services) -> None:
    client = InfluxClient(InfluxSettings(url=services.influx.url, timeout_s=5.0))
    client.create_database()
    with pytest.raises(InfluxRejected, match=r"InfluxDB refused /write \(400\)"):
        client.write_lines(["probe,device=p seq=1i,seq=\"x\" 1"])
    services.influx.stop()
    with pytest.raises(InfluxUnavailable, match="is unreachable"):
        client.write_lines([_line(3)])

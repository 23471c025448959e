"""Faults injected into real processes (issue 23 item 1): SIGKILL of the analyzer, InfluxDB, the
broker and the sensor at seeded random moments while a violation is replayed, compared with a
clean run (tests/faults/harness.py; scripts/fault_inject.py runs the long version), and the
defects the harness found, each pinned by its own test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from analyzer.config import AnalyzerConfig
from analyzer.deploy.services import Services
from analyzer.ingest.service import Analyzer
from analyzer.store.influx import InfluxClient, InfluxSettings
from sensor.config import MqttSettings
from sensor.frames import frames_from_samples
from sensor.outbox import Outbox
from sensor.publisher import FramePublisher
from sensor.wire import encode_frame
from tests.conftest import sine, wait_until
from tests.faults.harness import MAX_FRAME_AGE_S, START_NS, integrity_check

ROOT = Path(__file__).resolve().parent.parent
def _analyzer_config(services: Services) -> AnalyzerConfig:
    return AnalyzerConfig(
        max_frame_age_s=MAX_FRAME_AGE_S,
        mqtt=MqttSettings(port=services.broker.port, keepalive_s=5, reconnect_max_s=1),
        influx=InfluxSettings(url=services.influx.url, retry_max_s=0.5, timeout_s=2.0),
    )


def _stored_seqs(services: Services, device: str) -> list[int]:
    client = InfluxClient(InfluxSettings(url=services.influx.url))
    series = client.query(f"SELECT seq FROM level WHERE device = '{device}'")
    return sorted(row[1] for row in series[0]["values"]) if series else []


def test_frames_a_crashed_broker_had_acknowledged_are_sent_again_and_stored(
    services: Services, tmp_path: Path
) -> None:
    # Defect found by the harness: Mosquitto writes its queues every autosave_interval (30 s),
    # so a SIGKILL lost the frames it had acknowledged to the sensor since its last save.
    config = _analyzer_config(services)
    analyzer = Analyzer(config)
    analyzer.start()
    wait_until(analyzer.connected.is_set, what="the analyzer's session")
    analyzer.stop()  # its session stays, queueing frames while it is away
    assert services.broker.process is not None
    saves = services.broker.log_path.read_text().count("Saving in-memory database")
    services.broker.process.send_signal(signal.SIGUSR1)  # write the session, as autosave would
    wait_until(lambda: services.broker.log_path.read_text().count("Saving in-memory database")
               > saves, what="the broker's save")
    outbox = Outbox(tmp_path / "outbox.sqlite")
    for frame in frames_from_samples(sine(1000.0, 0.1, 10.0, 16000), 16000, 100.0,
                                     device_id="crash-1", start_ns=START_NS):
        outbox.put(frame.seq, encode_frame(frame))
    publisher = FramePublisher("crash-1", MqttSettings(port=services.broker.port, keepalive_s=5,
                                                       reconnect_max_s=1), outbox)
    publisher.start()
    try:
        wait_until(lambda: outbox.backlog() == 0, what="the broker to acknowledge 10 frames")
        services.broker.process.send_signal(signal.SIGKILL)
        services.broker.process.wait(timeout=10)
        services.broker.process = None
        services.broker.start()
        wait_until(lambda: publisher.connects >= 2 and outbox.backlog() == 0,
                   what="the sensor to reconnect and drain")
    finally:
        publisher.stop()
        outbox.close()
    assert publisher.resent == 10
    analyzer = Analyzer(config)
    analyzer.start()
    try:
        wait_until(lambda: analyzer.counters.frames_stored >= 10, timeout_s=30,
                   what="10 stored frames")
    finally:
        analyzer.stop()
    assert _stored_seqs(services, "crash-1") == list(range(10))


# Puts frames into a real outbox as fast as it can and reports each one once committed.
_WRITER = textwrap.dedent("""
    import sys
    from sensor.outbox import Outbox
    outbox = Outbox(sys.argv[1])
    seq = outbox.next_seq()
    while True:
        outbox.put(seq, bytes(7000))  # a frame's size
        if seq % 3 == 0:
            outbox.delete([seq - 1])  # as acknowledgements arrive
        print(seq, flush=True)
        seq += 1
""")


def test_an_outbox_killed_in_the_middle_of_writes_keeps_every_committed_frame(
    tmp_path: Path,
) -> None:
    # SIGKILL lands inside a transaction nearly every time: the writer does nothing else.
    path = tmp_path / "outbox.sqlite"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    committed: list[int] = []
    for kill in range(5):
        writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)],
                                  stdout=subprocess.PIPE, text=True, env=env)
        assert writer.stdout is not None
        for _ in range(200 + 37 * kill):  # a different moment each time
            committed.append(int(writer.stdout.readline()))
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=10)
        assert integrity_check(path) == "ok"
    outbox = Outbox(path)
    try:
        waiting = {seq for seq, _ in outbox.peek(100_000)}
        deleted = {seq - 1 for seq in committed if seq % 3 == 0}
        assert set(committed) - deleted <= waiting  # nothing committed is lost
        assert len(committed) == len(set(committed))  # no sequence number used twice
        assert outbox.next_seq() > max(committed)
    finally:
        outbox.close()

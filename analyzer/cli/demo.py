"""The demo: the whole system on one machine, on the bundled example recording.

Starts Mosquitto and InfluxDB (child processes, temporary state), starts the analyzer,
replays the recording through the sensor code as fast as it can, waits until every frame is
stored, then prints what was found and the InfluxQL to look at it.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from analyzer.acoustics import site_template
from analyzer.config import AnalyzerConfig
from analyzer.deploy import Services
from analyzer.ingest import Analyzer
from analyzer.store import InfluxSettings
from sensor.capture import FileSource
from sensor.config import CalibrationSettings, MqttSettings, OutboxSettings, SensorConfig
from sensor.node import run_node

log = logging.getLogger(__name__)

DEMO_RECORDING = Path(__file__).resolve().parents[2] / "demo" / "example.flac"
DEMO_DEVICE = "demo-0001"
DEMO_FULL_SCALE_DB = 100.0
ANONYMOUS_BROKER_NOTE = (
    "      (this demo's broker lets anyone publish without a login, on loopback only; a "
    "deployment\n       uses broker_config/, where anonymous clients are refused: TLS, one "
    "password per device\n       and an ACL, see broker_config/README.md)"
)
"""Said at start-up: the demo's convenience must not be mistaken for how a deployment runs."""


def _say(text: str) -> None:
    print(text, flush=True)


def run_demo(recording: str | None = None, keep_running: bool = False) -> int:
    """Run the demo; return the process exit status."""
    path = Path(recording) if recording else DEMO_RECORDING
    source = FileSource(path)
    workdir = tempfile.TemporaryDirectory(prefix="barkwatch-demo-")
    with Services(Path(workdir.name) / "services") as services:
        _say(
            f"[1/4] services up: mosquitto on 127.0.0.1:{services.broker.port}, "
            f"influxdb at {services.influx.url}"
        )
        _say(ANONYMOUS_BROKER_NOTE)
        mqtt_settings = MqttSettings(host="127.0.0.1", port=services.broker.port)
        sites = Path(workdir.name) / "sites"
        sites.mkdir()
        (sites / f"{DEMO_DEVICE}.toml").write_text(site_template(
            DEMO_DEVICE, address="(demo) 1 Example St", dog_location="back yard",
            source_to_sensor_m=8.0, source_to_boundary_m=12.0, ground="mixed",
        ))
        analyzer = Analyzer(
            AnalyzerConfig(
                mqtt=mqtt_settings,
                sites_dir=str(sites),
                influx=InfluxSettings(url=services.influx.url, database="barkwatch"),
            )
        )
        analyzer.start()
        _say("[2/4] analyzer subscribed to barkwatch/v1/+/+")
        sensor_config = SensorConfig(
            device_id=DEMO_DEVICE,
            mqtt=mqtt_settings,
            calibration=CalibrationSettings(full_scale_db=DEMO_FULL_SCALE_DB, date="demo"),
            outbox=OutboxSettings(path=str(Path(workdir.name) / "outbox.sqlite")),
        )
        start_ns = time.time_ns() - round(source.duration_s * 1e9)
        _say(
            f"[3/4] replaying {path.name} ({source.duration_s:.0f} s of audio) through the "
            f"sensor as device {DEMO_DEVICE} ..."
        )
        started = time.monotonic()
        stats = run_node(
            sensor_config,
            source,
            start_ns,
            threading.Event(),
            exit_when_drained=True,
            total_s=source.duration_s,
        )
        while analyzer.counters.frames_stored < stats.frames:
            _say(f"      stored {analyzer.counters.frames_stored}/{stats.frames} frames")
            time.sleep(0.5)
        elapsed = time.monotonic() - started
        analyzer.stop()
        _say(
            f"      {stats.frames} frames measured, published and stored in {elapsed:.1f} s "
            f"({source.duration_s / elapsed:.1f}x real time)"
        )
        events = analyzer.influx.query(
            f"SELECT duration_s, confidence, laeq_db, level_at_100ft_db, plainly_audible "
            f"FROM dog_event WHERE device = '{DEMO_DEVICE}'"
        )
        rows = events[0]["values"] if events else []
        _say(
            f"[4/4] {len(rows)} dog-vocalization event(s) stored (the classifier is not yet "
            "reliable: see models/MODEL_CARD.md); dog 8 m from the sensor, boundary 12 m:"
        )
        for time_ns, duration_s, confidence, laeq_db, at_100ft, audible in rows:
            offset_s = (time_ns - start_ns) / 1e9
            moment = datetime.fromtimestamp(time_ns / 1e9, UTC).strftime("%H:%M:%S.%f")
            distant = "     -" if at_100ft is None else f"{at_100ft:5.1f}"
            _say(
                f"      {moment[:-3]} UTC (+{offset_s:6.2f} s)  {duration_s:5.2f} s  "
                f"conf {confidence:.2f}  LAeq {laeq_db:5.1f} dB  at 100 ft {distant} dB"
                f"{'  plainly audible' if audible else ''}"
            )
        windows = analyzer.influx.query(
            f"SELECT rule, duration_s FROM evidence_window WHERE device = '{DEMO_DEVICE}'")
        found = windows[0]["values"] if windows else []
        _say(f"      ordinance findings: {len(found) or 'none'} (150 s of audio cannot hold "
             "a 7-minute episode or a 1-hour stretch)" if not found else
             f"      ordinance findings: {[(r[1], round(r[2])) for r in found]}")
        _say(
            "\nLook at it yourself (InfluxQL, database 'barkwatch'):\n"
            f"  curl -G {services.influx.url}/query --data-urlencode db=barkwatch "
            '--data-urlencode "q=SELECT laeq_db, lafmax_db, max_dog_score FROM level '
            f"WHERE device = '{DEMO_DEVICE}' LIMIT 5\"\n"
            f"  SELECT * FROM dog_event WHERE device = '{DEMO_DEVICE}'\n"
            f"  SELECT mean(laeq_db) FROM level WHERE device = '{DEMO_DEVICE}' "
            "AND time > now() - 1h GROUP BY time(10s)"
        )
        if keep_running:
            _say("\nServices keep running; press Ctrl-C to stop them.")
            try:
                while True:
                    time.sleep(1)
            except KeyboardInterrupt:
                pass
    workdir.cleanup()
    return 0

"""The demo: the whole system on one machine, on the bundled example recording.

Starts Mosquitto and InfluxDB (child processes, temporary state), starts the analyzer,
replays the recording through the sensor code as fast as it can, waits until every frame is
stored, then prints what was found. With ``keep_running`` the services stay up, with InfluxQL
to look at the data, until Ctrl-C or SIGTERM. Either signal at any point stops the services
and removes the temporary folder.
"""

from __future__ import annotations

import logging
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

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
ANONYMOUS_BROKER_NOTE = (
    "      (this demo's broker lets anyone publish without a login, on loopback only; a "
    "deployment\n       uses broker_config/, where anonymous clients are refused: TLS, one "
    "password per device\n       and an ACL, see broker_config/README.md)"
)
"""Said at start-up: the demo's convenience must not be mistaken for how a deployment runs."""


def _say(text: str) -> None:
    print(text, flush=True)


@contextmanager
def _stopped_by_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT (Ctrl-C) and SIGTERM (``kill``, systemd, a container stop) both set ``stop``:
    every wait below watches it, so either ends the demo through the same clean-up."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {number: signal.signal(number, on_signal)
                for number in (signal.SIGINT, signal.SIGTERM)}  # fmt: skip
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def run_demo(recording: str | None = None, keep_running: bool = False) -> int:
    """Run the demo; return the process exit status (130 when stopped before the end)."""
    path = Path(recording) if recording else DEMO_RECORDING
    source = FileSource(path)
    stop = threading.Event()
    with (_stopped_by_signals(stop),
          tempfile.TemporaryDirectory(prefix="barkwatch-demo-") as workdir,
          Services(Path(workdir) / "services") as services):  # fmt: skip
        if stop.is_set():
            return 130
        _say(
            f"[1/4] services up: mosquitto on 127.0.0.1:{services.broker.port}, "
            f"influxdb at {services.influx.url}"
        )
        _say(ANONYMOUS_BROKER_NOTE)
        finished = _replay(path, source, Path(workdir), services, stop)
        if not finished:
            _say("stopped before the end; services stopped, temporary folder removed")
            return 130
        if not keep_running:
            _say(
                "\nThe services stopped with the demo (their data was in a temporary folder).\n"
                "To query the data yourself, run it with --keep-running (bash scripts/demo.sh "
                "--keep-running): the services stay up and it prints InfluxQL to try."
            )
            return 0
        _say(
            "\nServices keep running. Look at the data (InfluxQL, database 'barkwatch'):\n"
            f"  curl -G {services.influx.url}/query --data-urlencode db=barkwatch "
            '--data-urlencode "q=SELECT laeq_db, lafmax_db, max_dog_score FROM level '
            f"WHERE device = '{DEMO_DEVICE}' LIMIT 5\"\n"
            f"  SELECT * FROM dog_event WHERE device = '{DEMO_DEVICE}'\n"
            f"  SELECT mean(laeq_db) FROM level WHERE device = '{DEMO_DEVICE}' "
            "AND time > now() - 1h GROUP BY time(10s)\n"
            "Ctrl-C (or SIGTERM) stops them and removes the temporary folder."
        )
        stop.wait()
    _say("services stopped, temporary folder removed")
    return 0


def _replay(path: Path, source: FileSource, workdir: Path, services: Services,
            stop: threading.Event) -> bool:  # fmt: skip
    """Analyzer up, recording replayed, results printed; False when ``stop`` came first."""
    mqtt_settings = MqttSettings(host="127.0.0.1", port=services.broker.port)
    sites = workdir / "sites"
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
    try:
        _say("[2/4] analyzer subscribed to barkwatch/v1/+/+")
        # The default calibration, as `barkwatch analyze` and an uncalibrated sensor assume.
        calibration = CalibrationSettings(date="demo")
        sensor_config = SensorConfig(
            device_id=DEMO_DEVICE,
            mqtt=mqtt_settings,
            calibration=calibration,
            outbox=OutboxSettings(path=str(workdir / "outbox.sqlite")),
        )
        start_ns = time.time_ns() - round(source.duration_s * 1e9)
        _say(
            f"[3/4] replaying {path.name} ({source.duration_s:.0f} s of audio) through the "
            f"sensor as device {DEMO_DEVICE}, calibration assumed: an RMS of digital full "
            f"scale reads {calibration.full_scale_db:g} dB SPL (full_scale_db) ..."
        )
        started = time.monotonic()
        stats = run_node(
            sensor_config, source, start_ns, stop, exit_when_drained=True,
            total_s=source.duration_s,
        )  # fmt: skip
        while analyzer.counters.frames_stored < stats.frames and not stop.is_set():
            _say(f"      stored {analyzer.counters.frames_stored}/{stats.frames} frames")
            stop.wait(0.5)
        if stop.is_set():
            return False
        elapsed = time.monotonic() - started
    finally:
        analyzer.stop()
    _say(
        f"      {stats.frames} frames measured, published and stored in {elapsed:.1f} s "
        f"({source.duration_s / elapsed:.1f}x real time)"
    )
    _print_results(analyzer, start_ns, source.duration_s)
    return True


def _print_results(analyzer: Analyzer, start_ns: int, audio_s: float) -> None:
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
    if found:
        _say(f"      ordinance findings: {[(r[1], round(r[2])) for r in found]}")
    elif audio_s <= 420:
        _say(f"      ordinance findings: none ({audio_s:.0f} s of audio cannot hold a "
             "7-minute episode or a 1-hour stretch)")
    else:
        _say("      ordinance findings: none")

"""The demo: the whole system on one machine, from barking to the officer's evidence report.

Starts Mosquitto and InfluxDB (child processes, temporary state), starts the analyzer, makes
a scene of more than seven minutes of barking from the bundled recording (demo_scene.py),
replays it through the sensor code as fast as it can, waits until every frame is stored and
prints what was found. Then it tells the case story (demo_story.py): a complaint with an
earlier one on a prior date, the finding linked, the seizure checklist, and the evidence report
(HTML and PDF) written into ``out``, which outlives the demo. ``recording`` replays a given
file instead; the story is then told only if the file made a finding. With ``keep_running``
the services stay up, with InfluxQL to look at the data, until Ctrl-C or SIGTERM. Either
signal at any point stops the services and removes the temporary folder.
"""

from __future__ import annotations

import logging
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

from analyzer.acoustics import site_template
from analyzer.cli.demo_scene import (
    DEMO_RECORDING,
    Scene,
    load_material,
    make_scene,
    recording_rate_hz,
    write_scene,
)
from analyzer.cli.demo_story import tell_case_story
from analyzer.config import AnalyzerConfig
from analyzer.deploy import Services
from analyzer.errors import AnalyzerError
from analyzer.ingest import Analyzer
from analyzer.store import InfluxClient, InfluxSettings
from sensor.capture import FileSource
from sensor.config import CalibrationSettings, MqttSettings, OutboxSettings, SensorConfig
from sensor.node import run_node

log = logging.getLogger(__name__)

DEMO_DEVICE = "demo-0001"
DEMO_ADDRESS = "(demo) 1 Example St"
DEFAULT_OUT = "barkwatch-demo-report"
ANONYMOUS_BROKER_NOTE = (
    "      (this demo's broker lets anyone publish without a login, on loopback only; a "
    "deployment\n       uses broker_config/, where anonymous clients are refused: TLS, one "
    "password per device\n       and an ACL, see broker_config/README.md)"
)
"""Said at start-up: the demo's convenience must not be mistaken for how a deployment runs."""
SHOWN_EVENTS = 12  # events printed one per line; the rest are counted


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
        # Set from another thread: the handler runs on the main thread, which may be inside
        # stop.wait() holding the event's (non-reentrant) lock; stop.set() here would then
        # wait for that lock forever (a SIGTERM once hung the demo past 60 s).
        threading.Thread(target=stop.set, name="demo-stop", daemon=True).start()

    previous = {number: signal.signal(number, on_signal)
                for number in (signal.SIGINT, signal.SIGTERM)}  # fmt: skip
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


@dataclass(frozen=True)
class Replayed:
    """A finished replay: capture time of its first sample, its length, the windows sealed."""

    start_ns: int
    duration_s: float
    windows: int

    @property
    def end_ns(self) -> int:
        """Capture time just after its last sample."""
        return self.start_ns + round(self.duration_s * 1e9)


def run_demo(recording: str | None = None, keep_running: bool = False,
             out: str = DEFAULT_OUT) -> int:
    """Run the demo; return the process exit status (130 when stopped before the end, 1 when
    the bundled scene made no finding or the story could not be told)."""
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
        work = Path(workdir)
        if recording:
            path, scene = Path(recording), None
        else:
            _say("      making the scene from the bundled recording (seeded: the same every "
                 "run) ...")
            scene = make_scene(*load_material())
            path = write_scene(scene, work / "scene.flac")
        site_record = site_template(
            DEMO_DEVICE, address=DEMO_ADDRESS, dog_location="back yard",
            source_to_sensor_m=8.0, source_to_boundary_m=12.0, ground="mixed",
        )  # fmt: skip
        replayed = _replay(path, scene, site_record, work, services, stop)
        if replayed is None:
            _say("stopped before the end; services stopped, temporary folder removed")
            return 130
        status, complaint = _story(replayed, scene, site_record, work, services, Path(out))
        if not keep_running:
            _say(
                "\nThe services stopped with the demo (their data was in a temporary folder).\n"
                "To query the data yourself, run it with --keep-running (bash scripts/demo.sh "
                "--keep-running): the services stay up and it prints InfluxQL to try."
            )
            return status
        _say(
            "\nServices keep running. Look at the data (InfluxQL, database 'barkwatch'):\n"
            f"  curl -G {services.influx.url}/query --data-urlencode db=barkwatch "
            '--data-urlencode "q=SELECT laeq_db, lafmax_db, max_dog_score FROM level '
            f"WHERE device = '{DEMO_DEVICE}' LIMIT 5\"\n"
            f"  SELECT * FROM dog_event WHERE device = '{DEMO_DEVICE}'\n"
            f"  SELECT mean(laeq_db) FROM level WHERE device = '{DEMO_DEVICE}' "
            "AND time > now() - 1h GROUP BY time(10s)"
        )
        if complaint is not None:
            _say(f"The case file (case list and case audit take --db alone):\n"
                 f"  barkwatch case show {complaint} --db {work / 'cases.sqlite'} "
                 f"--influx-url {services.influx.url}")
        _say("Ctrl-C (or SIGTERM) stops them and removes the temporary folder.")
        stop.wait()
    _say("services stopped, temporary folder removed")
    return 0


def _story(replayed: Replayed, scene: Scene | None, site_record: str, work: Path,
           services: Services, out: Path) -> tuple[int, int | None]:
    """Tell the case story when the replay made a finding; the exit status and the
    complaint the story filed (None when it filed none)."""
    if not replayed.windows:
        if scene is None:
            _say("\nNo finding, so no case story: it needs a completed finding (more than 7 "
                 "minutes of barking with gaps under 60 s, then 3 minutes of capture after it)")
            return 0, None
        _say("\nThe scene's barking made no finding (has the detector changed? see "
             "models/MODEL_CARD.md): the case story cannot be told")
        return 1, None
    _say("\nThe case, as an officer builds it (barkwatch case ...; the case file is in the "
         "temporary folder):")
    influx = InfluxClient(InfluxSettings(url=services.influx.url, database="barkwatch"))
    try:
        story = tell_case_story(influx, work / "cases.sqlite", out, DEMO_DEVICE, DEMO_ADDRESS,
                                site_record, replayed.start_ns, replayed.end_ns)
    except AnalyzerError as exc:
        _say(f"the case story stopped: {exc}")
        return 1, None
    verified = sum(check.verified for check in story.checks)
    _say(
        f"\nThe evidence report of complaint #{story.complaint_id} ({verified} of "
        f"{len(story.checks)} evidence window(s) verified now), kept after the demo:\n"
        f"  HTML: {story.html.resolve()}\n"
        f"  PDF:  {story.pdf.resolve()}"
    )
    return (0 if story.checks and verified == len(story.checks) else 1), story.complaint_id


def _replay(path: Path, scene: Scene | None, site_record: str, workdir: Path,
            services: Services, stop: threading.Event) -> Replayed | None:
    """Analyzer up, recording replayed, results printed; None when ``stop`` came first."""
    source = FileSource(path)
    mqtt_settings = MqttSettings(host="127.0.0.1", port=services.broker.port)
    sites = workdir / "sites"
    sites.mkdir()
    (sites / f"{DEMO_DEVICE}.toml").write_text(site_record)
    analyzer = Analyzer(
        AnalyzerConfig(
            mqtt=mqtt_settings,
            sites_dir=str(sites),
            influx=InfluxSettings(url=services.influx.url, database="barkwatch"),
        )
    )
    _say("      starting the analyzer (the first run after installing also compiles "
         "librosa's kernels: up to a minute) ...")
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
            f"[3/4] replaying {path.name} ({source.duration_s:.0f} s of audio at "
            f"{source.sample_rate} Hz) through the "
            f"sensor as device {DEMO_DEVICE}, calibration assumed: an RMS of digital full "
            f"scale reads {calibration.full_scale_db:g} dB SPL (full_scale_db) ..."
        )
        if scene is not None:
            recorded_hz = recording_rate_hz(DEMO_RECORDING)
            _say(
                f"      the scene was made from {DEMO_RECORDING.name} (seeded: the same every "
                f"run): {len(scene.bark_spans_s)} of its barks over "
                f"{scene.barking_s / 60:.1f} min, gaps up to {scene.longest_gap_s:.0f} s, in "
                f"its bark-free background;\n      mixed at {scene.rate_hz} Hz (the deployment "
                f"rate) after a band-limited upsampling of the {recorded_hz} Hz recording, so "
                f"it holds nothing above {recorded_hz // 2} Hz"
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
            return None
        elapsed = time.monotonic() - started
    finally:
        analyzer.stop()
    _say(
        f"      {stats.frames} frames measured, published and stored in {elapsed:.1f} s "
        f"({source.duration_s / elapsed:.1f}x real time)"
    )
    windows = _print_results(analyzer, start_ns, source.duration_s, scene)
    return Replayed(start_ns, source.duration_s, windows)


def barks_in_events(bark_spans_s: tuple[tuple[float, float], ...],
                    event_spans_s: list[tuple[float, float]]) -> int:
    """How many of the placed barks (onset, offset, s) overlap at least one event's span."""
    return sum(any(onset < end and start < offset for start, end in event_spans_s)
               for onset, offset in bark_spans_s)


def reconcile_barks_and_events(scene: Scene, event_spans_s: list[tuple[float, float]]) -> str:
    """The line that ties the scene's barks to the events found: they are counted differently
    (an event may hold several close barks, or part of one), and a bark in no event widens
    the gaps the rules see beyond the scene's own."""
    placed = len(scene.bark_spans_s)
    found = barks_in_events(scene.bark_spans_s, event_spans_s)
    return (f"      of the scene's {placed} barks, {found} lie in an event and {placed - found} "
            "in none; an event may hold several close barks or part of one, so events and "
            "barks are not counted alike, and each bark in no event makes the gaps between "
            f"events longer than the scene's {scene.longest_gap_s:.0f} s")


def _audibility_column(at_100ft: float | None, audible: bool | None) -> str:
    if at_100ft is None or audible is None:
        return "  not assessed"
    return "  plainly audible" if audible else "  not plainly audible"


def _print_results(analyzer: Analyzer, start_ns: int, audio_s: float,
                   scene: Scene | None = None) -> int:
    """Print the events and findings stored; returns how many evidence windows there are."""
    events = analyzer.influx.query(
        f"SELECT duration_s, confidence, laeq_db, level_at_100ft_db, plainly_audible "
        f"FROM dog_event WHERE device = '{DEMO_DEVICE}'"
    )
    rows = events[0]["values"] if events else []
    _say(
        f"[4/4] {len(rows)} dog-vocalization event(s) stored (the classifier is not yet "
        "reliable: see models/MODEL_CARD.md); dog 8 m from the sensor, boundary 12 m:"
    )
    for time_ns, duration_s, confidence, laeq_db, at_100ft, audible in rows[:SHOWN_EVENTS]:
        offset_s = (time_ns - start_ns) / 1e9
        moment = datetime.fromtimestamp(time_ns / 1e9, UTC).strftime("%H:%M:%S.%f")
        distant = "     -" if at_100ft is None else f"{at_100ft:5.1f}"
        _say(
            f"      {moment[:-3]} UTC (+{offset_s:6.2f} s)  {duration_s:5.2f} s  "
            f"conf {confidence:.2f}  LAeq {laeq_db:5.1f} dB  at 100 ft {distant} dB"
            f"{_audibility_column(at_100ft, audible)}"
        )
    if len(rows) > SHOWN_EVENTS:
        _say(f"      ... and {len(rows) - SHOWN_EVENTS} more")
    if scene is not None:
        spans = [((t - start_ns) / 1e9, (t - start_ns) / 1e9 + d) for t, d, *_ in rows]
        _say(reconcile_barks_and_events(scene, spans))
    windows = analyzer.influx.query(
        f"SELECT rule, duration_s, events_counted, longest_gap_s FROM evidence_window "
        f"WHERE device = '{DEMO_DEVICE}'")
    found = windows[0]["values"] if windows else []
    for _, rule, duration_s, counted, longest_gap_s in found:
        _say(f"      ordinance finding: {rule}, {duration_s / 60:.1f} min of barking "
             f"({counted} events, longest gap {longest_gap_s:.0f} s): sealed as an evidence "
             "window")
    if not found and audio_s <= 420:
        _say(f"      ordinance findings: none ({audio_s:.0f} s of audio cannot hold a "
             "7-minute episode or a 1-hour stretch)")
    elif not found:
        _say("      ordinance findings: none")
    return len(found)

"""What a newcomer meets first (issue 26): the demo's end and its signals, the calibration
printed with results, installation records named as such, progress only on a terminal,
logging that stays readable at DEBUG."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path
from typing import IO

import pytest

from analyzer.cli.analyze import _duration, write_text
from tests.conftest import write_excerpt

BIN = Path(sys.executable).parent
BARKWATCH = BIN / "barkwatch"


def _accepts(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1.0)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _lines_until(stream: IO[str], marker: str, seen: list[str]) -> None:
    for line in stream:
        seen.append(line)
        if marker in line:
            return
    raise AssertionError(f"the demo ended before printing {marker!r}:\n{''.join(seen)}")


def _demo(tmp_path: Path, *options: str) -> subprocess.Popen[str]:
    clip = write_excerpt(tmp_path / "clip.wav", 70.0, 4.0)
    scratch = tmp_path / "scratch"  # the demo's temporary folder goes here
    scratch.mkdir()
    return subprocess.Popen(
        [BARKWATCH, "demo", "--input", clip, *options], stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, env={**os.environ, "TMPDIR": str(scratch)},
    )  # fmt: skip


def test_demo_without_keep_running_says_the_services_stopped_and_prints_no_dead_query(
    tmp_path: Path,
) -> None:
    demo = _demo(tmp_path)
    output, _ = demo.communicate(timeout=300)
    assert demo.returncode == 0, output
    assert "The services stopped with the demo" in output
    assert "--keep-running" in output
    assert "curl" not in output  # a query printed now would fail: nothing listens any more
    assert "reads 120 dB SPL (full_scale_db)" in output  # the calibration it assumed
    assert "findings: none (4 s of audio cannot hold" in output  # the file's length, not 150 s


def test_demo_keep_running_stopped_by_sigterm_stops_both_services_and_removes_its_folder(
    tmp_path: Path,
) -> None:
    demo = _demo(tmp_path, "--keep-running")
    seen: list[str] = []
    try:
        assert demo.stdout is not None
        _lines_until(demo.stdout, "Services keep running", seen)
        ports = re.search(r"mosquitto on 127\.0\.0\.1:(\d+), influxdb at http://127\.0\.0\.1:"
                          r"(\d+)", "".join(seen))  # fmt: skip
        assert ports, "".join(seen)
        broker_port, influx_port = int(ports[1]), int(ports[2])
        assert _accepts(broker_port) and _accepts(influx_port)
        demo.send_signal(signal.SIGTERM)
        rest, _ = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
    assert demo.returncode == 0, "".join(seen) + rest
    assert "services stopped, temporary folder removed" in rest
    assert not _accepts(broker_port)
    assert not _accepts(influx_port)
    assert list((tmp_path / "scratch").iterdir()) == []


DOCUMENT = {
    "duration_s": 600.0, "max_dog_score": 0.97, "full_scale_db": 110.0,
    "events": [
        {"onset_s": 12.0, "offset_s": 13.5, "label": "dog", "confidence": 0.91, "laeq_db": 71.2,
         "lafmax_db": 78.0, "level_at_100ft_db": 52.4, "uncertainty_db": 3.3,
         "audibility_margin_db": 14.6, "plainly_audible": True},
        {"onset_s": 40.0, "offset_s": 41.0, "label": "dog", "confidence": 0.66, "laeq_db": 60.0,
         "lafmax_db": 64.5, "level_at_100ft_db": 41.0, "uncertainty_db": 3.3,
         "audibility_margin_db": 4.2, "plainly_audible": False},
    ],
    "findings": [
        {"rule": "continuous", "start_s": 12.0, "end_s": 512.0, "duration_s": 500.0,
         "violation": True, "status": "completed", "events_counted": 80, "events_in_span": 81,
         "longest_gap_s": 41.5, "reading": "continuous: every dog vocalization counts"},
    ],
    "rules": {"continuous_limit_s": 420.0, "continuity_gap_s": 60.0,
              "intermittent_limit_s": 3600.0, "intermittency_gap_s": 600.0},
    "audibility": {"site": {"address": "1 Elm St", "source_to_sensor_m": 8.0,
                            "source_to_boundary_m": 12.0},
                   "settings": {"margin_db": 10.0},
                   "receiver": "100 ft (30.48 m) beyond the premises boundary"},
}  # fmt: skip


def _text(document: dict[str, object]) -> list[str]:
    out = io.StringIO()
    write_text(document, "bark.wav", out)
    return out.getvalue().splitlines()


def test_text_with_a_site_gives_each_events_level_at_100_ft_margin_and_decision() -> None:
    lines = _text(DOCUMENT)
    assert lines[3].endswith("at 100 ft 52.4 dB (±3.3)  margin +14.6 dB  plainly audible")
    assert lines[4].endswith("at 100 ft 41.0 dB (±3.3)  margin +4.2 dB  not plainly audible")
    assert "site 1 Elm St: dog 8 m from the sensor, 12 m from the boundary" in lines[2]
    assert "margin of 10 dB or more" in lines[2]


def test_text_gives_each_finding_with_rule_span_and_verdict() -> None:
    lines = _text(DOCUMENT)
    assert lines[5].startswith("  findings (continuous: more than 7 min with gaps under 60 s")
    assert lines[6].startswith("  continuous: 12.00-512.00 s (8 min 20.00 s), VIOLATION "
                               "(completed); 80 of 81 events counted, longest gap 41.5 s")


@pytest.mark.parametrize(("seconds", "said"), [
    (420.0, "7 min"), (3600.0, "60 min"), (500.0, "8 min 20.00 s"), (45.04, "45.04 s"),
    (419.99, "6 min 59.99 s"), (420.04, "7 min 0.04 s")])
def test_text_says_durations_in_minutes_and_seconds(seconds: float, said: str) -> None:
    assert _duration(seconds) == said


def test_text_states_the_calibration_it_assumed() -> None:
    assert "an RMS of digital full scale reads 110 dB SPL" in _text(DOCUMENT)[1]


def test_text_without_a_site_says_there_is_no_audibility_and_no_finding() -> None:
    lines = _text({**DOCUMENT, "audibility": None, "findings": [],
                   "events": DOCUMENT["events"][:1]})  # type: ignore[index]
    assert lines[2].startswith("  no installation record (--site FILE)")
    assert lines[3].endswith("LAFmax 78.0 dB")
    assert lines[4].startswith("  findings: none (continuous: more than 7 min")


def test_analyze_text_with_a_site_prints_levels_at_100_ft(tmp_path: Path) -> None:
    clip = write_excerpt(tmp_path / "clip.wav", 70.0, 20.0)
    site = tmp_path / "site.toml"
    made = subprocess.run([BARKWATCH, "site", "create", site, "--device", "d-1", "--sensor-m",
                           "8", "--boundary-m", "12"], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    result = subprocess.run([BARKWATCH, "analyze", clip, "--site", site, "--format", "text"],
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "reads 120 dB SPL" in result.stdout
    events = [line for line in result.stdout.splitlines() if " dog  conf " in line]
    assert events and all(" at 100 ft " in line and "plainly audible" in line for line in events)


def test_site_create_with_both_distances_does_not_ask_to_fill_them_in(tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    result = subprocess.run([BARKWATCH, "site", "create", site, "--device", "d-1", "--sensor-m",
                             "8", "--boundary-m", "12"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "fill in" not in result.stdout
    assert "valid" in result.stdout


def test_site_create_names_the_distance_left_to_fill_in(tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    result = subprocess.run([BARKWATCH, "site", "create", site, "--device", "d-1", "--sensor-m",
                             "8"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "fill in source_to_boundary_m " in result.stdout


def test_a_missing_site_file_is_named_as_an_installation_record(tmp_path: Path) -> None:
    clip = write_excerpt(tmp_path / "clip.wav", 70.0, 2.0)
    missing = tmp_path / "nowhere.toml"
    result = subprocess.run([BARKWATCH, "analyze", clip, "--site", missing],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert f"installation record {missing} does not exist" in result.stderr
    assert "config file" not in result.stderr


LOGGING_PROBE = """
import logging
from sensor.cli import configure_logging
configure_logging("DEBUG")
logging.getLogger("numba.core.byteflow").debug("bytecode dump")
logging.getLogger("matplotlib").info("font cache")
logging.getLogger("analyzer.offline.analysis").debug("our own detail")
logging.getLogger("barkwatch.sensor").debug("the command's detail")
logging.getLogger("numba.core.byteflow").warning("a library's warning")
"""


def test_debug_logging_keeps_other_libraries_at_warning() -> None:
    # numba (under librosa) logs thousands of bytecode lines at DEBUG while it compiles.
    result = subprocess.run([sys.executable, "-c", LOGGING_PROBE], capture_output=True,
                            text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    logged = [line.split(" ", 2)[2] for line in result.stderr.splitlines()]
    assert logged == ["DEBUG analyzer.offline.analysis: our own detail",
                      "DEBUG barkwatch.sensor: the command's detail",
                      "WARNING numba.core.byteflow: a library's warning"]


def _stderr_on_a_terminal(command: list[str | Path]) -> str:
    """Run ``command`` with stderr on a pseudo-terminal; return what it wrote there."""
    controller, terminal = pty.openpty()
    # 24 rows, 200 columns: a new pseudo-terminal has 0 columns, where tqdm draws nothing.
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 200, 0, 0))
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            ready, _, _ = select.select([controller], [], [], 0.2)
            if ready:
                try:
                    data = os.read(controller, 65536)
                except OSError:  # the terminal's other end closed
                    return
                if not data:
                    return
                chunks.append(data)
            elif done.is_set():
                return

    done = threading.Event()
    reader = threading.Thread(target=drain)
    reader.start()
    try:
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=terminal, timeout=300,
                       check=True)
    finally:
        done.set()
        os.close(terminal)
        reader.join(10)
        os.close(controller)
    return b"".join(chunks).decode(errors="replace")


def test_analyze_shows_progress_on_a_terminal(tmp_path: Path) -> None:
    clip = write_excerpt(tmp_path / "clip.wav", 70.0, 20.0)
    shown = _stderr_on_a_terminal([BARKWATCH, "analyze", clip])
    assert "%|" in shown and "/20 s [" in shown


def test_analyze_prints_no_progress_when_quiet_on_a_terminal(tmp_path: Path) -> None:
    clip = write_excerpt(tmp_path / "clip.wav", 70.0, 20.0)
    shown = _stderr_on_a_terminal([BARKWATCH, "analyze", clip, "--quiet"])
    assert "%|" not in shown


def test_analyze_prints_no_progress_when_stderr_is_not_a_terminal(tmp_path: Path) -> None:
    clip = write_excerpt(tmp_path / "clip.wav", 70.0, 20.0)
    result = subprocess.run([BARKWATCH, "analyze", clip], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert "%|" not in result.stderr and "\r" not in result.stderr


def test_evaluate_prints_no_progress_when_stderr_is_not_a_terminal(tmp_path: Path) -> None:
    folder = tmp_path / "eval"
    folder.mkdir()
    write_excerpt(folder / "a.wav", 70.0, 4.0)
    result = subprocess.run([BARKWATCH, "evaluate", folder, "--out", tmp_path / "out"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert '"files": 1' in result.stdout
    assert "%|" not in result.stderr and "\r" not in result.stderr


def test_fit_reports_progress_after_every_training_step() -> None:
    from tests.test_training import _toy_problem
    from training import fit

    inputs, labels = _toy_problem()
    told: list[tuple[float, float]] = []
    fit.fit_network(inputs[:64], labels[:64], seed=1, epochs=2,
                    progress=lambda done, total: told.append((done, total)))
    steps = 2 * max(1, 64 // fit.BATCH)
    assert told == [(k, steps) for k in range(1, steps + 1)]


def test_barkwatch_train_commands_take_quiet() -> None:
    for command in ("trainset", "fit"):
        result = subprocess.run([BIN / "barkwatch-train", command, "--help"],
                                capture_output=True, text=True, timeout=60)
        assert "--quiet" in result.stdout

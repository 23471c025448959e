"""``barkwatch-sensor``: the command a sensor node runs (see ``--help``)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from types import FrameType
from typing import TYPE_CHECKING

import numpy as np

from sensor import __version__
from sensor.configfile import finite_float
from sensor.errors import SensorError

if TYPE_CHECKING:
    from sensor.bearing_report import BearingCheckReport
    from sensor.config import SensorConfig

log = logging.getLogger("barkwatch.sensor")

DESCRIPTION = """\
Barkwatch sensor node: captures audio (a microphone, or a sound file for replay), measures
calibrated levels, one-third-octave bands and classification features every second, keeps
them in a durable outbox and publishes them over MQTT. Raw audio never leaves the device."""


OWN_LOGGERS = ("barkwatch", "sensor", "analyzer", "training")
"""Loggers of this project's code (module names and the commands' own); ``--log-level``
applies to them only."""


def configure_logging(level: str) -> None:
    """Log to stderr: this project's loggers at ``level``, every other library's at WARNING.

    ``--log-level DEBUG`` is for Barkwatch's own messages; numba (under librosa) alone
    writes thousands of bytecode-dump lines at DEBUG while it compiles.
    """
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(level)


def _parse_time(text: str) -> int:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise SensorError(f"--start-time {text!r} is not an ISO 8601 time: {exc}") from exc
    if moment.tzinfo is None:
        raise SensorError(f"--start-time {text!r} needs a time zone, e.g. 2026-06-01T22:00:00Z")
    return int(moment.astimezone(UTC).timestamp() * 1_000_000) * 1000


def _parse_pace(text: str) -> float | None:
    if text == "fast":
        return None
    if text == "realtime":
        return 1.0
    try:
        return float(text)
    except ValueError as exc:
        raise SensorError(f"--pace {text!r} is not 'realtime', 'fast' or a number") from exc


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used to render the usage in docs/COMMANDS.md)."""
    parser = argparse.ArgumentParser(prog="barkwatch-sensor", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--list-devices", action="store_true", help="list audio input devices and exit"
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING"],
        help="logging detail (default INFO)",
    )
    sub = parser.add_subparsers(dest="command")

    run = sub.add_parser("run", help="measure and publish until stopped (or the file ends)")
    run.add_argument("--config", required=True, help="sensor configuration file (TOML)")
    run.add_argument(
        "--input", metavar="FILE", help="read this sound file instead of the microphone"
    )
    run.add_argument(
        "--pace",
        default="realtime",
        metavar="PACE",
        help="file replay pace: 'realtime' (default), 'fast' (as fast as possible) "
        "or a speed-up factor such as 10",
    )
    run.add_argument(
        "--duration",
        type=finite_float,
        metavar="S",
        help="stop after S seconds of audio (default: until stopped or the file ends)",
    )
    run.add_argument("--device", help="override audio.device (name substring or index)")
    run.add_argument(
        "--start-time", metavar="ISO", help="capture time of the file's first sample (default: now)"
    )
    run.add_argument(
        "--no-wait",
        action="store_true",
        help="with --input: exit when the file is measured, leaving unsent frames "
        "in the outbox, instead of waiting for the broker to acknowledge all",
    )

    check = sub.add_parser("validate-config", help="check a configuration file and exit")
    check.add_argument("--config", help="sensor configuration file (TOML)")
    check.add_argument(
        "--describe", action="store_true", help="print every key with its default and meaning"
    )

    sub.add_parser("list-devices", help="list audio input devices and exit")

    calibrate = sub.add_parser(
        "calibrate",
        help="calibrate with a 1 kHz sound calibrator on the microphone",
        description="Capture the calibrator's tone, check that it is clean and steady, and "
        "store the offset between digital full scale and sound pressure level, the date and "
        "the calibrator in the configuration file. Reports the drift since the last "
        "calibration. Refuses, with the reason, a tone that is not fit to calibrate with.",
    )
    calibrate.add_argument("--config", required=True, help="sensor configuration file (TOML)")
    calibrate.add_argument(
        "--calibrator", required=True, help="make, model and serial of the calibrator"
    )
    calibrate.add_argument(
        "--level",
        type=finite_float,
        help="calibrator level in dB SPL (default: the configured one)",
    )
    calibrate.add_argument(
        "--seconds", type=finite_float, default=5.0, help="capture length (default 5 s)"
    )
    calibrate.add_argument("--input", metavar="FILE", help="use a recording of the calibrator")
    calibrate.add_argument(
        "--dry-run", action="store_true", help="measure and report, change nothing"
    )

    bearing = sub.add_parser(
        "bearing-check",
        help="check the microphone array's orientation with a clap at a known bearing",
        description="At installation: clap (or play a tone) at a spot whose compass bearing "
        "from the sensor you know, while this listens. Prints the bearing measured for each "
        "clap and whether it agrees with --expected; when it does not, the orientation_deg "
        "that would make it agree. Sends the result to the broker (retained, for the review "
        "app's field check) unless --no-publish. Exits 1 when the check fails, 3 when the "
        "result could not be sent. Needs [array].",
    )
    bearing.add_argument("--config", required=True, help="sensor configuration file (TOML)")
    bearing.add_argument("--expected", type=finite_float, required=True, metavar="DEG",
                         help="compass bearing of the clap's spot from the sensor, degrees")
    bearing.add_argument("--tolerance", type=finite_float, default=15.0, metavar="DEG",
                         help="largest accepted difference (default 15 degrees)")
    bearing.add_argument("--seconds", type=finite_float, default=10.0,
                         help="capture length (default 10 s)")
    bearing.add_argument("--input", metavar="FILE",
                         help="use a recording from the array instead of the microphones")
    bearing.add_argument("--no-publish", action="store_true",
                         help="only print the result; do not send it to the broker "
                         "(barkwatch/v1/bearing_check/<device>)")
    bearing.add_argument("--publish-timeout", type=finite_float, default=30.0, metavar="S",
                         help="give up sending the result after S seconds (default 30)")
    return parser


def _bearing_check(args: argparse.Namespace) -> int:
    from sensor.bearing_check import check_bearing, describe
    from sensor.bearing_report import report_of
    from sensor.capture import FileSource, MicrophoneSource
    from sensor.config import load_sensor_config

    config = load_sensor_config(args.config)
    if not config.array.can_bear:
        raise SensorError(f"{args.config}: no microphone array ([array] preset), so no bearing")
    if not 0.0 <= args.expected <= 360.0 or not args.tolerance > 0 or not args.seconds > 0:
        raise SensorError("--expected must be 0-360 degrees, --tolerance and --seconds positive")
    if not 0 < args.publish_timeout <= 3600:
        raise SensorError("--publish-timeout must be 0-3600 s")
    started_ns = time.time_ns()  # the capture's start: the time the check is stored at
    source: FileSource | MicrophoneSource
    if args.input:
        source = FileSource(args.input, max_s=args.seconds, channel=config.audio.channel,
                            keep_channels=True)
        if source.file_channels < config.input_channels:
            raise SensorError(
                f"{args.input} has {source.file_channels} channel(s); the array's capsules "
                f"are on channels {list(config.array.channels)} (config [array])")
    else:
        source = MicrophoneSource(
            config.audio.device, config.audio.sample_rate, config.audio.block_s,
            config.audio.queue_blocks, config.audio.channel,
            max_samples=round(args.seconds * config.audio.sample_rate),
            input_channels=config.input_channels)
        log.info("listening %.0f s: clap at the spot %.0f degrees from the sensor ...",
                 args.seconds, args.expected)
    blocks = [block.channels for block in source if block.channels is not None]
    if source.counters.dropped_blocks:
        raise SensorError("capture blocks were dropped during the check; try again")
    if not blocks:
        raise SensorError("nothing was captured")
    check = check_bearing(np.concatenate(blocks), source.sample_rate, config.array,
                          config.audio.channel, args.expected, args.tolerance)
    for line in describe(check):
        print(line)
    verdict = 0 if check.passed else 1
    if args.no_publish:
        return verdict
    report = report_of(check, config.device_id, started_ns, config.array.orientation_deg)
    return _send_bearing_check(config, report, verdict, args.publish_timeout)


def _send_bearing_check(config: SensorConfig, report: BearingCheckReport, verdict: int,
                        timeout_s: float) -> int:
    """Send the check's result for the review app's field check; ``verdict`` or 3."""
    from sensor.bearing_report import bearing_check_topic, encode_report
    from sensor.oneshot import publish_once

    topic = bearing_check_topic(config.device_id)
    try:
        publish_once(config.mqtt, f"barkwatch-sensor-{config.device_id}-bearing-check", topic,
                     encode_report(report), retain=True, timeout_s=timeout_s)
    except SensorError as exc:
        print(f"barkwatch-sensor: error: the result was not sent to the broker: {exc} "
              "(the verdict above stands; --no-publish only prints it)", file=sys.stderr)
        return 3
    print(f"sent to the broker on {topic}: the field check shows it")
    return verdict


def _calibrate(args: argparse.Namespace) -> int:
    from sensor.calibration import analyse_calibration_tone, record_calibration
    from sensor.capture import FileSource, MicrophoneSource
    from sensor.config import load_sensor_config

    config = load_sensor_config(args.config)
    level = args.level if args.level is not None else config.calibration.reference_level_db
    source: FileSource | MicrophoneSource
    if args.input:
        source = FileSource(args.input, max_s=args.seconds)
    else:
        source = MicrophoneSource(
            config.audio.device,
            config.audio.sample_rate,
            config.audio.block_s,
            config.audio.queue_blocks,
            config.audio.channel,
            max_samples=round(args.seconds * config.audio.sample_rate),
        )
        log.info("capturing %.1f s of the calibrator ...", args.seconds)
    blocks = [block.samples for block in source if block.samples is not None]
    if source.counters.dropped_blocks:
        raise SensorError("capture blocks were dropped during calibration; try again")
    samples = np.concatenate(blocks) if blocks else np.zeros(0)
    result = analyse_calibration_tone(samples, source.sample_rate, level)
    print(
        f"tone {result.tone_frequency_hz:.1f} Hz at {result.tone_level_dbfs:.2f} dBFS, "
        f"{result.tone_to_noise_db:.1f} dB above noise, steady within {result.spread_db:.2f} dB"
    )
    print(f"full_scale_db = {result.full_scale_db:.2f} (calibrator {level:.1f} dB SPL)")
    if args.dry_run:
        return 0
    date = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    previous = record_calibration(args.config, result, args.calibrator, date)
    if previous is None:
        print(f"stored in {args.config} (first calibration)")
    else:
        drift = result.full_scale_db - previous
        print(f"stored in {args.config}; drift since the last calibration: {drift:+.2f} dB "
              f"(was {previous:.2f})")
        if abs(drift) > 1.0:
            log.warning("calibration drifted by %+.2f dB: check the microphone", drift)
    return 0


def _run(args: argparse.Namespace) -> int:
    from sensor.capture import FileSource, MicrophoneSource
    from sensor.config import load_sensor_config
    from sensor.node import run_node

    config = load_sensor_config(args.config)
    stop = threading.Event()
    source: FileSource | MicrophoneSource
    if args.duration is not None and args.duration <= 0:
        raise SensorError(f"--duration {args.duration} must be positive")
    array = config.array.can_bear
    if args.input:
        source = FileSource(args.input, speed=_parse_pace(args.pace), max_s=args.duration,
                            channel=config.audio.channel if array else None,
                            keep_channels=array)
        if array and source.file_channels < config.input_channels:
            raise SensorError(
                f"{args.input} has {source.file_channels} channel(s); the array's capsules "
                f"are on channels {list(config.array.channels)} (config [array])"
            )
        start_ns: int | None = _parse_time(args.start_time) if args.start_time else None
        if start_ns is None:
            start_ns = int(datetime.now(UTC).timestamp() * 1e6) * 1000
        total_s: float | None = source.duration_s
        log.info(
            "replaying %s (%.1f s at %d Hz, %s pace)",
            args.input,
            source.duration_s,
            source.file_rate,
            args.pace,
        )
    else:
        device = args.device if args.device is not None else config.audio.device
        source = MicrophoneSource(
            device,
            config.audio.sample_rate,
            config.audio.block_s,
            config.audio.queue_blocks,
            config.audio.channel,
            max_samples=round(args.duration * config.audio.sample_rate) if args.duration else None,
            input_channels=config.input_channels if array else None,
        )
        start_ns, total_s = None, args.duration

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: stopping; unsent frames stay in the outbox", signum)
        stop.set()
        if isinstance(source, MicrophoneSource):
            source.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    stats = run_node(
        config,
        source,
        start_ns,
        stop,
        exit_when_drained=bool(args.input) and not args.no_wait,
        total_s=total_s,
    )
    log.info("done: %d frames, %d samples lost", stats.frames, stats.lost_samples)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``barkwatch-sensor``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    try:
        if args.list_devices or args.command == "list-devices":
            from sensor.capture import describe_input_devices

            print(describe_input_devices())
            return 0
        if args.command == "validate-config":
            from sensor.config import describe_sensor_config, validate_sensor_config

            if args.describe:
                print(describe_sensor_config())
                return 0
            if not args.config:
                parser.error("validate-config needs --config FILE (or --describe)")
            validate_sensor_config(args.config)
            print(f"{args.config}: valid")
            return 0
        if args.command == "run":
            return _run(args)
        if args.command == "calibrate":
            return _calibrate(args)
        if args.command == "bearing-check":
            return _bearing_check(args)
        parser.print_help()
        return 2
    except SensorError as exc:
        print(f"barkwatch-sensor: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

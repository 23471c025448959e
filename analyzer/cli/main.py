"""``barkwatch``: the server-side command (see ``--help``)."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING, Any

from analyzer import __version__
from analyzer.errors import AnalyzerError
from sensor.calibration import DEFAULT_FULL_SCALE_DB
from sensor.cli import configure_logging
from sensor.configfile import finite_float
from sensor.errors import SensorError

if TYPE_CHECKING:  # imported lazily at run time: the CLI starts fast
    from analyzer.detect.settings import DetectorSettings

log = logging.getLogger("barkwatch")

DESCRIPTION = """\
Barkwatch server side. 'analyze' runs the whole pipeline on sound files in one process (no
broker, no database) and prints JSON; 'analyzer run' is the live service that subscribes to
every sensor and stores evidence in InfluxDB; 'demo' starts local services and replays the
bundled recording through sensor, broker, analyzer and database. 'ca', 'broker' and 'device'
set up a secured broker and manage device credentials (broker_config/README.md)."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser."""
    parser = argparse.ArgumentParser(prog="barkwatch", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING"],
        help="logging detail (default INFO)",
    )
    sub = parser.add_subparsers(dest="command")

    analyze = sub.add_parser(
        "analyze",
        help="analyse sound files offline and print one JSON document per file",
        description="Measure each file exactly as a sensor would and run the analyzer's "
        "pipeline on it. Prints one barkwatch.analysis/1 JSON document per file, "
        "one per line (schema in the README). A file that cannot be read is named on "
        "stderr and gets no document; one whose audio turns bad part-way (a NaN or "
        "infinite sample, data that stops decoding) keeps what was measured before and "
        "says where and why in 'failure'. Every file is tried; the exit status is 1 if "
        "any failed, else 0.",
    )
    analyze.add_argument(
        "files", nargs="+", metavar="FILE",
        help="sound files: what libsndfile reads (WAV, FLAC, OGG, AIFF, ...) or FFmpeg decodes "
        "(MP3, M4A/AAC, a video's sound); a file with several channels is measured as their "
        "average (said in the document's warnings)")
    analyze.add_argument(
        "--format",
        choices=["json", "text"],
        default="json",
        help="JSON lines (default) or a readable summary",
    )
    analyze.add_argument(
        "--include-frames",
        action="store_true",
        help="add per-second levels and band levels ('frames')",
    )
    analyze.add_argument(
        "--full-scale-db",
        type=finite_float,
        default=DEFAULT_FULL_SCALE_DB,
        metavar="L",
        help="calibration: a signal whose RMS is digital full scale reads L dB SPL (default "
        f"{DEFAULT_FULL_SCALE_DB:g}, as an uncalibrated sensor; take the recording sensor's "
        "calibration.full_scale_db); printed with the results",
    )
    analyze.add_argument(
        "--site",
        metavar="FILE",
        help="installation record (barkwatch site create): adds the level 100 ft beyond the "
        "premises boundary and the plainly-audible decision to every event",
    )
    analyze.add_argument(
        "--config",
        metavar="FILE",
        help="analyzer configuration whose [detector], [audibility] and [rules] to use",
    )
    analyze.add_argument(
        "--quiet", action="store_true", help="no progress bar (shown only on a terminal)"
    )

    service = sub.add_parser("analyzer", help="the live analyzer service")
    service_sub = service.add_subparsers(dest="action")
    run = service_sub.add_parser("run", help="subscribe, analyse and store until stopped")
    run.add_argument("--config", required=True, help="analyzer configuration file (TOML)")
    check = service_sub.add_parser("validate-config", help="check a configuration file")
    check.add_argument("--config", help="analyzer configuration file (TOML)")
    check.add_argument(
        "--describe", action="store_true", help="print every key with its default and meaning"
    )

    demo = sub.add_parser("demo", help="run the whole system locally: a scene made from the "
                          "bundled recording, a case and its evidence report")
    demo.add_argument("--input", metavar="FILE", help="replay this file instead")
    demo.add_argument(
        "--keep-running",
        action="store_true",
        help="keep the services up after the replay, for queries, until Ctrl-C or SIGTERM",
    )
    demo.add_argument(
        "--out", metavar="DIR", default="barkwatch-demo-report",
        help="folder for the evidence report, kept after the demo (default "
        "./barkwatch-demo-report)",
    )

    from analyzer.cli.case import add_case_parser
    from analyzer.cli.cluster import add_cluster_parser
    from analyzer.cli.findings import add_findings_parser
    from analyzer.cli.provision import add_parsers
    from analyzer.cli.report import add_report_parser
    from analyzer.cli.review import add_review_parser
    from analyzer.cli.site import add_site_parser

    add_parsers(sub)
    add_cluster_parser(sub)
    add_site_parser(sub)
    add_findings_parser(sub)
    add_case_parser(sub)
    add_report_parser(sub)
    add_review_parser(sub)
    evaluate = sub.add_parser(
        "evaluate",
        help="score detection against annotated recordings (precision, recall, F1, PR curve)",
        description="Analyse every audio file in DIR; NAME.annotations.csv or NAME.csv "
        "(onset_s,offset_s,label) beside it marks its dog vocalizations, none means no dog. "
        "Prints a JSON summary; writes summary.json and pr_curve.png to --out.",
    )
    evaluate.add_argument("dir", metavar="DIR", help="folder of audio files and annotations")
    evaluate.add_argument("--out", default="barkwatch-evaluation", help="output folder")
    evaluate.add_argument("--full-scale-db", type=finite_float, default=DEFAULT_FULL_SCALE_DB,
                          metavar="L", help="calibration assumed for the files (default "
                          f"{DEFAULT_FULL_SCALE_DB:g})")
    evaluate.add_argument("--config", help="analyzer configuration whose [detector] to use")
    evaluate.add_argument("--quiet", action="store_true",
                          help="no progress bar (shown only on a terminal)")
    return parser


def check_detector_files(settings: DetectorSettings) -> None:
    """Read the configured event verifier once, so that a missing or damaged file is named at
    the start (VerifierError) rather than at every device's first frame."""
    from analyzer.detect.verifier import configured_verifier

    configured_verifier(settings.verifier_path)


def _analyzer(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from analyzer.config import describe_analyzer_config, load_analyzer_config

    if args.action == "validate-config":
        if args.describe:
            print(describe_analyzer_config())
            return 0
        if not args.config:
            parser.error("analyzer validate-config needs --config FILE (or --describe)")
        from sensor.config import check_connection_settings

        config = load_analyzer_config(args.config)
        check_connection_settings(config.mqtt)  # as `run` would
        check_detector_files(config.detector)
        print(f"{args.config}: valid")
        return 0
    if args.action != "run":
        parser.error("analyzer needs an action: run or validate-config")
    from analyzer.ingest import Analyzer

    config = load_analyzer_config(args.config)
    check_detector_files(config.detector)  # a bad file stops the start, not every device
    analyzer: Any
    if config.cluster.servers:  # the clustered broker (docs/SCALE.md)
        from analyzer.ingest.cluster import ClusterAnalyzer

        analyzer = ClusterAnalyzer(config)
    else:
        analyzer = Analyzer(config)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    analyzer.start()
    while not stop.wait(1.0):
        if analyzer.failure is not None:  # exit so that systemd restarts it, no zombie
            log.error("analyzer worker stopped (%s); exiting", analyzer.failure)
            analyzer.stop()
            return 1
    analyzer.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``barkwatch``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    try:
        if args.command == "analyze":
            from analyzer.cli.analyze import run_analyze

            return run_analyze(args)
        if args.command == "analyzer":
            return _analyzer(args, parser)
        if args.command == "evaluate":
            from analyzer.cli.progress import progress_bar
            from analyzer.offline import run_evaluate

            with progress_bar("evaluate", "files", args.quiet) as progress:
                summary = run_evaluate(args.dir, args.out, args.full_scale_db, args.config,
                                       progress)
            print(json.dumps(summary, indent=2))  # after the bar is gone from the terminal
            return 0
        if args.command == "demo":
            from analyzer.cli.demo import run_demo

            return run_demo(args.input, keep_running=args.keep_running, out=args.out)
        if args.command == "site":
            from analyzer.cli.site import run_site

            return run_site(args)
        if args.command == "case":
            from analyzer.cli.case import run_case

            return run_case(args)
        if args.command == "report":
            from analyzer.cli.report import run_report

            return run_report(args)
        if args.command == "review":
            from analyzer.cli.review import run_review

            return run_review(args)
        if args.command == "findings":
            from analyzer.cli.findings import run_findings

            return run_findings(args)
        if args.command == "cluster":
            from analyzer.cli.cluster import run_cluster

            return run_cluster(args, parser)
        if args.command in ("ca", "broker", "device"):
            from analyzer.cli.provision import run

            return run(args, parser)
        parser.print_help()
        return 2
    except (SensorError, AnalyzerError) as exc:
        print(f"barkwatch: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

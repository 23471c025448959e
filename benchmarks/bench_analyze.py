"""`barkwatch analyze` of one hour of 48 kHz audio: wall time, CPU time, real-time factor.

    .venv/bin/python benchmarks/bench_analyze.py [--minutes 60] [--profile] [--seed 1]

Issue 24's goal: "`barkwatch analyze` of one hour of 48 kHz audio in under 30 s". The hour
is a soundscape mixed from the corpus (``benchmarks/ordinance_scenes.py``: dog bouts of
0.5-3 min with confusers (speech, music, birds, farm animals, traffic, household) between them
in a steady bed, seeded), written once as 16-bit FLAC at 48 kHz and cached under
``~/.cache/barkwatch/bench-analyze/``. The real command runs on it as a subprocess
(``.venv/bin/barkwatch analyze --quiet``), so start-up, decoding and JSON output are counted.

Reported (one JSON document): wall time, the child's CPU time (user + system, from
``resource.getrusage``), real-time factor (wall / audio), the load average before and after
(the machine is shared). ``--threads`` adds a run that splits the CPU time between the three
threads of the analysis (measuring, the networks, the caller's with start-up): on an idle
machine with two cores the wall time can approach the larger of the per-thread times only as
far as the GIL lets them overlap. ``--profile`` adds a profiled run (cProfile, which
slows Python-heavy code more than native code; cProfile sees one thread, so that run does
everything on the main thread, as the sensor does: it measures each stage's work, not the
overlap) split into
stages by the cumulative time of the functions that do them: decode, meter (DC removal,
levels, bands, percentiles), CNN (mel rows and the network), YAMNet (resampling, front end,
network), wire round trip, analyzer pipeline (detector, events, audibility, rules) and the
rest (start-up, imports, output).
``--output FILE`` keeps the analysis document (to diff two trees' output byte for byte).
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from ordinance_scenes import (  # noqa: E402
    DEFAULT_CORPORA,
    Material,
    Scene,
    SceneError,
    plan_bouts,
    render,
    scene_digest,
)

CACHE = Path.home() / ".cache" / "barkwatch" / "bench-analyze"
BARKWATCH = ROOT / ".venv" / "bin" / "barkwatch"

# (stage, [(file suffix, function name)]): a stage's time is the sum of these functions'
# cumulative times (none calls another of its list).
STAGES: list[tuple[str, list[tuple[str, str]]]] = [
    ("decode", [("sensor/capture.py", "__iter__")]),
    ("wire round trip", [("analyzer/offline/analysis.py", "_through_wire")]),
    ("analyzer pipeline (detector, events, audibility, rules)", [
        ("analyzer/detect/pipeline.py", "feed"), ("analyzer/detect/pipeline.py", "finish"),
        ("analyzer/acoustics/audibility.py", "observe"),
        ("analyzer/acoustics/audibility.py", "assess"),
        ("analyzer/ordinance/findings.py", "findings_for_events")]),
]
MEASURE = ("sensor/frames.py", "_measure")
MEL_ROWS = ("sensor/features.py", "process")
NETWORKS = [("sensor/scoring.py", "process"), ("sensor/scoring.py", "flush")]
YAMNET = [("sensor/scoring.py", "_patches"), ("sensor/resample.py", "process")]
# `barkwatch analyze ARGS` under cProfile, everything on the main thread (cProfile profiles
# one thread): the sensor's loop of analyzer.offline's measured_frames without its threads.
# argv[1] is the profile's path.
PROFILED_ANALYZE = """
import cProfile, sys
import analyzer.offline.analysis as analysis
from analyzer.cli import main
from sensor.capture import AudioSampleError

def one_thread(source, full_scale_db, cnn_model_path=""):
    networks = analysis.SensorNetworks(source.sample_rate,
                                       cnn=analysis.cached_model(cnn_model_path))
    builder = analysis.FrameBuilder("offline", source.sample_rate, full_scale_db, start_ns=0,
                                    networks=networks)
    blocks = iter(source)
    while True:
        try:
            block = next(blocks)
        except StopIteration:
            break
        except AudioSampleError:
            for frame in builder.skip(0):
                yield analysis._through_wire(frame, source)
            raise
        for frame in builder.push(block.samples):
            yield analysis._through_wire(frame, source)
    for frame in builder.finish():
        yield analysis._through_wire(frame, source)

analysis.measured_frames = one_thread
out, sys.argv = sys.argv[1], ["barkwatch", *sys.argv[2:]]
cProfile.run("status = main()", out)
"""
# `barkwatch analyze ARGS` counting the CPU time of the networks' worker thread and of the
# measuring thread: prints {"worker_cpu_s": ..., "measuring_cpu_s": ...} as stderr's last line.
THREAD_SPLIT = """
import json, sys, time
import analyzer.offline.analysis as analysis
import sensor.scoring as scoring
from analyzer.cli import main

spent = {"worker_cpu_s": 0.0, "measuring_cpu_s": 0.0}
both, measure_into = scoring.SensorNetworks._both, analysis._measure_into

def timed_both(self, second, mel_db):
    start = time.thread_time()
    try:
        return both(self, second, mel_db)
    finally:
        spent["worker_cpu_s"] += time.thread_time() - start

def timed_measure_into(*args):
    try:
        measure_into(*args)
    finally:
        spent["measuring_cpu_s"] += time.thread_time()  # the thread's whole CPU time

scoring.SensorNetworks._both = timed_both
analysis._measure_into = timed_measure_into
sys.argv = ["barkwatch", *sys.argv[1:]]
status = main()
print(json.dumps(spent), file=sys.stderr)
sys.exit(status)
"""


def hour_scene(minutes: float, seed: int, material: Material) -> Scene:
    """Dog bouts of 0.5-3 min at 1-10 min intervals over the length, confusers between."""
    rng = np.random.default_rng([seed, 3600])
    duration = minutes * 60
    bouts, t = [], 30.0
    while True:
        length = float(rng.uniform(30.0, 180.0))
        if t + length > duration - 30.0:
            break
        bouts.append((t, length))
        t += length + float(rng.uniform(60.0, 600.0))
    return plan_bouts(f"hour-s{seed}", "hour", seed, material, bouts, duration, {})


def soundscape(minutes: float, seed: int, corpora: list[Path]) -> Path:
    material = Material.from_corpora(corpora)
    scene = hour_scene(minutes, seed, material)
    path = CACHE / f"soundscape-{minutes:g}min-s{seed}-{scene_digest(scene)}.flac"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".part.flac")
        render(scene, material, partial)
        partial.rename(path)
    return path


def timed_run(command: list[str], output: Path) -> dict[str, Any]:
    """Run ``command`` with stdout to ``output``: wall time, its CPU time and its stderr."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with output.open("w") as out:
        run = subprocess.run(command, stdout=out, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if run.returncode != 0:
        raise SystemExit(f"bench_analyze: {' '.join(command)} failed: {run.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "stderr": run.stderr}


def _cumulative(stats: pstats.Stats, wanted: tuple[str, str]) -> float:
    total = 0.0
    for (filename, _line, name), row in stats.stats.items():  # type: ignore[attr-defined]
        if name == wanted[1] and filename.endswith(wanted[0]):
            total += row[3]
    return total


def stage_shares(profile: Path) -> dict[str, Any]:
    """Seconds and share of the profiled run's total per stage."""
    stats = pstats.Stats(str(profile))
    total = float(stats.total_tt)  # type: ignore[attr-defined]

    def cum(functions: list[tuple[str, str]]) -> float:
        return sum(_cumulative(stats, f) for f in functions)

    seconds = {name: cum(functions) for name, functions in STAGES}
    # SensorNetworks.process and .flush run the CNN and YAMNet (its resampling included);
    # _measure runs the meter, the mel rows and SensorNetworks.process.
    yamnet = cum(YAMNET)
    seconds["YAMNet (resample + front end + network)"] = yamnet
    seconds["CNN (mel rows + network)"] = cum(NETWORKS) - yamnet + cum([MEL_ROWS])
    seconds["meter (DC, levels, bands, percentiles)"] = cum([MEASURE]) - cum(
        [NETWORKS[0], MEL_ROWS])
    seconds["other (start-up, imports, frame loop, output)"] = total - sum(seconds.values())
    return {name: {"s": round(s, 2), "share": round(s / total, 3)} for name, s in seconds.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Time `barkwatch analyze` on a seeded one-hour 48 kHz soundscape mixed "
        "from the corpus (cached under ~/.cache/barkwatch/bench-analyze); print a JSON "
        "summary: wall and CPU time, real-time factor, and with --profile the share of each "
        "stage.")
    parser.add_argument("--minutes", type=float, default=60.0, help="length (default 60)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--corpus", type=Path, action="append",
                        help="corpus folder (repeatable; default ../shared/corpus/train and "
                        "extra)")  # fmt: skip
    parser.add_argument("--profile", action="store_true",
                        help="also run once under cProfile and report the stages' shares")
    parser.add_argument("--threads", action="store_true",
                        help="also run once counting the networks' worker thread's CPU time")
    parser.add_argument("--output", type=Path, help="keep the analysis document here")
    parser.add_argument("--file", type=Path, help="time this file instead of the soundscape")
    args = parser.parse_args(argv)
    if args.minutes <= 0:
        parser.error("--minutes must be positive")
    try:
        path = args.file or soundscape(args.minutes, args.seed,
                                       args.corpus or list(DEFAULT_CORPORA))  # fmt: skip
    except SceneError as exc:
        parser.error(str(exc))
    import soundfile

    info = soundfile.info(str(path))
    audio_s = info.frames / info.samplerate
    command = [str(BARKWATCH), "analyze", "--quiet", str(path)]
    with tempfile.TemporaryDirectory(prefix="bench-analyze-") as tmp:
        output = args.output or Path(tmp) / "analysis.json"
        load_before = os.getloadavg()
        times = timed_run(command, output)
        load_after = os.getloadavg()
        document = json.loads(output.read_text())
        result: dict[str, Any] = {
            "file": str(path), "audio_s": round(audio_s, 1), "sample_rate": info.samplerate,
            "wall_s": round(times["wall_s"], 2), "cpu_s": round(times["cpu_s"], 2),
            "rtf_wall": round(times["wall_s"] / audio_s, 5),
            "rtf_cpu": round(times["cpu_s"] / audio_s, 5),
            "goal_s": 30.0 * audio_s / 3600, "met": times["wall_s"] < 30.0 * audio_s / 3600,
            "load_before": [round(v, 2) for v in load_before],
            "load_after": [round(v, 2) for v in load_after],
            "events": len(document["events"]), "findings": len(document["findings"]),
            "frames_measured": document["frames_measured"],
        }  # fmt: skip
        if args.threads:
            split = timed_run([sys.executable, "-c", THREAD_SPLIT, *command[1:]],
                              Path(tmp) / "split.json")  # fmt: skip
            spent = json.loads(split["stderr"].strip().splitlines()[-1])
            result["threads"] = {
                "wall_s": round(split["wall_s"], 2), "cpu_s": round(split["cpu_s"], 2),
                "networks_thread_cpu_s": round(spent["worker_cpu_s"], 2),
                "measuring_thread_cpu_s": round(spent["measuring_cpu_s"], 2),
                "caller_and_start_up_cpu_s": round(
                    split["cpu_s"] - spent["worker_cpu_s"] - spent["measuring_cpu_s"], 2)}
        if args.profile:
            profile = Path(tmp) / "analyze.prof"
            profiled = timed_run([sys.executable, "-c", PROFILED_ANALYZE, str(profile),
                                  *command[1:]], Path(tmp) / "profiled.json")  # fmt: skip
            result["profiled_wall_s"] = round(profiled["wall_s"], 2)
            result["stages"] = stage_shares(profile)
    sys.stdout.write(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

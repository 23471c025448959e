"""What the speech gate (issue 34, wire v4) costs the evidence: the same recordings analysed
from gated frames and from frames that carry everything, through the sensor's own code, the
wire and the analyzer's pipeline (bundled detector unless --head).

1. Where no one speaks: the demo recording (``demo/example.flac``) and bark-only scenes (bark
   clips of the corpus's ``dogs/``, 20-60 m away, in its street ambience at 0-15 dB SNR) —
   events (onset, offset, label) must be identical; the gate's share of seconds and the
   wire's bytes per second are reported. The 100 ft estimate of each event: from the gated
   frames (band background from the sensor's per-minute L90s) against the frames that carry
   everything with a background from every second's spectrum (as v2 and v3 sent it).
2. Barks under speech: each bark clip with a spoken digit of ``words/`` (FSDD, CC BY-SA 4.0,
   privacy testing only) over it, the bark's RMS 0, 5 and 10 dB over the voice's, both in the
   street: hit rate (an event overlaps the bark) gated and ungated.

    .venv/bin/python benchmarks/gate_cost.py --out docs/experiments/gate_cost.json

Deterministic for a seed; a benchmark, not a test (minutes on one core).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analyzer.acoustics.audibility import (  # noqa: E402
    AudibilityAssessor,
    AudibilitySettings,
    frame_band_levels,
)
from analyzer.acoustics.site import InstallationRecord  # noqa: E402
from analyzer.config import DetectorSettings  # noqa: E402
from analyzer.detect import DevicePipeline, DogEvent  # noqa: E402
from analyzer.detect.verifier import VerifierModel  # noqa: E402
from sensor.frames import FrameBuilder  # noqa: E402
from sensor.wire import (  # noqa: E402
    GATE_DOG,
    GATE_QUIET,
    GATE_SCORES,
    GATE_SPEECH,
    Frame,
    decode_frame,
    encode_frame,
)
from training.finetune import at_distance  # noqa: E402
from training.head_data import held_out_sources  # noqa: E402

RATE = 16_000
FULL_SCALE_DB = 110.0
CORPUS = ROOT.parent / "shared" / "corpus"


def read(path: Path) -> np.ndarray:
    samples, rate = sf.read(path, dtype="float64", always_2d=True)
    mono = samples.mean(axis=1)
    return mono if rate == RATE else soxr.resample(mono, rate, RATE, quality="VHQ")


def frames_of(samples: np.ndarray) -> list[Frame]:
    builder = FrameBuilder("gate-cost", RATE, FULL_SCALE_DB, 0)
    frames = [f for start in range(0, samples.size, RATE)
              for f in builder.push(samples[start:start + RATE])]
    return frames + builder.finish()


SITE = InstallationRecord(device_id="gate-cost", source_to_sensor_m=8.0,
                          source_to_boundary_m=12.0)


def events(frames: list[Frame], settings: DetectorSettings, whole: bool,
           truth: np.ndarray | None = None, verifier: VerifierModel | None = None,
           ) -> tuple[list[tuple[int, int, str]], int, list[tuple[float, float, bool, float]]]:
    """Events from the frames as the analyzer receives them, the bytes sent, and each event's
    audibility as the live analyzer judges it when the event ends (level 100 ft away,
    audibility margin, plainly audible; NaN where there is none); ``whole``: every frame
    carries everything and the background comes from every second's spectrum, as v2 and v3
    sent it. ``truth``: the background scene's own 1 s band levels (seconds x bands), to which
    each event's band background is compared (mean absolute error over the vocal bands, dB,
    against their L90 over the same window). ``verifier``: this one instead of the
    configured one."""
    pipeline = DevicePipeline("gate-cost", settings, verifier=verifier)
    assessor = AudibilityAssessor(SITE, AudibilitySettings())
    found, sent, judged = [], 0, []

    def judge(ended: list[DogEvent]) -> None:
        for event in ended:
            verdict = assessor.assess(event)
            error = math.nan
            background = assessor.background.estimate()
            if truth is not None and background is not None:
                end_s = event.onset_ns / 1e9
                window = truth[max(0, int(end_s - AudibilitySettings().background_window_s)):
                               int(end_s) + 1]
                expected = np.percentile(window, 10.0, axis=0)
                vocal = assessor.vocal & (expected > -200.0)
                error = float(np.mean(np.abs(background.bands_db[vocal] - expected[vocal])))
            judged.append((math.nan, math.nan, False, error) if verdict is None else (
                verdict.level_at_100ft_db, verdict.audibility_margin_db,
                verdict.plainly_audible, error))

    for frame in frames:
        payload = encode_frame(dataclasses.replace(frame, gate=GATE_DOG, background=None)
                               if whole else frame)
        sent += len(payload)
        decoded = decode_frame(payload)
        result = pipeline.feed(decoded)
        assessor.observe(decoded, result.max_dog_score)
        judge(result.events)
        found += result.events
    last = pipeline.finish().events
    judge(last)
    found += last
    return [(e.onset_ns, e.offset_ns, e.label) for e in found], sent, judged


def audibility_change(gated: list[tuple[float, float, bool, float]],
                      whole: list[tuple[float, float, bool, float]]) -> dict[str, float]:
    """How the same events' 100 ft levels and audibility margins differ, gated minus whole
    (dB), in how many the plainly-audible verdict differs, and how many have an audibility
    whole but none gated (their seconds all left as "scores" frames: no spectrum)."""
    a, b = np.array([g[:2] for g in gated]), np.array([w[:2] for w in whole])
    both = np.all(np.isfinite(a) & np.isfinite(b), axis=1)
    lost = int(np.sum(~np.isfinite(a[:, 0]) & np.isfinite(b[:, 0]))) if len(a) else 0
    if not both.any():
        return {"events_compared": 0, "audibility_lost": lost}
    level, margin = (a - b)[both, 0], (a - b)[both, 1]
    return {"events_compared": int(both.sum()), "audibility_lost": lost,
            "level_median_db": round(float(np.median(level)), 2),
            "level_max_abs_db": round(float(np.max(np.abs(level))), 2),
            "margin_median_db": round(float(np.median(margin)), 2),
            "margin_max_abs_db": round(float(np.max(np.abs(margin))), 2),
            "verdicts_differ": int(sum(g[2] != w[2] for g, w, k in zip(gated, whole, both,
                                                                      strict=True) if k)),
            **({"background_error_db_gated": round(float(np.nanmean([g[3] for g in gated])), 2),
                "background_error_db_whole": round(float(np.nanmean([w[3] for w in whole])), 2)}
               if np.isfinite([g[3] for g in gated]).any() else {})}


def bark_clips(limit: int, rng: np.random.Generator,
               sources: frozenset[str] | None = None) -> list[np.ndarray]:
    """Up to ``limit`` bark clips of ``dogs/``, one per source; with ``sources`` (``dogs/NAME``
    as a fine-tuning report's ``held_out_sources`` names them), only those sources'."""
    with open(CORPUS / "dogs" / "manifest.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["label"] == "dog_bark"
                and (sources is None or f"dogs/{r['source']}" in sources)]
    # one clip per source (the large segmented source counts once), 0.3-4 s long
    by_source: dict[str, dict[str, str]] = {}
    for row in rows:
        if 0.3 <= float(row["duration_s"]) <= 4.0:
            by_source.setdefault(row["source"], row)
    chosen = sorted(by_source.values(), key=lambda r: r["clip_id"])
    rng.shuffle(chosen)  # type: ignore[arg-type]
    return [read(CORPUS / "dogs" / r["file"]) for r in chosen[:limit]]


def street() -> np.ndarray:
    with open(CORPUS / "dogs" / "manifest.csv", newline="") as f:
        files = sorted(r["file"] for r in csv.DictReader(f)
                       if r["label"].startswith("street") or "ambience" in r["clip_id"])
    return np.concatenate([read(CORPUS / "dogs" / name) for name in files[:12]])


def digits(limit: int, rng: np.random.Generator) -> list[np.ndarray]:
    with open(CORPUS / "words" / "manifest.csv", newline="") as f:
        rows = sorted(csv.DictReader(f), key=lambda r: r["clip_id"])
    picked = rng.choice(len(rows), size=limit, replace=False)
    return [read(CORPUS / "words" / rows[int(i)]["file"]) for i in picked]


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x)) + 1e-30))


def bark_scene(barks: list[np.ndarray], bed: np.ndarray, rng: np.random.Generator,
               voices: list[np.ndarray] | None = None, over_voice_db: float = 0.0
               ) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """Barks 8 s apart, each 20-60 m away at 0-15 dB over the bed (or, with ``voices``, a
    digit over each bark, the bark ``over_voice_db`` over the voice); and the bark spans."""
    spacing = 8 * RATE
    total = (len(barks) + 1) * spacing
    bed = np.resize(bed, total) * 1.0
    out = bed.copy()
    spans = []
    for k, bark in enumerate(barks):
        at = (k + 1) * spacing - bark.size // 2
        far = at_distance(bark, float(rng.uniform(20.0, 60.0)), 0.75)
        snr = float(rng.uniform(0.0, 15.0))
        gain = rms(bed[at:at + far.size]) / rms(far) * 10 ** (snr / 20)
        out[at:at + far.size] += gain * far
        spans.append((at / RATE, (at + bark.size) / RATE))
        if voices is not None:
            voice = voices[k % len(voices)]
            start = at + max(0, (bark.size - voice.size) // 2)
            level = rms(gain * far) / rms(voice) * 10 ** (-over_voice_db / 20)
            out[start:start + voice.size] += level * voice[: out.size - start]
    return out, spans


def hit_rate(found: list[tuple[int, int, str]], spans: list[tuple[float, float]]) -> float:
    hits = sum(any(on / 1e9 < end and off / 1e9 > start for on, off, _ in found)
               for start, end in spans)
    return hits / max(1, len(spans))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--barks", type=int, default=40, help="bark clips (default 40)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--head", default="", help="detector head (default: bundled)")
    parser.add_argument("--held-out", type=Path, metavar="JSON",
                        help="barks only from the held_out_sources of this report of "
                        "barkwatch-train finetune --export (sources the sensor's fine-tuned "
                        "network never saw); default: every source of dogs/")
    parser.add_argument("--candidates", action="store_true",
                        help="every candidate of the configured event verifier kept (what the "
                        "verifier is given to judge), instead of the events it keeps")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    settings = DetectorSettings(head_path=args.head)
    verifier = None
    if args.candidates:
        configured = DevicePipeline("gate-cost", settings).verifier
        if configured is None:
            parser.error("--candidates: the detector runs without an event verifier")
        verifier = VerifierModel.keeping_all(configured.on_threshold, configured.off_threshold)
    started = time.monotonic()
    results: dict[str, object] = {"load_average": os.getloadavg(), "seed": args.seed,
                                  "head": args.head or "bundled",
                                  "candidates": args.candidates}
    sources = None
    if args.held_out:
        try:
            sources = held_out_sources(args.held_out)
        except ValueError as error:
            parser.error(f"--held-out {error}")
        results["held_out"] = str(args.held_out)
    barks, bed = bark_clips(args.barks, rng, sources), street()
    results["bark_clips"] = len(barks)
    scenes = {"demo": (read(ROOT / "demo" / "example.flac"), []),
              "barks in the street": bark_scene(barks, bed, rng)}
    for name, (samples, spans) in scenes.items():
        frames = frames_of(samples)
        truth = None
        if spans:  # the street alone: the background each event's estimate should find
            truth = np.stack([frame_band_levels(f) for f in frames_of(np.resize(bed,
                                                                                samples.size))])
        gated, sent, at_100ft = events(frames, settings, whole=False, truth=truth,
                                       verifier=verifier)
        whole, sent_whole, at_100ft_whole = events(frames, settings, whole=True, truth=truth,
                                                    verifier=verifier)
        share = {g: sum(f.gate == g for f in frames) / len(frames)
                 for g in (GATE_DOG, GATE_SCORES, GATE_QUIET, GATE_SPEECH)}
        results[name] = {
            "seconds": len(frames), "gate_share": share,
            "events_gated": len(gated), "events_whole": len(whole),
            "identical": gated == whole,
            "audibility_gated_minus_whole": audibility_change(at_100ft, at_100ft_whole)
            if gated == whole else "events differ",
            "bytes_per_s_gated": sent / len(frames), "bytes_per_s_whole": sent_whole / len(frames),
            **({"hit_rate_gated": hit_rate(gated, spans),
                "hit_rate_whole": hit_rate(whole, spans)} if spans else {})}
        print(name, json.dumps(results[name]), flush=True)
    voices = digits(args.barks, rng)
    under: dict[str, object] = {}
    for over in (0.0, 5.0, 10.0):
        samples, spans = bark_scene(barks, bed, np.random.default_rng(args.seed), voices, over)
        frames = frames_of(samples)
        gated = events(frames, settings, whole=False, verifier=verifier)[0]
        whole = events(frames, settings, whole=True, verifier=verifier)[0]
        under[f"bark {over:g} dB over the voice"] = {
            "hit_rate_gated": hit_rate(gated, spans), "hit_rate_whole": hit_rate(whole, spans),
            "speech_seconds": sum(f.gate == GATE_SPEECH for f in frames)}
        print(over, json.dumps(under[f"bark {over:g} dB over the voice"]), flush=True)
    results["barks under speech"] = under
    results["seconds_taken"] = round(time.monotonic() - started, 1)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

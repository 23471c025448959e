"""What the speech gate (issue 34, wire v3) costs the evidence: the same recordings analysed
from gated frames and from frames that carry everything, through the sensor's own code, the
wire and the analyzer's pipeline (bundled detector unless --head).

1. Where no one speaks: the demo recording (``demo/example.flac``) and bark-only scenes (bark
   clips of the corpus's ``dogs/``, 20-60 m away, in its street ambience at 0-15 dB SNR) —
   events (onset, offset, label) must be identical; the gate's share of seconds and the
   wire's bytes per second are reported.
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
import os
import sys
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analyzer.config import DetectorSettings  # noqa: E402
from analyzer.detect import DevicePipeline  # noqa: E402
from sensor.frames import FrameBuilder  # noqa: E402
from sensor.wire import GATE_DOG, GATES, Frame, decode_frame, encode_frame  # noqa: E402
from training.finetune import at_distance  # noqa: E402

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


def events(frames: list[Frame], settings: DetectorSettings, whole: bool
           ) -> tuple[list[tuple[int, int, str]], int]:
    """Events from the frames as the analyzer receives them, and the bytes sent."""
    pipeline = DevicePipeline("gate-cost", settings)
    found, sent = [], 0
    for frame in frames:
        payload = encode_frame(dataclasses.replace(frame, gate=GATE_DOG) if whole else frame)
        sent += len(payload)
        found += pipeline.feed(decode_frame(payload)).events
    found += pipeline.finish().events
    return [(e.onset_ns, e.offset_ns, e.label) for e in found], sent


def bark_clips(limit: int, rng: np.random.Generator) -> list[np.ndarray]:
    with open(CORPUS / "dogs" / "manifest.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["label"] == "dog_bark"]
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
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    settings = DetectorSettings(head_path=args.head)
    started = time.monotonic()
    results: dict[str, object] = {"load_average": os.getloadavg(), "seed": args.seed,
                                  "head": args.head or "bundled"}
    barks, bed = bark_clips(args.barks, rng), street()
    scenes = {"demo": (read(ROOT / "demo" / "example.flac"), []),
              "barks in the street": bark_scene(barks, bed, rng)}
    for name, (samples, spans) in scenes.items():
        frames = frames_of(samples)
        gated, sent = events(frames, settings, whole=False)
        whole, sent_whole = events(frames, settings, whole=True)
        share = {g: sum(f.gate == g for f in frames) / len(frames) for g in GATES}
        results[name] = {
            "seconds": len(frames), "gate_share": share,
            "events_gated": len(gated), "events_whole": len(whole),
            "identical": gated == whole,
            "bytes_per_s_gated": sent / len(frames), "bytes_per_s_whole": sent_whole / len(frames),
            **({"hit_rate_gated": hit_rate(gated, spans),
                "hit_rate_whole": hit_rate(whole, spans)} if spans else {})}
        print(name, json.dumps(results[name]), flush=True)
    voices = digits(args.barks, rng)
    under: dict[str, object] = {}
    for over in (0.0, 5.0, 10.0):
        samples, spans = bark_scene(barks, bed, np.random.default_rng(args.seed), voices, over)
        frames = frames_of(samples)
        gated, _ = events(frames, settings, whole=False)
        whole, _ = events(frames, settings, whole=True)
        under[f"bark {over:g} dB over the voice"] = {
            "hit_rate_gated": hit_rate(gated, spans), "hit_rate_whole": hit_rate(whole, spans),
            "speech_seconds": sum(f.gate == "speech" for f in frames)}
        print(over, json.dumps(under[f"bark {over:g} dB over the voice"]), flush=True)
    results["barks under speech"] = under
    results["seconds_taken"] = round(time.monotonic() - started, 1)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

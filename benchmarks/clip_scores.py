"""Clip-level figures of the analyzer's detectors on sources the sensor's network never saw.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/clip_scores.py \
        --held-out docs/experiments/finetune_sensor_fold0.json [--out FILE]

Issue 39's first goal is a clip AUPRC (and recall at 1 / 2 / 5 % false alarms) on left-out
sources. ``barkwatch-train finetune`` reports it for the fine-tuned score alone and for
untouched YAMNet; this gives it for the detectors the analyzer runs, through the sensor's own
code: every clip of the held-out sources (``held_out_sources`` of the fine-tuning report; the
corpora's steady backgrounds left out, as ``judge_soundscapes.py`` does), as recorded, with 1 s
of -60 dBFS white noise before and after (YAMNet needs a patch's 0.96 s, and digital silence
throws it: models/MODEL_CARD.md), measured at 16 kHz by ``sensor.frames.frames_from_samples``,
each frame through the wire (encode, decode) into the analyzer's :class:`DevicePipeline`. A
clip's score is the highest fused step score over it; it is "found" when an event overlaps
the clip's own span. Detectors: ``shipped`` (the bundled head, events cut to the CNN's onsets)
and ``v4`` (the sensor's head, the analyzer's before issue 39).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from analyzer.detect import DevicePipeline  # noqa: E402
from analyzer.detect.head import ANALYZER_HEAD_PATH, DEFAULT_HEAD_PATH  # noqa: E402
from analyzer.detect.settings import DetectorSettings  # noqa: E402
from sensor.frames import frames_from_samples  # noqa: E402
from sensor.wire import decode_frame, encode_frame  # noqa: E402
from training.corpus import RATE, load_audio  # noqa: E402
from training.head_data import (  # noqa: E402
    CorpusClip,
    held_out_sources,
    is_background,
    read_corpora,
)
from training.head_eval import clip_figures  # noqa: E402

log = logging.getLogger("clip_scores")
CORPORA = [ROOT.parent / "shared" / "corpus" / name for name in ("train", "extra", "dogs")]
PAD_S = 1.0
PAD_DBFS = -60.0
FULL_SCALE_DB = 100.0
DETECTORS = {"shipped": str(ANALYZER_HEAD_PATH), "v4": str(DEFAULT_HEAD_PATH)}


def padded(samples: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``samples`` with ``PAD_S`` of white noise at ``PAD_DBFS`` RMS before and after."""
    pad = rng.standard_normal(round(PAD_S * RATE)) * 10 ** (PAD_DBFS / 20)
    return np.concatenate([pad, samples, pad[::-1]])


def clip_result(samples: np.ndarray, pipelines: dict[str, DevicePipeline]
                ) -> dict[str, tuple[float, bool]]:
    """Per detector: the highest fused score and whether an event overlaps the clip."""
    span = (round(PAD_S * 1e9), round((PAD_S + samples.size / RATE - 2 * PAD_S) * 1e9))
    best = dict.fromkeys(pipelines, 0.0)
    found = dict.fromkeys(pipelines, False)
    for frame in frames_from_samples(samples, RATE, FULL_SCALE_DB, device_id="clip"):
        wired = decode_frame(encode_frame(frame))
        for name, pipeline in pipelines.items():
            result = pipeline.feed(wired)
            best[name] = max(best[name], result.max_dog_score)
            found[name] |= any(e.onset_ns < span[1] and e.offset_ns > span[0]
                               for e in result.events)
    for name, pipeline in pipelines.items():
        result = pipeline.finish()
        best[name] = max(best[name], result.max_dog_score)
        found[name] |= any(e.onset_ns < span[1] and e.offset_ns > span[0] for e in result.events)
    return {name: (best[name], found[name]) for name in pipelines}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--held-out", type=Path, required=True, metavar="JSON",
                        help="report of barkwatch-train finetune --export (held_out_sources)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here too")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    try:
        held = held_out_sources(args.held_out)
    except ValueError as error:
        parser.error(f"--held-out {error}")
    clips: list[CorpusClip] = [c for c in read_corpora(CORPORA)
                               if c.source_key in held and not is_background(c)]
    log.info("%d clips of %d held-out sources (%d dog)", len(clips), len(held),
             sum(c.clip.is_dog for c in clips))
    started, load_before = time.monotonic(), os.getloadavg()
    rng = np.random.default_rng(1)
    scores: dict[str, list[float]] = {name: [] for name in DETECTORS}
    found: dict[str, list[bool]] = {name: [] for name in DETECTORS}
    for k, item in enumerate(clips, 1):
        pipelines = {name: DevicePipeline("clip", DetectorSettings(head_path=path))
                     for name, path in DETECTORS.items()}
        for name, (score, hit) in clip_result(padded(load_audio(item.clip.path), rng),
                                              pipelines).items():
            scores[name].append(score)
            found[name].append(hit)
        if k % 100 == 0 or k == len(clips):
            log.info("%d/%d clips (%.0f s)", k, len(clips), time.monotonic() - started)
    labels = np.array([c.clip.is_dog for c in clips])
    report: dict[str, Any] = {
        "command": "benchmarks/clip_scores.py " + " ".join(sys.argv[1:] if argv is None
                                                            else argv),
        "held_out_sources": len(held), "clips": len(clips), "pad_s": PAD_S,
        "pad_dbfs": PAD_DBFS, "seconds": round(time.monotonic() - started),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()], "detectors": {}}
    for name in DETECTORS:
        hits = np.array(found[name])
        report["detectors"][name] = clip_figures(labels, np.array(scores[name])) | {
            "dog_clips_with_an_event": int(hits[labels].sum()),
            "other_clips_with_an_event": int(hits[~labels].sum())}
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

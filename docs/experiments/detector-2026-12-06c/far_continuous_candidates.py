"""The bundled verifier's candidates in one ordinance scene (issue 39, eleventh step): each
candidate's onset, probability and features, and the median features of the kept and the
dropped ones; the shipped detector's event count beside.

    .venv/bin/python docs/experiments/detector-2026-12-06c/far_continuous_candidates.py \\
        /tmp/det/scenes/continuous_far-s5-*.flac
"""

import glob
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from analyzer.detect import DetectorSettings, DevicePipeline  # noqa: E402
from analyzer.detect.verifier import (  # noqa: E402
    BUNDLED_VERIFIER_PATH,
    FEATURES,
    VerifierModel,
)
from analyzer.offline.analysis import frames_of_file  # noqa: E402

path = sorted(glob.glob(sys.argv[1]))[0]
frames = frames_of_file(Path(path), 100.0)[1]
verifier = VerifierModel.load(BUNDLED_VERIFIER_PATH)
judged = DevicePipeline("d", DetectorSettings(), verifier=verifier)
judged.candidates = []
events = [e for f in frames for e in judged.feed(f).events] + judged.flush()
shipped = DevicePipeline("d", DetectorSettings(verifier_path="none"))  # the fusion alone
shipped_events = [e for f in frames for e in shipped.feed(f).events] + shipped.flush()
print(path, "frames", len(frames), "verifier events", len(events), "shipped events",
      len(shipped_events), "candidates", len(judged.candidates))
x = np.array([f for _, f, _ in judged.candidates])
probability = np.array([q for _, _, q in judged.candidates])
kept = probability >= verifier.keep_at
np.set_printoptions(precision=2, suppress=True, linewidth=200)
print("feature", FEATURES)
print("kept median   ", np.median(x[kept], axis=0))
print("dropped median", np.median(x[~kept], axis=0))
onsets = [e.onset_ns / 1e9 for e, _, _ in judged.candidates]
for t, q, f in list(zip(onsets, probability, x, strict=True))[:60]:
    print(f"{t:7.1f} p={q:.2f}", f)

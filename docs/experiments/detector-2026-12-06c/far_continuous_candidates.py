"""The bundled verifier's candidates in one ordinance scene (issue 39, eleventh step): each
candidate's onset, probability and features, and the median features of the kept and the
dropped ones; the shipped detector's event count beside.

    .venv/bin/python docs/experiments/detector-2026-12-06c/far_continuous_candidates.py \\
        /tmp/det/scenes/continuous_far-s5-*.flac
"""
import sys, glob
sys.path.insert(0, ".")
from pathlib import Path
import numpy as np
from analyzer.detect import DetectorSettings, DevicePipeline
from analyzer.detect.verifier import VerifierModel, FEATURES, BUNDLED_VERIFIER_PATH
from analyzer.offline.analysis import frames_of_file
path = sorted(glob.glob(sys.argv[1] if len(sys.argv) > 1 else "/tmp/det/scenes/continuous_far-s5*.flac"))[0]
frames = frames_of_file(Path(path), 100.0)[1]
v = VerifierModel.load(BUNDLED_VERIFIER_PATH)
p = DevicePipeline("d", DetectorSettings(), verifier=v); p.candidates = []
ev = [e for f in frames for e in p.feed(f).events] + p.flush()
s = DevicePipeline("d", DetectorSettings())
sev = [e for f in frames for e in s.feed(f).events] + s.flush()
print(path, "frames", len(frames), "verifier events", len(ev), "shipped events", len(sev), "candidates", len(p.candidates))
x = np.array([f for _, f, _ in p.candidates]); pr = np.array([q for _, _, q in p.candidates])
kept = pr >= 0.8
np.set_printoptions(precision=2, suppress=True, linewidth=200)
print("feature", FEATURES)
print("kept median   ", np.median(x[kept], axis=0))
print("dropped median", np.median(x[~kept], axis=0))
on = np.array([e.onset_ns / 1e9 for e, _, _ in p.candidates])
for t, q, f in list(zip(on, pr, x))[:60]:
    print(f"{t:7.1f} p={q:.2f}", f)

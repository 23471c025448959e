"""Detector families compared at equal false alarms (issue 39, tenth step).

For each judged soundscape file and each family of thresholds (the fine-tuned score alone,
``tuned@ON/OFF``; fused with the CNN, ``fused 0.5/0.5@ON/OFF``), the segment F1, the hit rate at
5 dB and over and the bouts of 5+ missed, interpolated linearly between the family's thresholds
at a given false-alarm rate on the confuser scene (blank where the family does not span it).

    python3 docs/experiments/detector-2026-12-06b/equal_false_alarms.py FA_PER_HOUR FILE...
"""

import json
import sys

import numpy as np

target = float(sys.argv[1])
print(f"at {target:g} false alarms an hour on the confuser scene: F1 / hit rate 5+ dB / "
      "bouts of 5+ missed")
for path in sys.argv[2:]:
    detectors = json.load(open(path))["detectors"]
    cells = []
    for family in ("tuned@", "fused 0.5/0.5@"):
        rows = [(r["confuser scene"]["false alarms per hour"],
                 r["dog scenes"]["segment precision/recall/F1"][2],
                 r["dog scenes"]["hit rate 5..inf dB"],
                 r["dog scenes"]["bouts of 5+ missed"][0])
                for name, r in detectors.items() if name.startswith(family) and "+" not in name]
        rows.sort()
        fa = np.array([r[0] for r in rows])
        if not rows or not fa[0] <= target <= fa[-1]:
            cells.append(f"{family:15s} -")
            continue
        values = [float(np.interp(target, fa, [r[k] for r in rows])) for k in (1, 2, 3)]
        cells.append(f"{family:15s} {values[0]:.3f} / {values[1]:.2f} / {values[2]:.0f}")
    print(f"{path.rsplit('/', 1)[-1]}: " + "; ".join(cells))

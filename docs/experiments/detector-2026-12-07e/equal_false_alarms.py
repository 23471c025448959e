"""The bundled CNN and a CNN held out of fold 0, compared at equal false alarms (issue 39,
sixteenth step).

For each judged soundscape file, two families of thresholds: the shipped head (the log-odds
fusion 0.5 / 0.5, events cut where the CNN reaches 0.2) at 0.5 / 0.3, 0.7 / 0.5, 0.8 / 0.6,
0.9 / 0.7 (as shipped), 0.98 / 0.75 and 0.99 / 0.75; and the CNN alone (one threshold pair,
the detector's default). Per family, the segment F1, the hit rate at 5 dB and over and the
bouts of 5+ missed, interpolated linearly between the family's thresholds at a given rate of
false alarms an hour over the two confuser scenes together (the confuser scene and the
confuser bouts scene; blank where the family does not span it, with the span it has).

    python3 docs/experiments/detector-2026-12-07e/equal_false_alarms.py FA_PER_HOUR FILE...
"""

import json
import sys

import numpy as np

FAMILIES = {"shipped head": ("fused 0.5/0.5@0.5/0.3", "fused 0.5/0.5@0.7/0.5",
                             "fused 0.5/0.5@0.8/0.6", "shipped", "shipped@0.98/0.75",
                             "shipped@0.99/0.75"),
            "CNN alone": ("cnn",)}


def confuser_rate(row: dict) -> float:
    scenes = [row[k] for k in ("confuser scene", "confuser bouts scene") if k in row]
    return sum(s["false alarms"] for s in scenes) / sum(s["hours"] for s in scenes)


target = float(sys.argv[1])
print(f"at {target:g} false alarms an hour on the confuser scenes: F1 / hit rate 5+ dB / "
      "bouts of 5+ missed")
for path in sys.argv[2:]:
    with open(path) as file:
        detectors = json.load(file)["detectors"]
    cells = []
    for family, names in FAMILIES.items():
        rows = sorted((confuser_rate(detectors[n]),
                       detectors[n]["dog scenes"]["segment precision/recall/F1"][2],
                       detectors[n]["dog scenes"]["hit rate 5..inf dB"],
                       detectors[n]["dog scenes"]["bouts of 5+ missed"][0])
                      for n in names if n in detectors)
        fa = np.array([r[0] for r in rows])
        if not rows or not fa[0] <= target <= fa[-1]:
            span = f" (spans {fa[0]:.1f}-{fa[-1]:.1f})" if rows else ""
            cells.append(f"{family} -{span}")
            continue
        values = [float(np.interp(target, fa, [r[k] for r in rows])) for k in (1, 2, 3)]
        cells.append(f"{family} {values[0]:.3f} / {values[1]:.2f} / {values[2]:.0f}")
    print(f"{path.rsplit('/', 1)[-1]}: " + "; ".join(cells))

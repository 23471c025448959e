"""How the dog clips' barks stand in their own clips (issue 39, tenth step).

Per dog clip of train/, extra/ and dogs/ (first 10 s, as fine-tuning cuts them): the number
of prominent 20 ms steps (training.head_data.prominent_steps, on the high-passed power, as the
soundscapes' labels use), and how far the prominent steps' mean power stands over the clip's
mean power (the offset between a copy placed by the clip's RMS and one placed by its barks).

    .venv/bin/python docs/experiments/detector-2026-12-06b/bark_prominence.py
"""

import collections
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from training.corpus import RATE, load_audio  # noqa: E402
from training.finetune import MAX_CLIP_S  # noqa: E402
from training.head_data import _highpass, _power_db, prominent_steps, read_corpora  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus"
clips = read_corpora([CORPUS / "train", CORPUS / "extra", CORPUS / "dogs"])
offsets: dict[str, list[float]] = collections.defaultdict(list)
few: dict[str, int] = collections.Counter()
for c in clips:
    if not c.clip.is_dog:
        continue
    key = "UrbanSound8K" if c.source_key == "train/us8k" else "other sources"
    x = _highpass(load_audio(c.clip.path)[: int(MAX_CLIP_S * RATE)])
    db = _power_db(x)
    active = prominent_steps(db, np.ones(db.size, bool))
    few[key] += int(active.sum() < 5)
    if active.any():
        prominent = 10 * np.log10(np.mean(10 ** (db[active] / 10)))
        offsets[key].append(prominent - 10 * np.log10(np.mean(x**2) + 1e-20))
for key, values in offsets.items():
    v = np.array(values)
    p10, p90 = np.percentile(v, [10, 90])
    print(f"{key}: {len(v)} clips; fewer than 5 prominent steps: {few[key]}; prominent steps "
          f"over the clip's RMS: median {np.median(v):.1f} dB (10 % {p10:.1f}, 90 % {p90:.1f})")

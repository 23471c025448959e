"""Which labelled barks does no detector find? (issue 39, tenth step)

Rebuilds `benchmarks/judge_soundscapes.py`'s dog scenes for a held-out fold and seed, reads
their measured frames from the judge's `--frames-cache`, and for every labelled bark (a run of
dog steps merged across 0.1 s) records whether each of a broad set of detectors found it, its
length, its own SNR, and whether any bark of the same placed clip was found. Prints hit rates
by the bark's own SNR for each detector and for their union, by length, and per clip.

    .venv/bin/python docs/experiments/detector-2026-12-06b/bark_ceiling.py \\
        REPORT.json NETWORK.onnx CACHE_DIR SEED [bout|scene]

The last argument is the judge's ``--beds-per`` (default bout). Outputs as run (fold 3, the
``--snr-of bark`` network, seed 1): ``bark_ceiling_fold3_scene.txt`` (one bed per scene, as the
judge was until 2026-12-06) and ``bark_ceiling_fold3_bouts.txt``.
"""

import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import judge_soundscapes as J  # noqa: E402

from training.validate import runs  # noqa: E402

report, network, cache, seed = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), int(
    sys.argv[4])
beds_per = sys.argv[5] if len(sys.argv) > 5 else "bout"
NAMES = ("shipped", "tuned@0.5/0.3", "fused 0.5/0.5@0.5/0.3", "cnn")
held = J.held_out_sources(report)
clips = J.read_corpora(list(J.DEFAULT_CORPORA))
beds = [J.load_audio(c.clip.path) for c in clips if J.is_held_out_background(c)]
dogs = J.drawn_clips(clips, held, seed)[0]
audio = [J.load_audio(c.clip.path)[: 10 * J.RATE] for c in dogs]
every = J.detectors()
chosen = {n: every[n] for n in NAMES}
rows = []  # (snr, length s, clip key, found per detector...)
placed_at: list[tuple[float, float, int]] = []
original = J._place


def recording(rng, scene, bed, clip_audio, at, *args, **kwargs):  # type: ignore[no-untyped-def]
    index = next(i for i, a in enumerate(audio) if a is clip_audio)
    placed_at.append((at / J.RATE, (at + clip_audio.size) / J.RATE, index))
    return original(rng, scene, bed, clip_audio, at, *args, **kwargs)


J._place = recording
kept = []  # (band, scene, frames, placed clips)
with tempfile.TemporaryDirectory() as workdir:
    for band in J.BANDS_DB:
        placed_at.clear()
        scene = J.dog_scene(band, audio, beds, seed, beds_per)
        frames = J.measured(scene, Path(workdir), cache, network)
        kept.append((band, scene, frames, list(placed_at)))
        found = {n: J._hits(runs(scene.labels == 1, 0.1), J.events_of(frames, *d))
                 for n, d in chosen.items()}
        for k, (a, b) in enumerate(runs(scene.labels == 1, 0.1)):
            lo, hi = round(a / J.STEP_S), max(round(b / J.STEP_S), round(a / J.STEP_S) + 1)
            snr = float(np.nanmedian(scene.own_snr[lo:hi]))
            clip = next((f"{band[0]}:{i}:{s:.0f}" for s, e, i in placed_at if s <= a < e), "?")
            rows.append((snr, b - a, clip, *(bool(found[n][k]) for n in NAMES)))
snr = np.array([r[0] for r in rows])
length = np.array([r[1] for r in rows])
hits = np.array([r[3:] for r in rows])
union = hits.any(axis=1)
print(f"{len(rows)} barks; detectors: {', '.join(NAMES)}; union = found by any")
for lo, hi in J.OWN_SNR_BANDS:
    sel = (snr >= lo) & (snr < hi)
    per = " / ".join(f"{hits[sel, j].mean():.2f}" for j in range(len(NAMES)))
    print(f"own SNR {lo}..{hi} dB: {sel.sum()} barks; hit rate {per}; union {union[sel].mean():.2f}")
loud = snr >= 5
for lo, hi in ((0, 0.06), (0.06, 0.1), (0.1, 0.2), (0.2, 0.5), (0.5, 99)):
    sel = loud & (length >= lo) & (length < hi)
    if sel.any():
        print(f"  5+ dB, {lo}-{hi} s long: {sel.sum()} barks, union hit rate "
              f"{union[sel].mean():.2f}, shipped {hits[sel, 0].mean():.2f}")
clip_keys = sorted({r[2] for r, s in zip(rows, snr, strict=True) if s >= 5})
clip_found = {k: any(u for r, u, s in zip(rows, union, snr, strict=True) if r[2] == k and s >= 5)
              for k in clip_keys}
in_found = [u for r, u, s in zip(rows, union, snr, strict=True) if s >= 5 and clip_found[r[2]]]
print(f"placed clips with a 5+ dB bark: {len(clip_keys)}; with one found by the union: "
      f"{sum(clip_found.values())}; barks at 5+ dB in those clips found: "
      f"{np.mean(in_found):.2f} of {len(in_found)}")
by_label: dict[str, list[int]] = {}
for k, hit in clip_found.items():
    label = dogs[int(k.split(":")[1])].clip.label if k != "?" else "(outside a placed clip)"
    by_label.setdefault(label, [0, 0])
    by_label[label][0] += 1
    by_label[label][1] += int(hit)
print("placed clips with a 5+ dB bark, found by the union, by label: " + ", ".join(
    f"{label} {v[1]}/{v[0]}" for label, v in sorted(by_label.items(), key=lambda x: -x[1][0])))

# Each placed clip's score as recorded (the network's highest dog logit over the clean clip):
# are the clips that nothing finds in the scenes heard when they stand alone?
from sensor.yamnet_features import clip_patches  # noqa: E402

session = onnxruntime.InferenceSession(str(network))
clean = {}
for k in clip_keys:
    if k == "?":
        continue
    i = int(k.split(":")[1])
    if i not in clean:
        patches = clip_patches(audio[i].astype(np.float32)).astype(np.float32)[:, None]
        clean[i] = float(session.run(["dog_logit"], {"patches": patches})[0].max())
for hit in (True, False):
    logits = np.array([clean[int(k.split(":")[1])] for k in clip_keys
                       if k != "?" and clip_found[k] == hit
                       and dogs[int(k.split(":")[1])].clip.label == "dog_bark"])
    print(f"dog_bark clips {'found' if hit else 'missed'} in the scenes: {logits.size}; as "
          f"recorded, dog probability over 0.5: {np.mean(logits > 0):.2f}, over 0.9: "
          f"{np.mean(logits > np.log(9)):.2f}; median logit {np.median(logits):.1f}")

# What takes them: the distance, the bed, or both? Each dog_bark clip once more, its highest
# dog probability: 40 m away (air, ground, no reverberation) alone at -30 dBFS; in a held-out
# bed at +7 dB by its prominent steps with no distance; and both.
from training.finetune import at_distance, bed_piece, rms  # noqa: E402
from training.head_data import gain_for_snr  # noqa: E402

check = np.random.default_rng(3)


def best(x: np.ndarray) -> float:
    patches = clip_patches(x.astype(np.float32)).astype(np.float32)[:, None]
    return float(session.run(["dog_logit"], {"patches": patches})[0].max())


def in_bed(x: np.ndarray) -> np.ndarray:
    bed = bed_piece(check, beds, x.size)
    bed = bed / max(rms(bed), 1e-9) * 10 ** (-35 / 20)
    return x * gain_for_snr(x, bed, np.ones(x.size // J.HOP + 1, bool), 7.0) + bed


for hit in (True, False):
    chosen_clips = sorted({int(k.split(":")[1]) for k in clip_keys if k != "?" and
                           clip_found[k] == hit and dogs[int(k.split(":")[1])].clip.label
                           == "dog_bark"})
    far, noisy, both, reverberant = [], [], [], []
    for i in chosen_clips:
        x = audio[i]
        distant = at_distance(x, 40.0, 0.75)
        far.append(best(distant / max(rms(distant), 1e-9) * 10 ** (-30 / 20)))
        noisy.append(best(in_bed(x)))
        both.append(best(in_bed(distant)))
        reverberant.append(best(in_bed(at_distance(x, 40.0, 0.75, check))))
    print(f"dog_bark clips {'found' if hit else 'missed'} ({len(chosen_clips)}): share over 0.5 "
          + ", ".join(f"{name} {np.mean(np.array(v) > 0):.2f}" for name, v in
                      (("40 m alone", far), ("+7 dB in a bed", noisy), ("both", both),
                                       ("both, reverberant", reverberant))))

# In the scenes themselves: the network on the scene's own samples over each missed bark clip,
# against the scores its frames carried (dg, per 0.48 s patch) over the same span.
for hit in (True, False):
    direct, sent, levels = [], [], []
    for band, scene, frames, spans in kept:
        t0 = frames[0].capture_ns
        for start, end, i in spans:
            key = f"{band[0]}:{i}:{start:.0f}"
            if key not in clip_found or clip_found[key] != hit or dogs[i].clip.label != "dog_bark":
                continue
            direct.append(best(scene.samples[int(start * J.RATE):int(end * J.RATE) + J.RATE]))
            over = [f for f in frames if start - 1 <= (f.capture_ns - t0) / 1e9 < end + 1]
            dg = [float(np.max(f.patch_dog_scores)) for f in over
                  if f.patch_dog_scores is not None and f.patch_dog_scores.size]
            sent.append(max(dg) if dg else float("nan"))
            levels.append(np.mean([f.gate != "dog" for f in over]) if over else float("nan"))
    print(f"dog_bark clips {'found' if hit else 'missed'} in the scenes ({len(direct)}): the "
          f"network on the scene's samples over 0.5: {np.mean(np.array(direct) > 0):.2f}; the "
          f"frames' highest dg over 0.5: {np.nanmean(np.array(sent) > 0.5):.2f} (none sent: "
          f"{np.mean(np.isnan(sent)):.2f}); share of their frames sent as levels only "
          f"{np.nanmean(levels):.2f}")

bands: dict[str, list[int]] = {}
for k, hit in clip_found.items():
    if k != "?" and dogs[int(k.split(":")[1])].clip.label == "dog_bark":
        bands.setdefault(k.split(":")[0], [0, 0])
        bands[k.split(":")[0]][0] += 1
        bands[k.split(":")[0]][1] += int(not hit)
print("dog_bark clips with a 5+ dB bark, missed / all, by the clip's SNR band (its lower "
      "edge): " + ", ".join(f"{b} {v[1]}/{v[0]}" for b, v in sorted(bands.items(),
                                                                    key=lambda x: float(x[0]))))

import sys, pickle, numpy as np, tempfile, logging
from pathlib import Path
sys.path.insert(0, "/work/main"); sys.path.insert(0, "/work/main/benchmarks")
import judge_soundscapes as J
from training.validate import runs
seed = int(sys.argv[1]) if len(sys.argv) > 1 else 2
held = J.held_out_sources(Path("/work/main/docs/experiments/finetune_sensor_fold0.json"))
clips = J.read_corpora(list(J.DEFAULT_CORPORA))
beds = [J.load_audio(c.clip.path) for c in clips if J.is_held_out_background(c)]
mine = [c for c in clips if c.source_key in held and not J.is_background(c)]
rng = np.random.default_rng(seed)
dogs = [c for c in mine if c.clip.is_dog]; others = [c for c in mine if not c.clip.is_dog]
dogs = [dogs[i] for i in sorted(rng.permutation(len(dogs))[:150])]
dog_audio = [J.load_audio(c.clip.path)[:10 * J.RATE] for c in dogs]
det = J.detectors()["shipped"]
rows = []
with tempfile.TemporaryDirectory() as wd:
  for band in J.BANDS_DB:
    scene = J.dog_scene(band, dog_audio, beds, seed)
    frames = J.measured(scene, Path(wd), Path("/tmp/judge-cache"))
    ev = J.events_of(frames, *det)
    t0 = frames[0].capture_ns
    barks = runs(scene.labels == 1, 0.1)
    found = J._hits(barks, ev)
    # per-frame summaries keyed by second index
    per = {}
    for f in frames:
        s = int(round((f.capture_ns - t0) / 1e9))
        dg = f.patch_dog_scores
        per[s] = (f.gate, float(np.max(f.dog_steps)) if f.dog_steps.size else np.nan,
                  float(np.max(dg)) if dg is not None and dg.size else np.nan)
    for (a, b), hit in zip(barks, found):
        snr = np.nanmedian(scene.own_snr[round(a/J.STEP_S):max(round(b/J.STEP_S), round(a/J.STEP_S)+1)])
        secs = range(int(a), int(b) + 1)
        g = [per.get(s, ("?", np.nan, np.nan)) for s in secs]
        rows.append((band[0], a, b - a, snr, hit, [x[0] for x in g], np.nanmax([x[1] for x in g]), np.nanmax([x[2] for x in g] + [-1])))
pickle.dump(rows, open(f"/tmp/s3/diag{seed}.pkl", "wb"))
import collections
for lo, hi in J.OWN_SNR_BANDS:
    sel = [r for r in rows if lo <= r[3] < hi]
    miss = [r for r in sel if not r[4]]
    print(f"SNR {lo}..{hi}: {len(sel)} barks, {len(miss)} missed")
    if not miss: continue
    dur = np.array([r[2] for r in miss]); cnn = np.array([r[6] for r in miss]); dg = np.array([r[7] for r in miss])
    lv = np.mean(["levels" in r[5] for r in miss])
    print(f"  missed: dur med {np.median(dur):.2f}s (<0.1s {np.mean(dur<0.1):.2f}); max cnn med {np.nanmedian(cnn):.2f} (>=0.5 {np.mean(cnn>=0.5):.2f}); max dg med {np.nanmedian(dg):.2f} (>=0.5 {np.mean(dg>=0.5):.2f}, >=0.9 {np.mean(dg>=0.9):.2f}); any levels-only frame {lv:.2f}")
    hit = [r for r in sel if r[4]]
    if hit:
        dur = np.array([r[2] for r in hit]); print(f"  found: dur med {np.median(dur):.2f}s; max dg med {np.nanmedian([r[7] for r in hit]):.2f}")

import sys, pickle, numpy as np, tempfile, collections
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
dogs = [c for c in mine if c.clip.is_dog]
dogs = [dogs[i] for i in sorted(rng.permutation(len(dogs))[:150])]
dog_audio = [J.load_audio(c.clip.path)[:10 * J.RATE] for c in dogs]
ids = {id(a): k for k, a in enumerate(dog_audio)}
placed = []
orig = J._place
def rec(rng, scene, bed, audio, at, *a, **kw):
    placed.append((ids[id(audio)], at / J.RATE, (at + audio.size) / J.RATE)); return orig(rng, scene, bed, audio, at, *a, **kw)
J._place = rec
det = J.detectors()["shipped"]
stat = collections.defaultdict(lambda: [0, 0, 0, 0])  # clip -> barks, found, barks5, found5
with tempfile.TemporaryDirectory() as wd:
  for band in J.BANDS_DB:
    placed.clear()
    scene = J.dog_scene(band, dog_audio, beds, seed)
    frames = J.measured(scene, Path(wd), Path("/tmp/judge-cache"))
    ev = J.events_of(frames, *det)
    barks = runs(scene.labels == 1, 0.1)
    found = J._hits(barks, ev)
    for (a, b), hit in zip(barks, found):
        snr = np.nanmedian(scene.own_snr[round(a/J.STEP_S):max(round(b/J.STEP_S), round(a/J.STEP_S)+1)])
        k = next((k for k, s, e in placed if s <= a < e), -1)
        st = stat[k]; st[0] += 1; st[1] += hit
        if snr >= 5: st[2] += 1; st[3] += hit
by_src = collections.defaultdict(lambda: [0, 0, 0, 0]); by_lab = collections.defaultdict(lambda: [0, 0, 0, 0])
for k, st in stat.items():
    c = dogs[k]
    for d, key in ((by_src, c.source_key), (by_lab, c.clip.label)):
        for i in range(4): d[key][i] += st[i]
print("by label:"); [print(f"  {k}: {v[1]}/{v[0]}  5+dB {v[3]}/{v[2]}") for k, v in sorted(by_lab.items(), key=lambda x: -x[1][0])]
print("by source:"); [print(f"  {k}: {v[1]}/{v[0]}  5+dB {v[3]}/{v[2]}") for k, v in sorted(by_src.items(), key=lambda x: -x[1][0])]
import pickle; pickle.dump({Path(dogs[k].clip.path).name: st for k, st in stat.items()}, open("/tmp/s3/clipstat.pkl","wb"))
print("clips with 0 found of >=3 barks at 5+:")
for k, st in sorted(stat.items()):
    if st[2] >= 3 and st[3] == 0: print("  ", Path(dogs[k].clip.path).name, dogs[k].clip.label, dogs[k].source_key, st)

"""Ensemble of the bundled fine-tuned network and the hard-negative one, from the judge's cached
frames (seed 2): dg = sigmoid(mean of the two logits), or min; then the judge's detectors."""
import dataclasses, json, sys, tempfile
from pathlib import Path
import numpy as np
sys.path.insert(0, "/work/main"); sys.path.insert(0, "/work/main/benchmarks")
import judge_soundscapes as J
from training.head_data import read_corpora, is_held_out_background, is_background
from training.corpus import load_audio, RATE

seed = int(sys.argv[1]) if len(sys.argv) > 1 else 2
held = set(json.loads(Path("/work/main/docs/experiments/finetune_sensor_fold0.json").read_text())["held_out_sources"])
clips = read_corpora(list(J.DEFAULT_CORPORA))
beds = [load_audio(c.clip.path) for c in clips if is_held_out_background(c)]
mine = [c for c in clips if c.source_key in held and not is_background(c)]
rng = np.random.default_rng(seed)
dogs = [c for c in mine if c.clip.is_dog]; others = [c for c in mine if not c.clip.is_dog]
dogs = [dogs[i] for i in sorted(rng.permutation(len(dogs))[:150])]
others = [others[i] for i in sorted(rng.permutation(len(others))[:600])]
dog_audio = [load_audio(c.clip.path)[:10 * RATE] for c in dogs]
other_audio = [load_audio(c.clip.path)[:10 * RATE] for c in others]
scenes = [J.dog_scene(b, dog_audio, beds, seed) for b in J.BANDS_DB]
scenes.append(J.confuser_scene(other_audio, beds, seed, [c.clip.label for c in others]))
cache = Path("/tmp/judge-cache")
def logit(p): p = np.clip(p.astype(np.float64), 1e-6, 1 - 1e-6); return np.log(p / (1 - p))
combos = {"mean": lambda a, b: 1 / (1 + np.exp(-(logit(a) + logit(b)) / 2)),
          "min": np.minimum}
chosen = {n: d for n, d in J.detectors().items() if n.startswith(("tuned", "fused")) and "+bout" not in n}
rows = {(c, n): {"dogs": [], "confusers": []} for c in combos for n in chosen}
with tempfile.TemporaryDirectory() as wd:
    for scene in scenes:
        a = J.measured(scene, Path(wd), cache, J.DEFAULT_SENSOR_NETWORK_PATH)
        b = J.measured(scene, Path(wd), cache, Path("/tmp/v6/dog_yamnet.onnx"))
        kind = "confusers" if scene.name == "confusers" else "dogs"
        for cname, f in combos.items():
            frames = []
            one_sided = 0
            for x, y in zip(a, b, strict=True):
                if x.patch_dog_scores is not None and y.patch_dog_scores is not None:
                    frames.append(dataclasses.replace(x, patch_dog_scores=f(x.patch_dog_scores, y.patch_dog_scores).astype(np.float32)))
                else:  # one network's gate sent levels only: the other's frame as it is
                    one_sided += (x.patch_dog_scores is None) != (y.patch_dog_scores is None)
                    frames.append(x if x.patch_dog_scores is not None else y)
            print(scene.name, cname, "frames", len(frames), "one-sided", one_sided, flush=True)
            for name, (head, settings, cnn_only) in chosen.items():
                rows[(cname, name)][kind].append(J.judge_scene(scene, J.events_of(frames, head, settings, cnn_only)))
out = {}
for (cname, name), kinds in rows.items():
    ds, cs = J.summed(kinds["dogs"]), J.summed(kinds["confusers"])
    out[f"{cname} {name}"] = {"dog scenes": ds, "confuser scene": cs}
    print(cname, name, [ds.get(k) for k in ds if k.startswith("hit rate")], ds["bouts of 5+ missed"],
          ds.get("segment precision/recall/F1"), cs["false alarms per hour"], ds["false alarms per hour"], flush=True)
Path(f"/tmp/v6/ensemble_seed{seed}.json").write_text(json.dumps(out, indent=1))

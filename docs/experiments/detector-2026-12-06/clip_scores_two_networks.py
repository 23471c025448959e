import sys, json, numpy as np, time
from pathlib import Path
sys.path.insert(0, "/work/main")
from sensor.yamnet_network import YamnetNetwork, dog_class_indices, load_class_names
from sensor.yamnet_features import clip_patches
from training.corpus import RATE, load_audio
from training.finetune import at_distance, bed_piece, rms
from training.head_data import held_out_sources
from training.head_data import read_corpora, is_background, is_held_out_background, gain_for_snr
from training.head_eval import clip_figures
report, net = Path(sys.argv[1]), Path(sys.argv[2])
held = held_out_sources(report)
C = Path("/work/shared/corpus")
clips = read_corpora([C/"train", C/"extra", C/"dogs"])
beds = [load_audio(c.clip.path) for c in clips if is_held_out_background(c)]
mine = [c for c in clips if c.source_key in held and not is_background(c)]
network = YamnetNetwork(net, threads=2)
dogi = dog_class_indices(load_class_names())
rng = np.random.default_rng(5)
out = {"labels": [], "clean": [], "+10": [], "+0": []}
audio = {"clean": [], "+10": [], "+0": []}
t = time.time()
def scores(x):
    o = network.run(clip_patches(x))
    ys = o.scores[:, dogi].max(axis=1)
    dg = 1 / (1 + np.exp(-o.dog_logits))
    return dg, ys
for i, c in enumerate(mine):
    a = load_audio(c.clip.path)[:10 * RATE]
    out["labels"].append(int(c.clip.is_dog))
    pad = rng.standard_normal(RATE) * 10 ** (-60 / 20)
    xc = np.concatenate([pad, a, pad]); audio["clean"].append((np.clip(xc, -1, 1) * 32767).astype(np.int16))
    out["clean"].append(scores(xc))
    for snr in (10, 0):
        n = a.size + 2 * RATE
        bed = bed_piece(rng, beds, n); bed = bed / max(rms(bed), 1e-9) * 10 ** (-35 / 20)
        far = at_distance(a, 30.0, 0.75, rng if rng.random() < 0.5 else None)
        region = np.ones(far.size // 320 + 1, bool)
        x = bed.copy(); seg = slice(RATE, RATE + far.size)
        x[seg] += far * gain_for_snr(far, bed[seg], region, snr)
        audio[f"+{snr}"].append((np.clip(x, -1, 1) * 32767).astype(np.int16))
        out[f"+{snr}"].append(scores(x))
    if i % 200 == 0: print(i, len(mine), round(time.time() - t), flush=True)
import pickle; pickle.dump(out, open(sys.argv[3], "wb")); pickle.dump(audio, open(sys.argv[3] + ".audio", "wb"))

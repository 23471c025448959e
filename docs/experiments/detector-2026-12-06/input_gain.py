import sys, numpy as np, time, pickle
from pathlib import Path
sys.path.insert(0, "/work/main")
from sensor.yamnet_network import YamnetNetwork, dog_class_indices, load_class_names
from sensor.yamnet_features import clip_patches
from training.corpus import RATE, load_audio
from training.finetune import at_distance, bed_piece, rms
from training.head_data import held_out_sources
from training.head_data import read_corpora, is_background, is_held_out_background, gain_for_snr
from training.head_eval import clip_figures
held = held_out_sources(Path(sys.argv[1])); net = Path(sys.argv[2])
C = Path("/work/shared/corpus")
clips = read_corpora([C/"train", C/"extra", C/"dogs"])
beds = [load_audio(c.clip.path) for c in clips if is_held_out_background(c)]
mine = [c for c in clips if c.source_key in held and not is_background(c)]
network = YamnetNetwork(net, threads=2)
dogi = dog_class_indices(load_class_names())
rng = np.random.default_rng(5)
bed_db = float(sys.argv[3]) if len(sys.argv) > 3 else -35
gains = (-10, 0, 10, 20)
res = {g: [] for g in gains}; y = []
for i, c in enumerate(mine):
    a = load_audio(c.clip.path)[:10 * RATE]; y.append(int(c.clip.is_dog))
    n = a.size + 2 * RATE
    bed = bed_piece(rng, beds, n); bed = bed / max(rms(bed), 1e-9) * 10 ** (bed_db / 20)
    far = at_distance(a, 30.0, 0.75, rng if rng.random() < 0.5 else None)
    region = np.ones(far.size // 320 + 1, bool)
    x = bed.copy(); seg = slice(RATE, RATE + far.size)
    x[seg] += far * gain_for_snr(far, bed[seg], region, 5.0)
    for g in gains:
        o = network.run(clip_patches(np.clip(x * 10 ** (g / 20), -1, 1)))
        res[g].append((o.dog_logits.max(), o.scores[:, dogi].max()))
y = np.array(y)
for g in gains:
    r = np.array(res[g]); fd = clip_figures(y, r[:, 0]); fy = clip_figures(y, r[:, 1])
    print(f"bed {bed_db} dBFS, gain {g:+d} dB: dg AUPRC {fd['auprc']} r@2% {fd['recall_at_2%_fa']} | ys AUPRC {fy['auprc']} r@2% {fy['recall_at_2%_fa']}", flush=True)

"""Replay the head's mixed training streams and the clean clips; keep YAMNet's per-position activations."""
import sys, time, pickle, numpy as np, onnx, onnxruntime as ort
from pathlib import Path
from training import head_data as hd
from sensor.yamnet_features import clip_patches
which = sys.argv[1]  # train | clean
part = (int(sys.argv[2]), int(sys.argv[3]))
corpora = [Path('/work/shared/corpus/train'), Path('/work/shared/corpus/extra')]
m = onnx.load('models/yamnet.onnx')
act = '/model/layer14/pointwise_conv/relu/Relu_output_0'
m.graph.output.append(onnx.helper.make_tensor_value_info(act, onnx.TensorProto.FLOAT, None))
so = ort.SessionOptions(); so.intra_op_num_threads = 1
sess = ort.InferenceSession(m.SerializeToString(), so, providers=['CPUExecutionProvider'])
def positions(audio):
    patches = clip_patches(audio.astype(np.float32)); embs, acts = [], []
    for k in range(0, len(patches), 256):
        _, emb, a = sess.run(None, {'log_mel_patches': patches[k:k+256][:, None].astype(np.float32)})
        embs.append(emb); acts.append(a.mean(axis=3).transpose(0, 2, 1))
    return np.concatenate(embs), np.concatenate(acts).astype(np.float16)
clips = hd.read_corpora(corpora)
out = []; t0 = time.time()
if which == 'train':
    bed = [c for c in clips if hd.is_background(c) and not hd.is_held_out_background(c)]
    backgrounds = [(hd.load_audio(c.clip.path), c.source_key) for c in bed]
    rng = np.random.default_rng(1)
    tasks = [(c, int(rng.integers(2**31))) for c in clips if not hd.is_held_out_background(c) for _ in range(3 if c.clip.is_dog else 1)]
    tasks = tasks[part[0]::part[1]]
    for k, (item, seed) in enumerate(tasks):
        audio, labels, snr, used = hd.mixed_stream(np.random.default_rng(seed), hd.load_audio(item.clip.path), item.clip.is_dog,
                                                   [b for b in backgrounds if b[1] != item.source_key] or backgrounds)
        emb, a = positions(audio)
        out.append((item.clip.clip_id, emb[:, :8].copy(), a, labels))
        if k % 100 == 0: print(k, len(tasks), round(time.time() - t0), flush=True)
else:
    for k, item in enumerate(clips[part[0]::part[1]]):
        emb, a = positions(hd.load_audio(item.clip.path))
        out.append((item.clip.clip_id, emb[:, :8].copy(), a, None))
        if k % 200 == 0: print(k, round(time.time() - t0), flush=True)
pickle.dump(out, open(f'/tmp/pos_{which}_{part[0]}.pkl', 'wb'), protocol=4)
print('done', round(time.time() - t0), flush=True)

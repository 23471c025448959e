"""YAMNet per time position (before its time pooling) on the soundscapes: a 0.32-s dog score."""
import json, time, numpy as np, onnx, onnxruntime as ort, pickle
from pathlib import Path
from training import head_data as hd
from training.head_eval import fold_heads
from training.head import HeadRecipe
from sensor.yamnet_features import clip_patches
from analyzer.detect.head import DogHead, logit
from scipy.special import expit
corpora = [Path('/work/shared/corpus/train'), Path('/work/shared/corpus/extra')]
m = onnx.load('models/yamnet.onnx')
act = '/model/layer14/pointwise_conv/relu/Relu_output_0'
m.graph.output.append(onnx.helper.make_tensor_value_info(act, onnx.TensorProto.FLOAT, None))
so = ort.SessionOptions(); so.intra_op_num_threads = 1
sess = ort.InferenceSession(m.SerializeToString(), so, providers=['CPUExecutionProvider'])
W = {i.name: onnx.numpy_helper.to_array(i) for i in m.graph.initializer}
Wc, bc = W['model.classifier.weight'], W['model.classifier.bias']
print('classifier', Wc.shape, bc.shape)
clips = hd.read_corpora(corpora)
beds = [hd.load_audio(c.clip.path) for c in clips if hd.is_held_out_background(c)]
scapes = hd.StreamSet.load(hd.cache_path(corpora, 'soundscapes-s1'))
key = {(mm['source'], mm['snr_db']): i for i, mm in enumerate(scapes.meta)}
out = {}
t0 = time.time(); maxdiff = 0
for source, snr, items, seed in hd._soundscape_plan(clips, 1):
    i = key[(source, snr)]
    audio, labels, own = hd._planned_soundscape(beds, items, snr, seed)
    patches = clip_patches(audio.astype(np.float32))
    embs, acts = [], []
    for k in range(0, len(patches), 256):
        x = patches[k:k+256][:, None].astype(np.float32)
        lg, emb, a = sess.run(None, {'log_mel_patches': x})
        embs.append(emb); acts.append(a.mean(axis=3))  # n x 1024 x 3 (time positions), freq pooled
    emb = np.concatenate(embs); a = np.concatenate(acts).transpose(0, 2, 1)  # n x 3 x 1024
    p0, p1 = int(scapes.patch_offsets[i]), int(scapes.patch_offsets[i+1])
    maxdiff = max(maxdiff, float(np.abs(emb - scapes.emb[p0:p1].astype(np.float32)).max()))
    out[i] = a.astype(np.float16)
    print(source, snr, a.shape, round(time.time()-t0), flush=True)
print('max |emb - cached emb|', maxdiff)
pickle.dump(out, open('/tmp/pos_acts.pkl', 'wb'))

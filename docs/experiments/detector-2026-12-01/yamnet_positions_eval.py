import pickle, numpy as np, sys, onnx
from pathlib import Path
from training import head_data as hd
from training.head_eval import fold_heads, spans_of, _f1
from training.head import HeadRecipe
from analyzer.detect.head import DogHead, step_head_scores
from analyzer.offline import event_counts, matched_references
from analyzer.offline.evaluate import segment_counts
from scipy.special import expit
C = '/root/.cache/barkwatch/head/'
corpora = [Path('/work/shared/corpus/train'), Path('/work/shared/corpus/extra')]
scapes = hd.StreamSet.load(C+'soundscapes-s1-644f499f7a67.npz')
train = hd.StreamSet.load(C+'train-v2-s1-d3-o1-644f499f7a67.npz')
acts = pickle.load(open('/tmp/pos_acts.pkl', 'rb'))
CP, SP = pickle.load(open('/tmp/fusion_parts.pkl', 'rb'))
m = onnx.load('models/yamnet.onnx'); W = {i.name: onnx.numpy_helper.to_array(i) for i in m.graph.initializer}
Wc, bc = W['model.classifier.weight'], W['model.classifier.bias']
if Wc.shape[0] == 521: Wc = Wc.T
un = DogHead()
folds = sorted({mm['source'] for mm in scapes.meta})
heads = fold_heads(train, folds, HeadRecipe(), 'source', Path(C+'heads-train-v2-s1-d3-o1-logistic-emb+ys-e8-644f499f7a67'))
POS = {}
for i, a in acts.items():
    n = a.shape[0]; x = a.reshape(-1, 1024).astype(np.float32)
    ys = expit(x @ Wc + bc).astype(np.float32)
    starts = (np.arange(n)[:, None] * 0.48 + np.arange(3)[None, :] * 0.32).ravel()
    s0, s1 = int(scapes.step_offsets[i]), int(scapes.step_offsets[i+1])
    y_pos = step_head_scores(starts, un.patch_scores(x, ys), s1 - s0, 0.02, 0.32)
    h_pos = step_head_scores(starts, heads[scapes.meta[i]['source']].patch_scores(x, ys), s1 - s0, 0.02, 0.32)
    POS[i] = (y_pos, h_pos)
def run(name, f, TH):
    for on, off in TH:
        cnt = {}; fa = 0; hours = 0
        for i, mm in enumerate(scapes.meta):
            s0, s1 = int(scapes.step_offsets[i]), int(scapes.step_offsets[i+1])
            est = spans_of(f(*SP[i], *POS[i]), on, off)
            if mm['kind'] == 'confusers': fa += len(est); hours += mm['duration_s']/3600; continue
            ref = hd.reference_spans(scapes.step_labels[s0:s1], 0.5, 0.1)
            c = event_counts(ref, est, 0.25); g = segment_counts(ref, est, mm['duration_s'])
            t = cnt.setdefault(mm['snr_db'], [0]*6)
            for j, val in enumerate((c.tp, c.fp, c.fn, g.tp, g.fp, g.fn)): t[j] += val
        print(name, on, off, ' '.join(f"{s:+.0f}:{_f1(*cnt[s][:3])}/{_f1(*cnt[s][3:])}" for s in sorted(cnt)), 'FA/h', round(fa/max(hours,1e-9), 2), flush=True)
TH = ((0.5,0.3),(0.7,0.5),(0.8,0.6),(0.9,0.7),(0.95,0.75))
run('pos-yamnet', lambda c,h,y,yp,hp: yp, TH)
run('pos-head', lambda c,h,y,yp,hp: hp, TH)
run('min(cnn,pos-head)', lambda c,h,y,yp,hp: np.minimum(c, hp), TH)
run('min(cnn,head,pos-head)', lambda c,h,y,yp,hp: np.minimum(np.minimum(c, h), hp), TH)

# the veto variants
run('min(cnn,pos-yamnet)', lambda c,h,y,yp,hp: np.minimum(c, yp), TH)
from scipy.special import logit as lg
for b in (2.0, 4.0):
    run(f'min(cnn,head,pos-yamnet+{b})', lambda c,h,y,yp,hp,b=b: np.minimum(np.minimum(c, h), expit(lg(np.clip(yp,1e-6,1-1e-6))+b)), TH)

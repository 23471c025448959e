"""LOSO logistic head on YAMNet's per-position activations (0.32 s cells), evaluated on soundscapes and clips."""
import pickle, time, numpy as np, torch, onnx, sys
from collections import defaultdict
from pathlib import Path
from training import head_data as hd
from training.head_eval import spans_of, _f1
from analyzer.detect.head import step_head_scores
from analyzer.offline import event_counts, average_precision, recall_at_far
from analyzer.offline.evaluate import segment_counts
torch.set_num_threads(2)
C = '/root/.cache/barkwatch/head/'
train = hd.StreamSet.load(C+'train-v2-s1-d3-o1-644f499f7a67.npz')
scapes = hd.StreamSet.load(C+'soundscapes-s1-644f499f7a67.npz')
clean = hd.StreamSet.load(C+'clean-644f499f7a67.npz')
m = onnx.load('models/yamnet.onnx'); W = {i.name: onnx.numpy_helper.to_array(i) for i in m.graph.initializer}
Wc, bc = W['model.classifier.weight'], W['model.classifier.bias']
if Wc.shape[0] == 521: Wc = Wc.T
def feats(a):  # n x 3 x 1024 -> (3n) x 1545
    x = a.reshape(-1, 1024).astype(np.float32)
    return np.hstack([x, np.clip(x @ Wc + bc, -14, 14)]).astype(np.float32)
# match replayed training streams to the cache's (for source and background sources)
by_clip = defaultdict(list)
for i, mm in enumerate(train.meta): by_clip[mm['clip_id']].append(i)
rep = pickle.load(open('/tmp/pos_train_0.pkl', 'rb')) + pickle.load(open('/tmp/pos_train_1.pkl', 'rb'))
X, Y, SRC = [], [], []
unmatched = 0
for clip_id, e8, a, labels in rep:
    hit = None
    for i in by_clip[clip_id]:
        p0, p1 = int(train.patch_offsets[i]), int(train.patch_offsets[i+1])
        if p1 - p0 == len(e8) and np.abs(train.emb[p0:p1, :8].astype(np.float32) - e8).max() < 0.02: hit = i; break
    if hit is None: unmatched += 1; continue
    mm = train.meta[hit]
    n = a.shape[0]
    lab = np.zeros(3 * n, np.int8)
    for p in range(n):
        for t in range(3):
            cell = labels[24 * p + 16 * t: 24 * p + 16 * t + 16]
            dog = int(np.sum(cell == 1))
            lab[3 * p + t] = 1 if dog >= 4 else (0 if dog == 0 and not np.any(cell < 0) else -1)
    X.append(feats(a)); Y.append(lab); SRC += [(mm['source'], tuple(mm['background_sources']))] * (3 * n)
print('streams', len(rep), 'unmatched', unmatched, flush=True)
X = np.concatenate(X); Y = np.concatenate(Y)
srcs = np.array([s for s, _ in SRC]); bgs = [b for _, b in SRC]
keep = Y >= 0; print('positions', len(Y), 'labelled', keep.sum(), 'dog', (Y == 1).sum(), flush=True)
acts = pickle.load(open('/tmp/pos_acts.pkl', 'rb'))
cl = pickle.load(open('/tmp/pos_clean_0.pkl', 'rb')) + pickle.load(open('/tmp/pos_clean_1.pkl', 'rb'))
clean_by_id = {cid: a for cid, _, a, _ in cl}
def fit(mask, seed=1):
    torch.manual_seed(seed)
    x = X[mask]; y = (Y[mask] == 1).astype(np.float32)
    mean = x.mean(0); scale = x.std(0) + 1e-3
    xt = torch.from_numpy((x - mean) / scale); yt = torch.from_numpy(y)
    wt = torch.from_numpy(np.where(y == 1, 0.5 / y.mean(), 0.5 / (1 - y.mean())).astype(np.float32))
    lin = torch.nn.Linear(x.shape[1], 1); drop = torch.nn.Dropout(0.2)
    opt = torch.optim.AdamW(lin.parameters(), 3e-3, weight_decay=0.01)
    g = torch.Generator().manual_seed(seed)
    for ep in range(4):
        order = torch.randperm(len(y), generator=g)
        for s in range(0, len(y), 1024):
            b = order[s:s+1024]
            loss = torch.nn.functional.binary_cross_entropy_with_logits(lin(drop(xt[b]))[:, 0], yt[b], weight=wt[b])
            opt.zero_grad(); loss.backward(); opt.step()
    w = lin.weight.detach().numpy()[0] / scale; b = float(lin.bias.detach()) - float(mean @ w)
    return w.astype(np.float32), b
folds = sorted({mm['source'] for mm in clean.meta})
POSH = {}; CLIP = {}
t0 = time.time()
for k, f in enumerate(folds):
    mask = keep & (srcs != f) & np.array([f not in b for b in bgs])
    w, b = fit(mask)
    def score(a, n_steps):
        z = feats(a) @ w + b; p = 1 / (1 + np.exp(-np.clip(z, -30, 30)))
        starts = (np.arange(a.shape[0])[:, None] * 0.48 + np.arange(3)[None, :] * 0.32).ravel()
        return step_head_scores(starts, p, n_steps, 0.02, 0.32), p
    for i, mm in enumerate(scapes.meta):
        if mm['source'] == f: POSH[i] = score(acts[i], int(scapes.step_offsets[i+1] - scapes.step_offsets[i]))[0]
    for i, mm in enumerate(clean.meta):
        if mm['source'] == f: CLIP[i] = float(score(clean_by_id[mm['clip_id']], 1)[1].max(initial=0))
    print('fold', k, f, round(time.time() - t0), flush=True)
pickle.dump((POSH, CLIP), open('/tmp/pos_head_scores.pkl', 'wb'))
lab = np.array([mm['is_dog'] for mm in clean.meta]); sc = np.array([CLIP[i] for i in range(len(clean.meta))])
corp = np.array([mm['source'].split('/')[0] for mm in clean.meta])
print('pos-head clip', round(average_precision(lab, sc), 4), 'R@2%', round(recall_at_far(lab, sc, .02)[0], 3), 'extra', round(average_precision(lab[corp=='extra'], sc[corp=='extra']), 4), 'train', round(average_precision(lab[corp=='train'], sc[corp=='train']), 4))

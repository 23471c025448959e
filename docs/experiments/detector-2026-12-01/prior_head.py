"""Head = a * untouched YAMNet dog logit + correction(w . x) + b; LOSO; strong L2 on w."""
import argparse, numpy as np, torch, time, pickle
from training.head_data import StreamSet
from training.head import raw_features, patch_starts_s
from analyzer.detect.head import DogHead, logit, step_head_scores
from analyzer.offline import average_precision, recall_at_far
ap = argparse.ArgumentParser(); ap.add_argument('--wd', type=float, default=1.0); ap.add_argument('--epochs', type=int, default=8)
ap.add_argument('--ctx', type=int, default=0, help='add mean features of neighbouring patches'); ap.add_argument('--tag', default='prior')
ap.add_argument('--folds', type=int, default=0)
a = ap.parse_args()
torch.set_num_threads(2)
C = '/root/.cache/barkwatch/head/'
train = StreamSet.load(C+'train-v2-s1-d3-o1-644f499f7a67.npz'); clean = StreamSet.load(C+'clean-644f499f7a67.npz'); scapes = StreamSet.load(C+'soundscapes-s1-644f499f7a67.npz')
un = DogHead()
def feats(ds):
    x = raw_features(ds.emb, ds.ys, True)
    y = np.clip(logit(un.patch_scores(ds.emb.astype(np.float32), ds.ys)), -10, 10).astype(np.float32)
    if a.ctx:
        xc = np.empty_like(x)
        for i in range(len(ds.meta)):
            p0, p1 = int(ds.patch_offsets[i]), int(ds.patch_offsets[i+1]); seg = x[p0:p1]
            prev = np.vstack([seg[:1], seg[:-1]]); nxt = np.vstack([seg[1:], seg[-1:]])
            xc[p0:p1] = np.maximum(prev, nxt)
        x = np.hstack([x, xc])
    return x, y
t0 = time.time()
XT, YT = feats(train); XC, YC = feats(clean); XS, YS = feats(scapes)
print('feats', time.time()-t0, flush=True)
pst = train.patch_stream_index()
sources = sorted({m['source'] for m in clean.meta})
if a.folds:
    perm = np.random.default_rng(0).permutation(len(sources)); fos = {sources[p]: f'g{k % a.folds}' for k, p in enumerate(perm)}
else: fos = {s: s for s in sources}
def fit(patches):
    torch.manual_seed(1)
    lab = train.patch_labels[patches]; keep = patches[lab >= 0]
    y = (train.patch_labels[keep] == 1).astype(np.float32)
    x = XT[keep]; mean = x.mean(0); scale = x.std(0) + 1e-3
    xt = torch.from_numpy((x - mean) / scale); pt = torch.from_numpy(YT[keep]); yt = torch.from_numpy(y)
    wt = torch.from_numpy(np.where(y == 1, 0.5 / y.mean(), 0.5 / (1 - y.mean())).astype(np.float32))
    w = torch.nn.Linear(x.shape[1], 1); torch.nn.init.zeros_(w.weight); torch.nn.init.zeros_(w.bias)
    alpha = torch.nn.Parameter(torch.ones(1))
    opt = torch.optim.Adam([{'params': w.weight, 'weight_decay': 0}, {'params': [w.bias, alpha]}], 1e-3)
    g = torch.Generator().manual_seed(1); drop = torch.nn.Dropout(0.2)
    for ep in range(a.epochs):
        order = torch.randperm(len(y), generator=g)
        for s in range(0, len(y), 256):
            b = order[s:s+256]
            out = alpha * pt[b] + w(drop(xt[b]))[:, 0]
            loss = torch.nn.functional.binary_cross_entropy_with_logits(out, yt[b], weight=wt[b]) + a.wd * 1e-3 * (w.weight ** 2).sum()
            opt.zero_grad(); loss.backward(); opt.step()
    W = w.weight.detach().numpy()[0]; B = float(w.bias.detach()); A = float(alpha.detach())
    return lambda X, P: 1 / (1 + np.exp(-(A * P + ((X - mean) / scale) @ W + B))), A
clean_sc = np.zeros(len(XC), np.float32); scape_sc = np.zeros(len(XS), np.float32)
cps = clean.patch_stream_index(); sps = scapes.patch_stream_index()
for k, f in enumerate(sorted(set(fos.values()))):
    held = {s for s, g in fos.items() if g == f}
    excl = np.array([m['source'] in held or bool(held & set(m['background_sources'])) for m in train.meta])
    fn, A = fit(np.flatnonzero(~excl[pst]))
    cm = np.array([clean.meta[i]['source'] in held for i in cps]); sm = np.array([scapes.meta[i]['source'] in held for i in sps])
    clean_sc[cm] = fn(XC[cm], YC[cm]); scape_sc[sm] = fn(XS[sm], YS[sm])
    if k % 8 == 0: print(k, f, round(A, 3), round(time.time() - t0), flush=True)
lab = np.array([m['is_dog'] for m in clean.meta]); corp = np.array([m['source'].split('/')[0] for m in clean.meta])
clip = np.array([clean_sc[int(clean.patch_offsets[i]):int(clean.patch_offsets[i+1])].max(initial=0) for i in range(len(clean.meta))])
print(a.tag, 'head clip', round(average_precision(lab, clip), 4), 'R@2%', round(recall_at_far(lab, clip, .02)[0], 3), 'extra', round(average_precision(lab[corp=='extra'], clip[corp=='extra']), 4), 'train', round(average_precision(lab[corp=='train'], clip[corp=='train']), 4))
np.savez(f'/tmp/{a.tag}.npz', clean=clean_sc, scapes=scape_sc)

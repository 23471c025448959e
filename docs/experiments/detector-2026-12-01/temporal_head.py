"""Experiment: a temporal head at 20 ms over [cnn logit, yamnet dog logit, projected patch features]."""
import sys, time, json, argparse
import numpy as np, torch
from training.head_data import StreamSet, reference_spans, SOUNDSCAPE_SNRS_DB
from training.head_eval import spans_of, _f1, fold_of, THRESHOLDS
from training.head import raw_features
from analyzer.detect.head import logit, DogHead, step_head_scores
from analyzer.offline import event_counts, average_precision, recall_at_far
from analyzer.offline.evaluate import segment_counts
torch.set_num_threads(2)
ap = argparse.ArgumentParser()
ap.add_argument('--folds', type=int, default=0, help='0 = LOSO; else k source groups')
ap.add_argument('--epochs', type=int, default=12)
ap.add_argument('--proj', type=int, default=8)
ap.add_argument('--width', type=int, default=16)
ap.add_argument('--dil', default='1,2,4,8')
ap.add_argument('--only', default='')
ap.add_argument('--relabel', type=int, default=0, help='-1 steps farther than this many steps from a dog step become 0 (0=off)')
ap.add_argument('--out', default='/tmp/seq_scores.npz')
a = ap.parse_args()
C = '/root/.cache/barkwatch/head/'
train = StreamSet.load(C+'train-v2-s1-d3-o1-644f499f7a67.npz')
clean = StreamSet.load(C+'clean-644f499f7a67.npz')
scapes = StreamSet.load(C+'soundscapes-s1-644f499f7a67.npz')
untouched = DogHead()
def step_patch_index(n_steps, n_patches):
    centre = (np.arange(n_steps) + 0.5) * 0.02
    hi = np.floor(centre / 0.48 + 1e-9).astype(int)
    lo = hi - 1
    hi_ok = hi < n_patches
    lo_ok = (lo >= 0) & (lo < n_patches)
    hi = np.where(hi_ok, hi, np.where(lo_ok, lo, 0)); lo = np.where(lo_ok, lo, hi)
    return lo, hi, (hi_ok | lo_ok)
def relabel(y):
    if not a.relabel: return y
    near = np.convolve((y == 1).astype(float), np.ones(2*a.relabel+1))[a.relabel:a.relabel+y.size] > 0
    return np.where((y == -1) & ~near, 0, y)
def prep(ds):
    out = []
    x_all = raw_features(ds.emb, ds.ys, True)
    for i in range(len(ds.meta)):
        p0, p1 = int(ds.patch_offsets[i]), int(ds.patch_offsets[i+1])
        s0, s1 = int(ds.step_offsets[i]), int(ds.step_offsets[i+1])
        n = s1 - s0
        yam = untouched.patch_scores(ds.emb[p0:p1].astype(np.float32), ds.ys[p0:p1])
        lo, hi, ok = step_patch_index(n, p1 - p0)
        out.append(dict(x=x_all[p0:p1], lo=lo, hi=hi, ok=ok.astype(np.float32),
                        cnn=np.clip(logit(ds.cnn[s0:s1]), -8, 8).astype(np.float32),
                        yam=np.clip(logit(step_head_scores(np.arange(p1-p0)*0.48, yam, n)), -8, 8).astype(np.float32),
                        y=relabel(ds.step_labels[s0:s1]).astype(np.float32)))
    return out
t0=time.time()
TR, CL, SC = prep(train), prep(clean), prep(scapes)
print('prep', time.time()-t0, flush=True)
class Net(torch.nn.Module):
    def __init__(s, nin, proj, width, dils):
        super().__init__()
        s.proj = torch.nn.Linear(nin, proj)
        s.drop = torch.nn.Dropout(0.2)
        layers = []; c = 2 + 2*proj + 1
        for d in dils:
            layers += [torch.nn.Conv1d(c, width, 5, dilation=d, padding=2*d), torch.nn.ReLU()]; c = width
        s.conv = torch.nn.Sequential(*layers, torch.nn.Conv1d(c, 1, 1))
    def forward(s, b):
        # b: list of stream dicts (already standardised x)
        seqs = []
        for st in b:
            z = s.proj(s.drop(st['xt']))  # (np, proj)
            zl, zh = z[st['lot']], z[st['hit']]
            ok = st['okt'][:, None]
            f = torch.cat([st['cnnt'][:, None], st['yamt'][:, None], (zl+zh)/2*ok, torch.maximum(zl, zh)*ok, ok], 1)
            seqs.append(f.T)
        L = max(q.shape[1] for q in seqs)
        x = torch.stack([torch.nn.functional.pad(q, (0, L - q.shape[1])) for q in seqs])
        return s.conv(x)[:, 0, :]
def totorch(st, mean, scale):
    return dict(xt=torch.from_numpy((st['x']-mean)/scale), lot=torch.from_numpy(st['lo']), hit=torch.from_numpy(st['hi']),
                okt=torch.from_numpy(st['ok']), cnnt=torch.from_numpy(st['cnn']), yamt=torch.from_numpy(st['yam']), y=st['y'])
def fit(idx, seed=1):
    torch.manual_seed(seed)
    x = np.concatenate([TR[i]['x'] for i in idx]); mean = x.mean(0); scale = x.std(0)+1e-3
    data = [totorch(TR[i], mean, scale) for i in idx]
    yall = np.concatenate([d['y'] for d in data]); pos = (yall==1).mean(); neg=(yall==0).mean()
    net = Net(x.shape[1], a.proj, a.width, [int(d) for d in a.dil.split(',')])
    opt = torch.optim.AdamW(net.parameters(), 2e-3, weight_decay=1e-2)
    g = np.random.default_rng(seed)
    for ep in range(a.epochs):
        order = g.permutation(len(data)); tot=0
        net.train()
        for k in range(0, len(order), 32):
            b = [data[j] for j in order[k:k+32]]
            out = net(b)
            L = out.shape[1]
            y = torch.stack([torch.nn.functional.pad(torch.from_numpy(d['y']), (0, L-len(d['y'])), value=-1) for d in b])
            w = torch.where(y==1, 0.5/pos, torch.where(y==0, 0.5/neg, torch.zeros(())))
            loss = torch.nn.functional.binary_cross_entropy_with_logits(out, (y==1).float(), weight=w, reduction='sum')/w.gt(0).sum()
            opt.zero_grad(); loss.backward(); opt.step(); tot += loss.item()
    net.eval()
    return net, mean, scale
def score(net, mean, scale, st):
    with torch.no_grad():
        return torch.sigmoid(net([totorch(st, mean, scale)])[0]).numpy()
sources = sorted({m['source'] for m in clean.meta})
if a.folds:
    rng = np.random.default_rng(0); perm = rng.permutation(len(sources))
    fold_of_source = {sources[p]: f'g{k % a.folds}' for k, p in enumerate(perm)}
else:
    fold_of_source = {s: s for s in sources}
folds = sorted(set(fold_of_source.values()))
if a.only: folds = [f for f in folds if f in a.only.split(',')]
clean_scores = {}; scape_scores = {}
t0 = time.time()
for k, f in enumerate(folds):
    held = {s for s, g in fold_of_source.items() if g == f}
    idx = [i for i, m in enumerate(train.meta) if m['source'] not in held and not (held & set(m['background_sources']))]
    net, mean, scale = fit(idx)
    for i, m in enumerate(clean.meta):
        if m['source'] in held: clean_scores[i] = score(net, mean, scale, CL[i])
    for i, m in enumerate(scapes.meta):
        if m['source'] in held: scape_scores[i] = score(net, mean, scale, SC[i])
    print(f'fold {k+1}/{len(folds)} {f} {len(idx)} streams {time.time()-t0:.0f}s', flush=True)
np.savez(a.out, **{f'c{i}': v for i, v in clean_scores.items()}, **{f's{i}': v for i, v in scape_scores.items()})
# clip figures
lab = np.array([clean.meta[i]['is_dog'] for i in clean_scores]); sc = np.array([v.max(initial=0) for v in clean_scores.values()])
corp = np.array([clean.meta[i]['source'].split('/')[0] for i in clean_scores])
print('clip AUPRC', round(average_precision(lab, sc), 4), 'R@2%', round(recall_at_far(lab, sc, .02)[0], 3),
      'extra', round(average_precision(lab[corp=='extra'], sc[corp=='extra']), 4))
TH = THRESHOLDS + ((0.995, 0.95), (0.998, 0.98))
for on, off in TH:
    cnt = {}; fa = 0; hours = 0
    for i, v in scape_scores.items():
        m = scapes.meta[i]; s0, s1 = int(scapes.step_offsets[i]), int(scapes.step_offsets[i+1])
        est = spans_of(v, on, off)
        if m['kind'] == 'confusers': fa += len(est); hours += m['duration_s']/3600; continue
        ref = reference_spans(scapes.step_labels[s0:s1], 0.5, 0.1)
        c = event_counts(ref, est, 0.25); g = segment_counts(ref, est, m['duration_s'])
        t = cnt.setdefault(m['snr_db'], [0]*6)
        for j, val in enumerate((c.tp, c.fp, c.fn, g.tp, g.fp, g.fn)): t[j] += val
    print(on, off, ' '.join(f"{s:+.0f}:{_f1(*cnt[s][:3])}/{_f1(*cnt[s][3:])}" for s in sorted(cnt)), 'FA/h', round(fa/max(hours,1e-9), 2), flush=True)

"""Try fusion formulas on cached LOSO heads: clip figures and soundscape events."""
import sys, numpy as np, time
from pathlib import Path
from training.head_data import StreamSet, reference_spans
from training.head_eval import spans_of, _f1, fold_heads, out_of_fold, THRESHOLDS
from training.head import HeadRecipe, patch_starts_s
from analyzer.detect.head import DogHead, step_head_scores
from analyzer.offline import event_counts, average_precision, recall_at_far
from analyzer.offline.evaluate import segment_counts
C = '/root/.cache/barkwatch/head/'
train = StreamSet.load(C+'train-v2-s1-d3-o1-644f499f7a67.npz')
clean = StreamSet.load(C+'clean-644f499f7a67.npz')
scapes = StreamSet.load(C+'soundscapes-s1-644f499f7a67.npz')
folds = sorted({m['source'] for m in clean.meta})
heads = fold_heads(train, folds, HeadRecipe(), 'source', Path(C+'heads-train-v2-s1-d3-o1-logistic-emb+ys-e8-644f499f7a67'))
un = DogHead()
def parts(ds, i, hp):
    p0, p1 = int(ds.patch_offsets[i]), int(ds.patch_offsets[i+1]); s0, s1 = int(ds.step_offsets[i]), int(ds.step_offsets[i+1])
    st = patch_starts_s(p1-p0)
    yam = un.patch_scores(ds.emb[p0:p1].astype(np.float32), ds.ys[p0:p1])
    return ds.cnn[s0:s1], step_head_scores(st, hp, s1-s0), step_head_scores(st, yam, s1-s0)
hc = out_of_fold(heads, clean); hs = out_of_fold(heads, scapes)
CP = {i: parts(clean, i, hc[i]) for i in range(len(clean.meta))}
SP = {i: parts(scapes, i, hs[i]) for i in range(len(scapes.meta))}
np.save('/tmp/fusion_parts_ok', 1)
import pickle; pickle.dump((CP, SP), open('/tmp/fusion_parts.pkl', 'wb'))

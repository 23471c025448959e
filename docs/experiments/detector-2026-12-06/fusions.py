import sys, pickle, numpy as np
sys.path.insert(0, "/work/main")
from training.head_eval import clip_figures
d = pickle.load(open(sys.argv[1], "rb")); y = np.array(d["labels"])
lg = lambda p: np.log(np.clip(p, 1e-6, 1 - 1e-6) / (1 - np.clip(p, 1e-6, 1 - 1e-6)))
for cond in ("clean", "+10", "+0"):
    rows = d[cond]
    combos = {"dg": [r[0].max() for r in rows], "ys": [r[1].max() for r in rows],
              "max(dg,ys)": [np.maximum(r[0], r[1]).max() for r in rows],
              "mean logit": [(0.5 * lg(r[0]) + 0.5 * lg(r[1])).max() for r in rows],
              "0.7dg+0.3ys": [(0.7 * lg(r[0]) + 0.3 * lg(r[1])).max() for r in rows],
              "noisy-or": [(1 - (1 - r[0]) * (1 - r[1])).max() for r in rows]}
    for k, s in combos.items():
        f = clip_figures(y, np.array(s)); print(cond, k, f["auprc"], f["recall_at_1%_fa"], f["recall_at_2%_fa"], f["recall_at_5%_fa"])

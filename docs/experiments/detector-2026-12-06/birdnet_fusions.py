import sys, pickle, numpy as np
sys.path.insert(0, "/work/main")
from training.head_eval import clip_figures
d = pickle.load(open(sys.argv[1], "rb")); b = pickle.load(open(sys.argv[2], "rb")); y = np.array(d["labels"])
lg = lambda p: np.log(np.clip(p, 1e-6, 1 - 1e-6) / (1 - np.clip(p, 1e-6, 1 - 1e-6)))
print("bn logit range", np.percentile(b["clean"], [5, 50, 95]))
for cond in ("clean", "+10", "+0"):
    rows = d[cond]; bn = np.array(b[cond])
    dg = np.array([lg(r[0]).max() for r in rows]); ys = np.array([lg(r[1]).max() for r in rows])
    combos = {"dg": dg, "ys": ys, "birdnet": bn, "dg+bn": 0.5 * dg + 0.5 * bn, "dg+ys+bn": (dg + ys + bn) / 3,
              "max(dg,bn)": np.maximum(dg, bn)}
    for k, s in combos.items():
        f = clip_figures(y, s); print(cond, k, f["auprc"], f["recall_at_1%_fa"], f["recall_at_2%_fa"], f["recall_at_5%_fa"])

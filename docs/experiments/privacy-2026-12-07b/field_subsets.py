"""The voices / words attack on subsets of the fields, from a privacy run's feature cache.

    .venv/bin/python docs/experiments/privacy-2026-12-07b/field_subsets.py voices CACHE_DIR
"""
import glob
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import training.privacy_features as pf  # noqa: E402
from training.privacy_attacks import evaluate  # noqa: E402
from training.privacy_features import LEVEL, load_features  # noqa: E402

attack, cache = sys.argv[1], sys.argv[2]
pf.GROUPS.update({
    "dog_s": frozenset({"dog_steps"}), "dg": frozenset({"patch_dog_scores"}),
    "pd": frozenset({"patch_head_scores"}),
    "dg+pd": frozenset({"patch_dog_scores", "patch_head_scores"}),
    "levels+dog_s": frozenset({LEVEL, "dog_steps"}),
    "levels+dg+pd": frozenset({LEVEL, "patch_dog_scores", "patch_head_scores"}),
    "all but dog_s": frozenset(set().union(*[g for g in pf.GROUPS.values() if g])
                               | {"patch_head_scores", "bands_db"}) - {"dog_steps"},
})
for path in sorted(glob.glob(cache + '/features-*.npz')):
    f = load_features(path)
    print(path, f.frame_kinds)
    groups = ["all", "dog_s", "dg", "pd", "dg+pd", "levels", "levels+dog_s", "levels+dg+pd",
              "all but dog_s"]
    out = evaluate(f, attack, ["logreg"], groups, 1, control=False, adapt=False)
    for g, e in out["groups"].items():
        print(f"  {g:16s} {e['logreg']['mean']:.3f}  cols {e['columns']}")

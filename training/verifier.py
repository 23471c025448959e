"""The event verifier's model from scikit-learn's gradient-boosted trees
(:class:`analyzer.detect.verifier.VerifierModel`: plain arrays, evaluated with numpy)."""

from __future__ import annotations

from typing import Any

import numpy as np

from analyzer.detect.verifier import FEATURES, VerifierModel


def verifier_model(classifier: Any, version: str, keep_at: float, on_threshold: float,
                   off_threshold: float) -> VerifierModel:
    """A fitted binary ``HistGradientBoostingClassifier`` over :data:`FEATURES` (no missing
    values, no categorical features) as a :class:`VerifierModel`."""
    if classifier.n_features_in_ != len(FEATURES):
        raise ValueError(f"the classifier has {classifier.n_features_in_} features, the "
                         f"verifier {len(FEATURES)}")
    trees = [predictors[0].nodes for predictors in classifier._predictors]
    if any(t["is_categorical"].any() for t in trees):
        raise ValueError("categorical splits are not supported")
    width = max(t.size for t in trees)

    def padded(name: str, dtype: Any) -> np.ndarray:
        out = np.zeros((len(trees), width), dtype)
        for k, tree in enumerate(trees):
            out[k, :tree.size] = tree[name]
        return out

    return VerifierModel(
        version, float(np.ravel(classifier._baseline_prediction)[0]),
        padded("feature_idx", np.int64), padded("num_threshold", np.float64),
        padded("left", np.int64), padded("right", np.int64), padded("is_leaf", bool),
        padded("value", np.float64), keep_at, on_threshold, off_threshold)

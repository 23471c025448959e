"""The dog head, as the analyzer names it: it runs on the sensor since wire v4 (issue 34).

The head lives in :mod:`sensor.dog_head`: the sensor computes each patch's dog score from
YAMNet's embedding and class scores and sends the score, not the embedding; the analyzer fuses
it with the CNN's step scores (:meth:`DogHead.fuse`) and, for frames that still hold the
embeddings in memory (offline training and evaluation), may score them with another head.
"""

from __future__ import annotations

from sensor.dog_head import (
    DEFAULT_HEAD_PATH,
    DEFAULT_VERSION,
    FUSION_KINDS,
    MODELS_DIR,
    PATCH_S,
    STEP_S,
    DogHead,
    capped_by_yamnet,
    logit,
    step_head_scores,
)

# The head the analyzer fuses with when ``[detector] head_path`` is empty (issue 39): the
# sensor's fine-tuned score (``dg``) and the CNN's in log-odds, events at 0.9 / 0.7
# (models/MODEL_CARD.md). The sensor's own head (``DEFAULT_HEAD_PATH``, v4) still makes ``pd``.
ANALYZER_HEAD_PATH = MODELS_DIR / "dog_head.v5-fused.npz"

__all__ = ["ANALYZER_HEAD_PATH", "DEFAULT_HEAD_PATH", "DEFAULT_VERSION", "FUSION_KINDS",
           "PATCH_S", "STEP_S", "DogHead", "capped_by_yamnet", "logit", "step_head_scores"]

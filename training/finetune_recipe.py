"""Fine-tuning YAMNet's top blocks for dog vocalisations on this CPU, judged on left-out sources
(issue 39, first step: does adapting the network beat untouched YAMNet on sources it never saw?).

Recipe:

- **Examples.** Every clip of the corpora (train/, extra/, dogs/) as recorded, plus
  ``copies`` copies placed as a dog next door is heard: 5-60 m away, with ISO 9613-1 air
  absorption over that distance (10 degC, 70 % RH; ``analyzer.acoustics.absorption_db_per_m``,
  applied per FFT bin), a ground reflection (source 0.5 m, microphone 2 m above grass,
  reflection factor 0.6-0.9, its delay from the path difference), reverberation half the time
  (``training.augment``), mixed into a real background bed at -5..+20 dB SNR (RMS over the
  clip; with ``snr_of = "bark"``, of the clip's prominent steps over the bed, as the
  soundscapes measure a bark's own SNR) with the microphone's self-noise (-85..-75 dBFS
  white). Spherical spreading only changes the level, which the SNR draw sets. Other sounds
  are placed the same way, so being mixed says nothing about being a dog; ``other_copies``
  of each of them (hard negatives: the confusions that cost false alarms are placed
  animals, voices and machines), and
  ``bed_pieces`` 10 s pieces of the training beds alone, with self-noise (a city street
  with nothing in it must score no dog either; a clip is cut at 10 s, so a long bed
  otherwise gives only its first 10 s), and ``voiced_copies`` more placed copies of each
  dog clip (``voiced_other_copies`` of each other clip) with a voice near the microphone over
  it (a speech clip of a training source, the clip -3..+10 dB over it, starting up to 0.5 s
  before: a bark under a passer-by's words, which the sensor's privacy gate and the judge's
  ``--voiced`` scene meet; voices over other clips too, so that a voice says nothing about a
  dog; only with ``--export``, where the held-out fold's voices are known to be out). Beds
  come from background recordings that are never used for evaluation
  (``training.head_data.is_held_out_background``).
- **Cache.** YAMNet's convolutions up to separable block ``train_from`` run once per patch
  (``sensor.yamnet_features.clip_patches``), their output kept as float16.
- **Training.** The blocks from ``train_from`` on and a new dog output (1,024 -> 1, started
  from YAMNet's "Dog" class, so the network starts where YAMNet is) are trained with a
  multiple-instance loss: an example's logit is the largest of its patches' (a dog clip need
  only hold a dog somewhere; a clip of something else must hold none), binary cross-entropy,
  the two classes weighted equally, Adam.
- **Judged leaving sources out.** Sources (``corpus/source``) go to ``folds`` folds by a stable
  hash; each fold's network is trained without the fold's sources and their clips' copies,
  then scores them: as recorded, and placed 30 m away in held-out beds at 0 and +10 dB. Clip
  score: the largest patch score. Untouched YAMNet (the largest of its dog classes' scores)
  is scored on the same patches.
"""

from __future__ import annotations

from dataclasses import dataclass

SNR_OF = ("clip", "bark")  # what a training copy's SNR is of (Recipe.snr_of)


@dataclass(frozen=True)
class Recipe:
    """What one fine-tuning run does (printed with its figures)."""

    copies: int = 2  # placed copies of each dog clip
    other_copies: int = 2  # placed copies of each clip of anything else (hard negatives)
    bed_pieces: int = 0  # 10 s pieces of training beds alone, as examples of no dog
    train_from: int = 12  # first trained separable block (1-13)
    epochs: int = 3
    batch_examples: int = 32
    learning_rate: float = 1e-4
    head_learning_rate: float = 1e-3
    folds: int = 5
    seed: int = 1  # every draw, and the sources' folds
    training_seed: int = 0  # when not 0: the training copies' and the training's draws
    threads: int = 2  # PyTorch threads
    snr_of: str = "clip"  # a training copy's SNR: of the whole clip's RMS, or "bark" (below)
    voiced_copies: int = 0  # placed copies of each dog clip with a training voice over it
    voiced_other_copies: int = 0  # the same of each clip of anything else

    @property
    def draw_seed(self) -> int:
        """The seed of the training copies, the beds alone and the training itself: another
        ``training_seed`` trains the same recipe again on the same folds (and judges it on
        the same evaluation copies), to tell a difference from training noise."""
        return self.training_seed or self.seed

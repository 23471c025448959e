"""The speech gate (issue 34, wire v3): what each second may carry off the sensor.

Wire v2 carried per-second band spectra, 0.5 s envelopes, the CNN's 20 ms dog scores and
YAMNet's embeddings and class scores in every second; from those an attacker told which of ten
spoken digits was said two times in three and who was speaking (docs/PRIVACY.md). The sensor
already runs YAMNet, whose speech classes say when someone speaks. Per frame:

- **dog**: dog activity in this second or the one before (the CNN's score of any 20 ms step,
  the fine-tuned network's or YAMNet's dog classes' score of any patch the frame carries, at
  or above the gate's thresholds, set well below the detector's): everything, as wire v2 —
  what the analyzer needs for the event and its level 100 ft away;
- **speech**: no dog activity, and a patch of this frame or of the one before scores at or
  above ``speech_threshold`` on one of YAMNet's speech and voice classes: the levels a sound
  level meter's display shows for the second (LAeq, LCeq, LZeq, LAFmax/min, LASmax, the
  running percentiles), no spectrum, no envelope, no score;
- **quiet**: neither: the levels with the band spectrum and envelopes (the background of the
  audibility estimate), no score and no patch (nothing to find there).

A frame's patches reach about a second past its end (those completed with the next second,
:mod:`sensor.wire`), so "the frame's patches" look ahead; "the one before" holds the decision
over the second after speech or a bark. Pure logic over frames; the class indices come from
YAMNet's class map.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from sensor.configfile import setting
from sensor.wire import GATE_DOG, GATE_QUIET, GATE_SPEECH, Frame

# YAMNet's classes of a human voice: speech, its kinds, shouting, whispering and singing (words
# can be sung). Laughter and crying carry no words and are left out.
SPEECH_CLASSES = (
    "Speech", "Child speech, kid speaking", "Conversation", "Narration, monologue", "Babbling",
    "Speech synthesizer", "Shout", "Bellow", "Whoop", "Yell", "Children shouting", "Screaming",
    "Whispering", "Singing", "Choir", "Yodeling", "Chant", "Mantra", "Male singing",
    "Female singing", "Child singing", "Synthetic singing", "Rapping", "Humming",
)


@dataclass(frozen=True)
class GateSettings:
    """Thresholds of the speech gate (sensor configuration ``[privacy]``).

    Dog activity is judged on the sensor's own scores with thresholds below what any of the
    project's detectors needs for an event, so every second that could hold one leaves whole:
    the bundled head (v4) min-fuses with the CNN and ends events below 0.75, so an event needs
    the CNN at 0.75 (gate 0.3); the fine-tuned network alone (v5) needs its score at 0.8 (gate
    0.5; street noise reaches 0.41); v5-fused, sigmoid of the mean of the two logits at 0.7,
    needs the CNN at 0.84 when the fine-tuned score is at most 0.5; untouched YAMNet, its dog
    classes (gate 0.2). Speech: YAMNet's score of a voice class (0..1). There is no switch to
    turn the gate off."""

    speech_threshold: float = setting(
        0.2, "a patch whose score of a voice class (YAMNet) reaches this is speech", 0.01, 0.99)
    cnn_threshold: float = setting(
        0.3, "dog activity: the small CNN's score of a 20 ms step reaches this", 0.01, 0.99)
    patch_dog_threshold: float = setting(
        0.5, "dog activity: the fine-tuned network's score of a patch reaches this", 0.01, 0.99)
    yamnet_dog_threshold: float = setting(
        0.2, "dog activity: YAMNet's score of a dog class reaches this", 0.01, 0.99)


def class_indices(names: tuple[str, ...], wanted: tuple[str, ...]) -> np.ndarray:
    """Output indices of the classes of ``wanted`` that ``names`` has."""
    return np.array([names.index(name) for name in wanted if name in names], dtype=np.int64)


class SpeechGate:
    """Decides each frame's gate in capture order. A frame is decided once the next one is
    known (:meth:`push` returns it then; :meth:`flush` decides the last), so dog activity
    and speech in the second before or after count: the analyzer's smoothing and its patches
    reach a little into the neighbouring seconds, and so does a word's start or end."""

    def __init__(self, class_names: tuple[str, ...], dog_classes: np.ndarray,
                 settings: GateSettings | None = None) -> None:
        self.settings = settings or GateSettings()
        self.speech_indices = class_indices(class_names, SPEECH_CLASSES)
        if self.speech_indices.size == 0:
            raise ValueError("YAMNet's class map has none of the speech classes")
        self.dog_indices = np.asarray(dog_classes, dtype=np.int64)
        self.reset()

    def reset(self) -> None:
        """Forget the frames before (lost samples: a new segment; flush first)."""
        self._held: Frame | None = None
        self._held_marks = (False, False)  # (dog activity, speech) of the frame held
        self._before_marks = (False, False)  # of the frame before it

    def dog_activity(self, frame: Frame) -> bool:
        """Whether any of the sensor's dog scores in ``frame`` reaches its threshold."""
        s = self.settings
        if frame.dog_steps.size and float(frame.dog_steps.max()) >= s.cnn_threshold:
            return True
        tuned = frame.patch_dog_scores
        if tuned is not None and tuned.size and float(tuned.max()) >= s.patch_dog_threshold:
            return True
        scores = frame.class_scores
        return bool(len(scores) and float(scores[:, self.dog_indices].max())
                    >= s.yamnet_dog_threshold)

    def speech(self, frame: Frame) -> bool:
        """Whether a patch of ``frame`` scores a voice class at or above the threshold."""
        scores = frame.class_scores
        return bool(len(scores) and float(scores[:, self.speech_indices].max())
                    >= self.settings.speech_threshold)

    def push(self, frames: list[Frame]) -> list[Frame]:
        """Take frames in capture order; return those now decided (one behind)."""
        decided = []
        for frame in frames:
            marks = (self.dog_activity(frame), self.speech(frame))
            if self._held is not None:
                decided.append(self._decide(marks))
            self._held, self._held_marks = frame, marks
        return decided

    def flush(self) -> list[Frame]:
        """The frame held, decided without a next one (end of a stream or a gap)."""
        decided = [self._decide((False, False))] if self._held is not None else []
        self.reset()
        return decided

    def _decide(self, after: tuple[bool, bool]) -> Frame:
        assert self._held is not None
        marks = (self._before_marks, self._held_marks, after)
        dog, speech = any(m[0] for m in marks), any(m[1] for m in marks)
        gate = GATE_DOG if dog else GATE_SPEECH if speech else GATE_QUIET
        frame = dataclasses.replace(self._held, gate=gate)
        self._before_marks = self._held_marks
        return frame

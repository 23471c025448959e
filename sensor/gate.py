"""The speech gate (issue 34, wire v4): what each second may carry off the sensor.

Wire v2 carried per-second band spectra, 0.5 s envelopes, the CNN's 20 ms dog scores and
YAMNet's embeddings and class scores in every second; from those an attacker told which of ten
spoken digits was said two times in three and who was speaking (docs/PRIVACY.md). Wire v3 kept
spectra in seconds without speech and everything in seconds with "dog activity" judged by the
CNN alone, which passes speech: digits were still told apart 39-54 % of the time. Now each
second is judged by the score the detector reads, and only a dog's second carries more than
levels (and, if configured, a candidate's: its dog scores):

- **dog**: in this second or a neighbour, the fused score of a bundled detector reaches its
  threshold at some 20 ms step — the sensor's dog head (its patch score ``pd``, fused with the
  CNN as the head file says), and, on a sensor that runs the fine-tuned network, the detectors
  that read its score (``dg``: ``models/dog_head.v5*.npz``) — or YAMNet's own dog classes reach
  ``yamnet_dog_threshold``. A detector's threshold is its own event off-threshold less
  ``event_margin`` (0.1; at least ``fused_threshold``, 0.5): an event spans only steps at or
  over the off-threshold, the CNN's score is taken at its highest over the analyzer's smoothing
  window, and the neighbours cover the analyzer's merging of events 0.5 s apart, so a second
  that could hold an event leaves whole (the same events gated and whole:
  ``benchmarks/gate_cost.py``). It carries what the analyzer needs for the event and its level
  100 ft away (:mod:`sensor.wire`), not YAMNet's embeddings or class scores;
- **scores** (only with ``candidate_scores``, off by default): no dog activity and no voice in
  the second or a neighbour, but a **candidate**: the fused score of the detector whose
  candidates the analyzer's event verifier judges (v5-fused, from 0.3) reaches
  ``candidate_threshold`` (0.25). It carries the dog scores (``dog_s``, ``pd``, ``dg``) and the
  A-weighted levels, no spectrum and no envelopes, so the verifier sees the candidate. Off by
  default because the bundled verifier learnt from frames without them: with them it kept 3
  false candidates in 2.3 hours of confuser bouts where it kept none (docs/PRIVACY.md). A
  candidate under a voice leaves as levels either way: which voice seconds reach a candidate's
  score, with those scores, told the game's voices apart 23 % of the time (goal at most 22.5 %);
- **speech**: no dog activity (a candidate or not), and a patch of this frame or a neighbour
  scores at or above ``speech_threshold`` on one of YAMNet's speech and voice classes;
- **quiet**: none of them.

Speech and quiet seconds both leave as ``levels`` (the A-weighted levels a sound level meter
shows, nothing more), so the stream does not say when someone spoke; the difference stays on
the sensor, where the band spectra of the bark-free seconds make the background statistics
(:class:`BackgroundStatistics`: every 10 s, per band, the L90 over those of the last ten minutes)
that the audibility estimate needs. Pure logic over frames; the class indices come
from YAMNet's class map.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import dataclass

import numpy as np
from scipy.ndimage import maximum_filter1d

from sensor.configfile import setting
from sensor.dog_head import DogHead, cached_head, step_head_scores
from sensor.wire import GATE_DOG, GATE_QUIET, GATE_SCORES, GATE_SPEECH, BandBackground, Frame
from sensor.yamnet_network import MODELS_DIR

# The detectors that read the fine-tuned network's patch score (wire ``dg``), judged beside the
# sensor's own head when the sensor runs that network.
TUNED_HEAD_FILES = ("dog_head.v5.npz", "dog_head.v5-fused.npz")
# The detector whose candidates the analyzer's bundled event verifier judges: the analyzer's
# default head (analyzer.detect.head.ANALYZER_HEAD_PATH; tests/test_speech_gate.py checks).
CANDIDATE_HEAD_FILE = "dog_head.v5-fused.npz"
# The CNN's score is taken at its highest over this many 20 ms steps: at least the analyzer's
# smoothing (a centred mean over 0.1 s, analyzer.detect.settings), whose value it bounds.
SMOOTHING_STEPS = 5
NO_MARKS = (False, False, False)  # a frame's marks (dog activity, candidate, speech): none
# A second is bark-free, for the background statistics, when the sensor's own head's fused
# score stays under this: the analyzer's audibility.bark_free_score (its background's seconds).
BARK_FREE_SCORE = 0.3

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

    Dog activity is judged on each detector's own fused score, from its event off-threshold
    less ``event_margin`` (the sensor's head ends events below 0.75, v5 below 0.8, v5-fused
    below 0.7: 0.65, 0.7, 0.6), so every second that could hold an event leaves whole; on
    speech the sensor's head's fused score stays under 0.12 and v5-fused's reaches 0.5 in 1 %
    of seconds (docs/PRIVACY.md). Speech: YAMNet's score of a voice class (0..1). There is no
    switch to turn the gate off."""

    speech_threshold: float = setting(
        0.2, "a patch whose score of a voice class (YAMNet) reaches this is speech", 0.01, 0.99)
    fused_threshold: float = setting(
        0.5, "dog activity: a detector's fused score of a 20 ms step reaches this (or, for a "
        "detector with event thresholds, its off-threshold less event_margin if higher)",
        0.01, 0.99)
    event_margin: float = setting(
        0.1, "dog activity: a detector with event thresholds counts from its off-threshold "
        "less this (a step under its off-threshold is in none of its events)", 0.0, 0.99)
    yamnet_dog_threshold: float = setting(
        0.2, "dog activity: YAMNet's score of a dog class reaches this", 0.01, 0.99)
    candidate_scores: bool = setting(
        False, "send a candidate's second without dog activity or a voice as a \"scores\" "
        "frame (dog scores and A-weighted levels, no spectrum), so the analyzer's event "
        "verifier sees it; off while the bundled verifier has not learnt from such frames")
    candidate_threshold: float = setting(
        0.25, "with candidate_scores: a candidate is a 20 ms step where the fused score of the "
        "detector whose candidates the analyzer's event verifier judges (v5-fused, from 0.3) "
        "reaches this", 0.01, 0.99)
    background_s: int = setting(
        10, "seconds between the background statistics (the L90 of each band)", 1, 3600)
    background_window_s: int = setting(
        600, "quiet seconds of the last this many seconds make each statistic (the analyzer's "
        "audibility.background_window_s)", 10, 3600)


def class_indices(names: tuple[str, ...], wanted: tuple[str, ...]) -> np.ndarray:
    """Output indices of the classes of ``wanted`` that ``names`` has."""
    return np.array([names.index(name) for name in wanted if name in names], dtype=np.int64)


def tuned_heads() -> tuple[DogHead, ...]:
    """The bundled detectors that read the fine-tuned network's score (those present)."""
    return tuple(cached_head(str(MODELS_DIR / name)) for name in TUNED_HEAD_FILES
                 if (MODELS_DIR / name).is_file())


class SpeechGate:
    """Decides each frame's gate in capture order. A frame is decided once the next one is
    known (:meth:`push` returns it then; :meth:`flush` decides the last), so dog activity
    and speech in the second before or after count: the analyzer's smoothing, its merging and
    its patches reach into the neighbouring seconds, and so does a word's start or end. The
    frames decided carry the background statistics (:class:`BackgroundStatistics`)."""

    def __init__(self, class_names: tuple[str, ...], dog_classes: np.ndarray,
                 settings: GateSettings | None = None, head: DogHead | None = None,
                 tuned: tuple[DogHead, ...] | None = None) -> None:  # fmt: skip
        self.settings = settings or GateSettings()
        self.speech_indices = class_indices(class_names, SPEECH_CLASSES)
        if self.speech_indices.size == 0:
            raise ValueError("YAMNet's class map has none of the speech classes")
        self.dog_indices = np.asarray(dog_classes, dtype=np.int64)
        self.head = head or cached_head()
        self.tuned = tuned_heads() if tuned is None else tuned
        # per detector (the sensor's own head, then the tuned ones): the fused score from which
        # a step counts as dog activity
        self.thresholds = tuple(self._threshold(h) for h in (self.head, *self.tuned))
        # per detector: whether its candidates are judged (``candidate_threshold``)
        candidate_file = MODELS_DIR / CANDIDATE_HEAD_FILE
        judged = cached_head(str(candidate_file)).version if candidate_file.is_file() else None
        self.judged = tuple(h.version == judged for h in (self.head, *self.tuned))
        self.backgrounds = BackgroundStatistics(self.settings.background_s,
                                             self.settings.background_window_s)
        self.reset()

    def _threshold(self, head: DogHead) -> float:
        """Dog activity for ``head``: ``fused_threshold``, or its off-threshold less
        ``event_margin`` where that is higher. An event spans only steps at or over the
        off-threshold; the margin covers the wire's float16 scores and the CNN's smoothing
        (taken at its highest, :data:`SMOOTHING_STEPS`)."""
        s = self.settings
        if head.off_threshold is None:
            return s.fused_threshold
        return max(s.fused_threshold, float(head.off_threshold) - s.event_margin)

    def reset(self) -> None:
        """Forget the frames before (lost samples: a new segment; flush first)."""
        self._held: Frame | None = None
        self._held_marks = NO_MARKS  # the marks of the frame held
        self._held_bark_free = True  # the frame held: the sensor's head scores it bark-free
        self._before_marks = NO_MARKS  # of the frame before it
        self._before: Frame | None = None  # the frame before the one being marked
        self.backgrounds.reset()

    def dog_activity(self, frame: Frame, before: Frame | None = None) -> bool:
        """Whether a detector's fused score reaches the threshold at a step of ``frame``
        (with the patches of ``frame`` and of ``before``, which may cover its first steps), or
        YAMNet's dog classes do in one of its patches."""
        return self._dog_activity(frame, self.fused_scores(frame, before))

    def _dog_activity(self, frame: Frame, fused: tuple[float, ...]) -> bool:
        s = self.settings
        scores = frame.class_scores
        if len(scores) and float(scores[:, self.dog_indices].max()) >= s.yamnet_dog_threshold:
            return True
        return any(score >= threshold
                   for score, threshold in zip(fused, self.thresholds, strict=False))

    def fused_scores(self, frame: Frame, before: Frame | None = None) -> tuple[float, ...]:
        """The highest fused score over the steps of ``frame`` of the sensor's own head and of
        each detector that reads the fine-tuned network (0 for those the frame lacks)."""
        n = frame.dog_steps.size
        frames = [f for f in (before, frame) if f is not None and len(f.patch_head_scores)]
        if n == 0 or not frames:
            return (0.0,)
        starts = np.concatenate([(f.patch_starts_ns - frame.capture_ns) / 1e9 for f in frames])
        cnn = maximum_filter1d(frame.dog_steps.astype(np.float64), SMOOTHING_STEPS)
        own = step_head_scores(starts, np.concatenate([f.patch_head_scores for f in frames]),
                               n, frame.hop_s)
        fused = [float(self.head.fuse(cnn, own).max())]
        if self.tuned and all(f.patch_dog_scores is not None for f in frames):
            tuned = step_head_scores(starts, np.concatenate(
                [f.patch_dog_scores for f in frames if f.patch_dog_scores is not None]), n,
                frame.hop_s)
            fused += [float(head.fuse(cnn, tuned).max()) for head in self.tuned]
        return tuple(fused)

    def candidate(self, fused: tuple[float, ...]) -> bool:
        """With ``candidate_scores``, whether the fused score (:meth:`fused_scores`) of the
        detector whose candidates the analyzer's event verifier judges reaches
        ``candidate_threshold``."""
        return self.settings.candidate_scores and any(
            judged and score >= self.settings.candidate_threshold
            for score, judged in zip(fused, self.judged, strict=False))

    def speech(self, frame: Frame) -> bool:
        """Whether a patch of ``frame`` scores a voice class at or above the threshold."""
        scores = frame.class_scores
        return bool(len(scores) and float(scores[:, self.speech_indices].max())
                    >= self.settings.speech_threshold)

    def push(self, frames: list[Frame]) -> list[Frame]:
        """Take frames in capture order; return those now decided (one behind)."""
        decided = []
        for frame in frames:
            fused = self.fused_scores(frame, self._before)
            marks = (self._dog_activity(frame, fused), self.candidate(fused),
                     self.speech(frame))
            bark_free = fused[0] < BARK_FREE_SCORE
            self._before = frame
            if self._held is not None:
                decided.append(self._decide(marks))
            self._held, self._held_marks, self._held_bark_free = frame, marks, bark_free
        return decided

    def flush(self) -> list[Frame]:
        """The frame held, decided without a next one (end of a stream or a gap), with the
        background statistics of the span it ends."""
        decided = []
        if self._held is not None:
            decided = [self.backgrounds.close(self._decide(NO_MARKS))]
        self.reset()
        return decided

    def _decide(self, after: tuple[bool, bool, bool]) -> Frame:
        assert self._held is not None
        dog, candidate, speech = (
            any(m[i] for m in (self._before_marks, self._held_marks, after)) for i in range(3))
        if dog:
            gate = GATE_DOG
        elif speech:
            gate = GATE_SPEECH
        else:
            gate = GATE_SCORES if candidate else GATE_QUIET
        frame = self.backgrounds.add(dataclasses.replace(self._held, gate=gate),
                                     bark_free=self._held_bark_free)
        self._before_marks = self._held_marks
        return frame


class BackgroundStatistics:
    """The background statistics the frames carry: every ``every_s`` seconds (the first time
    after ``FIRST_S``), per band, the L90 (the level exceeded 90 % of the time) of the 1 s band
    Leq over the bark-free seconds of the last ``window_s`` — those the sensor's head scores
    under the analyzer's ``bark_free_score``, speech or not: the seconds the analyzer's own
    background counts — computed where the spectra are. They ride on the frame decided next
    (:meth:`add`), or on the last frame of a stream or segment (:meth:`close`); without a
    bark-free second there are none. An L90 over ten minutes moves only when a second quieter
    than it comes or goes: it says nothing of what was said."""

    FIRST_S = 10  # the first statistics, so that a stream's first barks have a background

    def __init__(self, every_s: int, window_s: int) -> None:
        self.every_ns, self.window_ns = every_s * 10**9, window_s * 10**9
        self.reset()

    def reset(self) -> None:
        self._quiet: deque[tuple[int, np.ndarray]] = deque()  # (capture ns, bands)
        self._first_index = 0
        self._next_ns: int | None = None  # when the next statistics are due
        self._sent = False  # whether the latest quiet second is in statistics sent

    def add(self, frame: Frame, bark_free: bool) -> Frame:
        """Take a decided frame (``bark_free``: the sensor's head scores it under
        ``BARK_FREE_SCORE``, whatever its neighbours had or whether someone spoke); return it,
        with the statistics when they are due."""
        if self._next_ns is None:
            self._next_ns = frame.capture_ns + self.FIRST_S * 10**9
        out = frame
        if frame.capture_ns >= self._next_ns:
            out = self._attached(frame)
            self._next_ns = frame.capture_ns + self.every_ns
        self._take(frame, bark_free)
        return out

    def close(self, frame: Frame) -> Frame:
        """The last frame of a stream or segment (already taken by :meth:`add`), with the
        statistics of the quiet seconds since those last sent, if any."""
        closed = frame
        if frame.background is None and not self._sent:
            closed = self._attached(frame)
        self.reset()
        return closed

    def _take(self, frame: Frame, bark_free: bool) -> None:
        horizon = frame.capture_ns - self.window_ns
        while self._quiet and self._quiet[0][0] < horizon:
            self._quiet.popleft()
        if bark_free and len(frame.bands_db):
            if self._quiet and len(frame.bands_db) != len(self._quiet[0][1]):
                self._quiet.clear()  # another band set (never within one builder): anew
            self._quiet.append((frame.capture_ns, np.asarray(frame.bands_db, np.float64)))
            self._first_index = frame.band_first_index
            self._sent = False

    def _attached(self, frame: Frame) -> Frame:
        if not self._quiet:
            return frame
        l90 = np.percentile(np.stack([b for _, b in self._quiet]), 10.0, axis=0)
        stats = BandBackground(self._quiet[0][0], len(self._quiet), self._first_index,
                                 l90.astype(np.float32))
        self._sent = True
        return dataclasses.replace(frame, background=stats)

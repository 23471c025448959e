"""Per-device analysis of frames in capture order: fuse the scores, track events.

Pure logic: no sockets, no clock. Live analysis and offline analysis both feed frames here,
so they give the same events for the same frames.

Per 20 ms step the score the event tracker reads is the fusion (:meth:`DogHead.fuse`) of
- the small CNN's score, computed on the sensor (``Frame.dog_steps``) and smoothed here by a
  centred moving average of ``smoothing_s`` (so it comes ``smoothing_s / 2`` late), and
- the dog head's score of the YAMNet patches whose window holds the step's centre, exactly as
  :func:`~analyzer.detect.head.step_head_scores` defines it. A sensor sends frame k with every
  patch completed by the end of second k + 1 (``sensor.wire``), which includes every patch
  that covers a step of frame k, so the head adds no delay beyond the smoothing.

With an event verifier (the bundled one unless ``[detector] verifier_path`` names another, or
``"none"``) the tracker finds candidates at the verifier's own low thresholds and each one is
kept or dropped when it ends (:mod:`analyzer.detect.verifier`).

Which patch score (:func:`patch_scores_of`): a head that reads the sensor's fine-tuned network
takes ``dg``; otherwise the score the sensor's dog head computed (``pd``, wire v4: the
embeddings stay on the sensor). A frame that still holds YAMNet's embeddings (in memory:
training, evaluation of another head) is scored by this pipeline's own head.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from analyzer.detect.classifier import CentredMean, cached_model
from analyzer.detect.events import BoutTracker, DogEvent, EventTracker, event_tracker
from analyzer.detect.head import (
    ANALYZER_HEAD_PATH,
    DEFAULT_HEAD_PATH,
    PATCH_S,
    DogHead,
    step_head_scores,
)
from analyzer.detect.settings import DetectorSettings
from analyzer.detect.verifier import VerifierModel, VerifierState, configured_verifier
from sensor.dog_head import cached_head, head_version
from sensor.wire import Frame

log = logging.getLogger(__name__)

# A jump in capture time larger than this between consecutive frames is a gap in coverage.
CONTINUITY_TOLERANCE_NS = 50_000_000
PATCH_NS = round(PATCH_S * 1e9)
_NOT_CHECKPOINTED = ("device_id", "head", "settings", "verifier", "candidates")


def patch_scores_of(head: DogHead, frame: Frame) -> np.ndarray:
    """The dog score of each patch of ``frame`` that ``head`` fuses (module docstring)."""
    if len(frame.embeddings) == len(frame.patch_head_scores):
        return head.patch_scores(frame.embeddings, frame.class_scores, frame.patch_dog_scores)
    if head.sensor_scores and frame.patch_dog_scores is not None:
        return np.clip(frame.patch_dog_scores, 0.0, 1.0).astype(np.float32)
    return np.asarray(frame.patch_head_scores, np.float32)


@dataclass(frozen=True)
class FrameResult:
    """What the pipeline made of one frame.

    The CNN's smoothing looks ``smoothing_s / 2`` ahead, so the fused scores of a frame lag its
    steps: ``step_scores`` are the scores that became final with this frame, for consecutive
    20 ms steps starting at capture time ``scores_start_ns``; ``max_dog_score`` is their
    maximum. The held-back steps at the end of a stream come with :meth:`DevicePipeline.finish`.
    """

    max_dog_score: float
    events: list[DogEvent] = field(default_factory=list)
    scores_start_ns: int = 0
    step_scores: np.ndarray = field(default_factory=lambda: np.zeros(0))


class DevicePipeline:
    """Score smoothing, patch scores and event tracker of one device; feed frames in order."""

    def __init__(self, device_id: str, settings: DetectorSettings,
                 head: DogHead | None = None, verifier: VerifierModel | None = None) -> None:
        self.device_id = device_id
        self.head = head or cached_head(settings.head_path or str(ANALYZER_HEAD_PATH))
        if self.head.on_threshold is not None and self.head.off_threshold is not None:
            # A trained fusion's scores have their own scale: the thresholds tuned with it.
            settings = replace(settings, on_threshold=self.head.on_threshold,
                               off_threshold=self.head.off_threshold)  # fmt: skip
        self.verifier = verifier or configured_verifier(settings.verifier_path,
                                                        self.head.version)
        if self.verifier is not None:  # the tracker finds candidates; the verifier decides
            settings = replace(settings, on_threshold=self.verifier.on_threshold,
                               off_threshold=self.verifier.off_threshold)
        # (event, features, probability) of every candidate judged, when a caller sets a list
        # here (training, evaluation); not checkpointed
        self.candidates: list[tuple[DogEvent, np.ndarray, float]] | None = None
        self._verifier_state = VerifierState()
        self.settings = settings
        self.tracker: EventTracker | BoutTracker | None = None
        self._sensor_versions = ""
        self._smoother: CentredMean | None = None
        self._expected_ns: int | None = None
        self._hop_ns = 0
        self._scores_ns: int | None = None  # capture time of the next step to be scored
        self._laeq = np.zeros(0, dtype=np.float32)  # levels of steps not yet scored
        self._laf = np.zeros(0, dtype=np.float32)
        self._patch_starts_ns = np.zeros(0, dtype=np.int64)  # patches that may cover them
        self._patch_scores = np.zeros(0, dtype=np.float32)
        # (capture ns, end ns, bearing, uncertainty) of the frames with a bearing that an
        # event still to come may span (issue 36): :meth:`frame_bearings`
        self._bearings: list[tuple[int, int, float, float | None]] = []

    @property
    def model_version(self) -> str:
        """The networks behind the scores: the sensor's (its frames' ``mv``; before the first
        frame, the bundled CNN's) and the dog head's."""
        sensor = self._sensor_versions or cached_model(self.settings.model_path).version
        verifier = f"+{self.verifier.version}" if self.verifier is not None else ""
        return f"{sensor}+{self.head.version}{verifier}"

    def checkpoint(self) -> dict[str, Any]:
        """The state that the frames fed so far left: smoothing, pending levels and patches,
        the event tracker. Without the networks and settings, which the restoring pipeline has
        (the caller checks they are the same): what a restarted analyzer restores
        (``analyzer.ingest.journal``)."""
        return {k: v for k, v in vars(self).items() if k not in _NOT_CHECKPOINTED}

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`checkpoint` of a pipeline with the same settings and head."""
        unknown = set(state) - set(vars(self))
        if unknown:
            raise ValueError(f"pipeline checkpoint has unknown part(s) {sorted(unknown)}")
        vars(self).update(state)

    def feed(self, frame: Frame) -> FrameResult:
        """Score one frame; return the events that ended with it."""
        if self.tracker is None or self._smoother is None:
            self._sensor_versions = frame.model_versions
            self._hop_ns = round(frame.hop_s * 1e9)
            self._smoother = CentredMean(max(1, round(self.settings.smoothing_s / frame.hop_s)))
            self.tracker = event_tracker(self.device_id, self.settings, self.model_version)
            sensor_head = head_version(frame.model_versions)
            if self.head.layers and sensor_head not in (None, self.head.version):
                log.warning("device %s: the sensor runs dog head %s, this analyzer's is %s; "
                            "its patch scores are the sensor's", self.device_id, sensor_head,
                            self.head.version)  # fmt: skip
            if (self.head.sensor_scores and len(frame.patch_head_scores)
                    and frame.patch_dog_scores is None):
                log.warning("device %s sends no fine-tuned dog score (dg: its sensor runs plain "
                            "YAMNet): head %s fuses the sensor head's score (pd) instead, at "
                            "thresholds chosen for dg; set [detector] head_path = %s for it",
                            self.device_id, self.head.version, DEFAULT_HEAD_PATH)  # fmt: skip
        elif frame.model_versions != self._sensor_versions:
            log.warning("device %s: sensor networks changed from %s to %s", self.device_id,
                        self._sensor_versions, frame.model_versions)  # fmt: skip
        self._forget_bearings()
        if frame.bearing_deg is not None:
            uncertainty = frame.bearing_uncertainty_deg
            self._bearings.append((frame.capture_ns, frame.end_ns, float(frame.bearing_deg),
                                   None if uncertainty is None else float(uncertainty)))
        events: list[DogEvent] = []
        if (
            self._expected_ns is not None
            and abs(frame.capture_ns - self._expected_ns) > CONTINUITY_TOLERANCE_NS
        ):
            # Missing frames: neither silence nor barking. Close what was open, start afresh.
            events.extend(self._drain().events)
        if self._scores_ns is None:
            self._scores_ns = frame.capture_ns
        # The wire's envelopes come per 0.5 s block (privacy, sensor.wire): held over the block's
        # 20 ms steps, so events keep dog_s's onsets and take levels at 0.5 s resolution.
        self._laeq = np.concatenate([self._laeq, frame.laeq_steps_db])
        self._laf = np.concatenate([self._laf, frame.laf_steps_db])
        if len(frame.patch_head_scores):
            scores = patch_scores_of(self.head, frame)
            self._patch_starts_ns = np.concatenate([self._patch_starts_ns, frame.patch_starts_ns])
            self._patch_scores = np.concatenate([self._patch_scores, scores])
        start_ns = self._scores_ns
        fused, tracked = self._track(self._smoother.process(frame.dog_steps))
        events.extend(tracked)
        self._expected_ns = frame.end_ns
        return FrameResult(float(fused.max(initial=0.0)), events, start_ns, fused)

    def frame_bearings(self, onset_ns: int, offset_ns: int
                       ) -> list[tuple[float, float | None]]:
        """The (bearing, uncertainty) of each frame with a bearing that overlaps
        [``onset_ns``, ``offset_ns``): the stretches of an event this pipeline returned, asked
        before the next frame is fed (``analyzer.acoustics.attribution.attributed``)."""
        return [(b, u) for start, end, b, u in self._bearings
                if start < offset_ns and end > onset_ns]

    def _forget_bearings(self) -> None:
        """Drop the bearings of frames that end before any event still to come can start:
        the tracker's earliest open run, or the next step to be scored."""
        if not self._bearings:
            return
        pending = self.tracker.pending_onset_ns() if self.tracker is not None else None
        bounds = [t for t in (pending, self._scores_ns) if t is not None]
        self._bearings = [entry for entry in self._bearings
                          if entry[1] > min(bounds)] if bounds else []

    def _track(self, cnn: np.ndarray) -> tuple[np.ndarray, list[DogEvent]]:
        assert self.tracker is not None and self._scores_ns is not None
        n = cnn.size
        starts_s = (self._patch_starts_ns - self._scores_ns) / 1e9
        head = step_head_scores(starts_s, self._patch_scores, n, self._hop_ns / 1e9, PATCH_S)
        fused = self.head.fuse(cnn, head)
        floor = self.settings.span_cnn_floor
        events = self.tracker.feed(
            self._scores_ns, self._hop_ns / 1e9, fused, self._laeq[:n], self._laf[:n],
            cnn >= floor if floor > 0 else None
        )
        if self.verifier is not None:
            self._verifier_state.observe(self._scores_ns, self._hop_ns, fused, head, cnn,
                                         self._laf[:n])
            events = self._verified(events)
        self._laeq, self._laf = self._laeq[n:], self._laf[n:]
        self._scores_ns += n * self._hop_ns
        # Patches that end before the next step's centre can cover no later step.
        keep = self._patch_starts_ns + PATCH_NS > self._scores_ns + self._hop_ns // 2
        self._patch_starts_ns, self._patch_scores = (
            self._patch_starts_ns[keep], self._patch_scores[keep])
        return fused, events

    def _verified(self, candidates: list[DogEvent]) -> list[DogEvent]:
        """The candidates the verifier keeps (all of them without a verifier)."""
        if self.verifier is None:
            return candidates
        kept = []
        for event in candidates:
            if not self._verifier_state.covers(event.onset_ns):
                # Its start is not among the steps kept (it began before a restart from a
                # journal written without a verifier, or over BUFFER_S ago): nothing to judge
                # it by, so it is kept as the tracker found it.
                kept.append(event)
                continue
            x = self._verifier_state.features(event.onset_ns, event.offset_ns)
            probability = self.verifier.probability(x)
            if self.candidates is not None:
                self.candidates.append((event, x, probability))
            if probability >= self.verifier.keep_at:
                kept.append(event)
        return kept

    def _drain(self) -> FrameResult:
        """Score the held-back steps, close open events and forget all context."""
        if self._smoother is None or self.tracker is None or self._scores_ns is None:
            return FrameResult(max_dog_score=0.0)
        start_ns = self._scores_ns
        fused, events = self._track(self._smoother.flush())
        events.extend(self._verified(self.tracker.flush()))
        self._scores_ns = None
        self._laeq = self._laf = np.zeros(0, dtype=np.float32)
        self._patch_starts_ns = np.zeros(0, dtype=np.int64)
        self._patch_scores = np.zeros(0, dtype=np.float32)
        return FrameResult(float(fused.max(initial=0.0)), events, start_ns, fused)

    def finish(self) -> FrameResult:
        """End of a stream (a file): the held-back steps' scores and the events still open."""
        result = self._drain()
        self._expected_ns = None
        return result

    def flush(self) -> list[DogEvent]:
        """End open events (end of a file)."""
        return self.finish().events

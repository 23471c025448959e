"""Settings of the dog-vocalization scorer and the event tracker."""

from __future__ import annotations

from dataclasses import dataclass

from sensor.configfile import setting


@dataclass(frozen=True)
class DetectorSettings:
    """The dog-vocalization classifier and the event tracker (analyzer.detect.classifier, events).

    Scores are per 20 ms step, 0..1: the sensor's CNN score, smoothed here, fused with the dog
    head's score of YAMNet's patches (analyzer.detect.pipeline). A head file that carries its
    own on/off thresholds replaces the two below. Defaults were chosen on held-out recordings
    (models/MODEL_CARD.md) for few false alarms on long non-dog soundscapes.
    """

    model_path: str = setting(
        "", "the CNN the sensors run (.npz from barkwatch-train fit), named in results before a "
        "frame says which one; empty = bundled"
    )
    head_path: str = setting(
        "", "dog head file (.npz from barkwatch-train head); empty = bundled "
        "(models/dog_head.v5-fused.npz: the sensor's fine-tuned score fused with the CNN)"
    )
    smoothing_s: float = setting(
        0.1, "centred moving average of step scores, s (adds half of it to the delay)", 0.0, 2.0
    )
    min_band_level_db: float = setting(
        0.0,
        "unused since wire v2: the sensor gates the CNN at 0 dB SPL (sensor.scoring); kept so "
        "existing configuration files load",
        -100.0,
        100.0,
    )
    on_threshold: float = setting(0.95, "an event needs a score at least this high", 0.0, 1.0)
    off_threshold: float = setting(
        0.75, "an event spans the steps around it scoring at least this", 0.0, 1.0
    )
    verifier_path: str = setting(
        "", "event verifier file (.npz, analyzer.detect.verifier): candidates found at its own "
        "low thresholds are kept or dropped by it; empty = bundled (models/dog_verifier.npz, "
        "docs/DETECTOR.md) with the bundled head, none with another head_path; \"none\" = no "
        "verifier (events at the thresholds above)"
    )
    span_cnn_floor: float = setting(
        0.2, "an event's extent and levels are cut to its steps where the CNN's own score "
        "reaches this (its onsets and ends, 20 ms); an event with none keeps its whole extent; "
        "0 = off", 0.0, 1.0
    )
    min_duration_s: float = setting(0.1, "shortest event kept, s", 0.0, 10.0)
    merge_gap_s: float = setting(0.5, "events closer than this merge, s", 0.0, 30.0)
    bout_context_s: float = setting(
        0.0, "bout context (analyzer.detect.events.BoutTracker), s: a weaker candidate is an "
        "event when an event or enough candidates are this close; 0 = off", 0.0, 60.0
    )
    bout_on_threshold: float = setting(
        0.8, "with bout context: a candidate needs a score at least this high", 0.0, 1.0
    )
    bout_off_threshold: float = setting(
        0.6, "with bout context: events and candidates span the steps scoring at least this",
        0.0, 1.0
    )
    bout_min_events: int = setting(
        3, "with bout context: this many candidates in a row, each within the context of the "
        "last, confirm one another without an event", 1, 100
    )

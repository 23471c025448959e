"""Offline analysis: the sensor's feature code and the analyzer's pipeline in one process.

No broker, no database. This is the quickest way to try the product and the contract that
outside evaluation tools read, so the JSON document is versioned (``schema``) and stable:
fields are only ever added. The README documents every field.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

from analyzer import __version__
from analyzer.acoustics.audibility import (
    AudibilityAssessor,
    AudibilitySettings,
    EventAudibility,
    parameters,
)
from analyzer.acoustics.site import InstallationRecord
from analyzer.detect.events import DogEvent
from analyzer.detect.pipeline import DevicePipeline
from analyzer.detect.settings import DetectorSettings
from analyzer.ordinance.findings import findings_for_events
from analyzer.ordinance.rules import RuleSettings
from sensor.capture import FileSource
from sensor.frames import FrameBuilder
from sensor.wire import Frame, decode_frame, encode_frame

log = logging.getLogger(__name__)

SCHEMA = "barkwatch.analysis/1"
DEFAULT_FULL_SCALE_DB = 120.0


def _round(value: float, digits: int = 2) -> float:
    return round(float(value), digits)


def frames_of_file(path: str | Path, full_scale_db: float) -> tuple[FileSource, list[Frame]]:
    """Measure a sound file exactly as a sensor would; frames start at capture time 0.

    A trailing partial second is padded with silence so that short clips are analysed too.
    Every frame goes through the wire format and back, so offline analysis sees exactly the
    numbers (float16 features included) that the live analyzer receives.
    """
    source = FileSource(path, block_s=1.0)
    builder = FrameBuilder("offline", source.sample_rate, full_scale_db, start_ns=0)
    frames: list[Frame] = []
    for block in source:
        if block.samples is not None:
            frames.extend(builder.push(block.samples))
    frames.extend(builder.finish())
    return source, [decode_frame(encode_frame(frame)) for frame in frames]


AUDIBILITY_FIELDS = (
    "level_at_100ft_db", "lafmax_at_100ft_db", "audibility_margin_db", "plainly_audible",
    "uncertainty_db", "audibility_score", "judged_from", "estimate_at_100ft_db",
    "background_la90_db", "background_source", "background_limited", "dominant_band_hz",
)


def _audibility_fields(result: EventAudibility | None) -> dict[str, Any]:
    if result is None:
        return dict.fromkeys(AUDIBILITY_FIELDS)
    return result.as_dict()


def analyze_file(
    path: str | Path,
    full_scale_db: float = DEFAULT_FULL_SCALE_DB,
    include_frames: bool = False,
    settings: DetectorSettings | None = None,
    site: InstallationRecord | None = None,
    audibility_settings: AudibilitySettings | None = None,
    rule_settings: RuleSettings | None = None,
) -> dict[str, Any]:
    """Analyse one file; return the ``barkwatch.analysis/1`` document.

    With an installation record (``site``) every event also carries its level 100 ft beyond
    the premises boundary and the plainly-audible decision; without one those fields are null.
    """
    settings = settings or DetectorSettings()
    audibility_settings = audibility_settings or AudibilitySettings()
    source, frames = frames_of_file(path, full_scale_db)
    pipeline = DevicePipeline("offline", settings)
    assessor = AudibilityAssessor(site, audibility_settings) if site is not None else None
    assessed: dict[int, EventAudibility | None] = {}
    events: list[DogEvent] = []
    max_score = 0.0
    frame_rows: list[dict[str, Any]] = []
    for frame in frames:
        result = pipeline.feed(frame)
        if assessor is not None:
            assessor.observe(frame, result.max_dog_score)
            for event in result.events:
                assessed[event.onset_ns] = assessor.assess(event)
        events.extend(result.events)
        max_score = max(max_score, result.max_dog_score)
        if include_frames:
            frame_rows.append(
                {
                    "t_s": _round(frame.capture_ns / 1e9, 3),
                    "laeq_db": _round(frame.laeq_db),
                    "lceq_db": _round(frame.lceq_db),
                    "lzeq_db": _round(frame.lzeq_db),
                    "lafmax_db": _round(frame.lafmax_db),
                    "lafmin_db": _round(frame.lafmin_db),
                    "lasmax_db": _round(frame.lasmax_db),
                    "laf10_db": _round(frame.laf10_db),
                    "laf50_db": _round(frame.laf50_db),
                    "laf90_db": _round(frame.laf90_db),
                    "clipped_samples": frame.clipped_samples,
                    "dc_offset": _round(frame.dc_offset, 6),
                    "under_range": frame.under_range,
                    "dog_score": _round(result.max_dog_score, 4),
                    "bands_db": [_round(v) for v in frame.bands_db],
                }
            )
    final = pipeline.finish()  # the last steps (the classifier's look-ahead) and open events
    # The file's maximum includes them; the per-frame rows stay exactly what a live analyzer
    # stores for each frame (a live stream has no end to score them at).
    max_score = max(max_score, final.max_dog_score)
    for event in final.events:
        events.append(event)
        if assessor is not None:
            assessed[event.onset_ns] = assessor.assess(event)
    document: dict[str, Any] = {
        "schema": SCHEMA,
        "software_version": __version__,
        "model_version": pipeline.model_version,
        "file": str(path),
        "duration_s": _round(source.duration_s, 3),
        "sample_rate": source.sample_rate,
        "file_sample_rate": source.file_rate,
        "full_scale_db": full_scale_db,
        "frames_measured": len(frames),
        "max_dog_score": _round(max_score, 4),
        "events": [
            {
                "onset_s": _round(e.onset_ns / 1e9, 3),
                "offset_s": _round(e.offset_ns / 1e9, 3),
                "label": e.label,
                "confidence": e.confidence,
                "laeq_db": e.laeq_db,
                "lafmax_db": e.lafmax_db,
                **_audibility_fields(assessed.get(e.onset_ns)),
            }
            for e in events
        ],
        "findings": findings_for_events(
            events, assessed, [(f.capture_ns, f.end_ns) for f in frames],
            settings=rule_settings, site=site.address if site is not None else "",
        ),
        "rules": asdict(rule_settings or RuleSettings()),
        "audibility": parameters(site, audibility_settings) if site is not None else None,
    }
    if include_frames and frames:
        document["band_centres_hz"] = [
            _round(1000.0 * 10 ** ((frames[0].band_first_index + i) / 10), 3)
            for i in range(len(frames[0].bands_db))
        ]
        document["frames"] = frame_rows
    return document

"""Offline analysis: the sensor's code (levels, bands, both networks) and the analyzer's
pipeline in one process, through wire v2 and back, so offline and live give the same events.

No broker, no database. This is the quickest way to try the product and the contract that
outside evaluation tools read, so the JSON document is versioned (``schema``) and stable:
fields are only ever added. docs/OFFLINE.md documents every field.
"""

from __future__ import annotations

import io
import json
import logging
import math
import queue
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from threadpoolctl import threadpool_limits

from analyzer import __version__
from analyzer.acoustics import (
    AudibilityAssessor,
    AudibilitySettings,
    EventAudibility,
    InstallationRecord,
    parameters,
)
from analyzer.acoustics.attribution import (
    PremisesSector,
    attributed,
    count_origins,
    from_premises,
)
from analyzer.config import DetectorSettings
from analyzer.detect import DevicePipeline, DogEvent
from analyzer.ordinance import Coverage, RuleSettings, findings_for_events, finite_json
from sensor.calibration import DEFAULT_FULL_SCALE_DB
from sensor.capture import AudioSampleError, FileSource
from sensor.dog_cnn import cached_model
from sensor.errors import WireError
from sensor.frames import FrameBuilder
from sensor.gate import GateSettings
from sensor.scoring import SensorNetworks, cached_yamnet
from sensor.wire import Frame, decode_frame, encode_frame

log = logging.getLogger(__name__)

SCHEMA = "barkwatch.analysis/1"

Progress = Callable[[float, float], None]
"""Told as work advances: (done, total), e.g. seconds of audio measured and the file's length.
Display only: it must not raise."""


def _round(value: float, digits: int = 2) -> float:
    return round(float(value), digits)


def _round_or_none(value: float, digits: int = 2) -> float | None:
    """A level rounded, or None (JSON null) where the frame did not carry it (NaN)."""
    return None if math.isnan(value) else round(float(value), digits)


def measured_frames(source: FileSource, full_scale_db: float,
                    cnn_model_path: str = "", yamnet_model_path: str = "",
                    gate: GateSettings | None = None) -> Iterator[Frame]:  # fmt: skip
    """Measure a sound file exactly as a sensor would, one frame at a time (memory stays flat
    with the file's length); frames start at capture time 0.

    A trailing partial second is padded with silence so that short clips are analysed too.
    Every frame goes through the wire format and back, so offline analysis sees exactly the
    numbers (float16 scores and embeddings included) that the live analyzer receives. Audio
    that cannot be used raises :class:`AudioSampleError` (the frames before it have been
    yielded, as a sensor hands them over at a gap; the partial second it falls in is dropped,
    not padded). ``cnn_model_path`` runs another CNN in the sensor's place, ``yamnet_model_path``
    another YAMNet or fine-tuned network (evaluation), ``gate`` other speech gate settings than
    a sensor's defaults (evaluation).

    Issue 24 wants an hour analysed in under 30 s, which one core cannot do: the file is
    decoded and measured on a thread of its own (:func:`_measure_into`, its networks on
    another), up to FRAMES_AHEAD frames ahead of the caller, who runs the wire round trip and
    the pipeline. The frames are those of the single-threaded sensor, in order
    (tests/test_offline_threads.py).
    """
    ahead: queue.Queue[Frame | BaseException | None] = queue.Queue(FRAMES_AHEAD)
    stop = threading.Event()
    measuring = threading.Thread(target=_measure_into, name="measure", daemon=True,
                                 args=(source, full_scale_db, cnn_model_path, yamnet_model_path,
                                       ahead, stop, gate))
    # One BLAS thread: OpenBLAS's own threads spin while they wait, and beside the measuring
    # and network threads they took the cores those need (an hour: 39-41 s wall and 72-75 s
    # CPU with two BLAS threads, 28 s and 39 s with one, on an idle 2-core machine).
    with threadpool_limits(limits=1, user_api="blas"):
        measuring.start()
        try:
            while (item := ahead.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield _through_wire(item, source)
        finally:  # also when the caller stops early: the measuring thread stops too
            stop.set()
            measuring.join()


FRAMES_AHEAD = 32  # frames measured ahead of the pipeline (about 10 KB each)
# seconds given to the frame builder at once: it starts the networks on all of them before
# measuring them, so the networks' thread runs through them without waiting
CHUNK_BLOCKS = 8


def _measure_into(source: FileSource, full_scale_db: float, cnn_model_path: str,
                  yamnet_model_path: str, out: queue.Queue[Frame | BaseException | None],
                  stop: threading.Event, gate: GateSettings | None = None
                  ) -> None:  # fmt: skip
    """The measuring thread of :func:`measured_frames`: frames into ``out``, then None (the
    end) or the exception that ended it; gives up when ``stop`` is set."""

    def put(item: Frame | BaseException | None) -> bool:
        while not stop.is_set():
            try:
                out.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    networks: SensorNetworks | None = None
    try:
        # the networks on yet another thread while this one measures
        networks = SensorNetworks(source.sample_rate, cnn=cached_model(cnn_model_path),
                                  yamnet=cached_yamnet(yamnet_model_path),
                                  worker_thread=True)  # fmt: skip
        builder = FrameBuilder("offline", source.sample_rate, full_scale_db, start_ns=0,
                               networks=networks, gate=gate)  # fmt: skip
        pending: list[np.ndarray] = []  # blocks read, pushed CHUNK_BLOCKS at a time

        def push_pending() -> bool:
            frames = builder.push(np.concatenate(pending)) if pending else []
            pending.clear()
            return all(put(frame) for frame in frames)

        blocks = iter(source)
        while True:
            try:
                block = next(blocks)
            except StopIteration:
                break
            except AudioSampleError as exc:  # the file's audio: hand over the seconds held
                if push_pending() and all(put(frame) for frame in builder.skip(0)):
                    put(exc)
                return
            if block.samples is not None:
                pending.append(block.samples)
                if len(pending) == CHUNK_BLOCKS and not push_pending():
                    return
        if push_pending() and all(put(frame) for frame in builder.finish()):
            put(None)
    except BaseException as exc:  # noqa: BLE001 - any failure is the caller's to raise
        put(exc)
    finally:
        if networks is not None:
            networks.close()


def _through_wire(frame: Frame, source: FileSource) -> Frame:
    try:
        return decode_frame(encode_frame(frame))
    except WireError as exc:
        # e.g. a float file whose samples sit beyond full scale (a DC offset above 1)
        start_s, end_s = frame.capture_ns / 1e9, frame.end_ns / 1e9
        first = round(start_s * source.file_rate)
        raise AudioSampleError(
            f"audio file {source.path}: the second at {start_s:.3f}-{end_s:.3f} s (from sample "
            f"{first}) cannot be measured: {exc}",
            first,
        ) from exc


def frames_of_file(path: str | Path, full_scale_db: float,
                   cnn_model_path: str = "", yamnet_model_path: str = "",
                   gate: GateSettings | None = None
                   ) -> tuple[FileSource, list[Frame]]:  # fmt: skip
    """Every frame of a file in a list (:func:`measured_frames`), for callers that index
    them; analysis streams instead."""
    source = FileSource(path, block_s=1.0)
    return source, list(measured_frames(source, full_scale_db, cnn_model_path,
                                        yamnet_model_path, gate))


class _FrameRows:
    """``--include-frames`` rows as JSON text, spooled to a temporary file as they are made,
    so that memory does not grow with the file's length."""

    def __init__(self) -> None:
        # Closed by close(); unlinked at once, so nothing is left on disk after a crash.
        self._spool = tempfile.TemporaryFile(  # noqa: SIM115
            "w+", encoding="utf-8", prefix="barkwatch-rows-")
        self.count = 0

    def add(self, row: dict[str, Any]) -> None:
        self._spool.write(finite_json(row, f"frames[{self.count}]") + "\n")
        self.count += 1

    def texts(self) -> Iterator[str]:
        self._spool.flush()
        self._spool.seek(0)
        for line in self._spool:
            yield line.rstrip("\n")
        self._spool.seek(0, io.SEEK_END)

    def close(self) -> None:
        self._spool.close()


@dataclass
class FileAnalysis:
    """One file's ``barkwatch.analysis/1`` document; its per-frame rows (with
    ``--include-frames``) are kept on disk until written."""

    document: dict[str, Any]
    frame_rows: _FrameRows | None = None

    @property
    def failed(self) -> bool:
        """The file could not be analysed to its end (``failure`` says where and why)."""
        return "failure" in self.document

    def as_dict(self) -> dict[str, Any]:
        """The whole document, the rows read back into it."""
        if self.frame_rows is None:
            return self.document
        return {**self.document,
                "frames": [json.loads(text) for text in self.frame_rows.texts()]}

    def write_json(self, out: TextIO) -> None:
        """Write the document as one JSON line, rows streamed from disk. The text equals
        ``json.dumps(self.as_dict())``; a NaN or infinity anywhere raises EvidenceError
        naming it, before anything is written."""
        head = finite_json(self.document, "document")
        if self.frame_rows is None:
            out.write(head + "\n")
            return
        out.write(head[:-1] + ', "frames": [')
        for i, text in enumerate(self.frame_rows.texts()):
            out.write((", " if i else "") + text)
        out.write("]}\n")

    def close(self) -> None:
        """Remove the spooled rows."""
        if self.frame_rows is not None:
            self.frame_rows.close()


AUDIBILITY_FIELDS = (
    "level_at_100ft_db", "lafmax_at_100ft_db", "audibility_margin_db", "plainly_audible",
    "uncertainty_db", "audibility_score", "judged_from", "estimate_at_100ft_db",
    "background_la90_db", "background_source", "background_limited", "dominant_band_hz",
)


def _audibility_fields(result: EventAudibility | None) -> dict[str, Any]:
    if result is None:
        return dict.fromkeys(AUDIBILITY_FIELDS)
    return result.as_dict()


def analyze_file(path: str | Path, **options: Any) -> dict[str, Any]:
    """Analyse one file; return the ``barkwatch.analysis/1`` document. ``options`` are those
    of :func:`analyze` (full_scale_db, include_frames, settings, site, ...)."""
    analysis = analyze(path, **options)
    try:
        return analysis.as_dict()
    finally:
        analysis.close()


def analyze(
    path: str | Path,
    full_scale_db: float = DEFAULT_FULL_SCALE_DB,
    include_frames: bool = False,
    settings: DetectorSettings | None = None,
    site: InstallationRecord | None = None,
    audibility_settings: AudibilitySettings | None = None,
    rule_settings: RuleSettings | None = None,
    progress: Progress | None = None,
) -> FileAnalysis:
    """Analyse one file, streaming: frames are measured, scored and let go one at a time;
    only events (and, with ``include_frames``, each frame's row, on disk) are kept.

    With an installation record (``site``) every event also carries its level 100 ft beyond
    the premises boundary and the plainly-audible decision; without one those fields are null.
    A file that cannot be opened raises AudioInputError. Audio that becomes unusable part-way
    (a NaN sample, data that stops decoding) ends the analysis there: the document keeps what
    was measured before and says where and why in ``failure``. ``warnings`` (present when
    there are any) lists what was read despite a problem (a truncated file). ``progress``
    is told (seconds measured, the file's length in seconds) after every frame.
    """
    settings = settings or DetectorSettings()
    audibility_settings = audibility_settings or AudibilitySettings()
    source = FileSource(path, block_s=1.0)
    pipeline = DevicePipeline("offline", settings)
    sector = site.sector if site is not None else None
    assessor = AudibilityAssessor(site, audibility_settings) if site is not None else None
    assessed: dict[int, EventAudibility | None] = {}
    events: list[DogEvent] = []
    max_score = 0.0
    coverage = Coverage()  # merged intervals: the rules see the same as from every frame
    frames_measured = 0
    band_centres_hz: list[float] = []
    frame_rows = _FrameRows() if include_frames else None
    failure: dict[str, Any] | None = None
    try:
        for frame in measured_frames(source, full_scale_db, settings.model_path):
            result = pipeline.feed(frame)
            found = [attributed(e, pipeline.frame_bearings(e.onset_ns, e.offset_ns), sector)
                     for e in result.events]  # before the next frame: the bearings kept
            if assessor is not None:
                assessor.observe(frame, result.max_dog_score)
                for event in found:
                    assessed[event.onset_ns] = assessor.assess(event)
            events.extend(found)
            max_score = max(max_score, result.max_dog_score)
            coverage.add(frame.capture_ns, frame.end_ns)
            frames_measured += 1
            if progress is not None:
                progress(min(frame.end_ns / 1e9, source.duration_s), source.duration_s)
            if frame_rows is not None:
                if not band_centres_hz:
                    band_centres_hz = [
                        _round(1000.0 * 10 ** ((frame.band_first_index + i) / 10), 3)
                        for i in range(len(frame.bands_db))
                    ]
                frame_rows.add(_frame_row(frame, result.max_dog_score))
    except AudioSampleError as exc:
        failure = {
            "reason": str(exc),
            "sample_index": exc.sample_index,
            "time_s": _round(exc.sample_index / source.file_rate, 3),
        }
    final = pipeline.finish()  # the last steps (the classifier's look-ahead) and open events
    # The file's maximum includes them; the per-frame rows stay exactly what a live analyzer
    # stores for each frame (a live stream has no end to score them at).
    max_score = max(max_score, final.max_dog_score)
    for event in final.events:
        event = attributed(event, pipeline.frame_bearings(event.onset_ns, event.offset_ns),
                           sector)
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
        "frames_measured": frames_measured,
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
                "bearing_deg": e.bearing_deg,
                "bearing_uncertainty_deg": e.bearing_uncertainty_deg,
                "origin": e.origin,
            }
            for e in events
        ],
        **rule_findings(events, assessed, coverage.intervals(), rule_settings,
                        site.address if site is not None else "", sector),
        "rules": asdict(rule_settings or RuleSettings()),
        "audibility": parameters(site, audibility_settings) if site is not None else None,
    }
    # Added to schema 1 after its first release, so present only when there is something
    # to say: a file analysed without trouble gives the same bytes as before.
    if source.warnings:
        document["warnings"] = list(source.warnings)
    if failure is not None:
        document["failure"] = failure
    if frame_rows is not None and frames_measured:
        document["band_centres_hz"] = band_centres_hz
        return FileAnalysis(document, frame_rows)
    if frame_rows is not None:
        frame_rows.close()
    return FileAnalysis(document)


def rule_findings(events: list[DogEvent], assessed: dict[int, EventAudibility | None],
                  coverage: list[tuple[int, int]], rule_settings: RuleSettings | None,
                  site: str, sector: PremisesSector | None = None) -> dict[str, Any]:
    """The document's findings: the rules over all events (``findings``, the upper bound; each
    window's ``from_premises`` says whether its rule holds over the sector's events alone) and
    again over the events attributed to the premises' sector (``findings_from_premises``, the
    lower bound; issue 36), and how many events came from where (``origins``)."""
    return {
        "findings": findings_for_events(events, assessed, coverage, settings=rule_settings,
                                        site=site, sector=sector),
        "findings_from_premises": findings_for_events(
            from_premises(events), assessed, coverage, settings=rule_settings, site=site,
            sector=sector),
        "origins": count_origins(e.origin for e in events),
    }


def _frame_row(frame: Frame, dog_score: float) -> dict[str, Any]:
    """The ``frames`` entry of one frame (``--include-frames``)."""
    return {
        "t_s": _round(frame.capture_ns / 1e9, 3),
        "laeq_db": _round(frame.laeq_db),
        "lceq_db": _round_or_none(frame.lceq_db),
        "lzeq_db": _round_or_none(frame.lzeq_db),
        "lafmax_db": _round(frame.lafmax_db),
        "lafmin_db": _round(frame.lafmin_db),
        "lasmax_db": _round(frame.lasmax_db),
        "laf10_db": _round(frame.laf10_db),
        "laf50_db": _round(frame.laf50_db),
        "laf90_db": _round(frame.laf90_db),
        "clipped_samples": frame.clipped_samples,
        "dc_offset": _round(frame.dc_offset, 6),
        "under_range": frame.under_range,
        "dog_score": _round(dog_score, 4),
        "bands_db": [_round(v) for v in frame.bands_db],
    }

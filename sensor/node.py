"""The sensor node's wiring: source -> frames -> outbox -> publisher, in that order.

Start-up fits on one screen; each stage lives in its own module. The capture thread (PortAudio
or the file reader) hands blocks to this loop, which measures each second and stores the frame
in the outbox; the publisher thread drains the outbox to the broker.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sensor.bearing import BearingCounters
from sensor.capture import AudioBlock, CaptureCounters
from sensor.clock import ClockStepDetector, clock_state
from sensor.config import SensorConfig
from sensor.frames import FrameBuilder
from sensor.outbox import Outbox
from sensor.publisher import FramePublisher
from sensor.wire import Frame, encode_frame

log = logging.getLogger(__name__)


@dataclass
class NodeStats:
    """What the measuring loop has done so far (read by the heartbeat)."""

    frames: int = 0
    samples: int = 0
    lost_samples: int = 0
    clipped_samples: int = 0
    clock_steps: int = 0
    started_monotonic: float = field(default_factory=time.monotonic)
    bearings: BearingCounters | None = None  # the array's bearing stage; None without one


def measure_into_outbox(
    source: Iterable[AudioBlock],
    builder: FrameBuilder,
    outbox: Outbox,
    stats: NodeStats,
    stop: threading.Event,
    progress_every_s: float = 10.0,
    total_s: float | None = None,
    pad_last: bool = False,
    clock: ClockStepDetector | None = None,
) -> None:
    """Cut the source into frames and store each one durably; log progress now and then.

    ``pad_last`` measures a trailing partial second padded with silence (file replay, so
    that replay and offline analysis give the same frames); otherwise only the complete
    seconds the builder holds are stored at the end. A step of the wall clock
    (``clock``) is flagged on the next frame (``clock_step_ns``) and counted.
    """
    clock = clock or ClockStepDetector()
    last_report = time.monotonic()

    def store(frames: list[Frame]) -> None:
        for frame in frames:
            step_ns = clock.step_ns()
            if step_ns:
                frame = dataclasses.replace(frame, clock_step_ns=step_ns)
                stats.clock_steps += 1
            outbox.put(frame.seq, encode_frame(frame))
            stats.frames += 1
            stats.clipped_samples += frame.clipped_samples

    for block in source:
        if block.lost_samples:
            log.warning("capture lost %d samples; restarting the frame", block.lost_samples)
            store(builder.skip(block.lost_samples))  # the frames held before the gap
            stats.lost_samples += block.lost_samples
        if block.samples is not None:
            stats.samples += block.samples.size
            store(builder.push(block.samples, block.channels))
        if time.monotonic() - last_report >= progress_every_s:
            done = stats.samples / builder.sample_rate
            of_total = f" of {total_s:.0f} s" if total_s else ""
            log.info(
                "measured %.0f s%s (%d frames, outbox %d)",
                done,
                of_total,
                stats.frames,
                outbox.backlog(),
            )
            last_report = time.monotonic()
        if stop.is_set():
            store(builder.skip(0))  # complete seconds held for the CNN's look-ahead
            return
    # The end of a file: its last part second padded with silence (replay); the end of a
    # capture: the complete seconds still held, the part second dropped.
    store(builder.finish() if pad_last else builder.skip(0))


def node_health(config: SensorConfig, stats: NodeStats, source: Any) -> dict[str, Any]:
    """The measuring side's part of the heartbeat (docs/WIRE.md): frames, capture counters,
    the clock, the calibration and, with a microphone array, the bearing stage's counters."""
    counters: CaptureCounters = source.counters
    clock = clock_state()
    return {
        "frames": stats.frames,
        "lost_samples": stats.lost_samples,
        "dropped_blocks": counters.dropped_blocks,
        "overflows": counters.overflows,
        "queue_depth": source.queue_depth() if hasattr(source, "queue_depth") else 0,
        "clock_synchronised": clock.synchronised,
        "clock_max_error_us": clock.max_error_us,
        "clock_steps": stats.clock_steps,
        "calibration_date": config.calibration.date,
        "full_scale_db": config.calibration.full_scale_db,
        **(stats.bearings.heartbeat_fields() if stats.bearings is not None else {}),
    }


def run_node(
    config: SensorConfig,
    source: Any,
    start_ns: int | None,
    stop: threading.Event,
    exit_when_drained: bool = False,
    total_s: float | None = None,
) -> NodeStats:
    """Run a sensor node until the source ends (file) or ``stop`` is set (microphone).

    ``start_ns`` is the capture time of the first sample; for a microphone it is taken when
    the stream starts (None).
    """
    outbox = Outbox(config.outbox.path, config.outbox.max_frames)
    stats = NodeStats()

    def health() -> dict[str, Any]:
        return node_health(config, stats, source)

    publisher = FramePublisher(
        config.device_id,
        config.mqtt,
        outbox,
        max_inflight=config.max_inflight,
        heartbeat_interval_s=config.heartbeat_interval_s,
        health=health,
        confirm=config.outbox.confirm,
        max_unconfirmed=config.outbox.max_unconfirmed,
        confirm_timeout_s=config.outbox.confirm_timeout_s,
        confirm_resend_max_s=config.outbox.confirm_resend_max_s,
    )
    publisher.start()
    try:
        builder = FrameBuilder(
            config.device_id,
            source.sample_rate,
            config.calibration.full_scale_db,
            start_ns=start_ns if start_ns is not None else time.time_ns(),
            first_seq=outbox.next_seq(),
            calibration_date=config.calibration.date,
            options=config.measurement.options(),
            gate=config.privacy,
            array=config.array,
        )
        stats.bearings = builder.bearings.counters if builder.bearings is not None else None
        blocks: Iterable[AudioBlock] = source
        if start_ns is None:
            blocks = _stamped_by_stream_start(source, builder)
        measure_into_outbox(
            blocks, builder, outbox, stats, stop, total_s=total_s, pad_last=start_ns is not None
        )
        log.info(
            "measured %d frames (%.1f s of audio); %d waiting in the outbox",
            stats.frames,
            stats.samples / builder.sample_rate,
            outbox.backlog(),
        )
        if exit_when_drained:
            while not stop.is_set() and not publisher.wait_drained(timeout_s=1.0):
                pass
    finally:
        publisher.stop()
        outbox.close()
    return stats


def _stamped_by_stream_start(source: Any, builder: FrameBuilder) -> Iterator[AudioBlock]:
    """Pass blocks through, taking capture time from the microphone stream's start."""
    for index, block in enumerate(source):
        if index == 0:
            builder.start_ns = source.start_ns
        yield block

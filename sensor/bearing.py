"""The bearing of each dog second (issue 36): every input channel kept a few seconds, and the
direction of arrival estimated once the speech gate has marked a second as dog.

The gate decides a second when the one after it is known, and the CNN scores a second only
with the next (:mod:`sensor.frames`): a second's frame comes out while the second two after it
is being measured. :class:`ChannelRing` keeps the last ``RING_S`` seconds of every channel,
indexed by sample since the stream's start, so the second's audio is still there when its
frame is decided; :class:`BearingStage` then runs :func:`sensor.doa.estimate_bearing` on it,
only for frames marked ``dog``. It runs in the thread that builds the frames, never in the
stream callback; levels, bands and scores still come from the measurement channel alone.

A dog second whose audio is no longer in the ring (it cannot happen with the frame builder's
delays, but a gap in the capture forgets the ring) leaves with "no bearing" and is counted.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

import numpy as np

from sensor.array import ArraySettings
from sensor.doa import DoaOptions, DoaPlan, estimate_bearing, plan_doa
from sensor.wire import GATE_DOG, Frame

log = logging.getLogger(__name__)

# The frame of second k comes out while second k + 2 is measured (the CNN's look-ahead, then the
# gate's): three seconds at most are needed; one more for blocks that straddle seconds.
RING_S = 4.0


class ChannelRing:
    """The last ``seconds`` of ``channels`` input channels, float32, by sample index since the
    stream's start (lost samples move the index on and forget what was kept)."""

    def __init__(self, sample_rate: int, channels: int, seconds: float = RING_S) -> None:
        if channels < 1:
            raise ValueError(f"ChannelRing: {channels} channels")
        self.capacity = max(1, round(seconds * sample_rate))
        self.buffer = np.zeros((self.capacity, channels), np.float32)
        self.end = 0  # sample index just after the newest kept
        self.filled = 0

    @property
    def channels(self) -> int:
        return self.buffer.shape[1]

    def push(self, block: np.ndarray) -> None:
        """Append (frames, channels) samples; the oldest are overwritten."""
        data = np.asarray(block, dtype=np.float32)
        if data.ndim != 2 or data.shape[1] < self.channels:
            raise ValueError(f"ChannelRing: a block of shape {data.shape} for "
                             f"{self.channels} channels")
        total = data.shape[0]
        data = data[-self.capacity:, : self.channels]
        first = (self.end + total - data.shape[0]) % self.capacity
        head = min(data.shape[0], self.capacity - first)  # up to the buffer's end, then round
        self.buffer[first:first + head] = data[:head]
        self.buffer[: data.shape[0] - head] = data[head:]
        self.end += total
        self.filled = min(self.capacity, self.filled + total)

    def skip(self, count: int) -> None:
        """``count`` samples were lost: the index moves on, what was kept is forgotten."""
        self.end += count
        self.filled = 0

    def span(self, start: int, stop: int) -> np.ndarray | None:
        """Samples ``start`` to ``stop`` (exclusive) of every channel, or None when they are not
        all kept."""
        if start < self.end - self.filled or stop > self.end or stop <= start:
            return None
        first = start % self.capacity
        if first + stop - start <= self.capacity:
            return self.buffer[first:first + stop - start].copy()
        return np.concatenate([self.buffer[first:], self.buffer[: first + stop - start
                                                                 - self.capacity]])


@dataclass
class BearingCounters:
    """What the bearing stage has done (read by the heartbeat, tests, logs and benchmarks)."""

    dog_seconds: int = 0
    with_bearing: int = 0
    not_in_ring: int = 0

    def heartbeat_fields(self) -> dict[str, int]:
        """The heartbeat's ``bearing_*`` counters (docs/WIRE.md): dog seconds seen, those
        that got a bearing, those whose channels had already left the ring."""
        return {"bearing_dog_seconds": self.dog_seconds,
                "bearing_with_bearing": self.with_bearing,
                "bearing_not_in_ring": self.not_in_ring}


class BearingStage:
    """Keeps the channels and gives each dog frame its bearing (``Frame.bearing_deg``,
    ``bearing_uncertainty_deg``; ``bearing_estimated`` True even when there is none)."""

    def __init__(self, array: ArraySettings, sample_rate: int,
                 options: DoaOptions | None = None, ring_s: float = RING_S) -> None:
        self.array = array
        self.sample_rate = sample_rate
        self.plan: DoaPlan = plan_doa(array, sample_rate, options)
        self.ring = ChannelRing(sample_rate, max(array.channels) + 1, ring_s)
        self.counters = BearingCounters()

    def push(self, channels: np.ndarray | None, count: int) -> None:
        """Keep a block's channels (``count`` samples; None is refused: an array sensor's
        blocks all carry them)."""
        if channels is None:
            raise ValueError("an array sensor's capture blocks must carry every channel "
                             "(AudioBlock.channels); this one has none")
        if channels.shape[0] != count:
            raise ValueError(f"a block of {count} samples carries {channels.shape[0]} samples "
                             "of its channels")
        self.ring.push(channels)

    def skip(self, count: int) -> None:
        self.ring.skip(count)

    def annotate(self, frames: list[Frame], start_ns: int) -> list[Frame]:
        """The frames, each ``dog`` one with its bearing; ``start_ns`` is the stream's capture
        start (frames' sample indices are counted from it)."""
        return [self._with_bearing(f, start_ns) if f.gate == GATE_DOG else f for f in frames]

    def _with_bearing(self, frame: Frame, start_ns: int) -> Frame:
        self.counters.dog_seconds += 1
        first = round((frame.capture_ns - start_ns) * self.sample_rate / 1e9)
        audio = self.ring.span(first, first + frame.n_samples)
        if audio is None:
            self.counters.not_in_ring += 1
            log.warning("dog second at %d ns: its channels are no longer kept; no bearing",
                        frame.capture_ns)
            return dataclasses.replace(frame, bearing_estimated=True)
        bearing = estimate_bearing(audio, self.plan)
        if bearing.has_bearing:
            self.counters.with_bearing += 1
        return dataclasses.replace(frame, bearing_deg=bearing.bearing_deg,
                                   bearing_uncertainty_deg=bearing.uncertainty_deg,
                                   bearing_estimated=True)

"""Streaming resampling of the capture to YAMNet's 16 kHz (48, 44.1 and 32 kHz in).

libsoxr (the ``soxr`` package, wheels for x86-64 and aarch64) in its streaming mode: the
filter state is carried from block to block, so a stream cut into blocks of any size gives the
same samples as the whole stream at once, and the filter's delay is compensated, so output
sample j is the signal at j / 16000 s after the stream's first input sample. "HQ" quality is a
linear-phase low-pass with a passband flat to well under 0.1 dB up to about 7.3 kHz: YAMNet's
mel bands end at 7.5 kHz (``sensor.yamnet_features``).
"""

from __future__ import annotations

import numpy as np
import soxr

from sensor.errors import SensorError

TARGET_RATE_HZ = 16_000
SOURCE_RATES_HZ = (16_000, 32_000, 44_100, 48_000)


class ResampleError(SensorError):
    """A rate the resampler does not take, or samples it cannot use."""


class StreamResampler:
    """Blocks at ``source_rate`` in, 16 kHz samples out; 16 kHz passes through unchanged."""

    def __init__(self, source_rate: int) -> None:
        if source_rate not in SOURCE_RATES_HZ:
            raise ResampleError(
                f"cannot resample {source_rate} Hz to {TARGET_RATE_HZ} Hz; the capture must be "
                f"one of {', '.join(map(str, SOURCE_RATES_HZ))} Hz"
            )
        self.source_rate = source_rate
        self.reset()

    def reset(self) -> None:
        """Forget the filter state, as at the start of a stream (or after lost samples)."""
        self._stream = (
            None
            if self.source_rate == TARGET_RATE_HZ
            else soxr.ResampleStream(self.source_rate, TARGET_RATE_HZ, 1, dtype="float64")
        )

    def process(self, block: np.ndarray, last: bool = False) -> np.ndarray:
        """16 kHz samples that ``block`` completes; ``last`` also drains the filter's tail."""
        samples = np.ascontiguousarray(block, dtype=np.float64).reshape(-1)
        if self._stream is None:
            return samples.copy()
        out: np.ndarray = self._stream.resample_chunk(samples, last=last)
        return out

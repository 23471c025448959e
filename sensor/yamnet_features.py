"""YAMNet's input front end: log-mel patches of 16 kHz audio, as the network was trained on.

The definition is YAMNet's own (TensorFlow Models, ``research/audioset/yamnet``,
``features.py`` and ``params.py``): 16 kHz mono samples in digital full scale (not calibrated);
an STFT with a 400-sample (25 ms) periodic Hann window, a 160-sample (10 ms) hop, FFT size 512,
no centring, magnitude (not power); 64 mel bands on the HTK scale, 125-7500 Hz, with the
triangles of ``tf.signal.linear_to_mel_weight_matrix`` (the DC bin gets no weight); natural log
of (mel + 0.001); patches of 96 frames (0.96 s) every 48 frames (0.48 s). A whole clip is
zero-padded as YAMNet pads it, to at least 0.975 s and a whole number of patch hops.

Runs on the sensor, so that no frame with a 10 ms hop ever leaves the device (issue 24:
speech rebuilt from these frames is intelligible).
"""

from __future__ import annotations

import math

import numpy as np

from sensor.errors import SensorError

SAMPLE_RATE_HZ = 16_000
WINDOW_SAMPLES = 400  # 25 ms
HOP_SAMPLES = 160  # 10 ms
FFT_SIZE = 512
N_MEL_BANDS = 64
MEL_LOW_HZ = 125.0
MEL_HIGH_HZ = 7_500.0
LOG_OFFSET = 0.001  # keeps log finite in digital silence: log(0.001) = -6.91
PATCH_FRAMES = 96  # 0.96 s
PATCH_HOP_FRAMES = 48  # 0.48 s
PATCH_HOP_S = PATCH_HOP_FRAMES * HOP_SAMPLES / SAMPLE_RATE_HZ
PATCH_S = PATCH_FRAMES * HOP_SAMPLES / SAMPLE_RATE_HZ
# YAMNet's minimum clip: one patch of frames plus the window beyond the last hop (0.975 s).
MIN_CLIP_SAMPLES = (PATCH_FRAMES - 1) * HOP_SAMPLES + WINDOW_SAMPLES
PATCH_HOP_SAMPLES = PATCH_HOP_FRAMES * HOP_SAMPLES


class FrontEndError(SensorError):
    """Audio that the front end cannot turn into patches; the message says what and where."""


def hertz_to_mel(frequency_hz: np.ndarray | float) -> np.ndarray:
    """HTK mel scale, as YAMNet's TensorFlow front end uses: 1127 ln(1 + f / 700)."""
    return 1127.0 * np.log1p(np.asarray(frequency_hz, dtype=np.float64) / 700.0)


def mel_weight_matrix() -> np.ndarray:
    """(FFT_SIZE // 2 + 1) x N_MEL_BANDS triangles, ``tf.signal.linear_to_mel_weight_matrix``.

    Band edges are equally spaced in mel between MEL_LOW_HZ and MEL_HIGH_HZ; each bin's
    weight is the smaller of its rising and falling slope, clipped at 0; bin 0 (DC) is zero.
    """
    n_bins = FFT_SIZE // 2 + 1
    bin_mel = hertz_to_mel(np.linspace(0.0, SAMPLE_RATE_HZ / 2, n_bins)[1:])[:, None]
    edges = np.linspace(hertz_to_mel(MEL_LOW_HZ), hertz_to_mel(MEL_HIGH_HZ), N_MEL_BANDS + 2)
    lower, centre, upper = edges[:-2], edges[1:-1], edges[2:]
    rising = (bin_mel - lower) / (centre - lower)
    falling = (upper - bin_mel) / (upper - centre)
    weights = np.maximum(0.0, np.minimum(rising, falling))
    return np.vstack([np.zeros((1, N_MEL_BANDS)), weights])


MEL_WEIGHTS = mel_weight_matrix()
# Periodic Hann (tf.signal.hann_window's default): the window of a 400-point DFT period.
HANN_WINDOW = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(WINDOW_SAMPLES) / WINDOW_SAMPLES)


def checked_samples(samples: np.ndarray, what: str = "samples") -> np.ndarray:
    """``samples`` as a 1-D float64 array, or FrontEndError naming the first bad sample."""
    array = np.asarray(samples)
    if array.ndim != 1:
        raise FrontEndError(f"{what}: expected mono (1-D) samples, got shape {array.shape}")
    if not np.issubdtype(array.dtype, np.floating) and not np.issubdtype(array.dtype, np.integer):
        raise FrontEndError(f"{what}: expected numbers, got dtype {array.dtype}")
    array = array.astype(np.float64, copy=False)
    bad = np.flatnonzero(~np.isfinite(array))
    if bad.size:
        raise FrontEndError(f"{what}: sample {int(bad[0])} is {array[bad[0]]} (not finite)")
    return array


def log_mel_frames(samples: np.ndarray) -> np.ndarray:
    """Log-mel frames (n_frames x 64) of 16 kHz samples, one per 10 ms hop, windows not padded:
    frame k covers samples [160 k, 160 k + 400). Fewer than 400 samples give no frame."""
    audio = checked_samples(samples)
    if audio.size < WINDOW_SAMPLES:
        return np.zeros((0, N_MEL_BANDS), dtype=np.float32)
    windows = np.lib.stride_tricks.sliding_window_view(audio, WINDOW_SAMPLES)[::HOP_SAMPLES]
    magnitude = np.abs(np.fft.rfft(windows * HANN_WINDOW, n=FFT_SIZE, axis=1))
    return np.log(magnitude @ MEL_WEIGHTS + LOG_OFFSET).astype(np.float32)


def patches_of_frames(frames: np.ndarray) -> np.ndarray:
    """Every whole patch (n x 96 x 64) of log-mel frames, one every 48 frames from frame 0."""
    n = 0 if len(frames) < PATCH_FRAMES else 1 + (len(frames) - PATCH_FRAMES) // PATCH_HOP_FRAMES
    if n == 0:
        return np.zeros((0, PATCH_FRAMES, N_MEL_BANDS), dtype=np.float32)
    view = np.lib.stride_tricks.sliding_window_view(frames, PATCH_FRAMES, axis=0)
    return np.ascontiguousarray(view[::PATCH_HOP_FRAMES][:n].transpose(0, 2, 1))


def pad_clip(samples: np.ndarray) -> np.ndarray:
    """A clip zero-padded as YAMNet pads it: to at least 0.975 s, then up to a whole number of
    0.48 s patch hops beyond the first patch, so that its end falls in a patch."""
    audio = checked_samples(samples)
    length = max(audio.size, MIN_CLIP_SAMPLES)
    hops = math.ceil((length - MIN_CLIP_SAMPLES) / PATCH_HOP_SAMPLES)
    padded = np.zeros(MIN_CLIP_SAMPLES + hops * PATCH_HOP_SAMPLES)
    padded[: audio.size] = audio
    return padded


def clip_patches(samples: np.ndarray) -> np.ndarray:
    """YAMNet's patches of a whole clip (n x 96 x 64, n >= 1): patch i starts at i x 0.48 s."""
    return patches_of_frames(log_mel_frames(pad_clip(samples)))


class YamnetFrontEnd:
    """Streaming patches: blocks of 16 kHz samples in, each patch out once its 0.96 s (plus
    the last window's 15 ms) have arrived. Splitting a stream differently into blocks gives the
    same patches, and the same as ``patches_of_frames(log_mel_frames(stream))``; only samples
    and frames that a later patch still needs are kept."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget everything, as at the start of a stream."""
        self._samples = np.zeros(0)
        self._frames = np.zeros((0, N_MEL_BANDS), dtype=np.float32)
        self.patches_emitted = 0

    def process(self, block: np.ndarray) -> np.ndarray:
        """Patches (n x 96 x 64, n may be 0) completed by ``block`` (16 kHz samples)."""
        audio = np.concatenate([self._samples, checked_samples(block, "block")])
        frames = log_mel_frames(audio)
        self._samples = audio[len(frames) * HOP_SAMPLES :]
        self._frames = np.concatenate([self._frames, frames])
        patches = patches_of_frames(self._frames)
        self._frames = self._frames[len(patches) * PATCH_HOP_FRAMES :]
        self.patches_emitted += len(patches)
        return patches

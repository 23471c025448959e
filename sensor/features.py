"""Classification features: calibrated log-mel band levels on a fixed 20 ms grid.

The analyzer never sees raw audio, so these features are what any classifier is trained and
run on. They are computed in physical units (dB SPL per mel band, after calibration) with a
window and hop fixed in seconds, so that the same sound gives the same features at every
supported capture rate; training code must call this module, never a copy of it.
"""

from __future__ import annotations

import librosa
import numpy as np

WINDOW_S = 0.025
HOP_S = 0.02
N_MELS = 64
FMIN_HZ = 50.0
FMAX_HZ = 8000.0
POWER_FLOOR = 1e-20  # mean-square floor (-200 dB re full scale) so silence stays finite


class MelFeatures:
    """Streaming mel band levels, one row per 20 ms hop, windows ending on hop boundaries.

    Each row covers the 25 ms that end at its hop boundary, so a one-second block at any
    supported rate yields exactly 50 rows and splitting the signal differently into blocks
    gives the same rows (the last 5 ms of each block are carried over).
    """

    def __init__(self, sample_rate: int, full_scale_db: float, n_mels: int = N_MELS) -> None:
        self.sample_rate = sample_rate
        self.full_scale_db = full_scale_db
        self.n_mels = n_mels
        self.hop = round(HOP_S * sample_rate)
        self.win = round(WINDOW_S * sample_rate)
        # No zero padding: the window length itself (pocketfft handles any length), and only
        # the bins up to FMAX_HZ are turned into power, which is what keeps this cheap at 48 kHz.
        self.n_fft = self.win
        self.window = np.hanning(self.win + 2)[1:-1]  # periodic-free Hann without zero ends
        # Power spectral density scaling (one-sided): triangles with unit peak then integrate
        # the PSD over each mel band, giving band mean square independent of the sample rate.
        self.psd_scale = 2.0 / (sample_rate * float(np.sum(self.window**2)))
        self.bin_hz = sample_rate / self.n_fft
        self.mel_basis = librosa.filters.mel(
            sr=sample_rate,
            n_fft=self.n_fft,
            n_mels=n_mels,
            fmin=FMIN_HZ,
            fmax=min(FMAX_HZ, sample_rate / 2),
            norm=None,
            htk=False,
        ).astype(np.float64)
        self.n_bins = int(np.flatnonzero(self.mel_basis.any(axis=0)).max()) + 1
        self.mel_basis_t = np.ascontiguousarray(self.mel_basis[:, : self.n_bins].T)
        self.reset()

    def reset(self) -> None:
        """Forget the carried samples, as at the start of a stream."""
        self._carry = np.zeros(self.win - self.hop, dtype=np.float64)

    def process(self, block: np.ndarray) -> np.ndarray:
        """Return mel band levels (rows x n_mels, dB SPL) for every hop completed by ``block``."""
        buffer = np.concatenate([self._carry, np.asarray(block, dtype=np.float64)])
        overlap = self.win - self.hop
        n_rows = max(0, (buffer.size - overlap) // self.hop)
        if n_rows == 0:
            self._carry = buffer
            return np.zeros((0, self.n_mels), dtype=np.float32)
        frames = np.lib.stride_tricks.sliding_window_view(buffer, self.win)[:: self.hop][:n_rows]
        spectrum = np.fft.rfft(frames * self.window, n=self.n_fft, axis=1)[:, : self.n_bins]
        psd = (spectrum.real**2 + spectrum.imag**2) * (self.psd_scale * self.bin_hz)
        band_power = psd @ self.mel_basis_t
        self._carry = buffer[n_rows * self.hop :]
        levels = 10.0 * np.log10(np.maximum(band_power, POWER_FLOOR)) + self.full_scale_db
        return levels.astype(np.float32)


def mel_centre_frequencies_hz(n_mels: int = N_MELS) -> np.ndarray:
    """Centre frequency of every mel band, Hz (Slaney mel scale, as the filters use)."""
    return librosa.mel_frequencies(n_mels=n_mels + 2, fmin=FMIN_HZ, fmax=FMAX_HZ, htk=False)[1:-1]

"""A first, simple dog-vocalization score: prominence of bark-band energy over background.

Per 20 ms step, the energy in the mel bands between ``band_low_hz`` and ``band_high_hz``
(where dog barks carry most of their energy, REFERENCE.md section 6) is compared with a
background that follows decreases quickly (0.3 s) and increases slowly
(``background_rise_s``), so a bark stands out and a steady noise does not. The background
starts at the median of the first frame, so a quiet first instant (a fade-in) does not make
everything after it prominent. The rise over background maps to a 0..1 score through a
logistic curve. It is deliberately simple: it flags any sudden sound in that band, dog or
not. The trained classifier (its own issue) replaces this score; the event tracker and
everything downstream stay the same.
"""

from __future__ import annotations

import math

import numpy as np

from analyzer.config import DetectorSettings
from sensor.features import mel_centre_frequencies_hz

MODEL_VERSION = "prominence-0.2"
BACKGROUND_FALL_S = 0.3


class ProminenceDetector:
    """Stateful per-device scorer over mel frames (rows of 20 ms steps x mel bands, dB SPL)."""

    model_version = MODEL_VERSION

    def __init__(self, settings: DetectorSettings, n_mels: int, hop_s: float) -> None:
        self.settings = settings
        centres = mel_centre_frequencies_hz(n_mels)
        self.band = (centres >= settings.band_low_hz) & (centres <= settings.band_high_hz)
        self.rise_per_step = 1.0 - math.exp(-hop_s / settings.background_rise_s)
        self.fall_per_step = 1.0 - math.exp(-hop_s / BACKGROUND_FALL_S)
        self.background_db: float | None = None

    def reset(self) -> None:
        """Forget the background (after a gap in the data)."""
        self.background_db = None

    def scores(self, mel_db: np.ndarray) -> np.ndarray:
        """Dog score in 0..1 for each row of ``mel_db``."""
        band_db = 10.0 * np.log10(np.sum(np.power(10.0, mel_db[:, self.band] / 10.0), axis=1))
        out = np.empty(band_db.size)
        s = self.settings
        if self.background_db is None and band_db.size:
            self.background_db = float(np.median(band_db))
        background = float(self.background_db or 0.0)
        for i, level in enumerate(band_db):
            prominence = level - background
            out[i] = 1.0 / (1.0 + math.exp(-(prominence - s.prominence_db) / s.slope_db))
            rate = self.fall_per_step if level < background else self.rise_per_step
            background += rate * (level - background)
        self.background_db = background
        return out

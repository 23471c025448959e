"""Sources of training streams: a clip augmented toward deployment conditions, real
backgrounds to mix it into, and synthetic negatives (tones, beeps, sweeps, noise bursts) and
narrow-band ones (bird-like chirp trains, alarm beeps, a whistle's glide).

Every function draws from the generator it is given, in a fixed order: the same seed gives the
same sound, bit for bit.
"""

from __future__ import annotations

import math

import numpy as np
import soxr
from scipy import signal

from training.corpus import RATE

MAX_SOURCE_S = 10.0  # a longer clip is cut to a random 10 s piece


def _reverb(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    rt60 = rng.uniform(0.2, 1.2)
    n = int(rt60 * RATE)
    t = np.arange(n) / RATE
    tail = rng.standard_normal(n) * np.exp(-6.9 * t / rt60)
    tail[: int(0.002 * RATE)] = 0.0
    drr_db = rng.uniform(-3.0, 10.0)  # direct-to-reverberant ratio
    tail *= 10 ** (-drr_db / 20) / math.sqrt(np.sum(tail**2) + 1e-12)
    ir = np.concatenate([[1.0], tail[1:]])
    return np.asarray(signal.fftconvolve(x, ir)[: x.size + n // 2])


def augment_source(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    """Pitch/time (resampling by up to +-6 %), distance low-pass, reverberation."""
    if x.size > MAX_SOURCE_S * RATE:
        start = rng.integers(0, x.size - int(MAX_SOURCE_S * RATE))
        x = x[start : start + int(MAX_SOURCE_S * RATE)]
    if rng.random() < 0.6:
        x = np.asarray(soxr.resample(x, RATE, RATE * rng.uniform(0.94, 1.06)))
    if rng.random() < 0.5:
        # Air absorption over tens of metres takes the top octaves first (ISO 9613-1).
        sos = signal.butter(2, rng.uniform(2000.0, 7000.0), fs=RATE, output="sos")
        x = np.asarray(signal.sosfilt(sos, x))
    if rng.random() < 0.4:
        x = _reverb(rng, x)
    if rng.random() < 0.6:
        x = random_colouring(rng, x)
    return x


def random_colouring(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    """A microphone's or a wall's colouring: a spectral tilt and one resonance or dip, +-6 dB."""
    tilt = rng.uniform(-0.6, 0.6)  # first-order tilt: +-6 dB or so between 300 Hz and 5 kHz
    y = signal.lfilter([1.0, -tilt], [1.0], x) / (1.0 + abs(tilt))
    b, a = signal.iirpeak(rng.uniform(300.0, 5000.0), rng.uniform(1.0, 4.0), fs=RATE)
    y = y + rng.uniform(-0.5, 1.0) * signal.lfilter(b, a, y)
    return np.asarray(y)


def background_segment(rng: np.random.Generator, pool: list[np.ndarray], n: int) -> np.ndarray:
    """``n`` samples of one or two real background recordings, looped if short."""
    out = np.zeros(n)
    for k in range(1 if rng.random() < 0.7 else 2):
        bg = pool[rng.integers(len(pool))]
        start = rng.integers(0, max(1, bg.size - n))
        piece = np.resize(np.roll(bg, -start), n)
        out += piece * (1.0 if k == 0 else 10 ** (rng.uniform(-15.0, 0.0) / 20))
    return out


def _synthetic_tone(rng: np.random.Generator, kind: int, t: np.ndarray) -> np.ndarray:
    """A steady tone (kind 0), beeps (1) or a siren-like sweep (2) at the sample times ``t``."""
    if kind == 0:
        return np.sin(2 * np.pi * rng.uniform(150.0, 5000.0) * t)
    if kind == 1:
        x = np.sin(2 * np.pi * rng.uniform(400.0, 4000.0) * t)
        period, on = rng.uniform(0.15, 1.0), rng.uniform(0.2, 0.7)
        return x * ((t % period) < on * period).astype(float)
    f0, depth, rate = rng.uniform(500, 1500), rng.uniform(200, 800), rng.uniform(0.2, 4.0)
    return np.sin(2 * np.pi * np.cumsum(f0 + depth * np.sin(2 * np.pi * rate * t)) / RATE)


def synthetic_negative(rng: np.random.Generator) -> np.ndarray:
    """A tone, beeps, a siren-like sweep, a noise burst or (near) silence: not a dog."""
    n = int(rng.uniform(1.0, 6.0) * RATE)
    t = np.arange(n) / RATE
    kind = rng.integers(5)
    if kind <= 2:
        x = _synthetic_tone(rng, int(kind), t)
    elif kind == 3:
        x = rng.standard_normal(n)
        if rng.random() < 0.5:
            sos = signal.butter(2, rng.uniform(300, 3000), fs=RATE, output="sos")
            x = signal.sosfilt(sos, x)
        x *= (rng.random(n // 1600 + 1) < 0.5).repeat(1600)[:n]
    else:
        x = rng.standard_normal(n) * 1e-3
    return np.asarray(x, dtype=np.float64)


def chirp_train(rng: np.random.Generator, n: int) -> np.ndarray:
    """Bird-like song: short fast sweeps of 1.5-7.5 kHz, some trilled, some with a harmonic."""
    x = np.zeros(n)
    start = int(rng.uniform(0.0, 0.3) * RATE)
    while start < n:
        m = int(rng.uniform(0.02, 0.25) * RATE)
        t = np.arange(m) / RATE
        f_start = rng.uniform(1500.0, 7500.0)
        f_end = np.clip(f_start * 2 ** rng.uniform(-1.5, 1.5), 1500.0, 7500.0)
        freq = f_start + (f_end - f_start) * t / t[-1]
        if rng.random() < 0.4:  # a trill
            freq *= 1 + rng.uniform(0.03, 0.15) * np.sin(2 * np.pi * rng.uniform(20, 60) * t)
        phase = 2 * np.pi * np.cumsum(freq) / RATE
        chirp = np.sin(phase)
        if rng.random() < 0.5 and freq.max() < 3900.0:
            chirp += rng.uniform(0.1, 0.5) * np.sin(2 * phase)
        chirp *= np.hanning(m) * rng.uniform(0.3, 1.0)
        end = min(n, start + m)
        x[start:end] += chirp[: end - start]
        start = end + int(rng.exponential(rng.uniform(0.03, 0.4)) * RATE)
    return x


def harmonic_beeps(rng: np.random.Generator, t: np.ndarray) -> np.ndarray:
    """An alarm or a reversing beeper: a 1-3 kHz square-ish tone, one or two pitches, pulsed."""
    base, swap = rng.uniform(1000.0, 3000.0), rng.uniform(0.2, 1.5)  # two pitches: swap period
    low = rng.uniform(0.7, 0.9) if rng.random() < 0.5 else 1.0
    f0 = base * np.where(t % swap < swap / 2, 1.0, low)
    phase = 2 * np.pi * np.cumsum(f0) / RATE
    x = np.zeros(t.size)
    for k in (1, 3, 5, 7):  # odd harmonics under the 8 kHz Nyquist frequency
        x += np.sin(k * phase) / k * (k * f0 < 7800.0)
    if rng.random() < 0.7:
        period, on = rng.uniform(0.15, 1.5), rng.uniform(0.2, 0.8)
        x *= (t % period) < on * period
    return x


def tonal_negative(rng: np.random.Generator) -> np.ndarray:
    """A narrow-band sound that is not a dog: bird-like chirps, alarm beeps, a whistle's glide,
    or one of the synthetic negatives' tones, beeps or sweeps (``--tonal-negatives``)."""
    n = int(rng.uniform(1.0, 6.0) * RATE)
    t = np.arange(n) / RATE
    kind = rng.integers(4)
    if kind == 0:
        x = chirp_train(rng, n)
    elif kind == 1:
        x = harmonic_beeps(rng, t)
    elif kind == 2:  # whistling: a pure tone gliding slowly between 1.5 and 4 kHz
        contour = np.cumsum(rng.standard_normal(n // 1600 + 2)) * rng.uniform(50.0, 300.0)
        freq = np.clip(rng.uniform(1500.0, 4000.0) + np.interp(
            np.arange(n), np.arange(contour.size) * 1600, contour), 1500.0, 4000.0)  # fmt: skip
        x = np.sin(2 * np.pi * np.cumsum(freq) / RATE)
    else:
        x = _synthetic_tone(rng, int(rng.integers(3)), t)
    return np.asarray(x, dtype=np.float64)

"""Acoustic calibration with a 1 kHz sound calibrator (IEC 60942), e.g. 94 dB SPL.

The calibrator on the microphone produces a known sound pressure level at 1 kHz; the capture
of it gives the offset between digital full scale and SPL (``full_scale_db``: the dB SPL
that a signal with an RMS of full scale reads). Before accepting it the tone is checked:

- long enough (at least 2 s) and not clipped;
- at the calibrator's frequency (within 2 %; IEC 60942 allows 1 % for class 1);
- clean: the tone carries at least ``min_tone_to_noise_db`` more energy than everything else
  (noise, hum, distortion), so the offset is not pulled by background noise;
- steady: its 100 ms levels stay within ``max_spread_db`` (a calibrator held loosely or
  knocked during the capture varies).

Any failed check refuses the calibration with the measured value and what to do about it.
Only the tone's own energy (the spectrum within 50 Hz of its peak) sets the offset.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sensor.errors import SensorError

NOMINAL_FREQUENCY_HZ = 1000.0
FREQUENCY_TOLERANCE = 0.02
TONE_HALF_WIDTH_HZ = 50.0
MIN_DURATION_S = 2.0
CLIP_LEVEL = 0.999
STEADINESS_BLOCK_S = 0.1

DEFAULT_FULL_SCALE_DB = 120.0
"""The calibration assumed until one is measured, everywhere (sensor, ``barkwatch analyze``,
``evaluate``, the demo): the dB SPL that an RMS of digital full scale reads. A typical digital
MEMS microphone, the usual Raspberry Pi choice, puts a 94 dB SPL tone at -26 dBFS (acoustic
overload at 120 dB SPL), so full scale reads 120 dB SPL (123 if dBFS is taken re a full-scale
sine, as datasheets do); USB measurement microphones at their default gain read a little
lower. An uncalibrated sensor is then a few dB off, not tens."""


class CalibrationRefused(SensorError):
    """The captured calibrator tone is not fit to calibrate with; the message says why."""


@dataclass(frozen=True)
class CalibrationResult:
    """What a calibration capture measured."""

    full_scale_db: float
    reference_level_db: float
    tone_frequency_hz: float
    tone_level_dbfs: float
    tone_to_noise_db: float
    spread_db: float
    duration_s: float


def analyse_calibration_tone(
    samples: np.ndarray,
    sample_rate: int,
    reference_level_db: float = 94.0,
    nominal_frequency_hz: float = NOMINAL_FREQUENCY_HZ,
    min_tone_to_noise_db: float = 20.0,
    max_spread_db: float = 0.5,
) -> CalibrationResult:
    """Measure ``full_scale_db`` from a capture of the calibrator; raise CalibrationRefused.

    ``samples`` are mono, full scale 1.0; ``reference_level_db`` is the calibrator's level in
    dB SPL at ``nominal_frequency_hz``.
    """
    x = np.asarray(samples, dtype=np.float64).reshape(-1)
    duration_s = x.size / sample_rate
    if duration_s < MIN_DURATION_S:
        raise CalibrationRefused(
            f"capture of {duration_s:.2f} s is too short; at least {MIN_DURATION_S:.0f} s needed"
        )
    clipped = int(np.count_nonzero(np.abs(x) >= CLIP_LEVEL))
    if clipped:
        raise CalibrationRefused(
            f"{clipped} samples clipped: lower the input gain and calibrate again"
        )
    x = x - x.mean()
    total_power = float(np.mean(x * x))
    if total_power <= 0.0:
        raise CalibrationRefused("the capture is silent: is the microphone connected?")

    window = np.hanning(x.size)
    spectrum = np.abs(np.fft.rfft(x * window)) ** 2
    frequencies = np.fft.rfftfreq(x.size, 1.0 / sample_rate)
    spectrum[frequencies < 20.0] = 0.0  # DC and rumble are not the tone
    peak_hz = float(frequencies[int(np.argmax(spectrum))])
    if abs(peak_hz - nominal_frequency_hz) > FREQUENCY_TOLERANCE * nominal_frequency_hz:
        raise CalibrationRefused(
            f"the strongest tone is at {peak_hz:.0f} Hz, not {nominal_frequency_hz:.0f} Hz "
            f"(tolerance {FREQUENCY_TOLERANCE:.0%}): is the calibrator on and switched on?"
        )
    near = np.abs(frequencies - peak_hz) <= TONE_HALF_WIDTH_HZ
    tone_fraction = float(spectrum[near].sum() / spectrum.sum())
    rest = max(1.0 - tone_fraction, 1e-12)
    tone_to_noise_db = 10.0 * np.log10(tone_fraction / rest)
    if tone_to_noise_db < min_tone_to_noise_db:
        raise CalibrationRefused(
            f"the tone is not clean: only {tone_to_noise_db:.1f} dB above noise and distortion "
            f"(at least {min_tone_to_noise_db:.0f} dB needed); seat the calibrator fully, "
            "shelter it from wind and noise, and check the microphone"
        )

    block = round(STEADINESS_BLOCK_S * sample_rate)
    n_blocks = x.size // block
    block_levels = 10.0 * np.log10(np.mean(x[: n_blocks * block].reshape(n_blocks, block) ** 2,
                                           axis=1))
    spread_db = float(block_levels.max() - block_levels.min())
    if spread_db > max_spread_db:
        raise CalibrationRefused(
            f"the level is not steady: its 100 ms levels vary by {spread_db:.2f} dB (at most "
            f"{max_spread_db:.2f} dB allowed); hold the calibrator still on the microphone"
        )

    tone_level_dbfs = 10.0 * np.log10(total_power * tone_fraction)
    return CalibrationResult(
        full_scale_db=round(float(reference_level_db - tone_level_dbfs), 3),
        reference_level_db=reference_level_db,
        tone_frequency_hz=peak_hz,
        tone_level_dbfs=float(tone_level_dbfs),
        tone_to_noise_db=float(tone_to_noise_db),
        spread_db=spread_db,
        duration_s=duration_s,
    )


def record_calibration(config_path: str, result: CalibrationResult, calibrator: str,
                       date: str) -> float | None:
    """Store the offset, date and calibrator in the sensor's TOML file, keeping its comments.

    Returns the previous calibration's ``full_scale_db``, so the caller can report the drift
    since it; None when the file records no earlier calibration (no ``date``): a
    ``full_scale_db`` without a date is the uncalibrated default a new device's file carries,
    and there is nothing to have drifted from.
    """
    import tomlkit

    try:
        with open(config_path, encoding="utf-8") as handle:
            document = tomlkit.parse(handle.read())
    except OSError as exc:
        raise SensorError(f"cannot read {config_path} to store the calibration: {exc}") from exc
    table = document.get("calibration")
    if table is None:
        table = tomlkit.table()
        document["calibration"] = table
    previous = table.get("full_scale_db") if str(table.get("date", "")).strip() else None
    table["full_scale_db"] = result.full_scale_db
    table["date"] = date
    table["calibrator"] = calibrator
    table["reference_level_db"] = result.reference_level_db
    try:
        with open(config_path, "w", encoding="utf-8") as handle:
            handle.write(tomlkit.dumps(document))
    except OSError as exc:
        raise SensorError(f"cannot write the calibration to {config_path}: {exc}") from exc
    return float(previous) if previous is not None else None

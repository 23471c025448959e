"""Outdoor sound propagation from the sensor to the point 100 ft beyond the premises boundary.

Pure functions over one-third-octave band levels (dB) at IEC 61260-1 exact mid-band
frequencies:

- atmospheric absorption, ISO 9613-1:1993 clause 6 (pure-tone coefficient at the exact
  mid-band frequency, as the standard's Table 1 and note 5 do for bands);
- geometrical divergence from a measured level: L2 = L1 - 20 lg(r2/r1) (spherical spreading
  from a point source, ISO 9613-2:1996 7.1 written for a measured pressure level);
- ground effect, ISO 9613-2:1996 7.3.1 (general method, Table 3), octave-band values applied
  to the one-third-octave bands inside each octave.

Levels move from r1 (source to sensor) to r2 (source to receiver); each term is the
difference between the two paths. Conservative choices (in the dog owner's favour: never a
higher level at the receiver than the data supports) are made by the caller,
:mod:`analyzer.acoustics.audibility`, by evaluating these functions at the ends of each parameter's
range.
"""

from __future__ import annotations

import math

import numpy as np

FEET_PER_METRE = 1.0 / 0.3048
RECEIVER_BEYOND_BOUNDARY_M = 30.48  # 100 ft exactly

# ISO 9613-1 reference atmosphere.
REFERENCE_PRESSURE_KPA = 101.325
REFERENCE_TEMPERATURE_K = 293.15
TRIPLE_POINT_K = 273.16

# ISO 9613-2:1996 Table 3 applies per octave; the centres of those octaves (exact, base 10).
_OCTAVE_CENTRES_HZ = 1000.0 * 10.0 ** (np.arange(-4, 4) * 0.3)  # 63 Hz ... 8 kHz


def metres_and_feet(metres: float) -> str:
    """A distance as '30.48 m (100.0 ft)'."""
    return f"{metres:.2f} m ({metres * FEET_PER_METRE:.1f} ft)"


def absorption_db_per_m(
    frequency_hz: np.ndarray | float,
    temperature_c: float,
    humidity_pct: float,
    pressure_kpa: float = REFERENCE_PRESSURE_KPA,
) -> np.ndarray:
    """Pure-tone attenuation coefficient alpha, dB per metre (ISO 9613-1:1993 eqs 3-5, B.1)."""
    f = np.asarray(frequency_hz, dtype=np.float64)
    temperature_k = temperature_c + 273.15
    pressure_ratio = pressure_kpa / REFERENCE_PRESSURE_KPA
    t_ratio = temperature_k / REFERENCE_TEMPERATURE_K
    # Saturation vapour pressure over liquid water (Annex B, eq. B.1 and B.2).
    c = -6.8346 * (TRIPLE_POINT_K / temperature_k) ** 1.261 + 4.6151
    h = humidity_pct * 10.0**c / pressure_ratio  # molar concentration of water vapour, %
    fr_o = pressure_ratio * (24.0 + 4.04e4 * h * (0.02 + h) / (0.391 + h))
    fr_n = pressure_ratio * t_ratio**-0.5 * (
        9.0 + 280.0 * h * math.exp(-4.170 * (t_ratio ** (-1.0 / 3.0) - 1.0))
    )
    return np.asarray(
        8.686
        * f**2
        * (
            1.84e-11 / pressure_ratio * t_ratio**0.5
            + t_ratio**-2.5
            * (
                0.01275 * math.exp(-2239.1 / temperature_k) / (fr_o + f**2 / fr_o)
                + 0.1068 * math.exp(-3352.0 / temperature_k) / (fr_n + f**2 / fr_n)
            )
        )
    )


def _octave_index(frequency_hz: np.ndarray) -> np.ndarray:
    """Index 0..7 of the ISO 9613-2 octave (63 Hz ... 8 kHz) containing each frequency."""
    index = np.round(np.log10(np.asarray(frequency_hz) / 1000.0) / 0.3).astype(int) + 4
    return np.clip(index, 0, 7)


def ground_attenuation_db(
    frequency_hz: np.ndarray,
    source_height_m: float,
    receiver_height_m: float,
    distance_m: float,
    ground_factor: float,
) -> np.ndarray:
    """A_gr = A_s + A_r + A_m per band, ISO 9613-2:1996 7.3.1 and Table 3 (dB; negative is
    a gain from a reflecting ground). One ground factor G for the whole path."""
    hs, hr, dp, g = source_height_m, receiver_height_m, distance_m, ground_factor

    def side(h: float) -> np.ndarray:
        near = 1.0 - math.exp(-dp / 50.0)
        a = 1.5 + 3.0 * math.exp(-0.12 * (h - 5.0) ** 2) * near + 5.7 * math.exp(
            -0.09 * h**2
        ) * (1.0 - math.exp(-2.8e-6 * dp**2))
        b = 1.5 + 8.6 * math.exp(-0.09 * h**2) * near
        c = 1.5 + 14.0 * math.exp(-0.46 * h**2) * near
        d = 1.5 + 5.0 * math.exp(-0.9 * h**2) * near
        return np.array([
            -1.5,
            -1.5 + g * a,
            -1.5 + g * b,
            -1.5 + g * c,
            -1.5 + g * d,
            -1.5 * (1.0 - g),
            -1.5 * (1.0 - g),
            -1.5 * (1.0 - g),
        ])

    q = 0.0 if dp <= 30.0 * (hs + hr) else 1.0 - 30.0 * (hs + hr) / dp
    middle = np.array([-3.0 * q] + [-3.0 * q * (1.0 - g)] * 7)
    per_octave = side(hs) + side(hr) + middle
    return np.asarray(per_octave[_octave_index(np.asarray(frequency_hz))])


def propagate_band_levels(
    levels_db: np.ndarray,
    frequency_hz: np.ndarray,
    sensor_distance_m: float,
    receiver_distance_m: float,
    absorption_db_m: np.ndarray,
    ground_db_at_sensor: np.ndarray | None = None,
    ground_db_at_receiver: np.ndarray | None = None,
) -> np.ndarray:
    """Band levels at the receiver from band levels measured at the sensor.

    Distances are from the source (the dog). Spreading 20 lg(r2/r1), absorption alpha (r2 - r1)
    and, when given, the change in ground attenuation between the two paths.
    """
    if sensor_distance_m <= 0 or receiver_distance_m <= 0:
        raise ValueError("distances from the source must be positive")
    out = (
        np.asarray(levels_db, dtype=np.float64)
        - 20.0 * math.log10(receiver_distance_m / sensor_distance_m)
        - np.asarray(absorption_db_m) * (receiver_distance_m - sensor_distance_m)
    )
    if ground_db_at_sensor is not None and ground_db_at_receiver is not None:
        out = out - (ground_db_at_receiver - ground_db_at_sensor)
    return np.asarray(out)


def a_weighting_db(frequency_hz: np.ndarray) -> np.ndarray:
    """IEC 61672-1:2013 Annex E analytic A-weighting, dB (0 dB at 1 kHz)."""
    f2 = np.asarray(frequency_hz, dtype=np.float64) ** 2
    f1, f2p, f3, f4 = 20.598997, 107.65265, 737.86223, 12194.217
    response = (f4**2 * f2**2) / (
        (f2 + f1**2) * np.sqrt((f2 + f2p**2) * (f2 + f3**2)) * (f2 + f4**2)
    )
    return np.asarray(20.0 * np.log10(response) + 1.9997)


def a_weighted_total_db(levels_db: np.ndarray, frequency_hz: np.ndarray) -> float:
    """Energy sum of band levels after A-weighting at the band centres, dB(A)."""
    weighted = np.asarray(levels_db) + a_weighting_db(frequency_hz)
    return float(10.0 * np.log10(np.sum(10.0 ** (weighted / 10.0))))

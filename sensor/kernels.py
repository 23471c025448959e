"""Compiled inner loops of the level meter and the one-third-octave bank (numba).

A recursive filter is latency-bound: each output sample waits for the previous one, so a
single biquad costs about as much per sample whatever the surrounding code does. The way to
go faster is to keep the CPU busy with independent recursions at once and to touch each
sample once: the A and C weightings, the F and S time weightings and every statistic of a
frame run in one loop (``weighted_meter_pass``), and the three band-pass filters of one
octave of the bank run in one loop with the anti-alias low-pass for the next octave
(``four_chain_pass``), summing squares as they go instead of writing output arrays.
Measured in benchmarks/bench_sensor.py (docs/MEASUREMENT.md, "Speed").

numba comes with librosa, which the sensor already needs; ``cache=True`` keeps the compiled
code on disk so only the first start after installation pays for compilation. Every kernel
does the same arithmetic in the same order as ``scipy.signal.sosfilt`` (transposed direct
form II), so its results equal scipy's (tested).
"""

from __future__ import annotations

import numpy as np
from numba import njit
from scipy import signal

CHAINS = 4
"""Filter chains ``four_chain_pass`` runs side by side: three bands and a low-pass."""

IDENTITY_SECTION = np.array([1.0, 0.0, 0.0, 1.0, 0.0, 0.0])
"""A second-order section that passes its input unchanged (pads a shorter chain)."""

SILENT_SECTION = np.array([0.0, 0.0, 0.0, 1.0, 0.0, 0.0])
"""A second-order section whose output is always zero (fills an unused chain)."""


def stack_chains(chains: list[np.ndarray]) -> np.ndarray:
    """Cascades of sections (each (n, 6), as scipy designs them) as one (n_max, 6, n_chains)
    array for the kernels that run chains side by side, shorter ones padded with
    ``IDENTITY_SECTION``."""
    n_sections = max(sos.shape[0] for sos in chains)
    stacked = np.empty((n_sections, 6, len(chains)))
    for chain, sos in enumerate(chains):
        stacked[:, :, chain] = IDENTITY_SECTION
        stacked[: sos.shape[0], :, chain] = sos
    return stacked


def sosfilt(sos: np.ndarray, x: np.ndarray, zi: np.ndarray) -> np.ndarray:
    """``scipy.signal.sosfilt(sos, x, zi=zi)`` for 1-D ``x``, updating ``zi`` in place.

    ``sos`` is (n, 6), ``zi`` (n, 2) C-contiguous float64; ``x`` is read, never written. The
    result equals the public function's (tested). Without scipy's argument checking (which
    cost more than filtering a short decimated signal) and, for one section, with the state
    held in registers: about half the time per sample of scipy's loop.
    """
    if not (zi.flags.c_contiguous and zi.dtype == np.float64 and zi.shape == (sos.shape[0], 2)):
        out, zi[...] = signal.sosfilt(sos, x, zi=zi)
        return np.asarray(out)
    samples = np.ascontiguousarray(x, dtype=np.float64)
    out = np.empty_like(samples)
    coefficients = np.ascontiguousarray(sos, dtype=np.float64)
    if coefficients.shape[0] == 1:
        _one_section(coefficients, samples, zi, out)
    else:
        _sections(coefficients, samples, zi, out)
    return out


@njit(cache=True, nogil=True)
def _one_section(sos: np.ndarray, x: np.ndarray, zi: np.ndarray, out: np.ndarray) -> None:
    b0, b1, b2, a1, a2 = sos[0, 0], sos[0, 1], sos[0, 2], sos[0, 4], sos[0, 5]
    z0 = zi[0, 0]
    z1 = zi[0, 1]
    for n in range(x.shape[0]):
        value = x[n]
        y = b0 * value + z0
        z0 = b1 * value - a1 * y + z1
        z1 = b2 * value - a2 * y
        out[n] = y
    zi[0, 0] = z0
    zi[0, 1] = z1


@njit(cache=True, nogil=True)
def _sections(sos: np.ndarray, x: np.ndarray, zi: np.ndarray, out: np.ndarray) -> None:
    z = zi.copy()  # a local copy the compiler knows nothing else writes
    for n in range(x.shape[0]):
        value = x[n]
        for s in range(sos.shape[0]):
            y = sos[s, 0] * value + z[s, 0]
            z[s, 0] = sos[s, 1] * value - sos[s, 4] * y + z[s, 1]
            z[s, 1] = sos[s, 2] * value - sos[s, 5] * y
            value = y
        out[n] = value
    zi[...] = z


@njit(cache=True, nogil=True, inline="always")
def _section(sos: np.ndarray, z: np.ndarray, s: int, chain: int, value: float) -> float:
    """One transposed-direct-form-II step of section ``s`` of ``chain`` (scipy's order)."""
    y = sos[s, 0, chain] * value + z[s, 0, chain]
    z[s, 0, chain] = sos[s, 1, chain] * value - sos[s, 4, chain] * y + z[s, 1, chain]
    z[s, 1, chain] = sos[s, 2, chain] * value - sos[s, 5, chain] * y
    return y


@njit(cache=True, nogil=True)
def four_chain_pass(
    x: np.ndarray,
    sos: np.ndarray,
    zi: np.ndarray,
    energy: np.ndarray,
    last_power: np.ndarray,
    last_chain_out: np.ndarray,
) -> None:
    """Four cascades of second-order sections over the same input, side by side.

    ``sos`` is (n_sections, 6, 4) and ``zi`` (n_sections, 2, 4): section s of chain k is
    ``sos[s, :, k]`` (pad a shorter chain with ``IDENTITY_SECTION``, an unused one with
    ``SILENT_SECTION``). Writes each chain's sum of squared outputs to ``energy`` and its last
    output squared to ``last_power`` (both length 4), and chain 3's output to
    ``last_chain_out`` (same length as ``x``). ``zi`` is updated. Each chain's output equals
    ``scipy.signal.sosfilt`` of its sections.
    """
    coefficients = sos.copy()  # local copies the compiler knows nothing else writes
    z = zi.copy()
    e0 = e1 = e2 = e3 = 0.0
    v0 = v1 = v2 = v3 = 0.0
    for n in range(x.shape[0]):
        v0 = v1 = v2 = v3 = x[n]
        for s in range(coefficients.shape[0]):
            # Four independent recursions: the CPU overlaps their latencies.
            v0 = _section(coefficients, z, s, 0, v0)
            v1 = _section(coefficients, z, s, 1, v1)
            v2 = _section(coefficients, z, s, 2, v2)
            v3 = _section(coefficients, z, s, 3, v3)
        e0 += v0 * v0
        e1 += v1 * v1
        e2 += v2 * v2
        e3 += v3 * v3
        last_chain_out[n] = v3
    zi[...] = z
    energy[0], energy[1], energy[2], energy[3] = e0, e1, e2, e3
    last_power[0], last_power[1] = v0 * v0, v1 * v1
    last_power[2], last_power[3] = v2 * v2, v3 * v3


@njit(cache=True, nogil=True)
def weighted_meter_pass(
    x: np.ndarray,
    sos: np.ndarray,
    zi: np.ndarray,
    state: np.ndarray,
    fast: float,
    slow: float,
    step: int,
    clip: float,
    step_a_sum: np.ndarray,
    step_fast_max: np.ndarray,
    step_fast_end: np.ndarray,
) -> tuple[float, float, float, float, float, float, int]:
    """The level meter's whole per-sample work on one block, in one loop.

    ``sos`` (n_sections, 6, 2) and ``zi`` (n_sections, 2, 2) hold the A weighting in chain 0
    and the C weighting in chain 1 (the shorter padded with ``IDENTITY_SECTION``); ``zi`` is
    updated. ``state`` holds the F and S mean squares [F, S] carried between blocks
    (IEC 61672-1 time weighting, exponential averagers with poles ``fast`` and ``slow``;
    updated). Returns (sum A², sum C², sum Z², max F, min F, max S, clipped samples) and
    fills the per-``step`` arrays: sum of A², maximum F mean square, F mean square at the
    step's end.
    """
    coefficients = sos.copy()
    z = zi.copy()
    f_state = state[0]
    s_state = state[1]
    sum_a = 0.0
    sum_c = 0.0
    sum_z = 0.0
    f_max = -1.0
    f_min = np.inf
    s_max = -1.0
    clipped = 0
    g_fast = 1.0 - fast
    g_slow = 1.0 - slow
    for k in range(x.shape[0] // step):
        step_sum = 0.0
        step_max = -1.0
        for n in range(k * step, (k + 1) * step):
            raw = x[n]
            a = raw
            c = raw
            for s in range(coefficients.shape[0]):
                a = _section(coefficients, z, s, 0, a)
                c = _section(coefficients, z, s, 1, c)
            if abs(raw) >= clip:
                clipped += 1
            a2 = a * a
            sum_a += a2
            sum_c += c * c
            sum_z += raw * raw
            step_sum += a2
            f_state = fast * f_state + g_fast * a2
            s_state = slow * s_state + g_slow * a2
            step_max = max(step_max, f_state)
            f_min = min(f_min, f_state)
            s_max = max(s_max, s_state)
        f_max = max(f_max, step_max)
        step_a_sum[k] = step_sum
        step_fast_max[k] = step_max
        step_fast_end[k] = f_state
    zi[...] = z
    state[0] = f_state
    state[1] = s_state
    return sum_a, sum_c, sum_z, f_max, f_min, s_max, clipped

"""Compiled inner loop of the level meter (numba).

After the A and C weighting filters (scipy's ``sosfilt``, which is as fast as a compiled
biquad gets: the recursion is latency-bound), everything else a frame needs from the
weighted signals is one pass here instead of a dozen numpy passes and two ``lfilter`` calls:
squares, sums, the F and S exponential averagers (IEC 61672-1 time weighting, two
independent recursions that the CPU overlaps), extremes and per-step statistics.
numba comes with librosa, which the sensor already needs; ``cache=True`` keeps the compiled
code on disk so only the first start after installation pays for compilation.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numba import njit
from scipy import signal


def _load_private_sosfilt() -> Callable[..., None] | None:
    try:  # the C loop behind scipy.signal.sosfilt, without ~40 µs of argument checking a call
        from scipy.signal._sosfilt import _sosfilt
    except ImportError:  # pragma: no cover - another scipy layout: the public function serves
        return None
    return _sosfilt


_private_sosfilt = _load_private_sosfilt()


def sosfilt(sos: np.ndarray, x: np.ndarray, zi: np.ndarray) -> np.ndarray:
    """``scipy.signal.sosfilt(sos, x, zi=zi)`` for 1-D float64 ``x``, updating ``zi`` in place.

    The filter bank makes dozens of these calls per second of audio, where scipy's argument
    checking costs more than the filtering of short decimated signals. ``sos`` (n x 6) and
    ``zi`` (n x 2) must be C-contiguous float64; the result equals the public function's
    (tested).
    """
    if _private_sosfilt is None or not (zi.flags.c_contiguous and zi.dtype == np.float64):
        out, zi[...] = signal.sosfilt(sos, x, zi=zi)
        return np.asarray(out)
    out = np.array(x, dtype=np.float64, order="C").reshape(1, -1)
    _private_sosfilt(sos, out, zi.reshape(1, *zi.shape))
    return out.reshape(-1)


@njit(cache=True, nogil=True)
def meter_pass(
    x: np.ndarray,
    a_weighted: np.ndarray,
    c_weighted: np.ndarray,
    state: np.ndarray,
    fast: float,
    slow: float,
    step: int,
    clip: float,
    step_a_sum: np.ndarray,
    step_fast_max: np.ndarray,
    step_fast_end: np.ndarray,
) -> tuple[float, float, float, float, float, float, int]:
    """Statistics of one block for the level meter.

    ``state`` holds the F and S mean squares [F, S] carried between blocks (updated).
    Returns (sum A², sum C², sum Z², max F, min F, max S, clipped samples) and fills the
    per-step arrays: sum of A², maximum F mean square, F mean square at the step's end.
    """
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
    n_steps = x.shape[0] // step
    for k in range(n_steps):
        step_sum = 0.0
        step_max = -1.0
        for n in range(k * step, (k + 1) * step):
            raw = x[n]
            if abs(raw) >= clip:
                clipped += 1
            a2 = a_weighted[n] * a_weighted[n]
            sum_a += a2
            sum_c += c_weighted[n] * c_weighted[n]
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
    state[0] = f_state
    state[1] = s_state
    return sum_a, sum_c, sum_z, f_max, f_min, s_max, clipped


@njit(cache=True, nogil=True)
def sum_of_squares(x: np.ndarray) -> float:
    """``sum(x * x)`` of a 1-D float64 array in one pass.

    Not ``np.dot(x, x)``: for long vectors that is a BLAS call, and OpenBLAS wakes its
    thread pool for it; on a busy machine (the sensor's capture, publisher and classifier
    threads, or other processes) those threads wait on each other and one dot product of a
    second at 48 kHz took 3 ms instead of 6 µs (measured on the 2-core development machine).
    """
    total = 0.0
    for value in x:
        total += value * value
    return total

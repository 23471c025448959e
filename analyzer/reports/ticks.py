"""Axis ticks a reader takes in at a glance: round values at an even step, inside the axis.

The step is 1, 2 or 5 times a power of ten (Heckbert, "Nice numbers for graph labels",
Graphics Gems, 1990): on an axis of 0-8.4 min the ticks are 0, 2, 4, 6, 8, so a line at 7 min
sits between 6 and 8 where it belongs, not near a tick labelled 8 at 8.4. The review app's
plot (analyzer/review/static/finding.js, ``niceTicks``) chooses its ticks the same way;
tests/test_report_print.py checks that both give the same answers.
"""

from __future__ import annotations

import math

NICE_MULTIPLES = (1.0, 2.0, 5.0)  # of a power of ten


def nice_step(span: float, most_ticks: int) -> float:
    """The smallest step of 1, 2 or 5 times a power of ten that puts at most ``most_ticks``
    ticks on an axis ``span`` long (``span`` > 0, ``most_ticks`` >= 2)."""
    if not (math.isfinite(span) and span > 0):
        raise ValueError(f"span must be a positive finite number, got {span!r}")
    if most_ticks < 2:
        raise ValueError(f"most_ticks must be at least 2, got {most_ticks}")
    power = 10.0 ** math.floor(math.log10(span / most_ticks))
    for scale in (1.0, 10.0, 100.0):
        for multiple in NICE_MULTIPLES:
            step = multiple * power * scale
            # ticks at k * step with lo <= k * step <= hi: at most floor(span / step) + 1
            if math.floor(span / step + 1e-9) + 1 <= most_ticks:
                return step
    raise AssertionError("unreachable: 10 times the first step always fits")  # pragma: no cover


def nice_ticks(lo: float, hi: float, most_ticks: int = 6) -> list[float]:
    """The multiples of :func:`nice_step` between ``lo`` and ``hi`` inclusive, in order
    (e.g. 0 to 8.4 with at most 6 ticks: 0, 2, 4, 6, 8). Values are rounded to the step's
    decimals, so 0.1 + 0.2 reads 0.3. ``hi`` <= ``lo`` gives the single tick ``lo``."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"axis ends must be finite, got {lo!r} and {hi!r}")
    if hi <= lo:
        return [lo]
    step = nice_step(hi - lo, most_ticks)
    decimals = max(0, -math.floor(math.log10(step)))
    first, last = math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9)
    return [round(k * step, decimals) + 0.0 for k in range(first, last + 1)]  # + 0.0: no -0

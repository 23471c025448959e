"""Coverage: the capture time in which a device's frames were measured.

A stretch with no frames (an outage, dropped data) is neither silence nor barking; the rules
report the uncovered parts of every finding's span and of the gap after it.
"""

from __future__ import annotations

import bisect

from analyzer.errors import AnalyzerError


class CoverageError(AnalyzerError):
    """A coverage interval that ends before it starts."""


class Coverage:
    """Merged capture-time intervals [start, end) in which frames were measured."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []

    def add(self, start_ns: int, end_ns: int) -> None:
        """Record that frames cover [start_ns, end_ns)."""
        if end_ns < start_ns:
            raise CoverageError(f"coverage interval ends ({end_ns}) before it starts "
                                 f"({start_ns})")
        i = bisect.bisect_left(self._ends, start_ns)  # first interval that may touch it
        j = bisect.bisect_right(self._starts, end_ns)  # intervals [i, j) touch or overlap
        if i < j:
            start_ns = min(start_ns, self._starts[i])
            end_ns = max(end_ns, self._ends[j - 1])
        self._starts[i:j] = [start_ns]
        self._ends[i:j] = [end_ns]

    def gaps(self, start_ns: int, end_ns: int) -> list[tuple[int, int]]:
        """The uncovered parts of [start_ns, end_ns), in order."""
        out: list[tuple[int, int]] = []
        cursor = start_ns
        i = max(bisect.bisect_right(self._ends, start_ns), 0)
        while cursor < end_ns and i < len(self._starts) and self._starts[i] < end_ns:
            if self._starts[i] > cursor:
                out.append((cursor, self._starts[i]))
            cursor = max(cursor, self._ends[i])
            i += 1
        if cursor < end_ns:
            out.append((cursor, end_ns))
        return out

    def forget_before(self, time_ns: int) -> None:
        """Drop intervals that end before ``time_ns`` (bounded memory)."""
        i = bisect.bisect_left(self._ends, time_ns)
        del self._starts[:i], self._ends[:i]

    def intervals(self) -> list[tuple[int, int]]:
        """The merged intervals kept."""
        return list(zip(self._starts, self._ends, strict=True))

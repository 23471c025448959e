"""Progress bars for long commands (tqdm): on a terminal only, never with ``--quiet``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from analyzer.offline import Progress

BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} {unit} [{elapsed}<{remaining}]"


@contextmanager
def progress_bar(description: str, unit: str, quiet: bool) -> Iterator[Progress]:
    """A bar on stderr, told (done, total) in ``unit``; log lines are printed above it, and
    it is gone when the block ends.

    tqdm's ``disable=None`` turns the bar off when stderr is not a terminal, so pipes, log
    files and systemd's journal get no carriage-return noise; ``quiet`` turns it off anyway.
    The bar is made at the first report, when the total is known.
    """
    bars: list[tqdm] = []

    def told(done: float, total: float) -> None:
        if not bars:
            bars.append(tqdm(desc=description, unit=unit, total=total, leave=False,
                             disable=True if quiet else None, bar_format=BAR_FORMAT))
        bar = bars[0]
        if bar.total != total:
            bar.total = total
        bar.update(done - bar.n)

    with logging_redirect_tqdm():
        try:
            yield told
        finally:
            for bar in bars:
                bar.close()

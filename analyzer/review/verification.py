"""Evidence links verified for the pages: concurrently (each check waits on InfluxDB while the
others compute), and a check made moments ago is reused for ``reuse_s`` seconds, shown with
the time it was made. ``reuse_s`` 0 recomputes on every view, as ``barkwatch case show``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from analyzer.cases import UNCHECKED, EvidenceLink, LinkCheck, verify_link
from analyzer.store import InfluxClient

NS = 1_000_000_000
MAX_CONCURRENT = 4


class LinkVerifier:
    """``verifier(links)`` -> their checks, in order; :meth:`checked_ns` tells when."""

    def __init__(self, client: InfluxClient, reuse_s: float, clock: Callable[[], int]) -> None:
        self.client = client
        self.reuse_ns = round(reuse_s * NS)
        self.clock = clock
        self._made: dict[tuple[int, str], tuple[LinkCheck, int]] = {}
        self._lock = threading.Lock()

    def _key(self, link: EvidenceLink) -> tuple[int, str]:
        return (link.id, link.digest)

    def checked_ns(self, link: EvidenceLink) -> int | None:
        """When the check shown for ``link`` was made (None: never)."""
        with self._lock:
            made = self._made.get(self._key(link))
        return made[1] if made else None

    def __call__(self, links: list[EvidenceLink]) -> list[LinkCheck]:
        now = self.clock()
        found: dict[int, LinkCheck] = {}
        with self._lock:
            for index, link in enumerate(links):
                made = self._made.get(self._key(link))
                if made is not None and now - made[1] < self.reuse_ns:
                    found[index] = made[0]
        todo = [(i, link) for i, link in enumerate(links) if i not in found]
        if todo:
            with ThreadPoolExecutor(max_workers=min(MAX_CONCURRENT, len(todo))) as pool:
                checks = list(pool.map(lambda item: verify_link(self.client, item[1]), todo))
            made_ns = self.clock()
            with self._lock:
                for (index, link), check in zip(todo, checks, strict=True):
                    found[index] = check
                    if check.state != UNCHECKED:  # InfluxDB trouble is asked again next time
                        self._made[self._key(link)] = (check, made_ns)
        return [found[i] for i in range(len(links))]

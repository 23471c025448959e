"""How much work the review application takes on at once: reports (each made in its own
process, killed at its time limit), InfluxDB queries behind the plots (per officer and in
all), and how long a stop waits for requests in flight. Issue 33: unbounded, 42 abandoned PDF
requests left every page unanswered and 8 wide zooms at once kept InfluxDB busy for minutes.

The ``[limits]`` table of the review configuration; :class:`QueryGate` is the pure core of
the query bounds (counts, no I/O): one for plot data, one for the pages that query InfluxDB.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from analyzer.errors import AnalyzerError
from sensor.configfile import setting

R = TypeVar("R")


@dataclass(frozen=True)
class LoadLimits:
    """The ``[limits]`` table: renders, plot queries, stopping."""

    render_workers: int = setting(1, "reports (PDF or HTML) made at the same time, each in "
                                  "its own process (one CPU core each)", 1, 16)
    render_queue: int = setting(2, "report requests that may wait for a renderer; past that a "
                                "request is answered 503 'busy, try again'", 0, 64)
    render_timeout_s: float = setting(60.0, "a report render running longer is killed and "
                                      "answered 504; also the renderer's CPU-time limit, s",
                                      0.01, 600.0)
    queries_per_officer: int = setting(2, "plot data requests of one officer answered at the "
                                       "same time; more are answered 503", 1, 64)
    queries_in_all: int = setting(4, "plot data requests of everyone answered at the same "
                                  "time; more are answered 503", 1, 256)
    page_queries_per_officer: int = setting(
        4, "pages that query InfluxDB (cases, case, finding, devices) of one officer answered "
        "at the same time; more are answered 503", 1, 64)
    page_queries_in_all: int = setting(16, "pages that query InfluxDB of everyone answered at "
                                       "the same time; more are answered 503", 1, 256)
    rollup_from_s: int = setting(21600, "plots whose buckets are at least a minute and whose "
                                 "range is at least this long are drawn from the one-minute "
                                 "rollups (level_1m, rule_progress_1m), s", 3600, 2678400)
    busy_answer_delay_s: float = setting(1.0, "a 503 for too many plot or report requests is "
                                         "sent this long after the request (waiting costs "
                                         "no thread), so a client that asks again at once "
                                         "cannot flood the server with refusals, s", 0.0, 30.0)
    graceful_shutdown_s: int = setting(5, "on SIGTERM, requests in flight may finish for this "
                                       "long; then they are cancelled (renders killed), s",
                                       0, 60)
    max_connections: int = setting(200, "connections and requests served at once; past that "
                                   "uvicorn answers 503 at once (slow clients cannot hold every "
                                   "worker)", 10, 10000)
    keep_alive_s: int = setting(5, "an idle kept-alive connection is closed after this long, s",
                                1, 120)
    max_header_bytes: int = setting(16384, "the most bytes of request line and headers the "
                                    "server buffers before refusing the request", 4096, 1048576)


class QueriesBusy(AnalyzerError):
    """Too many queries at once (the message says whose limit and to try again)."""


class QueryGate:
    """At most ``per_officer`` queries of one officer and ``in_all`` of everyone at a time.
    A request over either bound is refused at once (never queued: a queue of wide zooms is
    what overloaded InfluxDB). ``what`` names the requests in the refusal. Thread-safe
    (handlers run in Starlette's thread pool)."""

    def __init__(self, per_officer: int, in_all: int, what: str = "plot requests") -> None:
        if per_officer < 1 or in_all < 1:
            raise ValueError("query limits must be at least 1")
        self.per_officer = per_officer
        self.in_all = in_all
        self.what = what
        self._lock = threading.Lock()
        self._by_officer: dict[str, int] = {}

    @property
    def running(self) -> int:
        """Queries in flight now."""
        with self._lock:
            return sum(self._by_officer.values())

    def acquire(self, officer: str) -> None:
        """Take a place for ``officer`` or raise :class:`QueriesBusy`."""
        with self._lock:
            mine = self._by_officer.get(officer, 0)
            if mine >= self.per_officer:
                raise QueriesBusy(f"you have {mine} {self.what} being answered (at most "
                                  f"{self.per_officer} at a time); wait for them, then try "
                                  "again")
            if sum(self._by_officer.values()) >= self.in_all:
                raise QueriesBusy(f"the evidence database is answering {self.in_all} "
                                  f"{self.what}, the most it takes at a time; try again in a "
                                  "few seconds")
            self._by_officer[officer] = mine + 1

    def release(self, officer: str) -> None:
        """Give back a place taken by :meth:`acquire`."""
        with self._lock:
            left = self._by_officer.get(officer, 0) - 1
            if left > 0:
                self._by_officer[officer] = left
            else:
                self._by_officer.pop(officer, None)

    def answer(self, officer: str, call: Callable[[], R],
               busy: Callable[[QueriesBusy], R]) -> R:
        """``call()`` holding a place for ``officer``; ``busy(refusal)`` when none is free
        (each page says "too busy" its own way: a late 503, or a message and a redirect)."""
        try:
            self.acquire(officer)
        except QueriesBusy as exc:
            return busy(exc)
        try:
            return call()
        finally:
            self.release(officer)

    @contextmanager
    def place(self, officer: str) -> Iterator[None]:
        """``with gate.place(officer):`` around the queries of one request."""
        self.acquire(officer)
        try:
            yield
        finally:
            self.release(officer)

"""PDF reports rendered in worker processes, bounded in number, time and waiting.

A request first takes a place (:meth:`Renders.reserve`): at most ``workers + queue`` at once,
anyone past that is answered 503 before any work is done. Its report (reading the case file
and InfluxDB, the plots, the HTML, the PDF: :func:`analyzer.reports.pdf.report_pdf`) is then
made in a process of its own (started by a fork server that has WeasyPrint and matplotlib
loaded), which is killed when it
passes ``timeout_s`` (504), when the browser goes away (the request's disconnect cancels it),
or when the server stops. Pages never wait for a render: the event loop only polls a pipe.
"""

from __future__ import annotations

import logging
import multiprocessing
import threading
import time
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import anyio
import anyio.to_thread
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from analyzer.errors import AnalyzerError
from analyzer.reports.pdf import DOCUMENT, FAILED, ReportJob, render_in_child

log = logging.getLogger(__name__)
POLL_S = 0.05  # how often a waiting request looks at its renderer's pipe or a free worker
MAX_MESSAGES = 1000  # ASGI messages read while watching for a disconnect (a GET sends 1-2)


class RenderRefused(AnalyzerError):
    """A PDF was not made; ``status`` is the HTTP answer (503 busy, 504 too slow, 500)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _context() -> Any:
    # A fork server: the server's threads are never forked, and each render starts from a
    # process that has WeasyPrint imported already (about 1.5 s saved per report).
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["analyzer.reports.pdf"])
    return context


class Renders:
    """The render places and workers of one server."""

    def __init__(self, workers: int, queue: int, timeout_s: float) -> None:
        if workers < 1 or queue < 0 or timeout_s <= 0:
            raise ValueError("renders need at least one worker, a queue >= 0 and a timeout")
        self.workers, self.queue, self.timeout_s = workers, queue, timeout_s
        self._lock = threading.Lock()
        self._places = 0  # reserved: rendering or waiting
        self._running = 0
        self._context = _context()
        self.pids: deque[int] = deque(maxlen=64)  # renderers started, newest last
        self.abandoned = 0  # renders cancelled because the request went away

    @property
    def running(self) -> int:
        """Renderer processes alive now."""
        with self._lock:
            return self._running

    @property
    def places(self) -> int:
        """Requests holding a place (rendering or waiting)."""
        with self._lock:
            return self._places

    def reserve(self) -> Ticket:
        """A place for one PDF, or :class:`RenderRefused` (503) when all are taken."""
        with self._lock:
            if self._places >= self.workers + self.queue:
                raise RenderRefused(503, f"The report renderer is busy ({self.workers} "
                                    f"report(s) being made, {self.queue} waiting); try again "
                                    "in a minute.")
            self._places += 1
        return Ticket(self)

    def _free(self) -> None:
        with self._lock:
            self._places -= 1

    def _take_worker(self) -> bool:
        with self._lock:
            if self._running < self.workers:
                self._running += 1
                return True
            return False

    def _give_worker(self) -> None:
        with self._lock:
            self._running -= 1

    async def _wait_for_worker(self, deadline: float) -> None:
        for _ in range(int(self.timeout_s / POLL_S) + 2):
            if self._take_worker():
                return
            if time.monotonic() > deadline:
                break
            await anyio.sleep(POLL_S)
        raise RenderRefused(503, f"No PDF renderer came free within {self.timeout_s:g} s; "
                            "try again in a minute.")

    async def _render(self, job: ReportJob) -> bytes:
        await self._wait_for_worker(time.monotonic() + self.timeout_s)
        receiving, sending = self._context.Pipe(duplex=False)
        process = self._context.Process(target=render_in_child, daemon=True,
                                        args=(sending, job, self.timeout_s),
                                        name="barkwatch-pdf")
        try:
            await anyio.to_thread.run_sync(process.start)
            sending.close()
            self.pids.append(int(process.pid))
            answer = await self._answer(process, receiving)
        finally:
            receiving.close()
            if process.pid is not None and process.is_alive():
                process.kill()
            if process.pid is not None:
                process.join(timeout=5)
            self._give_worker()
        if answer[:1] == FAILED:
            raise RenderRefused(500, "The PDF could not be made: "
                                + answer[1:].decode(errors="replace"))
        return answer[1:]

    async def _answer(self, process: Any, receiving: Connection) -> bytes:
        deadline = time.monotonic() + self.timeout_s
        for _ in range(int(self.timeout_s / POLL_S) + 2):
            if receiving.poll():
                try:
                    answer: bytes = await anyio.to_thread.run_sync(receiving.recv_bytes)
                except EOFError:
                    process.join(timeout=5)
                    raise RenderRefused(500, "The PDF renderer stopped without a PDF (exit "
                                        f"status {process.exitcode}).") from None
                if answer[:1] in (DOCUMENT, FAILED):
                    return answer
                raise RenderRefused(500, "The PDF renderer answered garbage.")
            if time.monotonic() > deadline:
                break
            await anyio.sleep(POLL_S)
        log.warning("PDF render %d killed after %.3g s", process.pid, self.timeout_s)
        raise RenderRefused(504, f"The report took longer than {self.timeout_s:g} s to make "
                            "and was stopped. Try again when the server is less busy, or "
                            "make it with 'barkwatch report'.")


class Ticket:
    """One request's place; :meth:`response` renders when the response is sent."""

    def __init__(self, renders: Renders) -> None:
        self.renders = renders
        self._held = True

    def release(self) -> None:
        """Give the place back (once; later calls do nothing)."""
        if self._held:
            self._held = False
            self.renders._free()

    async def render(self, job: ReportJob) -> bytes:
        """The report of ``job`` as PDF (waits for a worker; :class:`RenderRefused` when not
        made)."""
        try:
            return await self.renders._render(job)
        finally:
            self.release()

    def response(self, job: ReportJob, headers: dict[str, str],
                 on_refused: Callable[[int, str], Response]) -> Response:
        """The report as a response that renders while it is being sent (PDF, or HTML for
        ``job.html_only``, with ``headers``), and stops the render if the browser goes away
        first; a refusal is answered with ``on_refused``."""
        return ReportResponse(self, job, headers, on_refused)


async def _disconnected(receive: Receive) -> None:
    for _ in range(MAX_MESSAGES):
        if (await receive())["type"] == "http.disconnect":
            return
    await anyio.sleep_forever()


class ReportResponse(Response):
    """Renders in :meth:`__call__`, racing the render against the client's disconnect."""

    def __init__(self, ticket: Ticket, job: ReportJob, headers: dict[str, str],
                 on_refused: Callable[[int, str], Response]) -> None:
        media_type = "text/html" if job.html_only else "application/pdf"
        super().__init__(media_type=media_type)
        self.ticket, self.job, self.report_headers, self.on_refused = (ticket, job, headers,
                                                                       on_refused)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        result: list[Response] = []

        async def render(cancel: anyio.CancelScope) -> None:
            try:
                document = await self.ticket.render(self.job)
            except RenderRefused as exc:
                result.append(self.on_refused(exc.status, str(exc)))
            else:
                result.append(Response(document, media_type=self.media_type,
                                       headers=self.report_headers))
            cancel.cancel()

        async def watch(cancel: anyio.CancelScope) -> None:
            await _disconnected(receive)
            cancel.cancel()

        try:
            async with anyio.create_task_group() as group:
                group.start_soon(render, group.cancel_scope)
                group.start_soon(watch, group.cancel_scope)
        finally:
            self.ticket.release()
        if not result:
            self.ticket.renders.abandoned += 1
            log.info("report request abandoned by the client; its render was stopped")
            return
        await result[0](scope, receive, send)

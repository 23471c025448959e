"""The PDF (or the HTML) of a report, made in a process of its own
(:mod:`analyzer.review.renders` starts it and kills it at its time limit): the case file and
InfluxDB are read, the HTML written and rendered there, so a request that is given up costs
nothing once its process is killed.
Imported by the renderers' fork server once, so each render starts with WeasyPrint and
matplotlib loaded."""

from __future__ import annotations

import math
import os
import resource
import select
import threading
from dataclasses import dataclass
from multiprocessing.connection import Connection

import weasyprint

from analyzer.cases import CaseFile
from analyzer.reports.gather import gather
from analyzer.reports.html import render_html
from analyzer.reports.paper import DEFAULT_PAPER
from analyzer.store import InfluxClient, InfluxSettings

DOCUMENT, FAILED = b"D", b"E"  # the first byte of the answer


@dataclass(frozen=True)
class ReportJob:
    """What a renderer needs to make one complaint's report (picklable)."""

    cases_db: str
    complaint_id: int
    influx: InfluxSettings
    now_ns: int
    html_only: bool = False  # the HTML page (UTF-8) instead of the PDF
    paper: str = DEFAULT_PAPER  # [report] paper of the review configuration


def render_pdf(html: str) -> bytes:
    """The PDF of an HTML document (WeasyPrint; no base URL: the report is self-contained)."""
    pdf: bytes = weasyprint.HTML(string=html).write_pdf()
    return pdf


def report_document(job: ReportJob) -> bytes:
    """The complaint's report as ``barkwatch report`` makes it: the PDF, or with
    ``html_only`` the HTML (UTF-8)."""
    with CaseFile(job.cases_db, lambda: job.now_ns) as store:
        data = gather(store, job.complaint_id, InfluxClient(job.influx), now_ns=job.now_ns)
    html = render_html(data, job.paper)
    return html.encode("utf-8") if job.html_only else render_pdf(html)


def _exit_when_abandoned(answer: Connection) -> None:
    """Thread: end this process as soon as the server closes its end of the pipe (it gave
    up on the render, or it is gone: the kernel closes a dead process's pipes). A pipe's
    write end reports POLLERR once no reader is left; no event is asked for, so nothing else
    wakes it (once the answer is sent and the end closed here, POLLNVAL: done anyway)."""
    poller = select.poll()
    poller.register(answer.fileno(), 0)
    poller.poll()
    os._exit(3)


def render_in_child(answer: Connection, job: ReportJob, cpu_limit_s: float) -> None:
    """Process target: make the report of ``job`` and send ``DOCUMENT + bytes`` (or
    ``FAILED + reason``) on ``answer``. The process ends by itself when the server stops waiting for
    it, and at the CPU-time limit (SIGXCPU), should the server be unable to kill it."""
    limit = max(1, math.ceil(cpu_limit_s)) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 1))
    threading.Thread(target=_exit_when_abandoned, args=(answer,), daemon=True).start()
    try:
        document = report_document(job)
    except Exception as exc:  # the reason travels back to the request; nothing is lost
        answer.send_bytes(FAILED + f"{type(exc).__name__}: {exc}".encode())
    else:
        answer.send_bytes(DOCUMENT + document)
    finally:
        answer.close()

"""The PDF of a report, made in a process of its own (:mod:`analyzer.review.renders` starts
it and kills it at its time limit). Imported by the renderers' fork server once, so each
render starts with WeasyPrint loaded."""

from __future__ import annotations

import math
import resource
from multiprocessing.connection import Connection

import weasyprint

PDF, FAILED = b"P", b"E"  # the first byte of the answer


def render_pdf(html: str) -> bytes:
    """The PDF of an HTML document (WeasyPrint; no base URL: the report is self-contained)."""
    pdf: bytes = weasyprint.HTML(string=html).write_pdf()
    return pdf


def render_in_child(answer: Connection, html: str, cpu_limit_s: float) -> None:
    """Process target: render ``html`` and send ``PDF + bytes`` (or ``FAILED + reason``) on
    ``answer``. The CPU-time limit ends the process by itself (SIGXCPU) should the server
    that started it be gone and unable to kill it."""
    limit = max(1, math.ceil(cpu_limit_s)) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 1))
    try:
        pdf = render_pdf(html)
    except Exception as exc:  # the reason travels back to the request; nothing is lost
        answer.send_bytes(FAILED + f"{type(exc).__name__}: {exc}".encode())
    else:
        answer.send_bytes(PDF + pdf)
    finally:
        answer.close()

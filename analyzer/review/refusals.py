"""Refusals sent late: a 503 for "too busy" waits ``[limits] busy_answer_delay_s`` in the
event loop before it is sent. Measured (benchmarks/README.md): eight clients re-asking for a
wide zoom the moment they were refused got about 850 refusals a second, and answering those
was what slowed everyone else's pages; a late refusal paces each client to one a second while
holding no thread."""

from __future__ import annotations

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send


class LateResponse(Response):
    """``inner``, sent ``delay_s`` seconds later (an asynchronous wait, no thread held)."""

    def __init__(self, inner: Response, delay_s: float) -> None:
        super().__init__(status_code=inner.status_code)
        self.inner = inner
        self.delay_s = delay_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.delay_s > 0:
            await anyio.sleep(self.delay_s)
        await self.inner(scope, receive, send)

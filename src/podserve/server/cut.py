"""The REST edge's in-flight inference requests, and how they end when the drain times
out (DESIGN.md §2, issue 15 item 3).

When `drain_timeout_s` expires, the runner calls `InflightRequests.cut()`: every
inference handler still running is cancelled (which frees its queue slot, or aborts its
generation and KV cache, the one cancellation contract) and answers for itself:
a JSON 503 with `Retry-After` and `Connection: close` when nothing was sent yet, or a
final error event when a stream had begun. Each cut request logs one line. Without
this, uvicorn cancelled them at its own shutdown timeout, which answered its plain-text
500 and logged a traceback each.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import orjson

from podserve.core.errors import Draining
from podserve.server.errors import error_response, openai_error, openai_error_response
from podserve.server.http import Response

log = logging.getLogger("podserve.server")

CUT_MESSAGE = (
    "server shut down: drain_timeout_s expired before this request finished, so it was "
    "cut and not completed; retry on another replica"
)


class InflightRequests:
    """The tasks running inference handlers on every edge, and whether they are being
    cut. A handler is cut by cancelling its task, unless it registered its own way to be
    told (a gRPC stream between two sends: server/grpc/cut.py)."""

    def __init__(self) -> None:
        self._tasks: dict[asyncio.Task[object], Callable[[], object]] = {}
        self.cutting = False

    def add(self, task: asyncio.Task[object], cut: Callable[[], object] | None = None) -> None:
        self._tasks[task] = task.cancel if cut is None else cut

    def discard(self, task: asyncio.Task[object]) -> None:
        self._tasks.pop(task, None)

    def __len__(self) -> int:
        return len(self._tasks)

    async def cut(self, timeout_s: float) -> int:
        """Cut every in-flight handler and wait (at most `timeout_s`) until each has
        answered; return how many were cut."""
        self.cutting = True
        tasks = list(self._tasks.items())
        for _, cut in tasks:
            cut()
        if tasks:
            await asyncio.wait([task for task, _ in tasks], timeout=timeout_s)
        return len(tasks)


def cut_response(openai: bool) -> Response:
    error = Draining(CUT_MESSAGE)
    return openai_error_response(error) if openai else error_response(error)


def cut_event(openai: bool) -> bytes:
    """The last server-sent events of a stream cut after it began: the error, and on
    OpenAI's streams `data: [DONE]` after it, as a stream the deadline ends has
    (routes_openai.py), so a client that reads to [DONE] sees both end alike."""
    body = openai_error(Draining(CUT_MESSAGE)) if openai else {"error": CUT_MESSAGE}
    event = b"data: " + orjson.dumps(body) + b"\n\n"
    return event + b"data: [DONE]\n\n" if openai else event


def log_cut(request_id: str, model: str, path: str, streaming: bool) -> None:
    log.warning(
        "request cut at drain timeout",
        extra={"request_id": request_id, "model": model, "path": path, "streaming": streaming},
    )

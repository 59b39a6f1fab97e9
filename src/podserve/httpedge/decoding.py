"""A request body's decode: on the event loop when the body is small, on one thread of its
own when it is big. The pod's REST routes that decode a body use it
(`server/routes_openai.py`, `routes_generate.py`, `routes_v2.py`), and so do its gRPC
inference RPCs (`server/grpc/service.py`, `stream.py`) and the gateway's parser
(`gateway/body_parse.py`).

A decode is mostly C that holds the GIL while it runs (orjson's parse, pydantic-core's
validation): on a thread it still stops the loop for as long as each such call lasts. So
what a client sizes is bounded first, in the schemas (a list's length before its items,
protocol/json_body.py), and the thread takes off the loop the rest: the Python between
and after those calls (validators, a chat's messages as dicts), during which the loop
gets its turn every switch interval (5 ms). The parse itself is bounded by the count of
the body's values on the JSON routes (`protocol/json_body.py`), and by `--max-body-bytes`
alone on OIP infer, whose tensors may hold millions (see docs/operations.md); there the
whole body's size decides, its binary part too, whose BYTES tensors are split one
element at a time (bounded in count first, protocol/v2/raw.py). One
thread, so one big body is decoded at a time (the Python objects of a pathological body
are many times its bytes); the others wait their turn without holding the loop.

On the thread the cyclic garbage collector is off while a body decodes. Every container
a parse makes counts towards the collector's next pass, and a full pass walks every
tracked object in the process (a pod's models and libraries included): 16.8 MB of empty
JSON lists took 3.4-4.2 s to decode in a pod with it on (orjson alone, in a bare process:
1.06 s on, 0.26 s off). A decode makes no cycles; what it frees, reference counting frees.
The collector is one switch for the whole process and both edges of a pod decode (REST
and gRPC), so it is held by count: off when the first decode starts, back on (if it was
on) when the last one ends; nothing else in podserve turns it off or on.

A small body is decoded inline: a hop to the thread and back cost about 30 us (busy 2-core
host), six times the decode of a short chat (5 us; a generate request 2 us), and most
requests are small. Up to `INLINE_BYTES` (the gateway's threshold too) the worst shapes
decode in under 2 ms on the loop (2,048 one-character messages: 1.6 ms; 21,000 ignored
empty lists: 0.8 ms).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import gc
import threading
from collections.abc import Callable
from typing import ParamSpec, TypeVar

INLINE_BYTES = 64 * 1024

P = ParamSpec("P")
T = TypeVar("T")


class BodyDecoding:
    """Where each body's decode runs; `close` when the edge stops."""

    def __init__(self, thread_name: str, inline_bytes: int = INLINE_BYTES) -> None:
        self._thread_name = thread_name
        self._inline_bytes = inline_bytes
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    async def run(
        self, size_bytes: int, work: Callable[P, T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """`work(*args, **kwargs)`, on the loop for a body of `size_bytes` up to the inline
        limit, else on the decoding thread (started at the first big body)."""
        if size_bytes <= self._inline_bytes:
            return work(*args, **kwargs)
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=self._thread_name
            )
        call = functools.partial(_COLLECTOR.run, functools.partial(work, *args, **kwargs))
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


class _CollectorHold:
    """The cyclic collector off while any decode holds it (the module's doc)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._was_on = False

    def run(self, work: Callable[[], T]) -> T:
        with self._lock:
            if self._holders == 0:
                self._was_on = gc.isenabled()
                gc.disable()
            self._holders += 1
        try:
            return work()
        finally:
            with self._lock:
                self._holders -= 1
                if self._holders == 0 and self._was_on:
                    gc.enable()


_COLLECTOR = _CollectorHold()

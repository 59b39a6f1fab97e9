"""Run the server process's event loop, and leave the process once it has drained and
closed what it owns, without the interpreter's or the event loop's own finalization
(issue 15 item 10, issue 16 item 6).

After `serve()` returns, everything podserve owes anyone is done: the drain finished
(or cut what it had to, answering each), the listeners are closed, shared-memory regions
unmapped, the payload log flushed, the log handlers flushed. What `sys.exit` would do
next is tear down the interpreter: join threads (a model load still running in the
default executor: seconds), run C-level finalizers and free every module. Measured on
the dev machine (benchmarks/exit_tail.py and an in-process probe): 1.5 s after the
last line of `main` with only scikit-learn imported, 3.9-5.2 s with torch and a
generation engine, against 0.01 s for the work above; and a generation thread still
inside torch while the interpreter finalizes is what turned a drain timeout into a
SIGABRT (exit 134). `os._exit` skips all of it, after flushing the standard streams.

The event loop is not closed either. `asyncio.run` and `uvloop.run` (both through
`asyncio.Runner.close`, CPython Lib/asyncio/runners.py) end with
`loop.shutdown_default_executor()`, which joins the default executor's threads: a
SIGTERM while a model was loading waited for the load to finish (20.0 s for a model
that takes 20 s to load; measured with the fake runtime's `load_delay_s`) before the
process could exit, past any termination grace period. `run_server_loop` returns as
soon as the server's coroutine does, and the process exits with the thread still
running. The loop is closed the usual way only when the coroutine raises (a startup
error such as a port in use), where the CLI goes on to exit normally.

What is left after `os._exit` is the kernel's: releasing the process's memory, which
grows with the resident set. That is the tail "with torch loaded" of issue 15 item 10:
not a thread, pool or grace of ours (the process reaches `os._exit` 10-40 ms after
"drain complete", with 15 threads still running, which `exit_group` ends), but 697 MB
resident with iris and tiny-lm (KV cache and torch) against ~420 MB with iris alone. The
exit uses 0.06-0.08 CPU-seconds, a bare Python process holding the same 507 MB of
anonymous memory 0.05 (benchmarks/exit_tail.py, `exit_cpu_s` and `bare_floor_cpu_s`); the
wall time above that on the dev machine is waiting for one of its 2 shared cores.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Coroutine
from typing import Any, NoReturn, TypeVar

T = TypeVar("T")


def new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # uvloop is optional (no Windows wheels); asyncio works, slower
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def run_server_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run `main` on a new event loop (uvloop when installed) and return its result
    without joining the default executor's threads or closing the loop; the caller
    exits the process next (`exit_process`). When `main` raises, the loop is shut down
    as `asyncio.run` would, and the exception propagates."""
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(main)
    except BaseException:
        _close(loop)
        raise


def _close(loop: asyncio.AbstractEventLoop) -> None:
    try:
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        asyncio.set_event_loop(None)
        loop.close()


def exit_process(code: int) -> NoReturn:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or broken pipe must not block exit
            stream.flush()
    os._exit(code)

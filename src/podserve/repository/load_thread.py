"""Run a blocking load on a thread of its own that ends when the load does.

Why not `asyncio.to_thread`: its executor keeps its threads, and a thread that has run a
parallel region keeps an OpenMP team of its own for as long as it lives (libgomp frees a
thread's pool only at thread exit, `gomp_free_thread`). The warm-up runs the model once,
so the loader thread keeps a team; the model's worker thread then makes a second. With
more OpenMP threads than CPUs, libgomp spins only briefly at each barrier before
sleeping on a futex (`gomp_throttled_spin_count_var`, used while `gomp_managed_threads`
exceeds the available CPUs: libgomp/config/linux/wait.h), so every one of a forward
pass's parallel regions paid a sleep and a wake-up.

Measured on the 2-core machine with all-MiniLM-L6-v2, one sentence a call, torch 2.13's
libgomp and 2 intra-op threads (`python benchmarks/openmp_teams.py --calls 600 --rounds
3`): called from one thread only, 6.4-6.7 ms p50 and 2-3 voluntary context switches a
call; once a second thread had run the model, 7.8-8.1 ms and 105 a call. Served W2 at
concurrency 1 went from 9.70 to 8.10 ms p50 with this change (benchmarks/table.py, raw
6.5 ms; issue 16).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def run_on_own_thread(name: str, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` on a new daemon thread (a wedged load must not hold up process exit);
    the caller's cancellation abandons the result, not the thread."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():
            return  # the awaiting task was cancelled
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        result: T | None = None
        error: BaseException | None = None
        try:
            result = fn(*args)
        except BaseException as exc:  # handed to the loop, which owns error handling
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name=name, daemon=True).start()
    return await future

"""Pin processes to CPUs for a benchmark: every thread of a process, so work it already
started (a model thread, a loop's executor) moves too; threads started later inherit
their creator's CPUs."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


def pin(pid: int, cpus: set[int]) -> None:
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):  # a thread that just ended
            os.sched_setaffinity(int(tid), cpus)


@contextlib.contextmanager
def pinned(layout: dict[int, set[int]]) -> Iterator[None]:
    """`layout`: pid → CPUs, for the block; this process's own pin is undone after it."""
    everything = set(range(os.cpu_count() or 1))
    for pid, cpus in layout.items():
        pin(pid, cpus)
    try:
        yield
    finally:
        if os.getpid() in layout:
            pin(os.getpid(), everything)

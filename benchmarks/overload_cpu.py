"""CPU-seconds from /proc for the overload benchmark (benchmarks/overload.py): a process's
or one thread's utime + stime (proc(5), `stat` fields 14 and 15) and the whole machine's
busy time (`/proc/stat`), so that a phase says who used the cores, not how long it took."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int, tid: int | None = None) -> float:
    """utime + stime of a process (all its threads) or of one of its threads, from /proc
    (proc(5): fields 14 and 15 of `stat`, in clock ticks)."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def machine_busy_s() -> float:
    """CPU-seconds the whole machine spent busy (every core), from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values[:8]) - idle) / CLOCK_TICKS


def threads_cpu_s(pid: int) -> dict[int, float]:
    """CPU-seconds of each thread of `pid` (threads that exit meanwhile are left out)."""
    times = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            times[int(tid)] = cpu_s(pid, int(tid))
    return times


@dataclass
class ServerMeter:
    """CPU-seconds during a phase: the server's, split into its main thread (the event
    loop: HTTP parsing, routing, refusals, JSON decoding), its busiest other thread (the
    model's worker thread, which runs onnxruntime's one intra-op thread inline: the
    runtime defaults to the usable CPUs less one, docs/benchmarks.md) and the rest; and
    the whole machine's."""

    pid: int
    threads: dict[int, float] = field(default_factory=dict)
    machine_s: float = 0.0

    def begin(self) -> None:
        self.threads = threads_cpu_s(self.pid)
        self.machine_s = machine_busy_s()

    def end(self) -> dict[str, float]:
        machine_s = machine_busy_s() - self.machine_s
        used = {
            tid: now - self.threads.get(tid, 0.0) for tid, now in threads_cpu_s(self.pid).items()
        }
        loop_s = used.pop(self.pid, 0.0)
        model_s = max(used.values(), default=0.0)
        server_s = loop_s + sum(used.values())
        return {
            "server": server_s,
            "server_loop": loop_s,
            "server_model_thread": model_s,
            "machine": machine_s,
        }

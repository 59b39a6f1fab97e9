"""How many threads a model's math library should use by default (`compute_threads`).

Decision (issue 16, measured on the 2-core development machine, benchmarks/table.py and
benchmarks/threads.py): the scikit-learn runtime's BLAS defaults to one thread fewer than
the CPUs the process may use, never below one. The event loop needs a core of its own to
parse, decode and answer requests while the model computes; a math library that takes
every core competes with it and, worse, with itself:

- OpenBLAS (numpy's, under scikit-learn) and OpenMP (torch's) split each operation across
  their threads and wait at a barrier for the slowest. When any other thread is runnable
  (the event loop, the load generator, a neighbour pod), one of them is descheduled and
  the operation waits for it a scheduler time slice, milliseconds, for microseconds of
  work. Idle OpenBLAS workers also spin on a core for a while after each call.
- Measured, in process, load average about 2.6 on 2 cores: all-MiniLM-L6-v2 at batch 32,
  41-43 sentences/s with torch's 2 threads against 126-176 with 1; one sentence, p50
  9.2-66 ms with 2 threads (depending on the neighbours) against 15.8-17.6 ms with 1.
  Served, scikit-learn MLP 32-256-256-10 at concurrency 64 with batching on: 3,485-5,183
  req/s with 1 BLAS thread against 741-1,774 with 2 (same run, docs/benchmarks.md).
- Not applied to torch (the embedding runtime): served all-MiniLM-L6-v2 at concurrency 64
  did better with torch's 2 threads (97-129 req/s against 67-98 with 1, same run), though
  in process one thread won. On a shared machine CFS shares CPU per thread, so two threads
  also buy a larger share against the neighbours; that is not a result to design on, and
  without a clear win torch keeps its default.

CPUs the process may use: its affinity mask, further capped by a cgroup v2 CPU quota
(`cpu.max`, what a Kubernetes CPU limit becomes), rounded up. Kubernetes does not narrow
the affinity mask of a limited container (only the static CPU manager policy does), so
without the quota every pod on a 64-core node would start 63 threads under a 2-core limit
and be throttled: https://kubernetes.io/docs/tasks/administer-cluster/cpu-management-policies/
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def usable_cpus(cpu_max: Path = CGROUP_CPU_MAX, affinity: int | None = None) -> int:
    """CPUs this process may run on: affinity, capped by the cgroup v2 quota if any."""
    count = affinity if affinity is not None else len(os.sched_getaffinity(0))
    quota = _quota_cpus(cpu_max)
    if quota is not None:
        count = min(count, quota)
    return max(1, count)


def compute_threads(cpu_max: Path = CGROUP_CPU_MAX, affinity: int | None = None) -> int:
    """A math library's default thread count: all usable CPUs but the event loop's."""
    return max(1, usable_cpus(cpu_max, affinity) - 1)


def _quota_cpus(cpu_max: Path) -> int | None:
    """`cpu.max` holds "QUOTA PERIOD" in microseconds, or "max PERIOD" for no limit."""
    try:
        fields = cpu_max.read_text().split()
    except OSError:
        return None  # cgroup v1, or not Linux: no quota we can read
    if len(fields) != 2 or fields[0] == "max":
        return None
    try:
        quota, period = int(fields[0]), int(fields[1])
    except ValueError:
        return None
    if quota <= 0 or period <= 0:
        return None
    return math.ceil(quota / period)

"""Where a server's CPU goes, thread by thread: the profile behind issue 16's decisions.

    python benchmarks/threads.py [--workload w2] [--concurrency 1] [--duration 5]
        [--env NAME=VALUE ...] [--grpc]

Starts `podserve serve` (batching on, W1 and W2 as benchmarks/table.py builds them) and the
hand-rolled FastAPI baseline, drives each with the load generator for `--duration`, and
prints each thread's CPU (utime + stime from /proc/<pid>/task/<tid>/stat) over the step in
cores, named by the thread's comm (`podserve-w2-0` is the model thread, `python` or
`MainThread` the event loop, OpenMP/OpenBLAS workers have the process's name). `--env`
sets variables for the podserve process only (e.g. OMP_NUM_THREADS=1), to try a cause.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import servers
import table

from podserve.bench.loop import Budget


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of each live thread of `pid`, keyed by `comm:tid`."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue  # the thread ended
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        out[f"{comm}:{task.name}"] = (int(fields[11]) + int(fields[12])) / tick
    return out


def profile(
    proc: servers.ServerProcess,
    workload: str,
    concurrency: int,
    budget: Budget,
    *,
    grpc_port: int | None = None,
) -> str:
    """One step over REST (or gRPC on `grpc_port`), with each thread's CPU in cores and
    in ms per request (the edges differ in threads: gRPC adds grpc's poller and
    event_engine threads)."""
    before, start = thread_cpu(proc.pid), time.monotonic()
    if grpc_port is None:
        step = table.measure_rest(proc.port, proc.pid, workload, concurrency, budget, workload)
    else:
        step = table.measure_grpc(grpc_port, proc.pid, workload, concurrency, budget, workload)
    after, elapsed = thread_cpu(proc.pid), time.monotonic() - start
    by_name: dict[str, float] = defaultdict(float)
    for key, seconds in after.items():
        used = (seconds - before.get(key, 0.0)) / elapsed
        if used >= 0.005:
            by_name[key] += used
    rows = sorted(by_name.items(), key=lambda kv: -kv[1])
    edge = "REST" if grpc_port is None else "gRPC"
    lines = [f"{proc.name} {edge}: {step.line()}"]
    lines += [
        f"    {name:32s} {cores:.2f} cores, {1000 * cores / max(step.rps, 1e-9):.3f} ms/request"
        for name, cores in rows
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=("w1", "w2"), default="w2")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--grpc", action="store_true", help="also drive podserve over gRPC")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    budget = Budget(duration_s=args.duration, warmup_s=1.0)
    extra = dict(item.split("=", 1) for item in args.env)
    with tempfile.TemporaryDirectory(prefix="podserve-threads-") as tmp:
        scratch = Path(tmp)
        model = {"w1": table.build_w1, "w2": table.build_w2}[args.workload](
            scratch / "src" / args.workload
        )
        repo = table.repository(scratch / "repo", {args.workload: model}, batching=True)
        logs = scratch / "logs"
        logs.mkdir()
        pod = table.podserve_server("podserve", repo, logs)  # with a gRPC port
        pod.env.update(extra)
        grpc_port: int = pod.grpc_port  # type: ignore[attr-defined]
        with pod, servers.baseline("fastapi", model, logs) as base:
            steps = [(pod, None), (base, None)] + ([(pod, grpc_port)] if args.grpc else [])
            for index in range(args.rounds):
                for proc, port in steps if index % 2 == 0 else reversed(steps):
                    line = profile(proc, args.workload, args.concurrency, budget, grpc_port=port)
                    print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

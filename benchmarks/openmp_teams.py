"""What a second thread that has run a torch model costs the thread that serves it.

    python benchmarks/openmp_teams.py [--calls 300]

all-MiniLM-L6-v2 (examples/models/minilm), one sentence a call, torch's default intra-op
threads. Each scenario runs in a fresh process:

- `one-thread`: the model is loaded on the main thread and called only from a worker
  thread (what podserve does since repository/load_thread.py);
- `two-threads`: the model is also called once on the main thread first (what a warm-up
  on a pooled `asyncio.to_thread` thread did), then from the worker.

Reported per call: p50 wall time, CPU time, and voluntary context switches (getrusage over
the whole process). libgomp keeps an OpenMP team per thread that ran a parallel region;
with more of its threads than CPUs it spins only briefly at barriers before sleeping, so
the second scenario pays a futex sleep and wake-up per parallel region on a machine with
fewer CPUs than the two teams' threads (about 100 context switches per call here).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ("one-thread", "two-threads")


def _scenario(name: str, calls: int) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import inprocess
    import numpy as np
    from table_workloads import SENTENCES

    from podserve.core.tensors import Datatype, InferRequest, Tensor

    model = inprocess.load(REPO_ROOT / "examples" / "models" / "minilm")

    def call(i: int) -> None:
        data = np.array([SENTENCES[i % len(SENTENCES)].encode()], dtype=object)
        request = InferRequest(model_name="w2", inputs=(Tensor("text", Datatype.BYTES, data),))
        model.postprocess(model.predict(model.preprocess(request)), request)

    if name == "two-threads":
        call(0)  # the main thread now holds an OpenMP team of its own
    worker = ThreadPoolExecutor(1)
    for i in range(10):
        worker.submit(call, i).result()
    samples = []
    usage, cpu = resource.getrusage(resource.RUSAGE_SELF), time.process_time()
    for i in range(calls):
        start = time.perf_counter()
        worker.submit(call, i).result()
        samples.append(time.perf_counter() - start)
    after = resource.getrusage(resource.RUSAGE_SELF)
    print(
        f"{name:12s} p50 {statistics.median(samples) * 1000:6.2f} ms   "
        f"CPU {(time.process_time() - cpu) / calls * 1000:6.2f} ms/call   "
        f"context switches {(after.ru_nvcsw - usage.ru_nvcsw) / calls:6.1f}/call",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--scenario", choices=SCENARIOS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.scenario:
        _scenario(args.scenario, args.calls)
        return 0
    print(f"{os.cpu_count()} CPUs; load average {os.getloadavg()}")
    for _ in range(args.rounds):  # interleaved: the machine's noise lands on both
        for name in SCENARIOS:
            subprocess.run(
                [sys.executable, __file__, "--scenario", name, "--calls", str(args.calls)],
                check=True,
                stderr=subprocess.DEVNULL,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The raw contender of benchmarks/table.py in a process of its own.

    python benchmarks/raw_worker.py w1|w2 MODEL_DIR

Loads the model once, then answers each stdin line `CONCURRENCY DURATION_S` with one JSON
line: `table.measure_raw`'s Step. A process of its own, like each server's: measured in
the load generator's process, which by then holds grpc's and uvloop's threads, W2 got
0.19-0.22 cores on the shared machine against the servers' 0.44-0.75 in the same rounds
(issue 16), so the limit said more about the process it ran in than about the model.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

import inprocess
import table

from podserve.bench.loop import Budget


def main() -> int:
    workload, model_dir = sys.argv[1], Path(sys.argv[2])
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model = inprocess.load(model_dir)
    print("ready", flush=True)
    for line in sys.stdin:
        concurrency, duration_s = line.split()
        budget = Budget(duration_s=float(duration_s), warmup_s=0.0)
        step = table.measure_raw(model, workload, int(concurrency), budget)
        print(orjson.dumps(dataclasses.asdict(step)).decode(), flush=True)
    model.unload()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where one request's time goes inside `podserve serve` at concurrency 1, phase by phase
(issue 16 item 1: W2 at concurrency 1 against the raw model).

    python benchmarks/timeline.py [--workload w2] [--requests 2000] [--env NAME=VALUE ...]

Starts the server (batching on, the workload as benchmarks/table.py builds it) with
benchmarks/timeline_hooks on its PYTHONPATH (see its docstring for the phases), sends
`--requests` requests one at a time with the standard library's http.client, and prints
the client's p50, the server's minor page faults per request, and each phase's median in
ms. Then the raw model (preprocess -> predict -> postprocess in this process, as
table.py's raw contender does at concurrency 1), p50 of the same number of calls.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import inprocess
import table
from table_raw import SENTENCES
from table_workloads import bodies

HOOKS = Path(__file__).resolve().parent / "timeline_hooks"


def _faults(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[7])  # minflt


def _raw_p50_ms(model_dir: Path, workload: str, calls: int) -> float:
    import numpy as np

    from podserve.core.tensors import Datatype, InferRequest, Tensor

    model = inprocess.load(model_dir)
    if workload == "w1":
        return inprocess.call_p50_ms(model, 3.0)
    samples = []
    for i in range(calls):
        data = np.array([SENTENCES[i % len(SENTENCES)].encode()], dtype=object)
        request = InferRequest(model_name="w2", inputs=(Tensor("text", Datatype.BYTES, data),))
        start = time.perf_counter()
        model.postprocess(model.predict(model.preprocess(request)), request)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples[10:]) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=("w1", "w2"), default="w2")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory(prefix="podserve-timeline-") as tmp:
        scratch = Path(tmp)
        build = {"w1": table.build_w1, "w2": table.build_w2}[args.workload]
        model = build(scratch / "src" / args.workload)
        repo = table.repository(scratch / "repo", {args.workload: model}, batching=True)
        logs = scratch / "logs"
        logs.mkdir()
        out = scratch / "timeline.json"
        pod = table.podserve_server("podserve", repo, logs)
        pod.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(HOOKS), pod.env.get("PYTHONPATH", "")) if p
        )
        pod.env["TIMELINE_OUT"] = str(out)
        pod.env.update(dict(item.split("=", 1) for item in args.env))
        with pod:
            conn = http.client.HTTPConnection("127.0.0.1", pod.port)
            payloads = bodies(args.workload)
            path = f"/v2/models/{args.workload}/infer"
            headers = {"content-type": "application/json"}
            latencies = []
            faults = _faults(pod.pid)
            for i in range(args.requests):
                start = time.perf_counter()
                conn.request("POST", path, payloads[i % len(payloads)], headers)
                response = conn.getresponse()
                response.read()
                if response.status != 200:
                    raise RuntimeError(f"HTTP {response.status}")
                latencies.append(time.perf_counter() - start)
            faults = _faults(pod.pid) - faults
            conn.close()
            phases = json.loads(out.read_text())
        raw = _raw_p50_ms(model, args.workload, args.requests)
    client = statistics.median(latencies) * 1000
    ratio = client / raw
    print(f"{args.workload}: client p50 {client:.3f} ms, raw p50 {raw:.3f} ms ({ratio:.2f}x)")
    print(f"server minor page faults per request: {faults / args.requests:.2f}")
    print("server phases, median ms: " + json.dumps(phases))
    return 0


if __name__ == "__main__":
    sys.exit(main())

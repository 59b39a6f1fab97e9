"""How long one big binary OIP body holds the pod's event loop: the slowest `/healthz`
answer, asked every 2 ms by a separate process, while a ~60 MB binary FP32 request is
read, joined and decoded (then refused by the model: 5 M rows against iris's batch
bound, so no inference cost is in the figure), against the slowest answer over the
same span with no big request in flight.

    python benchmarks/big_binary_body.py [--megabytes 60] [--rounds 3]

The prober runs in its own process because a prober thread beside the sender would
share the client's GIL and measure the client. Results: stdout and
benchmarks/results/big-binary-body-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness
import httpx
import numpy as np

PROBE = """
import sys, time, httpx
url, seconds = sys.argv[1], float(sys.argv[2])
worst, end = 0.0, time.monotonic() + seconds
with httpx.Client(base_url=url) as client:
    while time.monotonic() < end:
        started = time.perf_counter()
        assert client.get("/healthz").status_code == 200
        worst = max(worst, time.perf_counter() - started)
        time.sleep(0.002)
print(worst)
"""


def binary_body(megabytes: int) -> tuple[bytes, int]:
    rows = megabytes * 1_000_000 // 16  # FP32 [rows, 4]: iris takes 4 features
    data = np.ones((rows, 4), dtype=np.float32).tobytes()
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "features",
                    "shape": [rows, 4],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": len(data)},
                }
            ]
        }
    ).encode()
    return header + data, len(header)


def worst_healthz(url: str, seconds: float, send: bytes | None, header_length: int) -> float:
    probe = subprocess.Popen(
        [sys.executable, "-c", PROBE, url, str(seconds)], stdout=subprocess.PIPE, text=True
    )
    time.sleep(0.5)  # the prober's interpreter and first requests are under way
    if send is not None:
        response = httpx.post(
            f"{url}/v2/models/iris/infer",
            content=send,
            headers={
                "Content-Type": "application/octet-stream",
                "Inference-Header-Content-Length": str(header_length),
            },
            timeout=120,
        )
        assert response.status_code == 400, response.text  # refused by the batch bound
    out, _ = probe.communicate(timeout=seconds + 30)
    return float(out.strip())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    body, header_length = binary_body(args.megabytes)
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        replica = harness.Replica("big", harness.repository(root / "models", ("iris",)), root)
        replica.start()
        try:
            replica.wait_ready()
            for _ in range(args.rounds):
                idle = worst_healthz(replica.url, 2.0, None, header_length)
                loaded = worst_healthz(replica.url, 2.0, body, header_length)
                rounds.append({"idle_worst_ms": idle * 1000, "big_body_worst_ms": loaded * 1000})
        finally:
            replica.stop()
    report = {"megabytes": len(body) / 1e6, "rounds": rounds}
    print(json.dumps(report, indent=1))
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    harness.write_report(harness.RESULTS / f"big-binary-body-{stamp}.json", report)
    return 0


if __name__ == "__main__":
    sys.exit(main())

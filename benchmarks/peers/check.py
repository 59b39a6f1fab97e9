"""Do the peer servers compute what podserve computes? Starts podserve and each peer on
W1 and W2 (as benchmarks/table.py does), sends each the table's OIP v2 JSON bodies, and
compares: W1 the same predicted class for every body, W2 every embedding within 1e-4 of
podserve's (max absolute difference).

    .venv/bin/python benchmarks/peers/check.py [--peers kserve litserve mlserver]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import servers
from table_workloads import bodies, build_w1, build_w2, repository

from peers import contenders

W2_TOLERANCE = 1e-4


def infer(port: int, workload: str, body: bytes) -> np.ndarray[Any, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v2/models/{workload}/infer",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        output = orjson.loads(answer.read())["outputs"][0]
    return np.asarray(output["data"]).reshape(output["shape"])


def answers(port: int, workload: str) -> list[np.ndarray[Any, Any]]:
    return [infer(port, workload, body) for body in bodies(workload)]


def compare(workload: str, ours: list[Any], theirs: list[Any]) -> tuple[bool, str]:
    if workload == "w1":
        # The class, whatever the shape: MLServer's NumpyCodec answers [1, 1] for [1].
        same = sum(
            int(np.array_equal(a.ravel(), b.ravel())) for a, b in zip(ours, theirs, strict=True)
        )
        shapes = sorted({tuple(b.shape) for b in theirs})
        return same == len(ours), f"{same}/{len(ours)} same class, shapes {shapes}"
    worst = max(float(np.abs(a - b).max()) for a, b in zip(ours, theirs, strict=True))
    shapes = {tuple(b.shape) for b in theirs}
    ok = worst <= W2_TOLERANCE and shapes == {tuple(ours[0].shape)}
    return ok, f"max |diff| {worst:.2e} over {len(ours)} sentences, shapes {sorted(shapes)}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers", nargs="+", choices=contenders.PEERS, default=contenders.PEERS)
    args = parser.parse_args()
    failed = False
    with tempfile.TemporaryDirectory(prefix="podserve-peers-check-") as tmp:
        scratch = Path(tmp)
        logs = scratch / "logs"
        logs.mkdir()
        models = {"w1": build_w1(scratch / "src" / "w1"), "w2": build_w2(scratch / "src" / "w2")}
        repo = repository(scratch / "repo", models, batching=True)
        with servers.podserve("podserve", repo, logs) as podserve:
            expected = {w: answers(podserve.port, w) for w in models}
        for peer in args.peers:
            with contextlib.ExitStack() as stack:
                started: dict[int, servers.ServerProcess] = {}
                for workload, server in contenders.start(peer, models, scratch, logs).items():
                    if id(server) not in started:
                        started[id(server)] = stack.enter_context(server)
                    ok, detail = compare(
                        workload, expected[workload], answers(server.port, workload)
                    )
                    failed |= not ok
                    print(f"{peer} {workload}: {'OK' if ok else 'MISMATCH'} ({detail})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

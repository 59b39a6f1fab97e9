"""Does turning dynamic batching on cost a lone request anything? (issue 16 item 1: "batching
on costs ≤ 5% at c=1 on every bundled model")

    python benchmarks/batching_c1.py [--requests 400] [--rounds 4]

One `podserve serve` holds two copies of every bundled tensor model (examples/models): one
as committed (batching on) and one with `batching.enabled: false`. Each copy gets a closed
loop of one request at a time over OIP v2 REST, the copies alternating order every round so
drift lands on both; the report is each model's p50 with batching on ÷ off. Requests are
built from the model's own metadata (`GET /v2/models/<name>`: one row of each declared
input; numbers 1, BYTES "hello world"), and the client is the standard library's
`http.client` on one keep-alive connection, whose own cost per request is small beside
the server's (httpx's is ~0.8 ms here). tiny-lm is left out: it is a generative model,
scheduled by the continuous-batching engine, not the dynamic batcher this compares.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness

GENERATIVE = {"tiny-lm"}
# simple_string reads each BYTES element as an integer written as text (Triton's model).
BYTES_VALUE = {"simple_string": "7"}
GOAL = 1.05


def build_repository(root: Path) -> list[str]:
    names = []
    for source in sorted(harness.MODELS.iterdir()):
        if not (source / "model.yaml").is_file() or source.name in GENERATIVE:
            continue
        for variant, enabled in (("on", True), ("off", False)):
            copy = root / f"{source.name}-{variant}"
            shutil.copytree(source, copy)
            config = yaml.safe_load((copy / "model.yaml").read_text())
            config["name"] = copy.name
            config["batching"] = {**config.get("batching", {}), "enabled": enabled}
            (copy / "model.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        names.append(source.name)
    return names


def _value(model: str, datatype: str) -> Any:
    if datatype == "BYTES":
        return BYTES_VALUE.get(model, "hello world")
    if datatype == "BOOL":
        return True
    return 1


def request_body(model: str, metadata: dict[str, Any]) -> bytes:
    inputs = []
    for spec in metadata["inputs"]:
        shape = [1 if d == -1 else d for d in spec["shape"]] or [1]
        count = 1
        for d in shape:
            count *= d
        inputs.append(
            {
                "name": spec["name"],
                "datatype": spec["datatype"],
                "shape": shape,
                "data": [_value(model, spec["datatype"])] * count,
            }
        )
    return json.dumps({"inputs": inputs}).encode()


def _get(conn: http.client.HTTPConnection, path: str) -> dict[str, Any]:
    conn.request("GET", path)
    response = conn.getresponse()
    body = response.read()
    if response.status != 200:
        raise RuntimeError(f"GET {path}: {response.status} {body[:200]!r}")
    result: dict[str, Any] = json.loads(body)
    return result


def p50_ms(conn: http.client.HTTPConnection, model: str, body: bytes, requests: int) -> float:
    path = f"/v2/models/{model}/infer"
    headers = {"content-type": "application/json"}
    samples = []
    for _ in range(requests):
        started = time.perf_counter()
        conn.request("POST", path, body, headers)
        response = conn.getresponse()
        response.read()
        samples.append(time.perf_counter() - started)
        if response.status != 200:
            raise RuntimeError(f"{model}: HTTP {response.status}")
    return statistics.median(samples) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=400, help="per model, variant, round")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="batching-c1-") as tmp:
        work = Path(tmp)
        names = build_repository(work / "repo")
        server = harness.Replica("batching-c1", work / "repo", work).start()
        try:
            server.wait_ready()
            conn = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=60)
            bodies = {n: request_body(n, _get(conn, f"/v2/models/{n}-on")) for n in names}
            for name in names:  # warm both copies
                for variant in ("on", "off"):
                    p50_ms(conn, f"{name}-{variant}", bodies[name], 20)
            results: dict[str, dict[str, list[float]]] = {n: {"on": [], "off": []} for n in names}
            for index in range(args.rounds):
                order = ("on", "off") if index % 2 == 0 else ("off", "on")
                for name in names:
                    for variant in order:
                        results[name][variant].append(
                            p50_ms(conn, f"{name}-{variant}", bodies[name], args.requests)
                        )
        finally:
            server.stop()
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()}")
    print(f"{'model':15s} {'on p50 ms':>10s} {'off p50 ms':>11s} {'on/off':>7s}  rounds on/off")
    failed = []
    for name in names:
        on, off = results[name]["on"], results[name]["off"]
        ratio = statistics.median(on) / statistics.median(off)
        per_round = ", ".join(f"{a / b:.2f}" for a, b in zip(on, off, strict=True))
        verdict = "ok" if ratio <= GOAL else "OVER"
        if ratio > GOAL:
            failed.append(name)
        print(
            f"{name:15s} {statistics.median(on):10.3f} {statistics.median(off):11.3f} "
            f"{ratio:7.3f}  [{per_round}] {verdict}"
        )
    print(f"goal on/off ≤ {GOAL}: " + ("met on every model" if not failed else f"over: {failed}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

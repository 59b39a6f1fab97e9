"""Overload: does a pod keep its goodput, reject fast and stay healthy at 10x capacity?

    python benchmarks/overload.py [--duration 60] [--max-queue 8] [--factor 10]

One `podserve serve` replica serves `wide-mlp` (examples/models; a compute-heavy ONNX MLP)
with a small admission queue (`--max-queue`). Every request carries 64 rows, a whole
batch, so each request costs the same and capacity is a plain number.

1. capacity: `--base-clients` closed-loop clients (enough to keep the model busy) for
   `--capacity-s`: the requests/s the pod completes when it is just saturated; measured
   before, between and after the overload phases (the median is the capacity; the spread
   and the 1-minute load average show how much a shared machine drifted);
2. overload without backoff: `--factor` x as many clients, each sending its next request
   as soon as the last one is answered, whatever the answer (503s included: they ignore
   Retry-After), for `--duration` seconds;
3. overload with backoff: the same clients, but after a 503 each waits a random time up to
   the answer's `Retry-After` (full jitter, the AWS Architecture Blog's advice,
   https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/), capped at
   `--max-backoff-s`.

For each overload phase: goodput (200s per second) and its ratio to capacity, the offered
attempts per second, rejection latency (p50/p99 of the 503s), any other outcome, the
pod's RSS every second (min/max/first/last), and the latency of `/healthz` and `/ready`
polled every 0.5 s during the overload as the kubelet would. The issue's goal: goodput
>= 0.9x capacity without client backoff. Results: stdout and
benchmarks/results/overload-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness

ROWS = 64
MAX_SPREAD = 0.25


def body() -> bytes:
    data = np.random.default_rng(0).standard_normal((ROWS, 256)).astype(np.float32)
    return orjson.dumps(
        {
            "inputs": [
                {
                    "name": "input",
                    "shape": [ROWS, 256],
                    "datatype": "FP32",
                    "data": data.reshape(-1).tolist(),
                }
            ]
        }
    )


async def client_loop(
    client: httpx.AsyncClient,
    url: str,
    payload: bytes,
    tally: harness.Tally,
    rejections_s: list[float],
    stop: asyncio.Event,
    *,
    backoff: bool,
    max_backoff_s: float,
) -> None:
    headers = {"content-type": "application/json"}
    while not stop.is_set():
        start = time.monotonic()
        try:
            response = await client.post(url, content=payload, headers=headers)
        except httpx.HTTPError as exc:
            tally.record(f"error:{type(exc).__name__}")
            continue
        elapsed_s = time.monotonic() - start
        if response.status_code == 200:
            tally.record("ok", elapsed_s)
            continue
        tally.record(str(response.status_code))
        if response.status_code == 503:
            rejections_s.append(elapsed_s)
            if backoff:
                retry_after = response.headers.get("retry-after", "1")
                try:
                    wait_s = min(float(retry_after), max_backoff_s)
                except ValueError:
                    wait_s = 1.0
                await asyncio.sleep(random.uniform(0, wait_s))  # full jitter


async def rss_loop(pid: int, samples: list[tuple[float, int]], stop: asyncio.Event) -> None:
    while not stop.is_set():
        samples.append((time.monotonic(), harness.rss_bytes(pid)))
        await asyncio.sleep(1.0)  # the sampling period


async def phase(
    replica: harness.Replica,
    clients: int,
    duration_s: float,
    *,
    backoff: bool,
    max_backoff_s: float,
    observe: bool,
) -> dict[str, Any]:
    url = f"{replica.url}/v2/models/wide-mlp/infer"
    payload = body()
    tally = harness.Tally()
    rejections_s: list[float] = []
    stop = asyncio.Event()
    rss: list[tuple[float, int]] = []
    probes: dict[str, list[tuple[float, float, int]]] = {"healthz": [], "ready": []}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        tasks = [
            asyncio.create_task(
                client_loop(
                    client,
                    url,
                    payload,
                    tally,
                    rejections_s,
                    stop,
                    backoff=backoff,
                    max_backoff_s=max_backoff_s,
                )
            )
            for _ in range(clients)
        ]
        if observe:
            tasks.append(asyncio.create_task(rss_loop(replica.pid, rss, stop)))
            for name, samples in probes.items():
                probe = harness.probe_loop(f"{replica.url}/{name}", samples, stop)
                tasks.append(asyncio.create_task(probe))
        start = time.monotonic()
        await asyncio.sleep(duration_s)  # the length of the phase
        stop.set()
        await asyncio.gather(*tasks)
        elapsed_s = time.monotonic() - start
    result: dict[str, Any] = {
        "clients": clients,
        "backoff": backoff,
        "seconds": round(elapsed_s, 1),
        "goodput_rps": round(tally.outcomes["ok"] / elapsed_s, 2),
        "attempts_rps": round(tally.total / elapsed_s, 1),
        "outcomes": dict(sorted(tally.outcomes.items())),
        "ok_latency_p50_ms": harness.percentile_ms(tally.latencies_s, 50),
        "ok_latency_p99_ms": harness.percentile_ms(tally.latencies_s, 99),
        "rejection_p50_ms": harness.percentile_ms(rejections_s, 50),
        "rejection_p99_ms": harness.percentile_ms(rejections_s, 99),
    }
    if observe:
        values = [v for _, v in rss]
        result["rss_mb"] = {
            "first": round(values[0] / 1e6, 1),
            "min": round(min(values) / 1e6, 1),
            "max": round(max(values) / 1e6, 1),
            "last": round(values[-1] / 1e6, 1),
            "samples": len(values),
        }
        for name, samples in probes.items():
            latencies = [latency for _, latency, _ in samples]
            result[f"probe_{name}"] = {
                "samples": len(samples),
                "p50_ms": harness.percentile_ms(latencies, 50),
                "p99_ms": harness.percentile_ms(latencies, 99),
                "max_ms": round(max(latencies) * 1000, 1) if latencies else None,
                "statuses": dict(
                    sorted(
                        {str(s): sum(1 for *_, x in samples if x == s) for *_, s in samples}.items()
                    )
                ),
            }
    return result


async def main_async(args: argparse.Namespace) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="podserve-overload-"))
    repo = harness.repository(workdir / "repo", ("wide-mlp",))
    replica = harness.Replica(
        "overload", repo, workdir, extra=("--max-queue", str(args.max_queue))
    ).start()
    try:
        await asyncio.to_thread(replica.wait_ready)
        await phase(replica, args.base_clients, 3, backoff=False, max_backoff_s=0, observe=False)
        results: dict[str, Any] = {"capacity_runs": []}

        async def measure_capacity() -> None:
            # Bracketed: before, between and after the overloads, so that a shared
            # machine's drift shows up as spread instead of as a wrong ratio.
            run = await phase(
                replica,
                args.base_clients,
                args.capacity_s,
                backoff=False,
                max_backoff_s=0,
                observe=False,
            )
            run["loadavg_1m"] = round(os.getloadavg()[0], 2)
            results["capacity_runs"].append(run)
            print(f"capacity: {run}", flush=True)

        await measure_capacity()
        for backoff in (False, True):
            name = "overload_with_backoff" if backoff else "overload_no_backoff"
            results[name] = await phase(
                replica,
                args.base_clients * args.factor,
                args.duration,
                backoff=backoff,
                max_backoff_s=args.max_backoff_s,
                observe=True,
            )
            results[name]["loadavg_1m"] = round(os.getloadavg()[0], 2)
            print(f"{name}: {results[name]}", flush=True)
            await measure_capacity()
        runs = [r["goodput_rps"] for r in results["capacity_runs"]]
        capacity = statistics.median(runs)
        results["capacity_rps_median"] = capacity
        results["capacity_spread"] = round((max(runs) - min(runs)) / max(capacity, 1e-9), 3)
        for name in ("overload_no_backoff", "overload_with_backoff"):
            ratio = results[name]["goodput_rps"] / max(capacity, 1e-9)
            results[name]["goodput_vs_capacity"] = round(ratio, 3)
    finally:
        replica.stop()
    report = {
        "benchmark": "overload",
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "args": vars(args),
        "log": str(replica.log_path),
        "results": results,
        "goal": "goodput >= 0.9x capacity at 10x overload without client backoff",
        # A verdict only when capacity held still: on a shared machine whose capacity
        # moved by more than MAX_SPREAD during the run, the ratio means little.
        "goal_met": (
            results["overload_no_backoff"]["goodput_vs_capacity"] >= 0.9
            if results["capacity_spread"] <= MAX_SPREAD
            else f"inconclusive: capacity varied by {results['capacity_spread']:.0%}"
        ),
    }
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = harness.RESULTS / f"overload-{stamp}.json"
    harness.write_report(out, report)
    print(f"\ngoal met: {report['goal_met']}\nreport: {out}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per overload phase")
    parser.add_argument("--capacity-s", type=float, default=15.0)
    parser.add_argument("--max-queue", type=int, default=8)
    parser.add_argument("--base-clients", type=int, default=4)
    parser.add_argument("--factor", type=int, default=10, help="overload = factor x clients")
    parser.add_argument("--max-backoff-s", type=float, default=5.0)
    return asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())

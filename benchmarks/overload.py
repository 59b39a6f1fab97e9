"""Overload: does a pod keep its goodput, reject fast and stay healthy at 10x capacity?

    python benchmarks/overload.py [--duration 60] [--max-queue 8] [--factor 10]
                                  [--client-nice 19]

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

Where the CPU goes. On a cluster the clients run on other machines; here they share the
pod's cores. So each phase reports CPU-seconds from /proc (utime + stime, not wall
clock): the server's (and of its main thread, the event loop that parses, refuses and
decodes), the load generator's, and the rest of the machine's (other tenants). Measured
on a 2-core machine with the clients at the server's priority (`--client-nice 0`): 40
clients ignoring Retry-After took 2-3 ms of client CPU per attempt (httpx; ~1 ms at
capacity) and, being always runnable, a CPU share the model's threads needed; the
server's own refusal costs ~0.02 ms in the app (cProfile) plus the transport. That
measures the client, not the server. So the load generator runs in its own process at
`--client-nice 19` by default, in the capacity phases and the overload phases alike (the
same handicap on both sides of the ratio); the probes and the RSS sampling stay at normal
priority, as the kubelet would. `--client-nice 0` reproduces the unfair setup.

For each overload phase: goodput (200s per second) and its ratio to capacity, the offered
attempts per second, rejection latency (p50/p99 of the 503s, as the clients saw them),
any other outcome, the pod's RSS every second (min/max/first/last), the latency of
`/healthz` and `/ready` polled every 0.5 s during the overload, and the CPU accounting
(cores used by server, clients and others; server CPU per completed request; event-loop
and whole-server CPU per refusal, net of what the completed requests cost at capacity).
The issue's goal: goodput >= 0.9x capacity without client backoff. Results: stdout and
benchmarks/results/overload-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness

ROWS = 64
MAX_SPREAD = 0.25
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


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


# -- CPU accounting ------------------------------------------------------------------------


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


@dataclass
class ServerMeter:
    """CPU-seconds during a phase: the server's (all threads, and its main thread, which
    runs the event loop: HTTP parsing, routing, refusals, JSON decoding) and the whole
    machine's."""

    pid: int
    start: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def _read(self) -> tuple[float, float, float]:
        return cpu_s(self.pid), cpu_s(self.pid, self.pid), machine_busy_s()

    def begin(self) -> None:
        self.start = self._read()

    def end(self) -> tuple[float, float, float]:
        server, loop, machine = (b - a for a, b in zip(self.start, self._read(), strict=True))
        return server, loop, machine


# -- the load generator (its own process, at lower priority) --------------------------------


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


async def generate_load(spec: dict[str, Any], conn: Connection) -> dict[str, Any]:
    tally = harness.Tally()
    rejections_s: list[float] = []
    stop = asyncio.Event()
    clients = spec["clients"]
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    payload = body()
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        tasks = [
            asyncio.create_task(
                client_loop(
                    client,
                    spec["url"],
                    payload,
                    tally,
                    rejections_s,
                    stop,
                    backoff=spec["backoff"],
                    max_backoff_s=spec["max_backoff_s"],
                )
            )
            for _ in range(clients)
        ]
        cpu_start = time.process_time()
        conn.send("started")
        await asyncio.to_thread(conn.recv)  # the orchestrator's "stop"
        cpu_s_used = time.process_time() - cpu_start
        stop.set()
        await asyncio.gather(*tasks)
    return {
        "outcomes": dict(tally.outcomes),
        "ok_latencies_s": tally.latencies_s,
        "rejections_s": rejections_s,
        "cpu_s": cpu_s_used,
    }


def load_process(spec: dict[str, Any], conn: Connection) -> None:
    """Entry point of the load generator's process."""
    os.nice(spec["nice"])
    conn.send(asyncio.run(generate_load(spec, conn)))
    conn.close()


# -- the orchestrator --------------------------------------------------------------------------


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
    nice: int,
    model: str = "wide-mlp",
) -> dict[str, Any]:
    spec = {
        "url": f"{replica.url}/v2/models/{model}/infer",
        "clients": clients,
        "backoff": backoff,
        "max_backoff_s": max_backoff_s,
        "nice": nice,
    }
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    generator = context.Process(target=load_process, args=(spec, theirs), daemon=True)
    generator.start()
    if await asyncio.to_thread(ours.recv) != "started":
        raise RuntimeError("the load generator did not start")
    stop = asyncio.Event()
    rss: list[tuple[float, int]] = []
    probes: dict[str, list[tuple[float, float, int]]] = {"healthz": [], "ready": []}
    tasks = []
    if observe:
        tasks.append(asyncio.create_task(rss_loop(replica.pid, rss, stop)))
        for name, samples in probes.items():
            tasks.append(
                asyncio.create_task(harness.probe_loop(f"{replica.url}/{name}", samples, stop))
            )
    meter = ServerMeter(replica.pid)
    meter.begin()
    start = time.monotonic()
    await asyncio.sleep(duration_s)  # the length of the phase
    ours.send("stop")
    server_s, loop_s, machine_s = meter.end()
    elapsed_s = time.monotonic() - start
    stop.set()
    await asyncio.gather(*tasks)
    load: dict[str, Any] = await asyncio.to_thread(ours.recv)
    await asyncio.to_thread(generator.join)
    outcomes: dict[str, int] = load["outcomes"]
    ok, rejected = outcomes.get("ok", 0), outcomes.get("503", 0)
    attempts = sum(outcomes.values())
    client_s = load["cpu_s"]
    result: dict[str, Any] = {
        "clients": clients,
        "backoff": backoff,
        "client_nice": nice,
        "seconds": round(elapsed_s, 1),
        "goodput_rps": round(ok / elapsed_s, 2),
        "attempts_rps": round(attempts / elapsed_s, 1),
        "rejections_rps": round(rejected / elapsed_s, 1),
        "outcomes": dict(sorted(outcomes.items())),
        "ok_latency_p50_ms": harness.percentile_ms(load["ok_latencies_s"], 50),
        "ok_latency_p99_ms": harness.percentile_ms(load["ok_latencies_s"], 99),
        "rejection_p50_ms": harness.percentile_ms(load["rejections_s"], 50),
        "rejection_p99_ms": harness.percentile_ms(load["rejections_s"], 99),
        "cpu_s": {
            "server": round(server_s, 2),
            "server_loop": round(loop_s, 2),
            "clients": round(client_s, 2),
            "machine": round(machine_s, 2),
            "others": round(max(0.0, machine_s - server_s - client_s), 2),
        },
        "cores": {
            "server": round(server_s / elapsed_s, 2),
            "clients": round(client_s / elapsed_s, 2),
            "others": round(max(0.0, machine_s - server_s - client_s) / elapsed_s, 2),
        },
        "client_cpu_ms_per_attempt": round(client_s / max(attempts, 1) * 1000, 3),
    }
    refused = attempts - ok - sum(n for k, n in outcomes.items() if k.startswith("error:"))
    if refused:
        result["server_cpu_ms_per_refused"] = round(server_s / refused * 1000, 4)
        result["loop_cpu_ms_per_refused"] = round(loop_s / refused * 1000, 4)
    if ok:
        result["server_cpu_ms_per_ok"] = round(server_s / ok * 1000, 2)
        result["loop_cpu_ms_per_ok"] = round(loop_s / ok * 1000, 3)
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
            statuses: dict[str, int] = {}
            for *_, status in samples:
                statuses[str(status)] = statuses.get(str(status), 0) + 1
            result[f"probe_{name}"] = {
                "samples": len(samples),
                "p50_ms": harness.percentile_ms(latencies, 50),
                "p99_ms": harness.percentile_ms(latencies, 99),
                "max_ms": round(max(latencies) * 1000, 1) if latencies else None,
                "statuses": dict(sorted(statuses.items())),
            }
    return result


def refusal_costs(run: dict[str, Any], capacity_runs: list[dict[str, Any]]) -> dict[str, Any]:
    """CPU per refusal, net of the completed requests at the capacity runs' median cost
    each (an estimate: it also absorbs any change in cost per completed request)."""
    rejected = run["outcomes"].get("503", 0)
    ok = run["outcomes"].get("ok", 0)
    if not rejected:
        return {}
    per_ok = statistics.median(r["server_cpu_ms_per_ok"] for r in capacity_runs) / 1000
    loop_per_ok = statistics.median(r["loop_cpu_ms_per_ok"] for r in capacity_runs) / 1000
    cpu = run["cpu_s"]
    return {
        "server_cpu_ms_per_refusal": round((cpu["server"] - ok * per_ok) / rejected * 1000, 3),
        "loop_cpu_ms_per_refusal": round(
            (cpu["server_loop"] - ok * loop_per_ok) / rejected * 1000, 3
        ),
    }


async def main_async(args: argparse.Namespace) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="podserve-overload-"))
    repo = harness.repository(workdir / "repo", ("wide-mlp",))
    replica = harness.Replica(
        "overload", repo, workdir, extra=("--max-queue", str(args.max_queue))
    ).start()
    nice = args.client_nice
    try:
        await asyncio.to_thread(replica.wait_ready)
        await phase(
            replica, args.base_clients, 3, backoff=False, max_backoff_s=0, observe=False, nice=nice
        )
        results: dict[str, Any] = {"capacity_runs": []}
        # What refusing from the URL costs, alone: the overload's clients and bodies to
        # a model this pod does not serve, each answered 404 before its body is read
        # (the same early path as a full queue's 503, with no model running beside it).
        results["refusal_only"] = await phase(
            replica,
            args.base_clients * args.factor,
            args.refusal_s,
            backoff=False,
            max_backoff_s=0,
            observe=False,
            nice=nice,
            model="not-served",
        )
        print(f"refusal_only: {results['refusal_only']}", flush=True)

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
                nice=nice,
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
                nice=nice,
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
            results[name].update(refusal_costs(results[name], results["capacity_runs"]))
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
    for name in ("overload_no_backoff", "overload_with_backoff"):
        run = results[name]
        print(
            f"{name}: {run['goodput_vs_capacity']}x capacity ({run['goodput_rps']} vs "
            f"{capacity} req/s); cores server {run['cores']['server']}, clients "
            f"{run['cores']['clients']}, others {run['cores']['others']}; "
            f"refusal CPU ms server {run.get('server_cpu_ms_per_refusal')}, loop "
            f"{run.get('loop_cpu_ms_per_refusal')}"
        )
    alone = results["refusal_only"]
    print(
        f"refusal alone: {alone['attempts_rps']}/s, server CPU "
        f"{alone.get('server_cpu_ms_per_refused')} ms each (loop "
        f"{alone.get('loop_cpu_ms_per_refused')}), clients "
        f"{alone['client_cpu_ms_per_attempt']} ms each"
    )
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
    parser.add_argument(
        "--refusal-s", type=float, default=5.0, help="seconds of refusal-only traffic"
    )
    parser.add_argument(
        "--client-nice",
        type=int,
        default=19,
        help="niceness of the load generator's process (0: the server's priority)",
    )
    return asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())

"""Overload: does a pod keep its goodput, reject fast and stay healthy at 10x capacity?

    python benchmarks/overload.py [--duration 60] [--max-queue 8] [--factor 10]
                                  [--client-nice 19] [--client lean|httpx]

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
clock): the server's, its main thread's (the event loop: parsing, refusals, JSON decoding)
and its model thread's (onnxruntime runs one intra-op thread inline on it: the runtime
defaults to the usable CPUs less one, docs/benchmarks.md), the load generator's, and the
rest of the machine's (other tenants). What that showed (docs/benchmarks.md, Overload):

- The load generator was the expensive side: httpx took 1.9-3.3 ms of client CPU per
  attempt, against 0.1-0.4 ms of server CPU per refusal (0.02 ms of it in the app, by
  cProfile; the rest is uvicorn reading past the 330 KB body the client sends anyway).
  Clients that ignore Retry-After are always runnable, so at the server's priority they
  take a CPU share the model thread needs: with the model thread, the event loop and the
  clients all runnable on 2 cores, CFS gives each about 2/3 of a core, about the goodput
  the issue measured (0.60-0.66x); measured here, the model thread got 0.32-0.57x its
  capacity-phase CPU with clients at nice 0.
- So the load generator (overload_clients.py) is podserve bench's raw-asyncio client
  (`--client lean`, 0.03 ms an attempt; `--client httpx` is the old one), in its own
  process at `--client-nice 19` in the capacity phases and the overload phases alike
  (the same handicap on both sides of the ratio). The probes and the RSS sampling stay
  in this process at normal priority, as the kubelet's would. `--client-nice 0`
  reproduces the unfair setup.

For each overload phase: goodput (200s per second) and its ratio to capacity, the offered
attempts per second, rejection latency (p50/p99 of the 503s, as the clients saw them),
any other outcome, the pod's RSS every second (min/max/first/last), the latency of
`/healthz` and `/ready` polled every 0.5 s during the overload, and the CPU accounting
(cores used by server, clients and others; server CPU per completed request). What one
refusal costs is measured alone first (`refusal_only`: the same clients and bodies to a
model the pod does not serve, each refused from its URL, 404): server, event-loop and
client CPU per refusal.
The issue's goal: goodput >= 0.9x capacity without client backoff. Results: stdout and
benchmarks/results/overload-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness
from overload_clients import load_process
from overload_cpu import ServerMeter

MAX_SPREAD = 0.25


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
    client: str,
    model: str = "wide-mlp",
) -> dict[str, Any]:
    spec = {
        "url": f"{replica.url}/v2/models/{model}/infer",
        "clients": clients,
        "backoff": backoff,
        "max_backoff_s": max_backoff_s,
        "nice": nice,
        "client": client,
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
    used = meter.end()
    server_s, loop_s, machine_s = used["server"], used["server_loop"], used["machine"]
    model_s = used["server_model_thread"]
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
        "client": client,
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
            "server_model_thread": round(model_s, 2),
            "clients": round(client_s, 2),
            "machine": round(machine_s, 2),
            "others": round(max(0.0, machine_s - server_s - client_s), 2),
        },
        "cores": {
            "server": round(server_s / elapsed_s, 2),
            "server_loop": round(loop_s / elapsed_s, 2),
            "server_model_thread": round(model_s / elapsed_s, 2),
            "clients": round(client_s / elapsed_s, 2),
            "others": round(max(0.0, machine_s - server_s - client_s) / elapsed_s, 2),
        },
        "client_cpu_ms_per_attempt": round(client_s / max(attempts, 1) * 1000, 3),
    }
    refused = attempts - ok - sum(n for k, n in outcomes.items() if k.startswith("error:"))
    if refused and not ok:  # the refusal-only phase: all the server did was refuse
        result["server_cpu_ms_per_refused"] = round(server_s / refused * 1000, 4)
        result["loop_cpu_ms_per_refused"] = round(loop_s / refused * 1000, 4)
    if ok:
        # completed requests per CPU-second of the server: how much of the CPU the server
        # got went into goodput, whatever other tenants left it (vs_capacity below)
        result["ok_per_server_cpu_s"] = round(ok / max(server_s, 1e-9), 2)
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


async def main_async(args: argparse.Namespace) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="podserve-overload-"))
    repo = harness.repository(workdir / "repo", ("wide-mlp",))
    replica = harness.Replica(
        "overload", repo, workdir, extra=("--max-queue", str(args.max_queue))
    ).start()
    nice = args.client_nice
    try:
        await asyncio.to_thread(replica.wait_ready)
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
            client=args.client,
            model="not-served",
        )
        print(f"refusal_only: {results['refusal_only']}", flush=True)
        # Warm-up at the capacity load, right before the first capacity run: with 3 s the
        # first run measured 212 req/s and the next two 298 and 313 on a quiet machine
        # (2026-12-01; server CPU per answer fell from 9.1 to 6.3 ms), which made every
        # verdict "inconclusive".
        await phase(
            replica,
            args.base_clients,
            args.warmup_s,
            backoff=False,
            max_backoff_s=0,
            observe=False,
            nice=nice,
            client=args.client,
        )

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
                client=args.client,
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
                client=args.client,
            )
            results[name]["loadavg_1m"] = round(os.getloadavg()[0], 2)
            print(f"{name}: {results[name]}", flush=True)
            await measure_capacity()
        runs = [r["goodput_rps"] for r in results["capacity_runs"]]
        capacity = statistics.median(runs)
        results["capacity_rps_median"] = capacity
        results["capacity_spread"] = round((max(runs) - min(runs)) / max(capacity, 1e-9), 3)
        for index, name in enumerate(("overload_no_backoff", "overload_with_backoff")):
            ratio = results[name]["goodput_rps"] / max(capacity, 1e-9)
            results[name]["goodput_vs_capacity"] = round(ratio, 3)
            # Against the capacity measured just before and just after this phase: what
            # a machine whose other tenants come and go drifts least between.
            around = statistics.mean(runs[index : index + 2])
            ratio = results[name]["goodput_rps"] / max(around, 1e-9)
            results[name]["goodput_vs_adjacent_capacity"] = round(ratio, 3)
            # CPU-normalised: goodput per server CPU-second against capacity's. On a
            # machine whose other tenants take a varying share, this is the ratio to
            # expect where the pod has its cores to itself (if it stays CPU-bound).
            per_cpu = statistics.median(r["ok_per_server_cpu_s"] for r in results["capacity_runs"])
            ratio = results[name].get("ok_per_server_cpu_s", 0.0) / max(per_cpu, 1e-9)
            results[name]["goodput_per_cpu_vs_capacity"] = round(ratio, 3)
            around_model = statistics.mean(
                r["cores"]["server_model_thread"]
                for r in results["capacity_runs"][index : index + 2]
            )
            results[name]["model_thread_cores_vs_adjacent_capacity"] = round(
                results[name]["cores"]["server_model_thread"] / max(around_model, 1e-9), 3
            )
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
        # Whatever the other tenants took: does the server turn its CPU into goodput
        # under overload as it does at capacity? (What to expect where the pod has its
        # cores to itself and the clients are elsewhere; not the goal's own measure.)
        "goal_met_per_server_cpu": (
            results["overload_no_backoff"]["goodput_per_cpu_vs_capacity"] >= 0.9
        ),
    }
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = harness.RESULTS / f"overload-{stamp}.json"
    harness.write_report(out, report)
    for name in ("overload_no_backoff", "overload_with_backoff"):
        run = results[name]
        print(
            f"{name}: {run['goodput_vs_capacity']}x capacity ({run['goodput_rps']} vs "
            f"{capacity} req/s; {run['goodput_vs_adjacent_capacity']}x the adjacent "
            f"capacity runs); rejection p50/p99 {run['rejection_p50_ms']}/"
            f"{run['rejection_p99_ms']} ms; RSS {run['rss_mb']['first']}->"
            f"{run['rss_mb']['last']} MB (max {run['rss_mb']['max']}); /healthz p50/max "
            f"{run['probe_healthz']['p50_ms']}/{run['probe_healthz']['max_ms']} ms; "
            f"per server CPU-s {run['goodput_per_cpu_vs_capacity']}x capacity's; model "
            f"thread {run['cores']['server_model_thread']} cores "
            f"({run['model_thread_cores_vs_adjacent_capacity']}x capacity's); "
            f"cores server {run['cores']['server']} (loop {run['cores']['server_loop']}), clients "
            f"{run['cores']['clients']}, others {run['cores']['others']}"
        )
    alone = results["refusal_only"]
    print(
        f"refusal alone: {alone['attempts_rps']}/s, server CPU "
        f"{alone.get('server_cpu_ms_per_refused')} ms each (loop "
        f"{alone.get('loop_cpu_ms_per_refused')}), clients "
        f"{alone['client_cpu_ms_per_attempt']} ms each"
    )
    print(
        f"\ngoal met: {report['goal_met']} (per server CPU-second: "
        f"{report['goal_met_per_server_cpu']})\nreport: {out}"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per overload phase")
    parser.add_argument("--warmup-s", type=float, default=20.0, help="at capacity, first")
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
    parser.add_argument(
        "--client",
        choices=("lean", "httpx"),
        default="lean",
        help="podserve bench's raw-asyncio client (cheap) or httpx (2-3 ms of CPU an attempt)",
    )
    return asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())

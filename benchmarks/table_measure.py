"""How benchmarks/table.py measures one step of a contender: REST through the load
generator (podserve.bench), gRPC through grpc.aio as tritonclient sends it (unary
ModelInfer, or the ModelStreamInfer stream), the server's CPU
from /proc, podserve's rows per model call from /metrics, and the alternating rounds."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from table_workloads import SENTENCES, W1_FEATURES, BodiesWorkload, bodies, w1_rows

from podserve.bench.client import run as run_async
from podserve.bench.loop import Budget
from podserve.bench.stats import StepSummary
from podserve.bench.sweep import BenchPlan, run_plan
from podserve.bench.workloads import Target

T = TypeVar("T")


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
    port: int,
    pid: int,
    workload: str,
    concurrency: int,
    budget: Budget,
    model: str,
    cpu: Callable[[int], float] = cpu_seconds,
) -> Step:
    """One closed-loop step; `cpu(pid)` reads the server's CPU seconds (a peer that infers
    in child processes passes one that sums its process tree)."""
    plan = BenchPlan(
        target=Target("127.0.0.1", port),
        workload=BodiesWorkload(model, tuple(bodies(workload))),
        levels=(float(concurrency),),
        budget=budget,
    )
    before, start = cpu(pid), time.monotonic()
    summary: StepSummary = run_async(run_plan(plan)).summaries[0]
    server = (cpu(pid) - before) / (time.monotonic() - start)
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


# Streams a gRPC-stream contender spreads its concurrency over, on one channel (one
# HTTP/2 connection): 64 requests in flight go as 8 streams of 8, 1 as one stream of 1.
# One stream carrying all 64 measured 4,900-5,300 W1 req/s against 8,100 for 8 streams
# (2026-12-01, 18:40): grpc.aio writes a stream's messages one at a time.
GRPC_STREAMS = 8


async def _grpc_stream_closed_loop(
    port: int, workload: str, model: str, concurrency: int, budget: Budget
) -> tuple[list[float], int, float]:
    """Closed loop over Triton's `ModelStreamInfer` (tritonclient.grpc's `start_stream` /
    `async_stream_infer`): each client keeps one request in flight on its stream and
    matches the answer by `id`. A stream takes one write at a time (grpc.aio refuses a
    second concurrent write), so each stream has one writer task fed by a queue."""
    import grpc
    from tritonclient.grpc import service_pb2 as pb

    streams = max(1, min(concurrency, GRPC_STREAMS))
    per_stream = max(1, concurrency // streams)
    templates = [grpc_request(workload, model, i) for i in range(64)]
    latencies: list[float] = []
    errors = 0
    measure_from = time.monotonic() + budget.warmup_s
    stop_at = measure_from + budget.duration_s
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        open_stream = channel.stream_stream(
            "/inference.GRPCInferenceService/ModelStreamInfer",
            request_serializer=None,  # bytes as they are
            response_deserializer=pb.ModelStreamInferResponse.FromString,
        )

        async def one_stream(s: int) -> None:
            nonlocal errors
            call = open_stream()
            waiting: dict[str, asyncio.Future[bool]] = {}
            outbox: asyncio.Queue[bytes | None] = asyncio.Queue()

            async def writer() -> None:
                while (message := await outbox.get()) is not None:
                    await call.write(message)
                await call.done_writing()

            async def reader() -> None:
                async for answer in call:
                    found = waiting.pop(answer.infer_response.id, None)
                    if found is not None:
                        found.set_result(not answer.error_message)

            async def client(c: int) -> None:
                nonlocal errors
                request = templates[(s * per_stream + c) % len(templates)]
                sent = 0
                while (now := time.monotonic()) < stop_at:
                    request.id = f"{s}.{c}.{sent}"
                    sent += 1
                    done = asyncio.get_running_loop().create_future()
                    waiting[request.id] = done
                    outbox.put_nowait(request.SerializeToString())
                    if not await done:
                        errors += 1
                    elif now >= measure_from:
                        latencies.append(time.monotonic() - now)

            tasks = [asyncio.create_task(writer()), asyncio.create_task(reader())]
            await asyncio.gather(*(client(c) for c in range(per_stream)))
            outbox.put_nowait(None)
            await asyncio.gather(*tasks)

        cpu_before = 0.0

        async def mark() -> None:
            nonlocal cpu_before
            await asyncio.sleep(budget.warmup_s)
            cpu_before = time.process_time()

        await asyncio.gather(mark(), *(one_stream(s) for s in range(streams)))
        client_cores = (time.process_time() - cpu_before) / budget.duration_s
    return latencies, errors, client_cores


def measure_grpc_stream(
    port: int, pid: int, workload: str, concurrency: int, budget: Budget, model: str
) -> Step:
    return _grpc_step(
        pid, budget, _grpc_stream_closed_loop(port, workload, model, concurrency, budget)
    )


def measure_grpc(
    port: int, pid: int, workload: str, concurrency: int, budget: Budget, model: str
) -> Step:
    return _grpc_step(pid, budget, _grpc_closed_loop(port, workload, model, concurrency, budget))


def _grpc_step(pid: int, budget: Budget, loop: Any) -> Step:
    before, start = cpu_seconds(pid), time.monotonic()
    latencies, errors, client = run_async(loop)
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


def interleaved(
    contenders: dict[str, Callable[[], T]],
    rounds: int,
    line: Callable[[T], str],
    indent: str = "    ",
) -> dict[str, list[T]]:
    """Measure each contender `rounds` times, alternating the order every round, so a
    shared machine's drift lands on all of them; print each step as `line` tells."""
    results: dict[str, list[T]] = {name: [] for name in contenders}
    names = list(contenders)
    for index in range(rounds):
        for name in names if index % 2 == 0 else reversed(names):
            step = contenders[name]()
            results[name].append(step)
            print(f"{indent}{name}: {line(step)}", flush=True)
    return results


def idle_cpu(pid: int, seconds: float = 3.0) -> float:
    before, start = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)  # measuring an idle window, not synchronising
    return (cpu_seconds(pid) - before) / (time.monotonic() - start)


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())

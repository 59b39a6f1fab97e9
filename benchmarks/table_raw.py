"""benchmarks/table.py's `raw` contender: the model called in a process, no server, measured
in the same rounds as the servers (in its own process: RawWorker runs raw_worker.py)."""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import inprocess
import numpy as np
import orjson
from table_measure import Step
from table_workloads import SENTENCES

from podserve.bench.loop import Budget
from podserve.core.tensors import Datatype, InferRequest, Tensor


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

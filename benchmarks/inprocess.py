"""The model called directly through podserve's runtime API, in this process: the floor
a server's latency is compared with, and the throughput limit it is compared with."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from podserve.config.model_config import load_model_config
from podserve.core.tensors import Datatype, InferRequest, Tensor
from podserve.runtimes import LoadContext, ModelAPI, create_model


def load(model_dir: Path) -> ModelAPI:
    config = load_model_config(model_dir)
    model = create_model(config)
    model.load(LoadContext(config, model_dir))
    return model


def _request(model: ModelAPI, rows: int, seed: int = 0) -> InferRequest:
    rng = np.random.default_rng(seed)
    tensors = []
    for spec in model.inputs:
        shape = tuple(rows if i == 0 else (1 if d < 0 else d) for i, d in enumerate(spec.shape))
        if spec.datatype is Datatype.BYTES:
            raise ValueError("in-process benchmark needs numeric inputs")
        data = rng.random(shape).astype(spec.datatype.numpy_dtype)
        tensors.append(Tensor(spec.name, spec.datatype, data))
    return InferRequest(model_name="bench", inputs=tuple(tensors))


def call_p50_ms(model: ModelAPI, duration_s: float = 2.0) -> float:
    """p50 of preprocess → predict → postprocess on one row, as the server calls them."""
    request = _request(model, 1)
    samples: list[float] = []
    deadline = time.perf_counter() + duration_s
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        payload = model.preprocess(request)
        outputs = model.predict(payload)
        model.postprocess(outputs, request)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


@dataclass(frozen=True, slots=True)
class BatchRate:
    batch_size: int
    rows_per_s: float


def best_rows_per_s(
    model: ModelAPI, batch_sizes: tuple[int, ...] = (1, 8, 16, 32, 64), duration_s: float = 1.0
) -> list[BatchRate]:
    """Rows per second of `predict` at each batch size (sorted best first)."""
    rates = []
    for size in batch_sizes:
        payload = model.preprocess(_request(model, size, seed=size))
        model.predict(payload)  # warm-up: first calls allocate
        calls = 0
        start = time.perf_counter()
        while (elapsed := time.perf_counter() - start) < duration_s:
            model.predict(payload)
            calls += 1
        rates.append(BatchRate(size, calls * size / elapsed))
    return sorted(rates, key=lambda r: -r.rows_per_s)

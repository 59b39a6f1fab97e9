"""Triton's model-configuration and statistics extensions, read from the repository.

`GET /v2/models/{m}/config` and gRPC `ModelConfig` describe a model in Triton's terms
(what perf_analyzer and Triton's clients read); `GET /v2/models[/{m}]/stats` and gRPC
`ModelStatistics` report the model worker's counters (see `engine/stats.py`).
"""

from __future__ import annotations

from podserve.core.triton import ModelStatistics
from podserve.dataplane.types import ModelConfigView
from podserve.engine.stats import StatsRecorder
from podserve.generation.registry import is_generative
from podserve.repository import ModelEntry, ModelRepository, ModelState


def model_config(repository: ModelRepository, name: str, version: str | None) -> ModelConfigView:
    entry = repository.entry(name, version)
    config = entry.config
    worker = entry.worker
    if worker is not None:
        inputs, outputs, batches = worker.inputs, worker.outputs, worker.dynamic_batching
    else:  # not loaded: what its model.yaml declares
        inputs, outputs = config.input_specs(), config.output_specs()
        batches = config.batching.enabled and not is_generative(config.runtime)
    batching = config.batching
    return ModelConfigView(
        name=config.name,
        version=config.version,
        platform=config.platform or config.runtime,
        backend=config.runtime,
        max_batch_size=batching.max_batch_size if batches else 0,
        inputs=inputs,
        outputs=outputs,
        dynamic_batching=batches,
        preferred_batch_sizes=tuple(batching.preferred_batch_sizes),
        max_queue_delay_us=round(batching.max_queue_delay_ms * 1000),
        instance_count=config.instance_count,
        parameters={key: str(value) for key, value in sorted(config.parameters.items())},
    )


def model_statistics(
    repository: ModelRepository, name: str | None, version: str | None
) -> list[ModelStatistics]:
    """One model's statistics (zeros while it is not loaded), or every loaded model's.
    Counters start when the model is loaded; generative models count nothing here
    (their token histograms are on /metrics)."""
    if name:
        return [_statistics(repository.entry(name, version))]
    return [_statistics(e) for e in repository.entries() if e.state is ModelState.READY]


def _statistics(entry: ModelEntry) -> ModelStatistics:
    worker = entry.worker
    if worker is None:
        return StatsRecorder().snapshot(entry.name, entry.version)
    return worker.statistics()

"""Gauges derived from state, computed at scrape time by one collector.

A gauge that mirrors state (a queue's depth, a model being loaded, the engine's running
sequences) is read from that state when Prometheus scrapes, instead of being `set()` on
every change: the request path does no metric work for it, and the value can never drift
from the state it mirrors (a missed `dec()` on an error path, a model unloaded without
its gauge reset). Counters and histograms stay on the request path, where the events are.

The data plane supplies `read() -> ServingState`; this module only knows the names.
Names follow DESIGN.md §6, plus the vLLM names the Gateway API Inference Extension's
endpoint picker and common KEDA configurations read (vllm/v1/metrics/loggers.py):
`vllm:num_requests_waiting`, `vllm:num_requests_running`, `vllm:kv_cache_usage_perc`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


@dataclass(frozen=True, slots=True)
class GenerationState:
    running: int
    waiting: int
    kv_usage_ratio: float
    preemptions_total: int


@dataclass(frozen=True, slots=True)
class ModelServingState:
    name: str
    version: str
    loaded: bool
    queue_depth: int = 0
    inflight: int = 0
    generation: GenerationState | None = None


@dataclass(frozen=True, slots=True)
class ServingState:
    ready: bool
    draining: bool
    memory_bytes: int
    models: tuple[ModelServingState, ...]


class StateCollector(Collector):
    def __init__(self, read: Callable[[], ServingState]) -> None:
        self._read = read

    def describe(self) -> Iterator[Metric]:
        # Describing would read the state at registration; nothing to check for clashes
        # that a name collision test does not catch.
        return iter(())

    def collect(self) -> Iterator[Metric]:
        state = self._read()
        yield _gauge("podserve_ready", "1 when /ready answers 200.", [], [([], state.ready)])
        yield _gauge(
            "podserve_draining", "1 after SIGTERM, while draining.", [], [([], state.draining)]
        )
        yield _gauge(
            "podserve_model_memory_bytes",
            "Memory budget held by the loaded models.",
            [],
            [([], state.memory_bytes)],
        )
        models = state.models
        yield _gauge(
            "podserve_model_loaded",
            "1 when the model is loaded and serving.",
            ["model", "version"],
            [([m.name, m.version], m.loaded) for m in models],
        )
        loaded = [m for m in models if m.loaded]
        yield _gauge(
            "podserve_queue_depth",
            "Requests admitted and waiting to run.",
            ["model"],
            [([m.name], m.queue_depth) for m in loaded],
        )
        yield _gauge(
            "podserve_inflight_requests",
            "Requests admitted and not yet answered (queued or running).",
            ["model"],
            [([m.name], m.inflight) for m in loaded],
        )
        generative = [(m.name, m.generation) for m in loaded if m.generation is not None]
        running = [([n], g.running) for n, g in generative]
        waiting = [([n], g.waiting) for n, g in generative]
        kv = [([n], g.kv_usage_ratio) for n, g in generative]
        yield _gauge(
            "podserve_num_requests_running", "Sequences in the running batch.", ["model"], running
        )
        yield _gauge(
            "podserve_num_requests_waiting",
            "Sequences waiting to join the batch.",
            ["model"],
            waiting,
        )
        yield _gauge(
            "podserve_kv_cache_usage_ratio",
            "Fraction of the KV-cache token budget in use.",
            ["model"],
            kv,
        )
        preemptions = CounterMetricFamily(
            "podserve_num_preemptions",
            "Sequences preempted (and recomputed) since the model loaded.",
            labels=["model"],
        )
        for name, g in generative:
            preemptions.add_metric([name], g.preemptions_total)
        yield preemptions
        yield _gauge(
            "vllm:num_requests_running",
            "Alias of podserve_num_requests_running.",
            ["model_name"],
            running,
        )
        yield _gauge(
            "vllm:num_requests_waiting",
            "Alias of podserve_num_requests_waiting.",
            ["model_name"],
            waiting,
        )
        yield _gauge(
            "vllm:kv_cache_usage_perc",
            "Alias of podserve_kv_cache_usage_ratio (0..1).",
            ["model_name"],
            kv,
        )


def _gauge(
    name: str, doc: str, labels: list[str], samples: Sequence[tuple[list[str], float]]
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=labels)
    for values, value in samples:
        family.add_metric(values, float(value))
    return family

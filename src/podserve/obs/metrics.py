"""Every Prometheus metric podserve exports, defined once.

Histograms, not summaries, so Prometheus can aggregate across pods. Latency buckets span
1 ms to 5 minutes, which covers a tabular model and a long generation alike. Each server
owns its own registry, so tests can run several servers in one process.

The request path uses `ModelMetrics`, which binds the label values once per model: a
labelled child lookup costs more than the observation itself. Gauges that mirror state
(queue depth, in flight, loaded models, running and waiting sequences, KV usage, ready,
draining) are not here: one collector reads them at scrape time (`obs/collector.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from podserve.obs.collector import ServingState, StateCollector

LATENCY_BUCKETS_S = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
)
# Per-token latencies: sub-millisecond to seconds.
TOKEN_BUCKETS_S = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    0.75,
    1.0,
    2.5,
)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
LOAD_BUCKETS_S = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200)

EXPOSITION_CONTENT_TYPE = CONTENT_TYPE_LATEST

# `*_created` series double the exposition size and no autoscaler or alert reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]  # untyped in prometheus_client


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "podserve_requests",
            "Inference requests by final status code.",
            ["model", "endpoint", "code"],
            registry=r,
        )
        self.request_duration = Histogram(
            "podserve_request_duration_seconds",
            "Time from admission to response, per inference request.",
            ["model", "endpoint"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.queue_wait = Histogram(
            "podserve_queue_wait_seconds",
            "Time a request waited in the queue before running.",
            ["model"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.batch_size = Histogram(
            "podserve_batch_size",
            "Rows per model call.",
            ["model"],
            buckets=BATCH_SIZE_BUCKETS,
            registry=r,
        )
        self.compute_duration = Histogram(
            "podserve_inference_duration_seconds",
            "Time one batch spent in the model.",
            ["model"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.rejected = Counter(
            "podserve_rejected_requests",
            "Requests refused before computing, by reason.",
            ["model", "reason"],
            registry=r,
        )
        self.load_seconds = Gauge(
            "podserve_model_load_seconds",
            "Duration of the last successful load of the model (sets the startup-probe budget).",
            ["model", "version"],
            registry=r,
        )
        self.load_duration = Histogram(
            "podserve_model_load_duration_seconds",
            "Model load durations.",
            ["model"],
            buckets=LOAD_BUCKETS_S,
            registry=r,
        )
        self.autoloads = Counter(
            "podserve_model_autoloads",
            "Loads triggered by a request for an unloaded model.",
            ["model"],
            registry=r,
        )
        self.evictions = Counter(
            "podserve_model_evictions",
            "Idle models unloaded to make room within the memory budget.",
            ["model"],
            registry=r,
        )
        self.device_errors = Counter(
            "podserve_device_errors",
            "Inference calls that failed inside the model runtime.",
            ["model"],
            registry=r,
        )
        self.payload_records = Counter(
            "podserve_payload_records",
            "Sampled payload records by outcome: written, dropped (buffer full) or sink_error.",
            ["result"],
            registry=r,
        )
        # --- generation (DESIGN.md §6) ---
        self.ttft = Histogram(
            "podserve_time_to_first_token_seconds",
            "Time from arrival to the first token.",
            ["model"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.tpot = Histogram(
            "podserve_time_per_output_token_seconds",
            "Mean time per output token after the first, per request.",
            ["model"],
            buckets=TOKEN_BUCKETS_S,
            registry=r,
        )
        self.inter_token = Histogram(
            "podserve_inter_token_latency_seconds",
            "Time between consecutive tokens of a stream.",
            ["model"],
            buckets=TOKEN_BUCKETS_S,
            registry=r,
        )
        self.gen_queue_time = Histogram(
            "podserve_request_queue_time_seconds",
            "Time a generation request waited before a step first computed for it.",
            ["model"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.e2e = Histogram(
            "podserve_e2e_request_latency_seconds",
            "Time from arrival to the last token.",
            ["model"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.prompt_tokens = Counter(
            "podserve_prompt_tokens",
            "Prompt tokens processed.",
            ["model"],
            registry=r,
        )
        self.generation_tokens = Counter(
            "podserve_generation_tokens",
            "Tokens generated.",
            ["model"],
            registry=r,
        )
        self.drain_cut = Counter(
            "podserve_drain_cut_requests",
            "Requests cut because drain_timeout expired.",
            registry=r,
        )

    def watch(self, read: Callable[[], ServingState]) -> None:
        """Export the gauges derived from state (queue depth, in flight, loaded models,
        the engines' running and waiting sequences...), read at scrape time."""
        self.registry.register(StateCollector(read))

    def for_model(self, model: str, endpoint: str = "v2") -> ModelMetrics:
        return ModelMetrics(
            queue_wait=self.queue_wait.labels(model),
            batch_size=self.batch_size.labels(model),
            compute_duration=self.compute_duration.labels(model),
            device_errors=self.device_errors.labels(model),
        )

    def for_generation(self, model: str) -> GenerationMetrics:
        return GenerationMetrics(
            ttft=self.ttft.labels(model),
            tpot=self.tpot.labels(model),
            inter_token=self.inter_token.labels(model),
            e2e=self.e2e.labels(model),
            queue_time=self.gen_queue_time.labels(model),
            prompt_tokens=self.prompt_tokens.labels(model),
            generation_tokens=self.generation_tokens.labels(model),
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)


@dataclass(frozen=True, slots=True)
class ModelMetrics:
    """The per-model children the engine touches on every batch."""

    queue_wait: Histogram
    batch_size: Histogram
    compute_duration: Histogram
    device_errors: Counter


@dataclass(frozen=True, slots=True)
class GenerationMetrics:
    """The per-model children a generative model touches."""

    ttft: Histogram
    tpot: Histogram
    inter_token: Histogram
    e2e: Histogram
    queue_time: Histogram
    prompt_tokens: Counter
    generation_tokens: Counter

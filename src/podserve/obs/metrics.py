"""Every Prometheus metric podserve exports, defined once.

Histograms, not summaries, so Prometheus can aggregate across pods. Latency buckets span
1 ms to 5 minutes, which covers a tabular model and a long generation alike. Each server
owns its own registry, so tests can run several servers in one process.

The request path uses `ModelMetrics`, which binds the label values once per model: a
labelled child lookup costs more than the observation itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

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
        self.queue_depth = Gauge(
            "podserve_queue_depth",
            "Requests admitted and waiting for a batch.",
            ["model"],
            registry=r,
        )
        self.queue_wait = Histogram(
            "podserve_queue_wait_seconds",
            "Time a request waited in the queue before running.",
            ["model"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.inflight = Gauge(
            "podserve_inflight_requests",
            "Requests admitted and not yet answered (queued or running).",
            ["model"],
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
        self.model_loaded = Gauge(
            "podserve_model_loaded",
            "1 when the model is loaded and serving.",
            ["model", "version"],
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
        self.memory_used = Gauge(
            "podserve_model_memory_bytes",
            "Memory budget held by the loaded models.",
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
        self.ready = Gauge("podserve_ready", "1 when /ready answers 200.", registry=r)
        self.draining = Gauge("podserve_draining", "1 after SIGTERM, while draining.", registry=r)
        self.drain_cut = Counter(
            "podserve_drain_cut_requests",
            "Requests cut because drain_timeout expired.",
            registry=r,
        )

    def for_model(self, model: str, endpoint: str = "v2") -> ModelMetrics:
        return ModelMetrics(
            queue_depth=self.queue_depth.labels(model),
            queue_wait=self.queue_wait.labels(model),
            inflight=self.inflight.labels(model),
            batch_size=self.batch_size.labels(model),
            compute_duration=self.compute_duration.labels(model),
            device_errors=self.device_errors.labels(model),
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)


@dataclass(frozen=True, slots=True)
class ModelMetrics:
    """The per-model children the engine touches on every batch."""

    queue_depth: Gauge
    queue_wait: Histogram
    inflight: Gauge
    batch_size: Histogram
    compute_duration: Histogram
    device_errors: Counter

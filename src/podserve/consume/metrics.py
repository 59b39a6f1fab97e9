"""The consumer's Prometheus metrics, and the small HTTP listener that serves them with
the data plane's own (batch sizes, queue waits, ...) on one `/metrics`.

End-to-end latency runs from the entry id's timestamp (Redis' wall clock when the
producer's XADD landed) to the result's write, so it is measured on the wall clock: the
one clock both ends share. Clock skew between the Redis host and this pod shows in it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from podserve.obs.metrics import LATENCY_BUCKETS_S


class ConsumerMetrics:
    def __init__(self, stream: str, group: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        labels = {"stream": stream, "group": group}
        self.lag = Gauge(
            "podserve_consumer_lag",
            "Entries in the stream not yet delivered to the group (XINFO GROUPS lag).",
            registry=r,
        )
        self.pending = Gauge(
            "podserve_consumer_pending",
            "Entries delivered to the group and not yet acknowledged (the group's PEL).",
            registry=r,
        )
        self.inflight = Gauge(
            "podserve_consumer_inflight", "Entries this consumer is processing now.", registry=r
        )
        self.processed = Counter(
            "podserve_consumer_processed_total",
            "Entries answered with a result, by model and status.",
            ["model", "code"],
            registry=r,
        )
        self.failed = Counter(
            "podserve_consumer_failed_total",
            "Attempts that failed with a retryable error (left pending for another try).",
            ["model"],
            registry=r,
        )
        self.dead_lettered = Counter(
            "podserve_consumer_dead_lettered_total",
            "Entries moved to the dead-letter stream after max failures.",
            ["model"],
            registry=r,
        )
        self.duplicates = Counter(
            "podserve_consumer_duplicate_results_total",
            "Re-runs whose result had already been written (not written again).",
            registry=r,
        )
        self.claimed = Counter(
            "podserve_consumer_claimed_total",
            "Entries claimed from another (or a dead) consumer with XAUTOCLAIM.",
            registry=r,
        )
        self.latency = Histogram(
            "podserve_consumer_end_to_end_seconds",
            "From the entry's XADD (its id's timestamp) to its result's write.",
            ["model"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.info = Gauge(
            "podserve_consumer_info", "The stream and group this consumer reads.",
            list(labels), registry=r,
        )  # fmt: skip
        self.info.labels(**labels).set(1)
        # Labelled children by key: `labels()` (a lock and validation) costs more than the
        # `inc()`/`observe()` it precedes, once per entry.
        self._processed: dict[tuple[str, int], Counter] = {}
        self._latency: dict[str, Histogram] = {}

    def answered(self, model: str, status: int, latency_s: float) -> None:
        """One entry answered with `status`, `latency_s` after its XADD."""
        counter = self._processed.get((model, status))
        if counter is None:
            counter = self._processed[(model, status)] = self.processed.labels(model, str(status))
        counter.inc()
        histogram = self._latency.get(model)
        if histogram is None:
            histogram = self._latency[model] = self.latency.labels(model)
        histogram.observe(latency_s)

    def exposition(self) -> bytes:
        return bytes(generate_latest(self.registry))


class MetricsListener:
    """On `port` (0: any free port): GET /metrics from `render()`; /healthz 200 while the
    event loop answers (liveness); /ready 200 once `ready()` (the models are loaded and the
    consumer reads), else 503."""

    def __init__(
        self,
        render: Callable[[], bytes],
        host: str,
        port: int,
        ready: Callable[[], bool] = lambda: True,
    ) -> None:
        self._render = render
        self._ready = ready
        self._host = host
        self._port = port
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self._host, self._port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
            path = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b""
            route = path.split(b"?", 1)[0]
            kind = b"application/json"
            if route in (b"/metrics", b"/"):
                status, body = b"200 OK", self._render()
                kind = b"text/plain; version=0.0.4; charset=utf-8"
            elif route == b"/healthz":
                status, body = b"200 OK", b'{"live": true}'
            elif route == b"/ready":
                ready = self._ready()
                status = b"200 OK" if ready else b"503 Service Unavailable"
                body = b'{"ready": true}' if ready else b'{"ready": false}'
            else:
                status, body, kind = (
                    b"404 Not Found",
                    b'{"error": "not found"}',
                    b"application/json",
                )
            writer.write(
                b"HTTP/1.1 " + status + b"\r\nContent-Type: " + kind
                + b"\r\nContent-Length: " + str(len(body)).encode()
                + b"\r\nConnection: close\r\n\r\n" + body
            )  # fmt: skip
            await writer.drain()
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()

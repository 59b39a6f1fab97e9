"""The gateway's Prometheus metrics, named as issue 14 specifies.

`podserve_gateway_requests_total{namespace,team,model,upstream,code}`,
`podserve_gateway_tokens_total{namespace,team,model,upstream,kind}`,
`podserve_gateway_spend_usd_total{namespace,team,model}`,
`podserve_gateway_rejections_total{reason}`, and latency histograms for the upstream (time to
response headers) and for the gateway's own overhead. One registry per gateway.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from podserve.obs.metrics import LATENCY_BUCKETS_S

CONTENT_TYPE = CONTENT_TYPE_LATEST
_OVERHEAD_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1)


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "podserve_gateway_requests",
            "Requests answered by the gateway, by final status code.",
            ["namespace", "team", "model", "upstream", "code"],
            registry=r,
        )
        self.tokens = Counter(
            "podserve_gateway_tokens",
            "Tokens billed (kind=prompt|completion).",
            ["namespace", "team", "model", "upstream", "kind"],
            registry=r,
        )
        self.spend = Counter(
            "podserve_gateway_spend_usd",
            "Spend settled, in USD.",
            ["namespace", "team", "model"],
            registry=r,
        )
        self.rejections = Counter(
            "podserve_gateway_rejections",
            "Requests refused before any upstream saw them, by reason.",
            ["reason"],
            registry=r,
        )
        self.upstream_latency = Histogram(
            "podserve_gateway_upstream_latency_seconds",
            "Time from sending upstream to its response headers.",
            ["upstream"],
            buckets=LATENCY_BUCKETS_S,
            registry=r,
        )
        self.overhead = Histogram(
            "podserve_gateway_overhead_seconds",
            "Time the gateway itself added before the response headers.",
            buckets=_OVERHEAD_BUCKETS_S,
            registry=r,
        )
        self.retries = Counter(
            "podserve_gateway_retries", "Attempts after the first.", ["upstream"], registry=r
        )

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

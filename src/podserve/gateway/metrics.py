"""The gateway's Prometheus metrics, named as issue 14 specifies.

`podserve_gateway_requests_total{namespace,team,model,upstream,code}`,
`podserve_gateway_tokens_total{namespace,team,model,upstream,kind}`,
`podserve_gateway_spend_usd_total{namespace,team,model}`,
`podserve_gateway_rejections_total{reason}`, and latency histograms for the upstream (time to
response headers) and for the gateway's own overhead. One registry per gateway.

`labels(...)` takes the family's lock and builds a key on every call; the hot path asks for
the same few children again and again, so they are kept here once bound (`_child`).
"""

from __future__ import annotations

from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from podserve.obs.metrics import LATENCY_BUCKETS_S

CONTENT_TYPE = CONTENT_TYPE_LATEST
M = TypeVar("M", Counter, Histogram)
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

        self._children: dict[tuple[object, ...], object] = {}

    def _child(self, family: M, *labels: str) -> M:
        key = (id(family), *labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = family.labels(*labels)
        return found  # type: ignore[return-value]  # stored as the family's own child type

    def request(self, namespace: str, team: str, model: str, upstream: str, code: int) -> Counter:
        return self._child(self.requests, namespace, team, model, upstream, str(code))

    def token(self, namespace: str, team: str, model: str, upstream: str, kind: str) -> Counter:
        return self._child(self.tokens, namespace, team, model, upstream, kind)

    def spent(self, namespace: str, team: str, model: str) -> Counter:
        return self._child(self.spend, namespace, team, model)

    def rejection(self, reason: str) -> Counter:
        return self._child(self.rejections, reason)

    def upstream(self, upstream: str) -> Histogram:
        return self._child(self.upstream_latency, upstream)

    def retry(self, upstream: str) -> Counter:
        return self._child(self.retries, upstream)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

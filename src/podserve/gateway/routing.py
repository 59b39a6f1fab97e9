"""Endpoint choice: weighted split between pools, the least loaded ready pod in a pool,
hosted fallbacks last. Pure: loads arrive from the scraper, time is an argument.

Scoring follows the Gateway API Inference Extension's endpoint picker
(kubernetes-sigs/gateway-api-inference-extension pkg/epp/scheduling/framework/plugins/scorer):
its queue scorer, normalised across the candidate pods ((max - q) / (max - min)), plus its
KV-cache scorer, which is absolute (1 - usage), not normalised: normalising it too made a
0.01 difference in KV usage weigh as much as the whole queue difference, and with two pods
a pod with 4 more requests queued could tie and get half the picks.

A pod's queue is `waiting + running` from its last scrape, corrected by what this gateway
knows now: the requests it has in flight there minus those it had when that scrape came
in. Scrapes are up to one interval stale, and a burst would otherwise all land on the pod
that looked idle; and adding the whole in-flight count on top of the scrape (as this did
before) counted the gateway's own requests twice, once in the pod's `running` and once
here, so under skew the gateway kept sending to the loaded pod (with 16 side requests on
one pod and 4 on the other, about 1 in 8 of its requests instead of none), and those
requests set its p99. A pod is skipped when its /ready failed, its breaker is open, or
its waiting count is over the pool's `maxWaiting` (saturated). A saturated pool's request
goes to the fallbacks in order, or, with none, to its least loaded pod (its own queue
decides); only a pool with no ready pod spills into the other pools (see `plan`).

The split between pools is nginx's smooth weighted round-robin
(nginx/nginx src/http/ngx_http_upstream_round_robin.c, ngx_http_upstream_get_peer): over
any run of sum(weights) picks each pool gets exactly its weight, so a 5% canary gets 5%.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from podserve.config.gateway_config import GatewayConfig, RoutingPolicy
from podserve.gateway.breaker import Breaker


@dataclass(frozen=True, slots=True)
class EndpointLoad:
    ready: bool
    waiting: float = 0.0
    running: float = 0.0
    kv_usage: float = 0.0  # 0..1


@dataclass(frozen=True, slots=True)
class Target:
    upstream: str  # pool or fallback name
    base_url: str
    hosted: bool
    model_name: str | None = None  # the upstream's name for the model, if not the gateway's


@dataclass(slots=True)
class _PoolState:
    name: str
    weight: int
    max_waiting: float
    endpoints: tuple[str, ...]
    current: int = 0  # smooth weighted round-robin's running weight
    rotation: int = 0  # which pod goes first among equals
    targets: dict[str, Target] = field(default_factory=dict)  # by endpoint, built once

    def __post_init__(self) -> None:
        self.targets = {e: Target(self.name, e, hosted=False) for e in self.endpoints}


@dataclass(slots=True)
class _ModelRoutes:
    pools: list[_PoolState] = field(default_factory=list)
    fallbacks: list[Target] = field(default_factory=list)


class Router:
    def __init__(self, config: GatewayConfig) -> None:
        self._routes: dict[str, _ModelRoutes] = {}
        pools = {
            p.name: _PoolState(
                p.name, p.weight, p.max_waiting, tuple(e.rstrip("/") for e in p.endpoints)
            )
            for p in config.pools
        }
        for pool in config.pools:
            for model in pool.models:
                self._routes.setdefault(model, _ModelRoutes()).pools.append(pools[pool.name])
        for fb in config.fallbacks:
            for model in fb.models:
                renamed = fb.upstream_models.get(model)
                target = Target(fb.name, fb.base_url.rstrip("/"), hosted=True, model_name=renamed)
                self._routes.setdefault(model, _ModelRoutes()).fallbacks.append(target)
        self._pool_of = {ep.rstrip("/"): p.name for p in config.pools for ep in p.endpoints}
        self._loads: dict[str, EndpointLoad] = {}
        self._inflight: dict[str, int] = {}
        self._inflight_at_scrape: dict[str, int] = {}
        r = config.routing
        self._breakers: dict[str, Breaker] = {}
        self._breaker_args = (r.breaker_failures, r.breaker_open_s)
        self._by_load = r.policy is RoutingPolicy.LEAST_LOADED

    # --- inputs ----------------------------------------------------------------------
    def endpoints(self) -> list[str]:
        return sorted(self._pool_of)

    def update_load(self, endpoint: str, load: EndpointLoad) -> None:
        """A scrape's answer, which counts the requests this gateway had in flight then."""
        self._loads[endpoint] = load
        self._inflight_at_scrape[endpoint] = self._inflight.get(endpoint, 0)

    def queue(self, endpoint: str) -> float:
        """The pod's queue now: its last scrape, plus what this gateway sent it since,
        minus what of its own finished since; never below what it has in flight there."""
        load = self._loads.get(endpoint)
        inflight = self._inflight.get(endpoint, 0)
        if load is None:
            return float(inflight)
        since = inflight - self._inflight_at_scrape.get(endpoint, 0)
        return max(float(inflight), load.waiting + load.running + since)

    def breaker(self, key: str) -> Breaker:
        found = self._breakers.get(key)
        if found is None:
            found = self._breakers[key] = Breaker(*self._breaker_args)
        return found

    def on_start(self, target: Target, now_s: float) -> None:
        self.breaker(target.base_url).on_attempt(now_s)
        self._inflight[target.base_url] = self._inflight.get(target.base_url, 0) + 1

    def on_finish(self, target: Target, ok: bool, now_s: float) -> None:
        self._inflight[target.base_url] = self._inflight.get(target.base_url, 1) - 1
        if ok:
            self.breaker(target.base_url).on_success()
        else:
            self.breaker(target.base_url).on_failure(now_s)

    # --- decision --------------------------------------------------------------------
    def knows(self, model: str, hosted: bool = True) -> bool:
        """Whether some upstream serves `model`; `hosted=False`: some pool (OIP v2)."""
        routes = self._routes.get(model)
        return routes is not None and (hosted or bool(routes.pools))

    def serving(self, now_s: float) -> bool:
        """Whether some pool pod could take a request now: its last /ready answered 200
        and its breaker lets requests through (what `_rank` asks of a target)."""
        return any(
            load.ready and self.breaker(ep).allows(now_s) for ep, load in self._loads.items()
        )

    def renamed(self, model: str) -> bool:
        """Whether some upstream of `model` knows it by another name."""
        routes = self._routes.get(model)
        return routes is not None and any(t.model_name for t in routes.fallbacks)

    def plan(self, model: str, now_s: float, hosted: bool = True) -> list[Target]:
        """Targets to try in order; empty when nothing can serve the model now.
        `hosted=False` leaves the fallbacks out: a hosted API is OpenAI-compatible only,
        and an OIP v2 request sent there went with the payload and the provider's key to
        a path it does not serve (`<baseUrl>/v2/models/...`).

        The weighted split is kept strict: a saturated pool sends its share to the
        fallbacks (or, with none, to its own least loaded pod), never into another pool's
        share — a 5% canary stays 5% under load. Only a pool with no ready pod at all
        overflows into the other pools. Later entries are for retries.
        """
        routes = self._routes.get(model)
        if routes is None:
            return []
        fallbacks = [
            t for t in routes.fallbacks if hosted and self.breaker(t.base_url).allows(now_s)
        ]
        chosen = self._pick_pool(routes.pools)
        if chosen is None:
            return fallbacks
        others: list[Target] = []
        for pool in routes.pools:
            if pool is not chosen:
                others.extend(self._rank(pool, now_s))
        primary = self._rank(chosen, now_s)
        if primary:
            return primary + fallbacks + others
        saturated = self._rank(chosen, now_s, saturated_ok=True)
        if saturated:  # ready but over maxWaiting
            return fallbacks + saturated + others if fallbacks else saturated + others
        return others + fallbacks  # the chosen pool is down

    def _pick_pool(self, pools: list[_PoolState]) -> _PoolState | None:
        live = [p for p in pools if p.weight > 0]
        if not live:
            return None
        total = sum(p.weight for p in live)
        best = live[0]
        for pool in live:
            pool.current += pool.weight
            if pool.current > best.current:
                best = pool
        best.current -= total
        return best

    def _rank(self, pool: _PoolState, now_s: float, saturated_ok: bool = False) -> list[Target]:
        eligible: list[tuple[str, float]] = []
        for ep in pool.endpoints:
            load = self._loads.get(ep)
            if load is None or not load.ready:
                continue
            if load.waiting > pool.max_waiting and not saturated_ok:
                continue
            if not self.breaker(ep).allows(now_s):
                continue
            eligible.append((ep, load.kv_usage))
        if not eligible:
            return []
        pool.rotation += 1
        n = len(eligible)
        if n == 1:  # nothing to rank (a pool of one pod, or one left): on every request
            return [pool.targets[eligible[0][0]]]
        queue_scores = _normalised([self.queue(ep) for ep, _ in eligible])
        kv_scores = [min(1.0, max(0.0, kv)) for _, kv in eligible]
        # Lower is better; ties go to the next pod in rotation, not always the first.
        ranked = sorted(
            range(n),
            key=lambda i: (
                queue_scores[i] + kv_scores[i] if self._by_load else 0.0,
                (i - pool.rotation) % n,
            ),
        )
        return [pool.targets[eligible[i][0]] for i in ranked]


def _normalised(values: list[float]) -> list[float]:
    low, high = min(values), max(values)
    if high == low:
        return [0.0] * len(values)
    return [(v - low) / (high - low) for v in values]

"""The podserve gateway: several replicas must share one store, and an egress proxy must
not get the pods' traffic (docs/gateway.md)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from podserve.config.egress_proxy import PROXY_ENV, proxied_endpoints, proxy_env_names
from podserve.kube.lint.context import LintContext
from podserve.kube.lint.gateway_pods import gateway_config_files, gateway_container
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.types import Severity


def _store_kind(body: Mapping[str, Any]) -> str | None:
    store = body.get("store")
    if store is None:
        return "sqlite"  # the gateway's default
    kind = store.get("kind") if isinstance(store, Mapping) else None
    return str(kind) if kind is not None else None


def _check(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        gateway = gateway_container(pod)
        if gateway is None:
            continue
        replicas = ctx.max_replicas(pod)
        if replicas < 2:
            continue
        for config in gateway_config_files(ctx, pod, gateway):
            if _store_kind(config.body) == "sqlite":
                yield Hit(
                    pod.document,
                    "spec.replicas",
                    f"up to {replicas} gateway replicas, and ConfigMap {config.name} "
                    f"({config.key}, read as {gateway.config}) keeps budgets and limits in "
                    "a per-replica SQLite store",
                )


def _proxy_env(container: Mapping[str, Any]) -> tuple[set[str], str | None]:
    """(schemes the gateway container sends through a proxy, its literal NO_PROXY; None when
    NO_PROXY comes from a Secret or ConfigMap and cannot be read here)."""
    env = {str(e.get("name")): e for e in container.get("env") or [] if isinstance(e, Mapping)}
    schemes = {
        scheme
        for scheme in PROXY_ENV
        if any(
            n in env and (env[n].get("value") or env[n].get("valueFrom"))
            for n in proxy_env_names(scheme)
        )
    }
    for name in ("no_proxy", "NO_PROXY"):  # lower case first, as the gateway reads it
        if name in env:
            return schemes, str(env[name]["value"]) if "value" in env[name] else None
    return schemes, ""


def _endpoints(body: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    for pool in body.get("pools") or []:
        if isinstance(pool, Mapping):
            for endpoint in pool.get("endpoints") or []:
                yield str(pool.get("name", "?")), str(endpoint)


def _check_proxy(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        gateway = gateway_container(pod)
        if gateway is None:
            continue
        schemes, no_proxy = _proxy_env(gateway.spec)
        if not schemes or no_proxy is None:
            continue
        for config in gateway_config_files(ctx, pod, gateway):
            for pool, endpoint in proxied_endpoints(schemes, no_proxy, _endpoints(config.body)):
                yield Hit(
                    pod.document,
                    "spec.template.spec.containers[].env",
                    f"pool {pool}'s endpoint {endpoint} would go through the egress "
                    f"proxy: NO_PROXY is {no_proxy!r}",
                )


GATEWAY_REPLICAS_WITHOUT_SHARED_STORE = Rule(
    id="gateway-replicas-without-shared-store",
    severity=Severity.ERROR,
    title="Several gateway replicas, each with its own SQLite store",
    why="Budgets, reservations and rate-limit windows live in the store. With SQLite each "
    "replica keeps its own: N replicas let a key spend N times its budget and send N times "
    "its rpm/tpm (the per-process counters LiteLLM users report in #40291 and #27736), and "
    "the spend ledger is split across pods that are deleted on every rollout. The store is "
    "read from the file the gateway's `--config` names (`podserve gateway`, `python -m "
    "podserve.cli.main gateway`, or either in a `sh -c` script), found through the "
    "container's volumeMounts and the ConfigMap's keys or `items` paths, in `configMap` and "
    "`projected` volumes.",
    fix="Use `store: {kind: redis-postgres, redisEnv: …, postgresEnv: …}` with the URL and "
    "DSN from a Secret (`podserve render` of a `kind: Gateway` spec does this), or run one "
    "replica.",
    check=_check,
)


GATEWAY_PODS_THROUGH_EGRESS_PROXY = Rule(
    id="gateway-pods-through-egress-proxy",
    severity=Severity.ERROR,
    title="The gateway would send its pools' traffic to the egress proxy",
    why="The gateway reads HTTPS_PROXY / HTTP_PROXY and NO_PROXY as curl and Go do "
    "(src/podserve/config/egress_proxy.py). A pool endpoint that NO_PROXY does not cover "
    "goes to the proxy, which cannot reach cluster-internal names or pod IPs: every "
    "request and every load scrape to that pool fails, and the pool leaves rotation.",
    fix="Add the pods' domains and CIDRs to NO_PROXY (`.svc,.cluster.local,10.0.0.0/8`), "
    "or render the gateway from a `kind: Gateway` spec with `egressProxy.noProxy`, which "
    "refuses an endpoint it does not cover.",
    check=_check_proxy,
)

"""The podserve gateway: several replicas must share one store, and an egress proxy must
not get the pods' traffic (docs/gateway.md)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import yaml

from podserve.config.egress_proxy import PROXY_ENV, proxied_endpoints, proxy_env_names
from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.lint.pods import PodView
from podserve.kube.types import Document, Severity


def _gateway(pod: PodView) -> tuple[Mapping[str, Any], str] | None:
    """The container running `podserve gateway` and its `--config` path ("" without one)."""
    for ctr in pod.containers():
        words = [str(w) for w in (ctr.spec.get("command") or []) + (ctr.spec.get("args") or [])]
        if "gateway" not in words:
            continue
        at = words.index("gateway")
        if at > 0 and not words[at - 1].endswith("podserve"):
            continue
        rest = words[at + 1 :]
        if rest[:1] in (["keys"], ["spend"]):
            continue
        for i, word in enumerate(rest):
            if word == "--config" and i + 1 < len(rest):
                return ctr.spec, rest[i + 1]
            if word.startswith("--config="):
                return ctr.spec, word.split("=", 1)[1]
        return ctr.spec, ""
    return None


def _runs_gateway(pod: PodView) -> str | None:
    """The `--config` path of a container running `podserve gateway`, or "" without one."""
    found = _gateway(pod)
    return None if found is None else found[1]


def _config_maps(ctx: LintContext, pod: PodView) -> list[Document]:
    names = {
        str((v.get("configMap") or {}).get("name"))
        for v in pod.volumes()
        if isinstance(v.get("configMap"), Mapping)
    }
    return [
        doc
        for doc in ctx.of_kind("ConfigMap")
        if (doc.manifest.get("metadata") or {}).get("name") in names
        and str((doc.manifest.get("metadata") or {}).get("namespace", "")) == pod.namespace
    ]


def _config(text: str) -> Mapping[str, Any] | None:
    try:
        body: Any = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    return body if isinstance(body, Mapping) else None


def _gateway_configs(
    ctx: LintContext, pod: PodView, path: str
) -> Iterator[tuple[Document, str, Mapping[str, Any]]]:
    """(ConfigMap, key, parsed config) for each config the gateway may be reading."""
    filename = path.rsplit("/", 1)[-1] if path else None
    for config_map in _config_maps(ctx, pod):
        data = config_map.manifest.get("data") or {}
        for key, text in data.items():
            if filename is not None and key != filename:
                continue
            body = _config(str(text))
            if body is not None:
                yield config_map, str(key), body


def _store_kind(body: Mapping[str, Any]) -> str | None:
    store = body.get("store")
    if store is None:
        return "sqlite"  # the gateway's default
    kind = store.get("kind") if isinstance(store, Mapping) else None
    return str(kind) if kind is not None else None


def _check(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        path = _runs_gateway(pod)
        if path is None:
            continue
        replicas = ctx.max_replicas(pod)
        if replicas < 2:
            continue
        for config_map, key, body in _gateway_configs(ctx, pod, path):
            if _store_kind(body) == "sqlite":
                yield Hit(
                    pod.document,
                    "spec.replicas",
                    f"up to {replicas} gateway replicas, and ConfigMap "
                    f"{(config_map.manifest.get('metadata') or {}).get('name')} "
                    f"({key}) keeps budgets and limits in a per-replica SQLite store",
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
        found = _gateway(pod)
        if found is None:
            continue
        container, path = found
        schemes, no_proxy = _proxy_env(container)
        if not schemes or no_proxy is None:
            continue
        for _, _, body in _gateway_configs(ctx, pod, path):
            for pool, endpoint in proxied_endpoints(schemes, no_proxy, _endpoints(body)):
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
    "the spend ledger is split across pods that are deleted on every rollout.",
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

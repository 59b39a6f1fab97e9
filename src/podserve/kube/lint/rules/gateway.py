"""The podserve gateway: several replicas must share one store (docs/gateway.md)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import yaml

from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.lint.pods import PodView
from podserve.kube.types import Document, Severity


def _runs_gateway(pod: PodView) -> str | None:
    """The `--config` path of a container running `podserve gateway`, or "" without one."""
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
                return rest[i + 1]
            if word.startswith("--config="):
                return word.split("=", 1)[1]
        return ""
    return None


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


def _store_kind(text: str) -> str | None:
    try:
        body: Any = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if not isinstance(body, Mapping):
        return None
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
        filename = path.rsplit("/", 1)[-1] if path else None
        for config_map in _config_maps(ctx, pod):
            data = config_map.manifest.get("data") or {}
            for key, text in data.items():
                if filename is not None and key != filename:
                    continue
                if _store_kind(str(text)) == "sqlite":
                    yield Hit(
                        pod.document,
                        "spec.replicas",
                        f"up to {replicas} gateway replicas, and ConfigMap "
                        f"{(config_map.manifest.get('metadata') or {}).get('name')} "
                        f"({key}) keeps budgets and limits in a per-replica SQLite store",
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

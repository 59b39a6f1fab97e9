"""`podserve canary`: move traffic between the stable and canary backends of an HTTPRoute
(in rendered output or any route file), or set the percent in a ModelService spec.

Weights are shares of their sum (kubernetes-semantics.md §8); podserve writes them as a
percent pair summing to 100, so the file reads as what it means."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from podserve.core.errors import InvalidInput
from podserve.kube import conventions as c
from podserve.kube.types import Manifest


@dataclass(frozen=True, slots=True)
class CanaryChange:
    object: str
    before: int
    after: int


def _backends(route: Manifest) -> tuple[str, str]:
    annotations = (route.get("metadata") or {}).get("annotations") or {}
    stable, canary = annotations.get(c.STABLE_BACKEND), annotations.get(c.CANARY_BACKEND)
    if stable and canary:
        return str(stable), str(canary)
    names = [
        str(ref.get("name"))
        for rule in (route.get("spec") or {}).get("rules") or []
        for ref in rule.get("backendRefs") or []
    ]
    canaries = [n for n in names if n.endswith("-canary")]
    if len(canaries) != 1 or canaries[0].removesuffix("-canary") not in names:
        raise InvalidInput(
            f"HTTPRoute {route.get('metadata', {}).get('name')}: cannot tell stable from canary "
            f"backend; annotate it with {c.STABLE_BACKEND} and {c.CANARY_BACKEND}"
        )
    return canaries[0].removesuffix("-canary"), canaries[0]


def set_route_percent(route: Manifest, percent: int) -> tuple[Manifest, CanaryChange]:
    stable, canary = _backends(route)
    updated = copy.deepcopy(route)
    before = None
    for rule in (updated.get("spec") or {}).get("rules") or []:
        refs = rule.get("backendRefs") or []
        weights = {str(ref.get("name")): int(ref.get("weight", 1)) for ref in refs}
        if canary not in weights:
            continue
        total = sum(weights.values())
        before = round(100 * weights[canary] / total) if total else 0
        for ref in refs:
            if ref.get("name") == canary:
                ref["weight"] = percent
            elif ref.get("name") == stable:
                ref["weight"] = 100 - percent
    if before is None:
        raise InvalidInput(f"HTTPRoute has no rule with canary backend {canary}")
    name = str((route.get("metadata") or {}).get("name"))
    return updated, CanaryChange(f"HTTPRoute/{name}", before, percent)


def set_spec_percent(spec: Manifest, percent: int) -> tuple[Manifest, CanaryChange]:
    canary = (spec.get("spec") or {}).get("canary")
    if not isinstance(canary, dict):
        raise InvalidInput("the ModelService has no spec.canary to move traffic to")
    updated = copy.deepcopy(spec)
    updated_canary: dict[str, Any] = updated["spec"]["canary"]
    before = int(updated_canary.get("percent", 10))
    updated_canary["percent"] = percent
    name = str((spec.get("metadata") or {}).get("name"))
    return updated, CanaryChange(f"ModelService/{name}", before, percent)


def set_percent(
    manifests: Sequence[Manifest], percent: int
) -> tuple[list[Manifest], list[CanaryChange]]:
    """Rewrite every canary HTTPRoute and ModelService among the documents; others pass
    through unchanged. Raises when there is nothing to rewrite."""
    if not 0 <= percent <= 100:
        raise InvalidInput(f"--percent {percent} is outside 0..100")
    result: list[Manifest] = []
    changes: list[CanaryChange] = []
    for manifest in manifests:
        kind = manifest.get("kind")
        if kind == "HTTPRoute" and _has_two_backends(manifest):
            manifest, change = set_route_percent(manifest, percent)
            changes.append(change)
        elif kind == "ModelService":
            manifest, change = set_spec_percent(manifest, percent)
            changes.append(change)
        elif kind == "ConfigMap" and _embeds_canary_spec(manifest):
            # The spec stored beside rendered output must keep agreeing with the route.
            manifest = copy.deepcopy(manifest)
            embedded = yaml.safe_load(manifest["data"][c.SPEC_FILE])
            embedded, _ = set_spec_percent(embedded, percent)
            manifest["data"][c.SPEC_FILE] = yaml.safe_dump(embedded, sort_keys=True, width=4096)
        result.append(manifest)
    if not changes:
        raise InvalidInput("no canary HTTPRoute or ModelService in the input")
    return result, changes


def _embeds_canary_spec(config_map: Manifest) -> bool:
    text = (config_map.get("data") or {}).get(c.SPEC_FILE)
    if not isinstance(text, str):
        return False
    embedded = yaml.safe_load(text)
    return isinstance(embedded, dict) and bool((embedded.get("spec") or {}).get("canary"))


def _has_two_backends(route: Manifest) -> bool:
    return any(
        len(rule.get("backendRefs") or []) >= 2
        for rule in (route.get("spec") or {}).get("rules") or []
    )

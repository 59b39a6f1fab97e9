"""Per-pod serving capacity: from a `podserve bench` result when one is given (its ceiling
concurrency and measured service times), else from the ModelService the manifests carry
(the `modelservice.yaml` key of the rendered ConfigMap), else stated defaults."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from podserve.core.errors import InvalidInput
from podserve.kube.simulate.manifests import ServingFor
from podserve.kube.simulate.objects import PodTemplate, ServingParams
from podserve.kube.types import Manifest

DEFAULT_MAX_QUEUE = 256  # podserve serve --max-queue default (config/settings.py)
# Without a measurement, a typical request is taken as a fraction of the longest allowed
# one: a quarter for a generation, a hundredth for a single forward pass. These are
# assumptions, named in the summary's `capacity` so nobody mistakes them for measurements.
GENERATIVE_FRACTION = 0.25
FORWARD_FRACTION = 0.01
DEFAULT_GENERATIVE_CONCURRENCY = 16
DEFAULT_FORWARD_CONCURRENCY = 4
P99_OVER_MEAN = 2.0


@dataclass(frozen=True, slots=True)
class BenchCapacity:
    concurrency: int
    service_s: float
    service_p99_s: float


def _steps(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    steps = result.get("steps")
    if not isinstance(steps, list) or not steps:
        raise InvalidInput("bench result has no steps (expected `podserve bench` result.json)")
    return [s for s in steps if isinstance(s, dict)]


def bench_capacity(result: Mapping[str, Any]) -> BenchCapacity:
    """Ceiling concurrency (or the knee, or the highest level run) and the service time at
    the lowest level, where a request does not wait behind others."""
    steps = sorted(_steps(result), key=lambda s: float(s.get("level", 0)))
    plan = result.get("plan") if isinstance(result.get("plan"), dict) else {}
    mode = str((plan or {}).get("mode", steps[0].get("mode", "concurrency")))
    try:
        lowest = steps[0]
        latency = lowest["latency_ms"]
        service_s = float(latency["mean"]) / 1000.0
        level = result.get("ceiling") or result.get("knee") or steps[-1]["level"]
        at_level = min(steps, key=lambda s: abs(float(s["level"]) - float(level)))
        p99_s = float(at_level["latency_ms"]["p99"]) / 1000.0
        if mode == "concurrency":
            concurrency = float(level)
        else:
            concurrency = float(at_level.get("mean_in_flight") or 1.0)
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidInput(f"bench result is missing a field: {exc}") from exc
    if service_s <= 0:
        raise InvalidInput("bench result has a non-positive service time")
    return BenchCapacity(max(1, math.floor(concurrency)), service_s, max(p99_s, service_s))


def _embedded_spec(docs: Sequence[Manifest], config_names: set[str]) -> dict[str, Any]:
    for doc in docs:
        if doc.get("kind") != "ConfigMap":
            continue
        if str((doc.get("metadata") or {}).get("name")) not in config_names:
            continue
        data = doc.get("data") or {}
        text = data.get("modelservice.yaml")
        if isinstance(text, str):
            loaded = yaml.safe_load(text)
            if isinstance(loaded, dict):
                return loaded
    return {}


def _config_names(workload: Manifest) -> set[str]:
    spec = ((workload.get("spec") or {}).get("template") or {}).get("spec") or {}
    names = set()
    for volume in spec.get("volumes") or []:
        config = (volume or {}).get("configMap")
        if isinstance(config, dict) and "name" in config:
            names.add(str(config["name"]))
    return names


def _env(workload: Manifest) -> dict[str, str]:
    spec = ((workload.get("spec") or {}).get("template") or {}).get("spec") or {}
    out: dict[str, str] = {}
    for container in spec.get("containers") or []:
        for item in (container or {}).get("env") or []:
            if isinstance(item, dict) and "value" in item:
                out[str(item.get("name"))] = str(item["value"])
    return out


def serving_resolver(docs: Sequence[Manifest], bench: BenchCapacity | None) -> ServingFor:
    def resolve(workload: Manifest, template: PodTemplate) -> ServingParams:
        spec = _embedded_spec(docs, _config_names(workload)).get("spec") or {}
        serving = spec.get("serving") or {}
        model = spec.get("model") or {}
        env = _env(workload)
        max_queue = int(env.get("PODSERVE_MAX_QUEUE", serving.get("maxQueue", DEFAULT_MAX_QUEUE)))
        if bench is not None:
            return ServingParams(
                bench.concurrency, max_queue, bench.service_s, bench.service_p99_s, "bench"
            )
        longest = float(
            serving.get("longestRequestSeconds") or template.grace_s - template.pre_stop_s or 30.0
        )
        generative = bool(model.get("generative")) or "PODSERVE_MAX_CONTEXT_TOKENS" in env
        sequences = serving.get("maxConcurrentSequences") or env.get(
            "PODSERVE_MAX_CONCURRENT_SEQUENCES"
        )
        if generative:
            concurrency = int(sequences or DEFAULT_GENERATIVE_CONCURRENCY)
            service_s = longest * GENERATIVE_FRACTION
        else:
            concurrency = int(sequences or DEFAULT_FORWARD_CONCURRENCY)
            service_s = longest * FORWARD_FRACTION
        source = "spec" if spec else "defaults"
        return ServingParams(
            max(1, concurrency), max_queue, service_s, service_s * P99_OVER_MEAN, source
        )

    return resolve


def model_sizes(docs: Sequence[Manifest]) -> dict[str, float]:
    """Model size in GB per workload name, from the embedded spec (to time the fetch)."""
    out: dict[str, float] = {}
    for doc in docs:
        if doc.get("kind") not in {"Deployment", "StatefulSet"}:
            continue
        spec = _embedded_spec(docs, _config_names(doc)).get("spec") or {}
        size_gi = (spec.get("model") or {}).get("sizeGi")
        if size_gi:
            out[str((doc.get("metadata") or {}).get("name"))] = float(size_gi) * 1.073741824
    return out

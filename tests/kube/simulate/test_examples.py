"""Every example spec in examples/kube/ simulated on the example cluster of its provider
(examples/clusters/) under a 24-hour bursty trace, and on every other cluster for an hour:
the simulator must finish, count every request once, and place each spec on its own
provider's cluster."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from podserve.kube.simulate import (
    Options,
    Simulation,
    build_summary,
    load_cluster,
    manifests_from_text,
    scenario_from_manifests,
)
from podserve.kube.simulate.traffic import Trace

from ..paths import EXAMPLES, REPO_ROOT

CLUSTERS = {p.stem: p for p in sorted((REPO_ROOT / "examples" / "clusters").glob("*.yaml"))}
# ModelService capacity.provider → the example cluster that provider builds.
PROVIDER_CLUSTER = {
    "gke": "gke",
    "eks": "eks",
    "karpenter": "eks",
    "aks": "aks",
    "generic": "gpu-operator",
}
DAY_S = 24 * 3600


def bursty_day() -> Trace:
    """Quiet nights, a daytime swell, and a burst at the top of some hours."""
    points = []
    for minute in range(0, 24 * 60, 10):
        hour = minute / 60
        rate = 0.0 if hour < 6 or hour > 22 else 3 + 3 * math.sin((hour - 6) / 16 * math.pi)
        if minute % 180 == 0 and rate:
            rate += 40
        points.append((minute * 60.0, round(rate, 2)))
    return Trace(tuple(points))


def _provider(path: Path) -> str | None:
    spec = yaml.safe_load(path.read_text())["spec"]
    capacity = spec.get("capacity") or {}
    return capacity.get("provider") if spec.get("gpu") else None


def _run(spec: Path, cluster: str, duration: int) -> dict[str, object]:
    docs = manifests_from_text(spec.read_text(), str(spec))
    scenario = scenario_from_manifests(docs, None)
    loaded = load_cluster(CLUSTERS[cluster].read_text(), cluster)
    result = Simulation(scenario, loaded, bursty_day(), Options(duration_s=duration)).run()
    assert result.offered == result.served + result.rejected + result.cut
    return build_summary(result, seed=0)


def test_every_provider_has_an_example_cluster() -> None:
    assert set(PROVIDER_CLUSTER.values()) <= set(CLUSTERS)
    assert len(EXAMPLES) >= 4


@pytest.mark.parametrize("spec", EXAMPLES, ids=lambda p: p.stem)
def test_example_spec_runs_a_day_on_its_provider_cluster(spec: Path) -> None:
    provider = _provider(spec)
    clusters = [PROVIDER_CLUSTER[provider]] if provider else sorted(CLUSTERS)
    for cluster in clusters:
        summary = _run(spec, cluster, DAY_S)
        assert summary["scheduled"], (cluster, summary["unschedulable"])
        requests = summary["requests"]
        assert isinstance(requests, dict)
        assert requests["served"] > 0, (cluster, requests)


@pytest.mark.parametrize("cluster", sorted(CLUSTERS))
def test_every_spec_on_every_cluster_for_an_hour(cluster: str) -> None:
    for spec in EXAMPLES:
        summary = _run(spec, cluster, 3600)
        # Specs for another provider may not fit; then the summary says why, in the
        # scheduler's words.
        for item in summary["unschedulable"]:  # type: ignore[attr-defined]
            assert item["reason"].startswith("0/")
